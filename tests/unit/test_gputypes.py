"""GPU types by partition or by typed GRES inside one partition (slurm/gputypes.py): pure parts."""
from __future__ import annotations

import pytest

from slurm_gavel.core.errors import InputError
from slurm_gavel.job.progress import summary
from slurm_gavel.daemon.config import from_dict
from slurm_gavel.slurm.feasibility import judge
from slurm_gavel.slurm.gputypes import TypeMap, Where, discover, from_config
from slurm_gavel.slurm.records import SlurmJob, SlurmNode


def node(name, partitions, gpu_type, gpus=4):
    return SlurmNode(name, ("IDLE",), tuple(partitions), gpu_type, gpus)


def make_job(job_id, gpus, gpu_type=None):
    return SlurmJob(job_id=job_id, name="j", user="u", account="a", partition="gpu",
                    state=("PENDING",), reason="JobHeldUser", nodes=(), comment="", admin_comment="",
                    gpu_type=gpu_type, gpus=gpus, node_count=1, restarts=0, submit_time=None,
                    start_time=None, end_time=None, exit_code=None)


MIXED = [node("a", ["gpu"], "v100"), node("b", ["gpu"], "v100"), node("c", ["gpu"], "a100", 8),
         node("k", ["k80"], "k80"), node("cpu", ["cpu"], None, 0)]


def test_discovery_types_a_mixed_partition_by_gres_and_a_single_one_by_partition():
    types = discover(MIXED)
    assert types.where == {"k80": Where("k80"), "a100": Where("gpu", gres="a100"),
                           "v100": Where("gpu", gres="v100")}
    assert types.node_types(MIXED) == {"a": "v100", "b": "v100", "c": "a100", "k": "k80"}
    assert types.partition_of("a100") == "gpu" and types.partition_of("k80") == "k80"
    # the type a job runs on: its partition's, or in the mixed one its nodes'
    nt = types.node_types(MIXED)
    assert types.run_type("k80", ["k"], nt) == "k80"
    assert types.run_type("gpu", ["c"], nt) == "a100"
    assert types.run_type("gpu", ["a", "b"], nt) == "v100"
    assert types.run_type("gpu", ["a", "c"], nt) is None      # not one type
    assert types.run_type("cpu", ["cpu"], nt) is None
    assert sorted(types.pairs) == [("gpu", "a100"), ("gpu", "v100"), ("k80", "k80")]


def test_a_type_with_a_partition_of_its_own_is_not_also_a_slice_of_the_mixed_one():
    nodes = [node("a", ["gpu", "v100"], "v100"), node("c", ["gpu"], "a100")]
    types = discover(nodes)
    assert types.where == {"v100": Where("v100"), "a100": Where("gpu", gres="a100")}


def test_config_gpu_types_by_partition_gres_or_node_set():
    cfg = from_dict({"gpu_types": {"v100": {"partition": "gpu", "gres": "v100"},
                                   "a100": {"partition": "gpu", "nodes": "c,d[1-2]"},
                                   "k80": "k80"}})
    types = cfg.type_map()
    assert types.where == {"v100": Where("gpu", gres="v100"),
                           "a100": Where("gpu", nodes=frozenset({"c", "d1", "d2"})),
                           "k80": Where("k80")}
    assert from_dict({}).type_map() is None                    # discovered from Slurm
    assert from_dict({"partitions": {"v": "v100"}}).type_map().where == {"v100": Where("v")}


@pytest.mark.parametrize("spec, words", [
    ({"v100": {"gres": "v100"}}, "needs partition"),
    ({"v100": {"partition": "gpu", "typo": 1}}, "unknown key 'typo'"),
    ({"v100": {"partition": "gpu", "nodes": []}}, "host list"),
    ({"v100": 3}, "partition name or a table"),
    ({"v100": "gpu", "a100": "gpu"}, "partition gpu holds several types"),
])
def test_a_bad_gpu_types_entry_is_one_clear_error(spec, words):
    with pytest.raises(InputError) as e:
        from_dict({"gpu_types": spec}, source="gavel.toml")
    assert words in str(e.value) and "gavel.toml" in str(e.value)


def test_feasibility_in_a_mixed_partition_goes_by_node_type():
    types = discover(MIXED)
    nt = types.node_types(MIXED)
    big = make_job("1", gpus=6)
    v = judge(big, MIXED, {}, node_types=nt)          # only the a100 node holds 6 GPUs
    assert v.placement.worker_types == frozenset({"a100"}) and v.placement.servers == frozenset({"c"})
    typed = make_job("2", gpus=1, gpu_type="v100")     # --gres=gpu:v100:1 keeps its type
    v = judge(typed, MIXED, {}, node_types=nt)
    assert v.placement.worker_types == frozenset({"v100"}) and v.placement.servers == frozenset({"a", "b"})
    assert judge(make_job("3", gpus=1), MIXED, {}, node_types=nt).placement is None


def test_type_map_from_partitions_keeps_the_last_partition_of_a_type():
    assert TypeMap.from_partitions({"v1": "v100", "k": "k80", "v2": "v100"}).partition_of("v100") == "v2"


def test_a_speed_measured_on_one_node_type_is_not_read_as_the_next_nodes():
    """In a mixed partition the partition stays `gpu` across a move: the node says the type."""
    ran = {"event": "progress", "step": 50, "steps_per_second": 2.0, "partition": "gpu", "node": "v100-0"}
    moved = {"event": "start", "step": 50, "partition": "gpu", "node": "k80-0"}
    assert summary([ran])["steps_per_second"] == 2.0
    assert summary([ran, moved])["steps_per_second"] is None
    assert summary([ran, moved, {**ran, "node": "k80-0", "steps_per_second": 0.5}])["steps_per_second"] == 0.5


def test_the_devcluster_mixed_layout_is_one_partition_of_typed_nodes():
    from slurm_gavel.devcluster import render_slurm_conf
    conf = render_slurm_conf("/tmp/x", {"v100": (2, 4), "k80": (1, 2)}, 7000, 7001, mixed="gpu")
    parts = [line for line in conf.splitlines() if line.startswith("PartitionName=")]
    assert parts == ["PartitionName=gpu Nodes=v100-0,v100-1,k80-0 Default=YES MaxTime=INFINITE State=UP"]
    assert "Gres=gpu:v100:4" in conf and "Gres=gpu:k80:2" in conf
    one_each = render_slurm_conf("/tmp/x", {"v100": (2, 4), "k80": (1, 2)}, 7000, 7001)
    assert [line.split()[0] for line in one_each.splitlines() if line.startswith("PartitionName=")] == [
        "PartitionName=v100", "PartitionName=k80"]

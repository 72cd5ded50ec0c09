"""Reading Slurm's JSON: the same jobs and nodes recorded on Slurm 22.05 and 24.11.

tests/fixtures/record.sh made both recordings (see tests/fixtures/README.md):
gavel jobs running, held and requeued held after USR2 + exit 85, plain jobs
running, completed and failed, and a drained node.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_gavel.slurm.backend import discover_partitions
from slurm_gavel.slurm.records import (expand_hostlist, gpu_request, number, parse_jobs,
                                       parse_nodes, slurm_release, states)

from tests.support.slurm import as_24_11

# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SQUEUE = {"22.05": "squeue-22.05.json", "24.11": "squeue-24.11.json"}
NODES = {"22.05": "sinfo-22.05.json", "24.11": "nodes-24.11.json"}     # what SlurmCLI.nodes() runs


def load(name):
    return json.loads((FIXTURES / name).read_text())


def jobs_by_name(version):
    return {j.name: j for j in parse_jobs(load(SQUEUE[version]))}


@pytest.mark.parametrize("version", sorted(SQUEUE))
def test_recorded_jobs(version):
    assert slurm_release(load(SQUEUE[version])).startswith(version)
    jobs = jobs_by_name(version)
    assert list(jobs) == ["gavel-run", "gavel-held", "gavel-requeued", "plain", "done", "failed"]
    assert [j.job_id for j in jobs.values()] == ["1", "2", "3", "4", "5", "6"]

    run = jobs["gavel-run"]
    assert run.state == ("RUNNING",) and run.running and not run.finished and run.reason == "None"
    assert run.partition == "v100" and run.nodes == ("v100-0",) and run.node_count == 1
    assert (run.gpu_type, run.gpus, run.total_gpus) == (None, 1, 1)
    assert run.comment == "gavel model=resnet50 steps=1000"
    assert run.admin_comment == "gavel:v1 model=resnet50 weight=1 steps=1000"
    assert run.user == "root" and run.work_dir.startswith("/tmp/gavel-fixtures.")
    assert run.submit_time <= run.start_time < run.end_time              # end: an estimate
    assert run.restarts == 0 and run.exit_code == 0

    held = jobs["gavel-held"]                       # asked for gpu:v100:2: job_submit.lua untyped it
    assert held.state == ("PENDING",) and held.reason == "JobHeldUser" and not held.running
    assert held.partition == "v100" and held.nodes == () and (held.gpu_type, held.gpus) == (None, 2)
    assert held.admin_comment == "gavel:v1 model=vgg16 weight=2 entity=physics"
    assert held.start_time is None and held.end_time is None and held.submit_time > 0

    requeued = jobs["gavel-requeued"]               # USR2, exit 85: requeued held by Slurm
    assert requeued.state == ("PENDING", "SPECIAL_EXIT") and requeued.reason == "JobHeldUser"
    assert not requeued.running and not requeued.finished and requeued.primary_state == "PENDING"
    assert requeued.partition == "p100" and requeued.nodes == () and requeued.gpus == 1
    assert requeued.restarts == 1 and requeued.exit_code == 85
    assert requeued.start_time > requeued.submit_time                   # its next eligible time
    assert requeued.admin_comment == "gavel:v1 model=transformer weight=1 slo=129600"

    plain = jobs["plain"]
    assert plain.running and plain.partition == "k80" and plain.nodes == ("k80-0",)
    assert plain.gpus == 2 and plain.admin_comment == "" and plain.comment == ""

    done, failed = jobs["done"], jobs["failed"]
    assert done.state == ("COMPLETED",) and done.finished and done.exit_code == 0 and done.gpus == 0
    assert failed.state == ("FAILED",) and failed.finished and failed.reason == "NonZeroExitCode"
    assert failed.exit_code == 3 and failed.nodes == ("k80-0",)
    for j in (done, failed):
        assert j.submit_time <= j.start_time <= j.end_time


def test_both_versions_read_the_same_jobs():
    def key(j):
        return (j.job_id, j.name, j.user, j.partition, j.state, j.reason, j.nodes, j.comment,
                j.admin_comment, j.gpu_type, j.gpus, j.node_count, j.restarts, j.exit_code,
                j.start_time is None, j.end_time is None, j.end_time == j.start_time)
    assert [key(j) for j in jobs_by_name("22.05").values()] == \
           [key(j) for j in jobs_by_name("24.11").values()]


@pytest.mark.parametrize("version", sorted(NODES))
def test_recorded_nodes(version):
    nodes = parse_nodes(load(NODES[version]))
    assert slurm_release(load(NODES[version])).startswith(version)
    assert [(n.name, n.gpu_type, n.gpus, n.partitions) for n in nodes] == [
        (f"{t}-{i}", t, 4, (t,)) for t in ("k80", "p100", "v100") for i in (0, 1)]
    state = {n.name: n.state for n in nodes}
    assert state["k80-0"] == ("MIXED",) and state["v100-0"] == ("MIXED",)
    assert state["k80-1"] == ("IDLE",) and state["p100-1"] == ("IDLE", "DRAIN")
    assert [n.name for n in nodes if not n.usable] == ["p100-1"]
    assert discover_partitions(nodes) == {"k80": "k80", "p100": "p100", "v100": "v100"}


def test_exit_codes_of_both_versions():
    jobs = parse_jobs({"jobs": [
        {"job_id": 1, "exit_code": 85 << 8}, {"job_id": 2, "exit_code": 9},    # 22.05: wait status
        {"job_id": 3, "exit_code": {"status": ["SIGNALED"], "return_code": {"set": True, "number": 0},
                                    "signal": {"id": {"set": True, "number": 9}, "name": "KILL"}}},
        {"job_id": 4, "exit_code": {"status": ["ERROR"], "return_code": {"set": True, "number": 2}}},
        {"job_id": 5, "exit_code": {"status": ["PENDING"], "return_code": {"set": False, "number": 0}}},
    ]})
    assert [j.exit_code for j in jobs] == [85, 128 + 9, 128 + 9, 2, None]


@pytest.mark.parametrize("text, expected", [
    ("gres:gpu:2", (None, 2)), ("gres:gpu:v100:4", ("v100", 4)), ("gres/gpu:3", (None, 3)),
    ("gres/gpu=8", (None, 8)), ("cpu=4,mem=1G,gres/gpu:h100=2", ("h100", 2)), ("gpu:1", (None, 1)),
    ("cpu=4,mem=1G", (None, 0)), ("", (None, 0)), (None, (None, 0)),
])
def test_gpu_request_forms(text, expected):
    assert gpu_request(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("v100-[0-1]", ["v100-0", "v100-1"]), ("k80-3", ["k80-3"]),
    ("a[01-03],b7", ["a01", "a02", "a03", "b7"]), ("n[1,3-4]", ["n1", "n3", "n4"]), ("", []),
])
def test_hostlists(text, expected):
    assert expand_hostlist(text) == expected


def test_numbers_and_states_of_every_version():
    assert number(5) == 5 and number({"set": True, "infinite": False, "number": 7}) == 7
    assert number({"set": False, "number": 0}, None) is None
    assert number({"set": True, "infinite": True, "number": 0}) == float("inf")
    assert number("x", 3) == 3 and number(True, 1) == 1
    assert states("RUNNING") == ("RUNNING",) and states(["PENDING", "REQUEUED"]) == ("PENDING", "REQUEUED")
    assert states("idle+drain") == ("IDLE", "DRAIN") and states(None) == ()


def test_unknown_or_missing_fields_never_raise():
    jobs = parse_jobs({"jobs": [{}, {"job_id": {"set": True, "number": 9}, "job_state": 3}, "junk"]})
    assert [j.job_id for j in jobs] == ["", "9"]
    assert parse_nodes({"nodes": [{"name": "x", "state": None}]})[0].usable is False
    assert parse_jobs({}) == [] and parse_nodes({"nodes": None}) == []


# -- what a job's request says of where it can run (issue 11) ------------------------------
# squeue-shapes-22.05.json: recorded on 22.05.8 from the dev cluster (2 nodes x 4 GPUs per
# type, 8 CPUs and 16 GB per node), gavel jobs held by the plugin, in submission order:
# 1 -N 2 --gres=gpu:4, 2 --gpus=6, 3 -N 3 --gres=gpu:1, 4 --mem=20G, 5 --mem=8G,
# 6 --mem-per-cpu=3G -c 2, 7 --exclusive, 9 --dependency=afterok:7, 11 -c 12.
@pytest.mark.parametrize("shape", ["22.05", "24.11-shaped"])
def test_job_requests_read_from_both_versions(shape):
    data = load("squeue-shapes-22.05.json")
    if shape != "22.05":
        data = {"jobs": [as_24_11(j) for j in data["jobs"]]}
    jobs = {j.job_id: j for j in parse_jobs(data)}
    assert jobs["1"].node_count == 2 and jobs["1"].gpus == 4
    assert jobs["2"].gpus == 6 and jobs["2"].node_count == 1
    assert jobs["3"].node_count == 3
    assert jobs["4"].memory_per_node == 20480 and jobs["4"].memory_needed == 20480
    assert jobs["5"].memory_needed == 8192
    assert jobs["6"].memory_per_cpu == 3072 and jobs["6"].cpus_per_node == 2 and jobs["6"].memory_needed == 6144
    assert jobs["7"].exclusive and not jobs["5"].exclusive
    assert jobs["9"].dependency == "afterok:7(unfulfilled)" and jobs["9"].waiting_for_dependency
    assert not jobs["5"].waiting_for_dependency
    assert jobs["11"].cpus_per_node == 12
    assert jobs["5"].memory_per_cpu is None and jobs["5"].reservation == "" and jobs["5"].features == ""


@pytest.mark.parametrize("version", sorted(SQUEUE))
def test_an_ordinary_request_sets_no_limits(version):
    run = jobs_by_name(version)["gavel-run"]
    assert run.memory_needed is None and not run.exclusive and not run.waiting_for_dependency
    assert run.excluded_nodes == () and run.features == ""
    assert run.required_nodes == ("v100-0",)        # what placing it (NodeList=) set


@pytest.mark.parametrize("version", sorted(NODES))
def test_node_memory_cpus_and_features(version):
    nodes = {n.name: n for n in parse_nodes(load(NODES[version]))}
    assert nodes["k80-0"].memory == 16384 and nodes["k80-0"].cpus == 8
    assert nodes["k80-0"].features == ()


def test_feasibility_of_the_recorded_shapes():
    from slurm_gavel.slurm.feasibility import judge
    jobs = {j.job_id: j for j in parse_jobs(load("squeue-shapes-22.05.json"))}
    nodes = parse_nodes(load(NODES["22.05"]))
    partitions = discover_partitions(nodes)
    # -N 2 --gres=gpu:4 without a total (no plugin): a shape the daemon cannot choose
    assert judge(jobs["1"], nodes, partitions).hold.startswith("asks 4 GPUs per node on 2 nodes without a total")
    # --gpus=6: distributed, 2 x 3 on any type of 4-GPU nodes (issue 13)
    six = judge(jobs["2"], nodes, partitions)
    assert six.hold == "" and six.placement.same_gpus_per_server and six.placement.worker_types is None
    assert "on 3 nodes without a total" in judge(jobs["3"], nodes, partitions).hold
    assert "fits no node: needs 20480 MB memory per node" in judge(jobs["4"], nodes, partitions).hold
    assert judge(jobs["5"], nodes, partitions).hold == "" and judge(jobs["5"], nodes, partitions).placement is None
    assert "waiting for its dependency" in judge(jobs["9"], nodes, partitions).hold
    assert "CPUs per node" in judge(jobs["11"], nodes, partitions).hold
    # memory only some nodes have: only those nodes, and only their types
    import dataclasses
    big = [dataclasses.replace(n, memory=32768) if n.name == "v100-1" else n for n in nodes]
    wide = dataclasses.replace(jobs["5"], memory_per_node=20000.0)
    verdict = judge(wide, big, partitions)
    assert verdict.hold == ""
    assert verdict.placement.worker_types == frozenset({"v100"})
    assert verdict.placement.servers == frozenset({"v100-1"})


def test_a_two_gpu_job_is_kept_off_one_gpu_nodes():
    import dataclasses
    from slurm_gavel.slurm.feasibility import judge
    jobs = {j.job_id: j for j in parse_jobs(load("squeue-shapes-22.05.json"))}
    nodes = parse_nodes(load(NODES["22.05"]))
    partitions = discover_partitions(nodes)
    small = [dataclasses.replace(n, gpus=1) if n.name.startswith("k80") else n for n in nodes]
    two = dataclasses.replace(jobs["5"], gpus=2)
    verdict = judge(two, small, partitions)
    assert verdict.hold == "" and verdict.placement.worker_types == frozenset({"v100", "p100"})
    ones = [dataclasses.replace(n, gpus=1) for n in nodes]
    assert "the largest node has 1" in judge(two, ones, partitions).hold

"""A distributed job (GPU total per job) through the Slurm backend, on a replayed 22.05 queue.

Slurm's side is the recorded queue and node list of test_start_backoff (4-GPU nodes,
two per type), replayed; the job's request is changed to `--gpus=N`.  What is checked:
the placement the backend reports (equal parts, not one node), the one `scontrol update`
that gives the job its shape, a plan Slurm cannot carry out (3+1) that is not started,
and a job no type can hold that says why.  The same on the real cluster:
tests/cluster/test_distributed.py.
"""
from __future__ import annotations

import pytest

from slurm_gavel.core.clock import SimulatedClock
from slurm_gavel.core.plan import Assignment, RoundPlan
from slurm_gavel.slurm.backend import SlurmBackend
from slurm_gavel.slurm.feasibility import equal_split

from tests.support.replay import ReplayCLI


class ShapeCLI(ReplayCLI):
    def __init__(self, per_job: int):
        super().__init__()
        self.job["tres_per_job"] = f"gres:gpu:{per_job}"
        self.job["tres_per_node"] = ""
        self.updates = []

    def update(self, ids, **fields):
        super().update(ids, **fields)
        self.updates.append((tuple(ids), fields))

    def reshape(self, job, partition, nodes, gpus_per_node, tasks_per_node=None):
        # SlurmCLI.reshape's arguments, recorded through update
        tasks = {"TasksPerNode": str(tasks_per_node)} if tasks_per_node else {}
        self.update([job], Partition=partition, NumNodes=f"{len(nodes)}-{len(nodes)}",
                    NodeList=",".join(nodes), Gres=f"gpu:{gpus_per_node}", **tasks, StartTime="now")


def _start(backend, *servers):
    a = Assignment(("5",), "p100", tuple(servers))
    backend.execute(RoundPlan(0, (a,), (), (a,), ()), backend.clock.now() + 10)


def test_a_distributed_job_is_planned_spread_in_equal_parts_and_started_in_that_shape():
    cli = ShapeCLI(8)
    backend = SlurmBackend(cli, SimulatedClock(1000.0))
    (state,) = backend.observe().jobs
    assert state.scale_factor == 8 and state.hold_reason == ""
    assert state.placement.same_gpus_per_server and not state.placement.one_server
    _start(backend, ("p100-0", 4), ("p100-1", 4))
    assert cli.updates == [(("5",), {"Partition": "p100", "NumNodes": "2-2", "NodeList": "p100-0,p100-1",
                                     "Gres": "gpu:4", "StartTime": "now"})]
    assert cli.actions[-1] == ("release", ("5",))


def test_a_task_per_gpu_job_gets_its_tasks_per_node_with_its_shape():
    """24.11 lists --ntasks-per-gpu as tasks_per_tres (a number object) and, without
    TasksPerNode=, runs a reshaped job with one task per node (verified on 24.11.5)."""
    cli = ShapeCLI(4)
    cli.job["tasks_per_tres"] = {"set": True, "infinite": False, "number": 1}
    backend = SlurmBackend(cli, SimulatedClock(1000.0))
    backend.observe()
    _start(backend, ("p100-0", 2), ("p100-1", 2))
    assert cli.updates[-1][1]["TasksPerNode"] == "2" and cli.updates[-1][1]["Gres"] == "gpu:2"
    cli.job["tasks_per_tres"] = None                    # 22.05 does not list it
    backend = SlurmBackend(cli, SimulatedClock(1000.0))
    backend.observe()
    _start(backend, ("p100-0", 4),)
    assert "TasksPerNode" not in cli.updates[-1][1] and cli.updates[-1][1]["NumNodes"] == "1-1"


def test_a_plan_slurm_cannot_express_is_not_started():
    cli = ShapeCLI(4)
    backend = SlurmBackend(cli, SimulatedClock(1000.0))
    backend.observe()
    _start(backend, ("p100-0", 3), ("p100-1", 1))
    assert cli.actions == []


def test_a_job_asking_per_node_keeps_one_node():
    cli = ReplayCLI()
    cli.job["tres_per_node"] = "gres:gpu:4"
    backend = SlurmBackend(cli, SimulatedClock(1000.0))
    (state,) = backend.observe().jobs
    assert state.placement.one_server and not state.placement.same_gpus_per_server
    _start(backend, ("p100-0", 2), ("p100-1", 2))
    assert cli.actions == []


def test_a_total_no_type_can_hold_in_equal_parts_says_why():
    cli = ShapeCLI(12)                                   # 2 nodes x 4 GPUs per type
    backend = SlurmBackend(cli, SimulatedClock(1000.0))
    (state,) = backend.observe().jobs
    assert state.hold_reason.startswith("needs 12 GPUs in equal parts on nodes of one type"), state
    assert "v100: 4+4" in state.hold_reason


@pytest.mark.parametrize("total,sizes,shape", [
    (4, [4, 4], (1, 4)), (8, [4, 4], (2, 4)), (6, [4, 4], (2, 3)), (6, [4, 4, 4], (2, 3)),
    (5, [4, 4], None), (9, [4, 4, 4], (3, 3)), (3, [2, 2], None), (1, [1], (1, 1)),
])
def test_equal_split(total, sizes, shape):
    assert equal_split(total, sizes) == shape


def test_gpus_slurm_split_unevenly_are_read_per_node():
    """Another user's --gpus=6 on two 4-GPU nodes: Slurm gave it 4+2 (gres_detail as
    22.05's squeue --json shows it), so k80-0 has no GPU free and k80-1 two; not 3+3."""
    cli = ShapeCLI(1)
    other = dict(cli.job, job_id=12, admin_comment="", comment="", job_state="RUNNING",
                 nodes="k80-[0-1]", node_count=2, tres_per_job="gres:gpu:6", tres_per_node="",
                 gres_detail=["gpu:k80:4(IDX:0-3)", "gpu:k80:2(IDX:0-1)"], partition="k80")
    cli.squeue = lambda: {"jobs": [dict(cli.job), other]}
    backend = SlurmBackend(cli, SimulatedClock(1000.0))
    free = {s.name: s.gpus for s in backend.observe().servers}
    assert "k80-0" not in free and free["k80-1"] == 2, free


def test_an_exclusive_distributed_job_planned_as_a_whole_node_asks_its_own_total():
    cli = ShapeCLI(2)
    cli.job["shared"] = "none"                      # --exclusive on 22.05
    backend = SlurmBackend(cli, SimulatedClock(1000.0))
    (state,) = backend.observe().jobs
    assert state.scale_factor == 4                  # the node's GPUs, kept from others
    _start(backend, ("p100-0", 4))
    assert cli.updates[-1][1]["Gres"] == "gpu:2" and cli.updates[-1][1]["NumNodes"] == "1-1"

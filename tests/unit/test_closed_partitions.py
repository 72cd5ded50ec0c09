"""A partition Slurm has DOWN, DRAIN or INACT: its GPUs count as down in the `gpus` metric,
and a waiting job whose only partitions are closed says so in words (gqueue, explain).

Slurm's side is the recorded 22.05 queue and nodes of tests/support/replay.py (job 5, a
1-GPU gavel job; 3 types x 2 nodes x 4 GPUs), with the partitions' states as sinfo would say
them.  (On the real cluster: tests/cluster/test_slurm_state_faults.py.)
"""
from __future__ import annotations

from slurm_gavel.core.clock import SimulatedClock
from slurm_gavel.daemon.metrics import gpu_states
from slurm_gavel.slurm.backend import SlurmBackend
from tests.support.replay import ReplayCLI


def backend_with(states, types=""):
    cli = ReplayCLI()
    if types:
        cli.job["admin_comment"] += f" types={types}"
    cli.partition_states = lambda: dict(states)
    backend = SlurmBackend(cli, SimulatedClock(1000.0))
    backend.observe()
    return backend


def test_a_closed_partitions_gpus_are_down_in_the_metric():
    b = backend_with({"v100": "DOWN", "p100": "UP", "k80": "INACT"})
    states = gpu_states(b._nodes, b._jobs.values(), b._others_gpus, b.partitions, b.types, b.closed_partitions)
    assert states[("v100", "v100", "down")] == 8 and states[("v100", "v100", "idle")] == 0
    assert states[("k80", "k80", "down")] == 8 and states[("k80", "k80", "idle")] == 0
    # an UP partition is counted as before (the recording's p100 nodes as they are)
    before = gpu_states(b._nodes, b._jobs.values(), b._others_gpus, b.partitions, b.types)
    assert {k: v for k, v in states.items() if k[0] == "p100"} == {k: v for k, v in before.items() if k[0] == "p100"}
    assert before[("v100", "v100", "down")] < 8


def test_a_job_whose_only_partitions_are_closed_says_so():
    b = backend_with({"v100": "DOWN", "p100": "UP", "k80": "UP"}, types="v100")
    assert b.job_status()["5"].get("detail") == "partition v100 is DOWN"
    both = backend_with({"v100": "DOWN", "p100": "DRAIN", "k80": "UP"}, types="v100,p100")
    assert both.job_status()["5"].get("detail") == "partition p100 is DRAIN; partition v100 is DOWN"


def test_a_job_that_may_run_elsewhere_does_not_blame_a_closed_partition():
    b = backend_with({"v100": "DOWN", "p100": "UP", "k80": "UP"})
    assert "DOWN" not in (b.job_status()["5"].get("detail") or "")
    assert "DOWN" not in (backend_with({}, types="v100").job_status()["5"].get("detail") or "")

"""The backoff of a released job that Slurm does not start (issue 11), step by step.

Slurm's side is a recorded 22.05 queue (tests/fixtures/squeue-shapes-22.05.json, job 5:
an ordinary 1-GPU request) and node list, replayed by a recording CLI: the job stays
pending after its release, so the backend must hold it again, keep it out of the plan
for a round, then two, and say why.  (The same on the real cluster:
tests/cluster/test_stuck_jobs.py.)
"""
from __future__ import annotations

import json

from slurm_gavel.core.clock import SimulatedClock
from slurm_gavel.core.plan import Assignment, RoundPlan
from slurm_gavel.slurm.backend import SlurmBackend
from tests.support.replay import ReplayCLI


def start(backend, round_no):
    a = Assignment(("5",), "v100", (("v100-0", 1),))
    backend.execute(RoundPlan(round_no, (a,), (), (a,), ()), backend.clock.now() + 10)


def test_a_released_job_that_does_not_start_is_held_and_backs_off_doubling():
    clock = SimulatedClock(1000.0)
    cli = ReplayCLI()
    backend = SlurmBackend(cli, clock, start_timeout=5)
    obs = backend.observe()
    assert [j.hold_reason for j in obs.jobs] == [""]
    start(backend, 0)
    assert ("release", ("5",)) in cli.actions
    clock.sleep_until(1003)
    obs = backend.observe()                       # within the bound: it keeps its GPUs
    assert obs.running and not obs.jobs[0].hold_reason
    assert backend.job_status()["5"]["state"] == "S"
    clock.sleep_until(1006)
    obs = backend.observe()                       # past it: held again, not planned for a round
    assert cli.actions[-1] == ("hold", ("5",))
    assert not obs.running
    why = obs.jobs[0].hold_reason
    assert "Slurm says: Resources" in why and "held again, retry in 1 round" in why, why
    assert backend.job_status()["5"]["state"] == "W"
    clock.sleep_until(1017)
    assert backend.observe().jobs[0].hold_reason == ""    # one round (10 s) later: planned again
    start(backend, 2)
    clock.sleep_until(1023)
    obs = backend.observe()                       # the second failure: two rounds
    assert "retry in 2 rounds" in obs.jobs[0].hold_reason, obs.jobs[0].hold_reason
    clock.sleep_until(1033)
    assert "retry in 1 round" in backend.observe().jobs[0].hold_reason
    clock.sleep_until(1044)
    assert backend.observe().jobs[0].hold_reason == ""


def test_a_job_that_needs_two_nodes_is_never_planned_and_says_why():
    clock = SimulatedClock(1000.0)
    cli = ReplayCLI()
    # -N 2 as Slurm says it of a pending job: its request (tres_req_str node=2, max_nodes),
    # not node_count alone (an estimate: see tests/unit/test_request_capacity.py)
    cli.job["node_count"] = cli.job["max_nodes"] = 2
    cli.job["tres_req_str"] = cli.job["tres_req_str"].replace("node=1", "node=2")
    backend = SlurmBackend(cli, clock)
    state = backend.observe().jobs[0]
    # GPUs per node on two nodes without a total (submitted without the plugin): its
    # shape cannot be chosen, and it says how to submit it
    assert state.hold_reason.startswith("asks 1 GPUs per node on 2 nodes without a total"), state
    assert "--gpus=2" in state.hold_reason
    assert backend.job_status()["5"] == {"state": "W", "gpus": 0, "detail": state.hold_reason}

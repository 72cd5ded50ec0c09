"""A job preempted seconds after it started is signalled only once it has run
`min_run_seconds` (at most half a round): the cases of tests/cluster/test_min_run.py that need
no Slurm cluster (why a job signalled before it set its trap is lost is told there).
"""
from __future__ import annotations

from slurm_gavel.core.clock import SimulatedClock
from slurm_gavel.core.mechanism import Assignment, RoundPlan
from slurm_gavel.slurm.backend import SlurmBackend

from tests.support.replay import ReplayCLI


# -- the rule, on a recorded queue --------------------------------------------------------
def running_job(cli: ReplayCLI, started: float) -> None:
    cli.job.update(job_state="RUNNING", state_reason="None", start_time=int(started),
                   nodes="v100-0", partition="v100")


def observed(clock, started: float, guard: float) -> tuple[SlurmBackend, list]:
    """A backend that has seen job 5 running since `started`, and the signals it sends."""
    cli, signals = ReplayCLI(), []
    cli.signal = lambda ids, sig, full=False: signals.append((tuple(ids), clock.now()))
    running_job(cli, started)
    backend = SlurmBackend(cli, clock, min_run_seconds=guard)
    backend.observe()
    assert "5" in backend._running
    return backend, signals


def test_the_signal_waits_for_the_minimum_run_and_a_round_that_keeps_the_job_cancels_it():
    clock = SimulatedClock(1000.0)
    backend, signals = observed(clock, 998.0, 30)
    # a 60-s round: the guard is min(30, 60 / 2) = 30 s from the job's start (998)
    backend.execute(RoundPlan(1, (), (), (), ("5",)), clock.now() + 60)
    assert signals == []
    clock.sleep_until(1027.0)                    # run 29 s
    backend.observe()
    assert signals == []
    clock.sleep_until(1028.0)                    # run 30 s
    backend.observe()
    assert signals == [(("5",), 1028.0)]
    # a 20-s round caps it at 10 s
    backend.round_seconds = 20.0
    assert backend._min_run() == 10.0

    # preempted again at once by the next round, which then keeps it: never signalled
    backend, signals = observed(clock, clock.now() - 1, 30)
    backend.execute(RoundPlan(1, (), (), (), ("5",)), clock.now() + 60)
    a = Assignment(("5",), "v100", (("v100-0", 1),))
    backend.execute(RoundPlan(2, (a,), (a,), (), ()), clock.now() + 60)
    clock.sleep_until(clock.now() + 30)
    backend.observe()
    assert signals == []

    # with the guard off, or a job that has run long enough: at once
    for guard, started in ((0, clock.now() - 1), (30, clock.now() - 40)):
        backend, signals = observed(clock, started, guard)
        backend.execute(RoundPlan(1, (), (), (), ("5",)), clock.now() + 60)
        assert signals == [(("5",), clock.now())]

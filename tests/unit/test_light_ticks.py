"""Ticks between rounds read only what they need (issues 24, 25).

A tick looks at the jobs' states first (`SlurmCLI.job_states`, one cheap squeue) and reads
the whole queue and the nodes (`squeue --json`, 3.3 s and 16.7 MB at 5,000 jobs) only when
something it acts on changed or is under way, or the last full read is FULL_READ_SECONDS
old (slurm/backend/looks.py).  Slurm's side is the recorded 22.05 queue and node list
(`QueueCLI`, which counts its reads); the daemon is the real one, its CLI that queue.
"""
from __future__ import annotations

import logging
import time

import pytest

from slurm_gavel.core.clock import SimulatedClock
from slurm_gavel.core.plan import RoundPlan
from slurm_gavel.daemon import config as config_mod
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.store import SqliteStore
from slurm_gavel.slurm.backend import FULL_READ_SECONDS, SlurmBackend
from tests.support.daemon import TOY_TABLE
from tests.support.replay import QueueCLI, ReplayCLI


@pytest.fixture
def daemon(tmp_path, monkeypatch):
    made = []

    def make(cli, **extra):
        (tmp_path / "progress").mkdir(exist_ok=True)
        settings = {"database": str(tmp_path / "gavel.db"), "progress_dir": str(tmp_path / "progress"),
                    "throughputs": str(TOY_TABLE), "policy": "max_min_fairness",
                    "round_seconds": 120, "tick_seconds": 1, "min_run_seconds": 0, **extra}
        text = "".join(f"{k} = {str(v).lower() if isinstance(v, bool) else repr(v)}\n".replace("'", '"')
                       for k, v in settings.items())
        (tmp_path / "gavel.toml").write_text(text)
        monkeypatch.setattr(config_mod, "slurm_cli", lambda config, cls=None: cli)
        d = Daemon(config_mod.load(str(tmp_path / "gavel.toml")))
        made.append(d)
        return d
    yield make
    for d in made:
        d.engine.allocator.close()
        d.store.close()
        d.lock.release()


def reads(cli, before):
    return {k: v - before.get(k, 0) for k, v in cli.reads.items()}


def two_running(started: float) -> QueueCLI:
    """Jobs 5 and 6 running on v100-0 since `started`."""
    cli = QueueCLI()
    cli.add(5, on="v100-0", at=started)
    cli.add(6, on="v100-0", at=started, index=1)
    return cli


def test_quiet_ticks_cost_one_look_each_and_no_full_read(daemon, caplog):
    cli = two_running(time.time() - 30)
    d = daemon(cli)
    d.engine.plan()                        # a round: the full read
    assert cli.reads["squeue"] >= 1
    before = dict(cli.reads)
    caplog.clear()
    caplog.set_level(logging.INFO)
    for _ in range(5):
        d._tick()
    assert reads(cli, before) == {"squeue": 0, "nodes": 0, "job_states": 5}
    assert not caplog.records, caplog.text          # nothing said per light tick


def test_a_job_that_ends_costs_exactly_one_full_read_and_its_departure_is_recorded(daemon, tmp_path):
    cli = two_running(time.time() - 30)
    d = daemon(cli)
    d.engine.plan()
    d._tick()
    before = dict(cli.reads)
    cli.end(6, at=time.time())
    for _ in range(4):
        d._tick()
    assert reads(cli, before) == {"squeue": 1, "nodes": 1, "job_states": 4}
    store = SqliteStore(str(tmp_path / "gavel.db"), readonly=True)
    try:
        ended = {r["id"]: r["state"] for r in store.jobs(states=("completed",))}
    finally:
        store.close()
    assert ended == {"6": "completed"}


def test_follow_up_under_way_forces_full_reads_until_it_is_done(daemon):
    cli = two_running(time.time() - 30)
    cli.add(7)                             # held, waiting: the round starts it
    d = daemon(cli)
    d.engine.plan()
    assert ("release", ("7",)) in cli.actions, cli.actions
    assert "7" in d.backend._starting
    before = dict(cli.reads)
    for _ in range(3):                     # released, not running yet: every tick reads it all
        d._tick()
    assert reads(cli, before) == {"squeue": 3, "nodes": 3, "job_states": 3}
    a, _ = d.backend._starting["7"]
    cli.run(7, a.nodes[0], time.time(), index=2)
    before = dict(cli.reads)
    for _ in range(3):                     # the start seen once, then quiet again
        d._tick()
    assert reads(cli, before) == {"squeue": 1, "nodes": 1, "job_states": 3}
    assert not d.backend._starting


def test_a_preemption_forces_full_reads_when_its_signal_and_its_escalation_are_due():
    clock = SimulatedClock(1000.0)
    cli = two_running(990.0)
    backend = SlurmBackend(cli, clock, grace_seconds=20, min_run_seconds=30)
    backend.observe()
    backend.execute(RoundPlan(0, (), (), (), ("5",)), 1100.0)    # started 10 s ago: signalled at 1020
    assert backend._signal_later == {"5": 1020.0} and not cli.actions
    clock.sleep_until(1010)
    assert backend.why_poll(clock.now()) == ""
    clock.sleep_until(1020)
    assert backend.why_poll(clock.now()) == "signals due: 5"
    backend.observe()
    assert cli.actions == [("signal", ("5",))]
    clock.sleep_until(1030)                  # signalled; it has until 1040 to stop
    assert backend.why_poll(clock.now()) == ""
    clock.sleep_until(1040)
    assert backend.why_poll(clock.now()) == "preempted jobs to requeue held: 5"
    backend.observe()
    assert cli.actions[-1] == ("requeuehold", ("5",))
    clock.sleep_until(1045)                  # requeued held: a state change, read once
    assert backend.why_poll(clock.now()) == "job 5 is PENDING (was RUNNING)"
    backend.observe()
    clock.sleep_until(1050)
    assert backend.why_poll(clock.now()) == ""


def test_a_job_held_again_is_read_again_once():
    clock = SimulatedClock(1000.0)
    cli = two_running(990.0)
    cli.add(9, priority=1, state_reason="None")      # pending, not held: requeued by its owner
    backend = SlurmBackend(cli, clock)
    backend.observe()
    assert cli.actions == [("hold", ("9",))]
    clock.sleep_until(1005)
    assert backend.why_poll(clock.now()) == "jobs held again to confirm"
    backend.observe()
    clock.sleep_until(1010)
    assert backend.why_poll(clock.now()) == ""


def test_the_bound_forces_one_full_read(daemon):
    cli = two_running(time.time() - 30)
    d = daemon(cli)
    assert d.backend.full_read_seconds == FULL_READ_SECONDS == 60.0
    d.backend.full_read_seconds = 1.0
    d.engine.plan()
    before = dict(cli.reads)
    d._tick()
    assert reads(cli, before)["squeue"] == 0
    time.sleep(1.05)
    d._tick()                              # a second since the round's read: read again
    d._tick()
    assert reads(cli, before) == {"squeue": 1, "nodes": 1, "job_states": 3}


def test_with_mid_round_starts_a_new_job_is_read_and_started_at_the_next_tick(daemon):
    cli = two_running(time.time() - 30)
    d = daemon(cli, mid_round_starts=True)
    d.engine.plan()
    d._tick()
    before = dict(cli.reads)
    cli.add(8)
    d._tick()
    assert reads(cli, before)["squeue"] == 1
    assert ("release", ("8",)) in cli.actions, cli.actions


def test_without_mid_round_starts_a_new_job_waits_for_the_round():
    clock = SimulatedClock(1000.0)
    cli = two_running(970.0)
    backend = SlurmBackend(cli, clock)
    backend.observe()
    cli.add(8)
    clock.sleep_until(1005)
    assert backend.why_poll(clock.now()) == ""
    assert backend.why_poll(clock.now(), arrivals=True) == "job 8 is new"


def test_a_cli_without_the_look_reads_in_full_every_tick():
    clock = SimulatedClock(1000.0)
    backend = SlurmBackend(ReplayCLI(), clock)          # a recording: no job_states
    backend.observe()
    for t in (1005, 1010):
        clock.sleep_until(t)
        assert backend.why_poll(clock.now()), "a CLI without job_states must poll every tick"
        backend.observe()


def test_a_failed_look_reads_in_full():
    from slurm_gavel.slurm.commands import SlurmCommandError

    class Failing(QueueCLI):
        def job_states(self):
            raise SlurmCommandError(["squeue"], 1, "slurm_load_jobs error: Socket timed out")
    clock = SimulatedClock(1000.0)
    cli = Failing()
    cli.add(5, on="v100-0", at=990.0)
    backend = SlurmBackend(cli, clock)
    backend.observe()
    clock.sleep_until(1005)
    assert "could not be read" in backend.why_poll(clock.now())


def usage_by_job(observations) -> dict[str, float]:
    out: dict[str, float] = {}
    for obs in observations:
        for u in obs.usage:
            for job in u.assignment.jobs:
                out[job] = out.get(job, 0.0) + u.seconds
    return out


def test_credit_is_the_same_whether_the_ticks_between_reads_polled_or_looked():
    """Every tick polled (as before) or only those the look asks for: after the round's read
    each job is credited the same time, a job that ended between reads up to its end."""
    runs = {}
    for light in (False, True):
        clock = SimulatedClock(1000.0)
        cli = two_running(960.0)
        cli.add(7)
        backend = SlurmBackend(cli, clock, partitions={"v100": "v100", "p100": "p100", "k80": "k80"})
        seen = [backend.observe()]
        for t in range(1005, 1100, 5):
            clock.sleep_until(t)
            if t == 1025:
                cli.end(6, at=1022)                  # ends between ticks
            if t == 1040:
                cli.run(7, "p100-0", at=1037)        # starts between ticks (by hand)
            if not light or backend.why_poll(clock.now()):
                seen.append(backend.observe())
        clock.sleep_until(1100)
        seen.append(backend.observe())               # the round's read
        runs[light] = (usage_by_job(seen), cli.reads["squeue"])
    assert runs[True][0] == runs[False][0]
    assert runs[False][0] == {"5": 100.0, "6": 22.0, "7": 63.0}, runs[False][0]
    assert runs[True][1] < runs[False][1] / 2, (runs[True][1], runs[False][1])


def test_the_bound_is_the_admins_full_read_seconds_and_a_reload_changes_it(daemon, tmp_path):
    cli = two_running(time.time() - 30)
    d = daemon(cli, full_read_seconds=600)
    assert d.backend.full_read_seconds == 600
    toml = tmp_path / "gavel.toml"
    toml.write_text(toml.read_text().replace("full_read_seconds = 600", "full_read_seconds = 1"))
    d.reload()
    assert d.backend.full_read_seconds == 1
    d.engine.plan()
    before = dict(cli.reads)
    time.sleep(1.05)
    d._tick()
    assert reads(cli, before)["squeue"] == 1


def test_the_daemons_engine_grows_its_leases_as_gavel_toml_says(daemon):
    d = daemon(QueueCLI(), lease_load_exponent=2, max_lease_scale=4, restart_seconds=18)
    churn = d.engine.churn
    assert (churn.load_exponent, churn.max_lease_scale, churn.restart_seconds) == (2, 4, 18)
    assert churn.lease_scale(1.5) == 2.25 and churn.lease_scale(3.0) == 4

"""Ticks between rounds on the real local Slurm cluster read only what they need (issues 24, 25).

The daemon runs in-process, rounds of 40 s and ticks of 1 s, with two gavel jobs: one long,
one that ends 12 s after it starts.  Once both run, nothing changes until the short one
ends: the ticks only look at the jobs' states (`squeue --only-job-state` on 23.11+, a
three-column squeue on 22.05), never `squeue --json`.  The short job's end is still
noticed at the next tick: its departure and its credited time are in the database before
the round ends.  Each Slurm read is counted where the daemon makes it (its CLI).
"""
from __future__ import annotations

import threading
import time

import pytest

from tests.support.daemon import submit, write_config

from slurm_gavel.daemon import config as config_mod
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.store import SqliteStore

pytestmark = pytest.mark.slurm24     # the look differs: --only-job-state from 23.11


def store_rows(db: str, job: str):
    store = SqliteStore(db, readonly=True)
    try:
        states = {r["id"]: r for r in store.jobs(states=("active", "completed"))}
        return states.get(job), sum(store.job_time([job]).get(job, {}).values()), store.next_round()
    finally:
        store.close()


def test_quiet_ticks_read_no_full_queue_and_an_end_mid_round_is_seen_at_the_next_tick(clean, tmp_path):  # noqa: F811
    cluster = clean
    config = write_config(tmp_path, cluster, round_seconds=40, tick_seconds=1, policy="max_min_fairness")
    long = submit(cluster, tmp_path, "convnet", 1, 600)
    short = submit(cluster, tmp_path, "convnet", 1, 12)
    reads: list[tuple[str, bool, float]] = []       # (full | look, in a tick, when)
    in_tick = [False]
    holder, made = {}, threading.Event()

    def run():          # the daemon's SQLite connection belongs to the thread that opens it
        d = holder["daemon"] = Daemon(config_mod.load(config))
        full, look, tick = d.cli.squeue, d.cli.job_states, d.clock.tick

        def counted_full():
            reads.append(("full", in_tick[0], time.time()))
            return full()

        def counted_look():
            reads.append(("look", in_tick[0], time.time()))
            return look()

        def counted_tick():
            in_tick[0] = True
            try:
                tick()
            finally:
                in_tick[0] = False
        d.cli.squeue, d.cli.job_states, d.clock.tick = counted_full, counted_look, counted_tick
        made.set()
        d.run()

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    assert made.wait(60)
    daemon = holder["daemon"]
    db = str(tmp_path / "gavel.db")
    try:
        # both started by round 0 and seen running by the daemon (no start left to confirm)
        deadline = time.time() + 60
        while time.time() < deadline and not (
                {long, short} <= set(daemon.backend._running) and not daemon.backend._starting):
            time.sleep(0.2)
        assert {long, short} <= set(daemon.backend._running), daemon.backend.job_status()
        quiet = time.time()
        while time.time() < deadline and short in daemon.backend._running:
            time.sleep(0.2)
        ended = time.time()
        assert short not in daemon.backend._running, "the short job's end was not noticed"
        row, credited, rounds = store_rows(db, short)
        assert rounds == 1, "the round ended before the departure was recorded"
        assert row is not None and row["state"] == "completed", row
        time.sleep(4)                      # quiet again after the departure
        settled = time.time()
        row_long, _, rounds = store_rows(db, long)
        assert rounds == 1
    finally:
        daemon.request_stop()
        runner.join(timeout=120)
        if daemon._watchdog is not None:
            daemon._watchdog.cancel()
    assert not runner.is_alive()
    ticks = [(kind, at) for kind, in_tick_, at in reads if in_tick_]
    before_end = [kind for kind, at in ticks if quiet <= at < ended - 1.5]
    assert before_end.count("look") >= 5, ticks
    assert before_end.count("full") == 0, (before_end, ticks)
    # its end (COMPLETING, then gone) costs a full read or two, then nothing again
    at_end = [kind for kind, at in ticks if ended - 1.5 <= at < ended + 0.5]
    assert 1 <= at_end.count("full") <= 2, at_end
    after = [kind for kind, at in ticks if ended + 1.5 <= at < settled]
    assert after.count("full") == 0 and after.count("look") >= 2, after
    # credited its run: 12 steps of a second each (and the script's start)
    assert 11 <= credited <= 16, credited

"""Ticks between rounds on the real local Slurm cluster read only what they need (issues 24, 25).

The daemon runs in-process, rounds of 40 s and ticks of 1 s, with two gavel jobs: one long,
one that ends 12 s after it starts.  Once both run, nothing changes until the short one
ends: the ticks only look at the jobs' states (`squeue --only-job-state` on 23.11+, a
three-column squeue on 22.05), never `squeue --json`.  The short job's end is still
noticed at the next tick: its departure and its credited time are in the database before
the round ends.  Each Slurm read is counted where the daemon makes it (its CLI).
"""
from __future__ import annotations

import time

import pytest

from tests.support.daemon import daemon_thread, submit, write_config

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
    # per tick (numbered): its reads in order, each ("look", the short job's state) or ("full", None)
    ticks: dict[int, list[tuple[str, str | None]]] = {}
    tick_no = [0]

    def counting(d):
        full, look, tick = d.cli.squeue, d.cli.job_states, d.clock.tick

        def counted_full():
            ticks.setdefault(tick_no[0], []).append(("full", None))
            return full()

        def counted_look():
            states = look()
            ticks.setdefault(tick_no[0], []).append(("look", states.get(short)))
            return states

        def counted_tick():
            tick_no[0] = abs(tick_no[0]) + 1      # reads outside a tick (rounds) go under -n
            try:
                tick()
            finally:
                ticks.setdefault(tick_no[0], [])
                tick_no[0] = -tick_no[0]
        d.cli.squeue, d.cli.job_states, d.clock.tick = counted_full, counted_look, counted_tick

    db = str(tmp_path / "gavel.db")
    with daemon_thread(config, counting) as (daemon, _):
        # both started by round 0 and seen running by the daemon (no start left to confirm)
        deadline = time.time() + 60
        while time.time() < deadline and not (
                {long, short} <= set(daemon.backend._running) and not daemon.backend._starting):
            time.sleep(0.2)
        assert {long, short} <= set(daemon.backend._running), daemon.backend.job_status()
        quiet = abs(tick_no[0])
        # until the daemon has recorded the short job's departure (a tick after it ended)
        while time.time() < deadline and (store_rows(db, short)[0] or {}).get("state") == "active":
            time.sleep(0.2)
        noticed = abs(tick_no[0])
        row, credited, rounds = store_rows(db, short)
        looked = [reads[0][1] for n, reads in sorted(dict(ticks).items()) if n > 0 and reads]
        assert row is not None and row["state"] == "completed", (
            row, cluster.run(["scontrol", "-o", "show", "job", short]).stdout, looked)
        assert rounds == 1, "the round ended before the departure was recorded"
        time.sleep(4)                      # quiet again after the departure
        last = abs(tick_no[0]) - 1         # the last tick that is over
        _, _, rounds = store_rows(db, long)
        assert rounds == 1
    after = {n: ticks.get(n, []) for n in range(quiet + 1, last + 1)}
    running = [reads for reads in after.values() if ("look", "RUNNING") in reads]
    # while nothing changed: each tick one look, no full read
    assert len(running) >= 5 and all(reads == [("look", "RUNNING")] for reads in running), after
    # its end (COMPLETING, then COMPLETED) costs a full read or two, each after a look that
    # saw it, the first in the very tick whose look first saw it leave RUNNING
    full = {n: reads for n, reads in after.items() if ("full", None) in reads}
    assert 1 <= len(full) <= 2 and all(reads[0][0] == "look" and reads[0][1] != "RUNNING"
                                       for reads in full.values()), after
    first = min(n for n, reads in after.items() if reads and reads[0][1] != "RUNNING")
    assert first in full, after
    # then quiet again: the ticks begun after the departure was seen read nothing in full
    later = [ticks.get(n, []) for n in range(noticed + 1, last + 1)]
    assert len(later) >= 2 and all(reads and reads[0][0] == "look" and ("full", None) not in reads
                                   for reads in later), later
    # credited its run: 12 steps of a second each (and the script's start)
    assert 11 <= credited <= 16, credited

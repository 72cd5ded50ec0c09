"""Mid-round starts on the real local Slurm cluster: a job submitted during a round
starts at the daemon's next tick on idle GPUs, not at the next round (issue 12).

Rounds of 120 s, ticks of 1 s: the job must run within a few ticks of its
submission while the first round is still under way (the store has recorded
round 0 only, with the job's start in it).
"""
from __future__ import annotations

import time

from tests.support.daemon import queue, start_daemon, stop_daemon, submit, write_config


from slurm_gavel.daemon.store import SqliteStore, StoreError


def rounds_recorded(db) -> int:
    try:
        store = SqliteStore(db, readonly=True)
    except StoreError:       # the daemon has not made its database yet
        return 0
    try:
        return store.next_round()
    finally:
        store.close()


def test_a_job_submitted_mid_round_starts_at_the_next_tick(clean, tmp_path):  # noqa: F811
    cluster = clean
    config = write_config(tmp_path, cluster, round_seconds=120, tick_seconds=1, mid_round_starts=True)
    db = tmp_path / "gavel.db"
    daemon = start_daemon(config)
    try:
        deadline = time.time() + 60
        while rounds_recorded(db) < 1 and time.time() < deadline:
            time.sleep(0.5)
        assert rounds_recorded(db) == 1, "the daemon planned no first round"
        submitted = time.time()
        job = submit(cluster, tmp_path, "convnet", 1, 2000)
        while time.time() < submitted + 60 and queue(cluster).get(job) != "RUNNING":
            time.sleep(0.5)
        waited = time.time() - submitted
        assert queue(cluster).get(job) == "RUNNING", queue(cluster)
        assert waited < 30, waited                   # a round is 120 s
        assert rounds_recorded(db) == 1              # still the first round
        store = SqliteStore(db, readonly=True)
        started = store.db.execute("select round from placements where job = ? and action = 'start'",
                                   [job]).fetchall()
        store.close()
        assert started == [(0,)]
    finally:
        code, log = stop_daemon(daemon)
    assert "Traceback" not in log, log

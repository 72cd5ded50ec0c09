"""A restart is invisible: an engine resumed from the daemon's SQLite store plans exactly
the rounds the same engine would have planned had it not stopped.

The cluster (a SimulatedCluster: it goes on running while the "daemon" is
away, like Slurm) and the policy are the same in both runs; only the engine
is thrown away and a new one resumed from a real SQLite file.

The cases of tests/unit/test_restart.py that need a real Slurm cluster.
"""
from __future__ import annotations

import pytest

from slurm_gavel.sim.simulator import SimulatedCluster
from slurm_gavel.daemon.store import SqliteStore, StoreError


# -- on the real local Slurm cluster ------------------------------------------------------
def _rounds(db) -> dict[int, dict]:
    store = SqliteStore(db, readonly=True)
    try:
        return {r["number"]: r for r in store.db.query("select * from rounds")}
    finally:
        store.close()


def _wait_rounds(db, daemon, count: int, timeout: float = 180.0) -> dict[int, dict]:
    import time
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert daemon.poll() is None, daemon.communicate()[0][-3000:]
        if db.exists():
            try:
                rounds = _rounds(db)
            except StoreError:
                rounds = {}
            if len(rounds) >= count:
                return rounds
        time.sleep(1)
    pytest.fail(f"fewer than {count} rounds after {timeout} s")


def test_a_restarted_daemon_goes_on_where_it_stopped(slurm_cluster, tmp_path):
    from tests.support.daemon import MODELS, start_daemon, stop_daemon, submit, write_config

    cluster = slurm_cluster
    cluster.run(["scancel", "--user", "root"], check=False)
    db = tmp_path / "gavel.db"
    config = write_config(tmp_path, cluster, round_seconds=8, tick_seconds=1)
    # 28 GPUs asked of 24: the jobs take turns, and outlive the test
    for i in range(14):
        submit(cluster, tmp_path, MODELS[i % 4], 2, 600)
    try:
        first = start_daemon(config)
        try:
            before = _wait_rounds(db, first, 7)
        finally:
            code, log = stop_daemon(first)
        assert code == 0, log[-3000:]
        before = _rounds(db)
        second = start_daemon(config)
        try:
            after = _wait_rounds(db, second, len(before) + 3)
        finally:
            code, log = stop_daemon(second)
        assert code == 0, log[-3000:]
        after = _rounds(db)
    finally:
        cluster.run(["scancel", "--user", "root"], check=False)
    last = max(before)
    # the rounds go on numbering: the first run's rows are still there, unchanged
    assert all(after[n] == row for n, row in before.items())
    assert min(n for n in after if n not in before) == last + 1
    # and the first round after the restart moves no more jobs than the rounds before it did
    steady = [before[n]["preempt"] for n in sorted(before)[1:]]
    assert after[last + 1]["preempt"] <= max(steady), (after[last + 1], steady)
    assert after[last + 1]["keep"] >= 1
    assert "resuming at round" in log

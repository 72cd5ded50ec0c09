"""The daemon's SQLite store, written by the real engine and read back as `slurm-gavel queue` does."""
from __future__ import annotations

import sqlite3

import pytest

from slurm_gavel.daemon.store import MIGRATIONS, SqliteStore, StoreError

from tests.support.store import run


def test_time_per_type_in_sqlite_matches_what_ran(tmp_path):
    backend, store, _ = run(tmp_path / "state.db")
    assert backend.finished
    recorded = store.job_time()
    for job, result in backend.results.items():
        for wt, seconds in result.seconds.items():
            assert recorded.get(job, {}).get(wt, 0.0) == pytest.approx(seconds, abs=1e-6)
    done = store.jobs(states=("completed",))
    assert {r["id"] for r in done} == set(backend.results)
    assert all(r["finished"] >= r["submitted"] for r in done)


def test_rounds_placements_allocations_and_status_are_recorded(tmp_path):
    backend, store, engine = run(tmp_path / "state.db", rounds=5, n_jobs=6)
    n_rounds = store.db.execute("select count(*) from rounds").fetchone()[0]
    assert n_rounds == engine.round
    meta, shares = store.latest_allocation()
    assert meta["policy"] == "max_min_fairness"
    active = {r["id"] for r in store.jobs()}
    assert set(shares) <= active | set(backend.results)
    status = store.status_rows()
    assert set(status) <= active
    for row in status.values():
        assert (row["worker_type"] is None) == bool(row["reason"])


def test_a_reader_sees_the_database_while_the_writer_has_it_open(tmp_path):
    path = tmp_path / "state.db"
    _, writer, _ = run(path, rounds=20, n_jobs=4)
    reader = SqliteStore(path, readonly=True)
    assert reader.job_time() == writer.job_time()
    with pytest.raises(sqlite3.OperationalError):
        reader.db.execute("insert into events (time, kind) values (0, 'x')")


def test_migrations_run_once_and_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "state.db"
    SqliteStore(path).close()
    store = SqliteStore(path)            # opening again migrates nothing
    assert store.schema_version() == len(MIGRATIONS)
    store.db.execute("update meta set value = '99' where key = 'schema_version'")
    store.close()
    with pytest.raises(StoreError, match="newer"):
        SqliteStore(path)
    with pytest.raises(StoreError, match="no database"):
        SqliteStore(tmp_path / "missing.db", readonly=True)


def test_a_write_that_fails_halfway_leaves_nothing_behind(tmp_path):
    store = SqliteStore(tmp_path / "state.db")
    with pytest.raises(RuntimeError):
        with store._tx():
            store.db["events"].insert({"time": 1.0, "kind": "arrival", "job": "1", "detail": None})
            raise RuntimeError("killed mid-write")
    assert store.db.execute("select count(*) from events").fetchone()[0] == 0

"""Retention: the daemon's database forgets what is older than its horizon (ended jobs with
their time, events and placements; old rounds, placements and allocations) in one
transaction, keeps what gqueue and a restart need, and says its size and rows."""
from __future__ import annotations

import math

from slurm_gavel.daemon.store import SqliteStore

from tests.support.store import run


def counts(store) -> dict[str, int]:
    return store.size()[1]


def test_pruning_forgets_the_old_and_keeps_the_recent_and_what_a_restart_needs(tmp_path):
    backend, store, engine = run(tmp_path / "state.db", n_jobs=8)
    ended = {r["id"]: r["finished"] for r in store.jobs(states=("completed",))}
    assert len(ended) == 8
    cut = sorted(ended.values())[4]                     # 4 ended before it, 4 at or after
    old = {job for job, t in ended.items() if t < cut}
    assert len(old) == 4
    before = counts(store)
    next_round, latest = store.next_round(), store.latest_allocation()
    deleted = store.prune(cut)

    after = counts(store)
    assert deleted["jobs"] == 4 and after["jobs"] == before["jobs"] - 4
    assert {r["id"] for r in store.jobs(states=("completed",))} == set(ended) - old
    assert not set(store.job_time()) & old
    assert not {e["job"] for e in store.events()} & old
    assert not {r[0] for r in store.db.execute("select job from placements")} & old
    assert all(r[0] >= cut for r in store.db.execute("select time from events"))
    assert all(r[0] >= cut for r in store.db.execute("select started from rounds"))
    assert all(r[0] >= cut for r in store.db.execute("select time from allocations"))
    assert after["rounds"] < before["rounds"] and after["placements"] < before["placements"]
    # the recent stays whole: the last round numbers the next, the allocation in force reads
    assert store.next_round() == next_round and store.latest_allocation() == latest
    assert {e["job"] for e in store.events(kinds=["completed"])} == set(ended) - old
    # nothing more to forget at the same horizon
    assert all(n == 0 for n in store.prune(cut).values())


def test_a_horizon_past_everything_keeps_the_last_round_and_allocation(tmp_path):
    _, store, _ = run(tmp_path / "state.db", n_jobs=3)
    next_round, latest = store.next_round(), store.latest_allocation()
    store.prune(math.inf)
    rows = counts(store)
    assert rows["jobs"] == 0 and rows["events"] == 0 and rows["rounds"] == 1
    assert rows["allocations"] == 1
    assert store.next_round() == next_round and store.latest_allocation() == latest


def test_size_reports_the_file_and_every_table(tmp_path):
    _, store, _ = run(tmp_path / "state.db", n_jobs=3)
    size, rows = store.size()
    assert size >= (tmp_path / "state.db").stat().st_size > 0
    assert {"jobs", "events", "rounds", "placements", "allocations", "allocation_rows"} <= set(rows)
    reader = SqliteStore(tmp_path / "state.db", readonly=True)
    assert reader.size()[1] == rows

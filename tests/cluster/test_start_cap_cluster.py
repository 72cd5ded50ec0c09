"""The daemon's `max_starts_per_round` on the real local cluster (issue 25): six 1-GPU jobs
that all fit on the 24 GPUs, and a cap of 2: no round starts more than two, the jobs started
keep running (nothing preempted for the cap), and all six run within three rounds."""
from __future__ import annotations

import time

from slurm_gavel.daemon.store import SqliteStore

from tests.support.daemon import MODELS, queue, start_daemon, stop_daemon, submit, write_config


def test_no_round_starts_more_than_its_cap_and_all_run_within_three_rounds(clean, tmp_path):
    cluster = clean
    config = write_config(tmp_path, cluster, max_starts_per_round=2)
    jobs = [submit(cluster, tmp_path, MODELS[i % 4], 1, 600) for i in range(6)]
    daemon = start_daemon(config)
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            assert daemon.poll() is None, daemon.communicate()[0][-3000:]
            states = queue(cluster)
            if all(states.get(j) == "RUNNING" for j in jobs):
                break
            time.sleep(2)
        states = queue(cluster)
    finally:
        code, log = stop_daemon(daemon)
        cluster.run(["scancel", *jobs], check=False)
    assert code == 0, log[-3000:]
    assert all(states.get(j) == "RUNNING" for j in jobs), (states, log[-3000:])
    store = SqliteStore(tmp_path / "gavel.db", readonly=True)
    per_round = dict(store.db.execute("select number, start from rounds").fetchall())
    started = store.db.execute("select round, job from placements where action = 'start'").fetchall()
    preempted = store.db.execute("select count(*) from placements where action = 'preempt'").fetchone()[0]
    store.close()
    assert max(per_round.values()) <= 2, per_round
    first = {}
    for number, job in sorted(started):
        first.setdefault(job, number)
    assert set(first) == set(jobs), (first, per_round)
    assert sorted(first.values()) == [0, 0, 1, 1, 2, 2], (first, per_round)   # two a round
    assert preempted == 0, per_round

"""The daemon's `max_preemptions_per_round` on the real local cluster: 32 GPUs asked of 24 by
jobs that must take turns, the plain mechanism (no hysteresis), and a cap of 2: no round
stops more than two jobs, and the jobs still take turns (preemptions happen)."""
from __future__ import annotations

import time

from slurm_gavel.daemon.store import SqliteStore

from tests.support.daemon import MODELS, start_daemon, stop_daemon, submit, write_config


def test_no_round_of_the_daemon_preempts_more_than_its_cap(clean, tmp_path):
    cluster = clean
    config = write_config(tmp_path, cluster, max_preemptions_per_round=2)
    jobs = [submit(cluster, tmp_path, MODELS[i % 4], 2, 400) for i in range(16)]
    daemon = start_daemon(config)
    try:
        deadline = time.time() + 300
        while time.time() < deadline:
            assert daemon.poll() is None, daemon.communicate()[0][-3000:]
            if (tmp_path / "gavel.db").exists():
                store = SqliteStore(tmp_path / "gavel.db", readonly=True)
                rounds = store.db.execute("select count(*) from rounds").fetchone()[0]
                store.close()
                if rounds >= 7:
                    break
            time.sleep(3)
    finally:
        code, log = stop_daemon(daemon)
        cluster.run(["scancel", *jobs], check=False)
    assert code == 0, log[-3000:]
    store = SqliteStore(tmp_path / "gavel.db", readonly=True)
    per_round = dict(store.db.execute("select number, preempt from rounds").fetchall())
    assert len(per_round) >= 7, per_round
    assert max(per_round.values()) <= 2, per_round
    assert sum(per_round.values()) >= 2, per_round             # they do take turns
    stopped = dict(store.db.execute("select round, count(*) from placements where action = 'preempt' "
                                    "group by round").fetchall())
    assert max(stopped.values(), default=0) <= 2, stopped

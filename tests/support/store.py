"""An engine run recorded in a real SQLite file."""
from __future__ import annotations

from slurm_gavel.core.clock import SimulatedClock
from slurm_gavel.core.engine import Engine
from slurm_gavel.core.recompute import Immediate
from slurm_gavel.estimator.table import TableThroughputs
from slurm_gavel.policies import make_policy
from slurm_gavel.sim.simulator import SimulatedCluster
from slurm_gavel.sim.workloads import generate_trace
from slurm_gavel.daemon.store import SqliteStore

from tests.support.engine import small_table


def run(db_path, rounds=3000, n_jobs=6):
    table = small_table()
    clock = SimulatedClock()
    jobs = generate_trace(table, n_jobs=n_jobs, rate_per_hour=4, seed=5)
    backend = SimulatedCluster(jobs, table, {"v100": 1, "p100": 1, "k80": 1}, clock)
    store = SqliteStore(db_path)
    engine = Engine(clock, backend, Immediate(make_policy("max_min_fairness")),
                    TableThroughputs(table), store)
    for _ in range(rounds):
        if backend.finished:
            break
        engine.step()
        store.status(engine.round - 1, clock.now(), engine.explain())
    engine.step()       # observe the last departures
    return backend, store, engine

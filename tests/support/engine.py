"""A small throughput table and jobs for engine runs on the simulated cluster."""
from __future__ import annotations

from slurm_gavel.core.clock import SimulatedClock
from slurm_gavel.core.engine import Engine
from slurm_gavel.core.recompute import Immediate
from slurm_gavel.core.store import MemoryStore
from slurm_gavel.estimator.table import TableThroughputs, ThroughputTable
from slurm_gavel.policies import make_policy
from slurm_gavel.sim.simulator import SimulatedCluster
from slurm_gavel.sim.workloads import TraceJob


# A small table: three models whose speedups differ by type (what makes
# heterogeneity pay), scale factors 1, 2 and 4, and a few pairs.
SOLO = {
    "v100": {("fast", 1): 10.0, ("flat", 1): 3.0, ("mid", 1): 6.0,
             ("fast", 2): 18.0, ("mid", 2): 11.0, ("fast", 4): 34.0},
    "p100": {("fast", 1): 5.0, ("flat", 1): 3.0, ("mid", 1): 4.0,
             ("fast", 2): 9.0, ("mid", 2): 7.0, ("fast", 4): 17.0},
    "k80": {("fast", 1): 1.0, ("flat", 1): 2.5, ("mid", 1): 2.0,
            ("fast", 2): 1.8, ("mid", 2): 3.5, ("fast", 4): 3.4},
}


PAIRS = {("fast", 1): {("flat", 1): (6.0, 2.0), ("mid", 1): (0.0, 0.0)},
         ("flat", 1): {("mid", 1): (2.0, 4.0), ("flat", 1): (2.0, 2.0)}}


def small_table(pairs: bool = False) -> ThroughputTable:
    data = {}
    for wt, rows in SOLO.items():
        data[wt] = {}
        for (model, sf), value in rows.items():
            row = {"null": value}
            if pairs:
                scale = {"v100": 1.0, "p100": 0.6, "k80": 0.3}[wt]
                for (other, osf), (a, b) in PAIRS.get((model, sf), {}).items():
                    row[str((other, osf))] = [a * scale, b * scale]
            data[wt][str((model, sf))] = row
    return ThroughputTable.from_gavel_dict(data)


def job(model="fast", steps=3600, sf=1, at=0.0):
    return TraceJob(model, "", "", "", False, steps, sf, 1.0, None, at)


def run_engine(jobs, cluster, policy="max_min_fairness", rounds=200, allocator=None, table=None,
               round_seconds=360.0, **kw):
    table = table or small_table()
    clock = SimulatedClock()
    backend = SimulatedCluster(jobs, table, cluster, clock, gpus_per_node=kw.pop("gpus_per_node", 4))
    allocator = allocator or Immediate(make_policy(policy, space_sharing=kw.get("space_sharing", False)))
    store = MemoryStore()
    engine = Engine(clock, backend, allocator, TableThroughputs(table), store, round_seconds, **kw)
    for _ in range(rounds):
        if backend.finished:
            break
        engine.step()
    backend.observe()
    return engine, backend, store

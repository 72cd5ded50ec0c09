"""The shortcuts of issue 12's speed work give what the plain paths gave.

Each test holds the shortcut against the plain computation (written out here)
or against what it must keep doing: the throughput table's stacked lookup,
repair without pair rows, the engine's handling of a store that drops usage
records, and the HiGHS instance whose `threads` matches the scheduler.  The
whole simulation's check (same summary and per-job CSV as before the change)
is `bench/simulate.py --versions` (docs/benchmarks.md).
"""
from __future__ import annotations

import numpy as np
import pytest

from slurm_gavel.core.backend import JobState
from slurm_gavel.core.clock import SimulatedClock
from slurm_gavel.core.engine import Engine
from slurm_gavel.core.model import Allocation
from slurm_gavel.core.recompute import Immediate
from slurm_gavel.core.store import MemoryStore
from slurm_gavel.estimator.table import TableThroughputs
from slurm_gavel.policies import make_policy
from slurm_gavel.policies.program import repair
from slurm_gavel.sim.simulator import SimulatedCluster

from helpers import make_input
from test_engine import job, small_table


def test_table_lookup_gives_each_jobs_own_row_also_unknown_ones_and_fresh_arrays():
    table = small_table()
    source = TableThroughputs(table)
    types = ("v100", "p100", "k80")

    def plain(j):
        solo, spread = table.solo(j.job_type, j.scale_factor), table.unconsolidated(j.job_type, j.scale_factor)
        return ([solo.get(wt, np.nan) for wt in types], [spread.get(wt, np.nan) for wt in types])

    first = [JobState("a", "fast", 1, 0.0), JobState("b", "nosuchmodel", 1, 0.0), JobState("c", "mid", 1, 0.0)]
    later = [JobState("d", "mid", 1, 0.0), JobState("e", "flat", 1, 0.0), JobState("f", "fast", 2, 0.0),
             JobState("g", "nosuchmodel", 1, 0.0), JobState("h", "fast", 1, 0.0)]
    for jobs in (first, later, first[:1], []):
        got = source.lookup(jobs, types)
        want = [plain(j) for j in jobs]
        assert got.solo.shape == got.unconsolidated.shape == (len(jobs), 3)
        np.testing.assert_array_equal(got.solo, np.array([w[0] for w in want]).reshape(len(jobs), 3))
        np.testing.assert_array_equal(got.unconsolidated, np.array([w[1] for w in want]).reshape(len(jobs), 3))
        got.solo[:] = -1.0                  # a caller's change stays its own
    assert source.lookup(first, types).solo[0, 0] == table.solo("fast", 1)["v100"]
    # another order of worker types is another table
    np.testing.assert_array_equal(source.lookup(first[:1], ("k80", "v100")).solo,
                                  [[table.solo("fast", 1)["k80"], table.solo("fast", 1)["v100"]]])


def _repair_plain(inp, x, xp):
    """repair as it is with pair rows: through the Allocation's views."""
    alloc = Allocation(inp.job_ids, inp.worker_types, x, "", pair_jobs=inp.pair_jobs, x_pairs=xp)
    over = alloc.time_fractions()
    x = x * np.where(over > 1.0, 1.0 / np.maximum(over, 1e-300), 1.0)[:, None]
    used = Allocation(inp.job_ids, inp.worker_types, x, "").gpus_used(inp.scale_factors.astype(float))
    col = np.where(used > inp.counts, inp.counts / np.maximum(used, 1e-300), 1.0)
    return x * col[None, :], xp * col[None, :]


@pytest.mark.parametrize("seed", range(20))
def test_repair_without_pairs_is_the_same_arithmetic(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30))
    inp = make_input(rng.uniform(0.5, 5.0, (n, 3)), counts=rng.integers(4, 9, 3),
                     scale_factors=rng.choice([1, 2, 4], n))
    x = rng.uniform(0, 1, (n, 3)) * rng.choice([0.2, 0.5, 1.0 + 1e-6, 2.0], (n, 1))
    xp = np.zeros((0, 3))
    got, want = repair(inp, x, xp), _repair_plain(inp, x, xp)
    assert np.array_equal(got[0], want[0]) and got[1].shape == want[1].shape == (0, 3)
    assert (got[0].sum(axis=1) <= 1 + 1e-12).all()


def _engine(store):
    table = small_table()
    clock = SimulatedClock()
    jobs = [job("fast", 36000), job("mid", 36000), job("flat", 36000), job("fast", 720, at=1500.0)]
    backend = SimulatedCluster(jobs, table, {"v100": 1, "p100": 1, "k80": 1}, clock)
    return Engine(clock, backend, Immediate(make_policy("max_min_fairness")), TableThroughputs(table),
                  store, 360.0), backend


def test_a_store_that_drops_usage_is_handed_none_and_the_ledger_still_gets_every_second():
    kept, dropped = MemoryStore(keep_rounds=True), MemoryStore(keep_rounds=False)
    assert kept.keeps_usage and not dropped.keeps_usage
    runs = []
    for store in (kept, dropped):
        engine, backend = _engine(store)
        for _ in range(3):
            engine.step()
        engine.settle()
        credited = {j: engine.ledger.total(j) for j in backend.active_ids()}
        busy = float(backend.busy_gpu_seconds.sum())
        for _ in range(60):
            engine.step()
        engine.settle()
        runs.append((credited, busy, [(d.id, d.time) for d in store.departures], backend.busy_gpu_seconds.tolist(),
                     {j: (r.finish, r.seconds) for j, r in backend.results.items()}))
    assert kept.usages and not dropped.usages
    assert runs[0] == runs[1]            # the same run either way
    assert sum(sum(t.values()) for t in runs[0][0].values()) == runs[0][1] > 0    # every second credited
    assert len(runs[0][2]) == 4          # all four finished


def test_highs_threads_match_the_scheduler_and_solves_still_succeed():
    highspy = pytest.importorskip("highspy")
    from slurm_gavel.policies import direct

    h = direct._highs()
    status, threads = h.getOptionValue("threads")
    assert threads >= 1                 # found the scheduler's count (0 = not found)
    found = direct.max_min(np.ones(2), np.array([[1.0, 2.0], [3.0, 1.0]]), np.ones((2, 2), bool),
                           np.array([1.0, 1.0]), np.ones(2), np.ones(2, dtype=np.int64))
    assert found is not None and h.getModelStatus() == highspy.HighsModelStatus.kOptimal

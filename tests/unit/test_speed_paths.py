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

from tests.support.inputs import make_input
from tests.support.engine import job, small_table


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


def _classes_plain(inp, per_job):
    """Classes as find_classes made them with the feasible mask among the compared columns."""
    columns = [inp.solo_throughputs, inp.feasible.astype(float), inp.scale_factors[:, None].astype(float)]
    columns += [np.asarray(a, dtype=float).reshape(inp.n_jobs, -1) for a in per_job]
    keys = np.ascontiguousarray(np.concatenate(columns, axis=1)).view(np.int64)
    order = np.lexsort(keys.T[::-1])
    first = np.ones(inp.n_jobs, dtype=bool)
    first[1:] = (keys[order][1:] != keys[order][:-1]).any(axis=1)
    labels = np.empty(inp.n_jobs, dtype=np.int64)
    labels[order] = np.cumsum(first) - 1
    return labels, order[np.flatnonzero(first)]


@pytest.mark.parametrize("seed", range(20))
def test_classes_without_the_feasible_column_are_the_same_classes_in_the_same_order(seed):
    from slurm_gavel.policies.symmetry import find_classes
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 40))
    kinds = rng.uniform(0.5, 5.0, (5, 3))
    kinds[rng.random((5, 3)) < 0.3] = np.nan                 # types some kinds cannot use
    kinds[:, 0] = rng.uniform(0.5, 5.0, 5)                  # every kind fits type 0 (8 GPUs)
    pick = rng.integers(0, 5, n)
    # types 1 and 2 may have fewer GPUs than a job needs: infeasible with a positive throughput
    counts = np.concatenate([[8], rng.integers(1, 9, 2)])
    inp = make_input(kinds[pick], counts=counts, scale_factors=rng.choice([1, 2, 4], n))
    per_job = [rng.choice([1.0, 2.0], n)]
    classes = find_classes(inp, per_job)
    labels, reps = _classes_plain(inp, per_job)
    if classes is None:
        assert len(reps) == n
    else:
        assert np.array_equal(classes.labels, labels) and np.array_equal(classes.representatives, reps)


@pytest.mark.parametrize("seed", range(10))
def test_the_no_pair_class_path_gives_what_the_general_class_path_gives(seed):
    from slurm_gavel.policies.symmetry import find_classes
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 40))
    kinds = rng.uniform(0.5, 5.0, (4, 3))
    inp = make_input(kinds[rng.integers(0, 4, n)], counts=rng.integers(2, 9, 3),
                     scale_factors=rng.choice([1, 2], n))
    policy = make_policy("max_min_fairness").policy
    params = policy.parameters(inp)
    classes = find_classes(inp, policy._per_job_numbers(inp, params, {}))
    assert classes is not None
    fast = policy._solve_classes(inp, classes, params, {})
    # the general path, as it ran before the no-pair shortcut: a non-empty rates dict
    # (the throughputs again, which the direct route declines) takes it, through cvxpy
    general = policy._solve_classes(inp, classes, params,
                                    {"throughputs": (inp.solo_throughputs, inp.shared_throughputs)})
    assert fast.x.shape == (n, 3) and fast.pair_jobs.shape == (0, 2) and fast.x_pairs.shape == (0, 3)
    assert np.allclose(fast.x, general.x, atol=1e-6)
    assert fast.objective == pytest.approx(general.objective, rel=1e-6)


@pytest.mark.parametrize("seed", range(10))
def test_max_min_arrays_built_in_place_are_the_pattern_and_values_of_the_plain_build(seed):
    from slurm_gavel.policies import direct
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(1, 20)), 3
    solo = rng.uniform(0.0, 5.0, (n, k))
    coef, mult, sf = rng.uniform(0.1, 2.0, n), rng.integers(1, 5, n).astype(float), rng.choice([1, 2, 4], n)
    captured = {}
    real = direct._solve

    def spy(n_x, n_rows, cost, col_upper, row_upper, start, index, value, *strategy, **options):
        captured.update(cost=cost.copy(), col_upper=col_upper.copy(), row_upper=row_upper.copy(),
                        start=start.copy(), index=index.copy(), value=value.copy())
        return real(n_x, n_rows, cost, col_upper, row_upper, start, index, value, *strategy, **options)

    direct._solve = spy
    try:
        found = direct.max_min(coef, solo, solo > 0, np.array([4.0, 6.0, 2.0]), mult, sf)
    finally:
        direct._solve = real
    rate = coef[:, None] * solo
    scale = direct._power_of_two_scale(rate)
    start, index = direct._pattern(n, k, True)
    assert np.array_equal(captured["start"], np.append(start, 3 * n * k))
    assert np.array_equal(captured["index"], np.concatenate([index, np.arange(n)]))
    assert np.array_equal(captured["value"],
                          np.concatenate([direct._values(rate * scale, mult, sf, k), np.ones(n)]))
    assert np.array_equal(captured["row_upper"], np.concatenate([np.zeros(n), np.ones(n), [4.0, 6.0, 2.0]]))
    assert np.array_equal(captured["col_upper"][:-1], (solo > 0).astype(float).ravel())
    assert captured["col_upper"][-1] == np.inf and captured["cost"][-1] == 1.0 and not captured["cost"][:-1].any()
    assert found is not None


@pytest.mark.parametrize("seed,churn", [(0, False), (1, True), (2, True)])
def test_renewing_every_lease_at_once_is_the_plan_select_and_place_give(monkeypatch, seed, churn):
    """plan_round's shortcut for a round where every row runs on its only positive entry
    (`_renew_all`) against the full path, on every round of small simulations."""
    from dataclasses import replace

    from slurm_gavel.core import engine as engine_mod
    from slurm_gavel.core import mechanism
    from slurm_gavel.sim.workloads import generate_trace

    real_renew = mechanism._renew_all
    counts = {"shortcut": 0, "rounds": 0}

    def counted(*args):
        out = real_renew(*args)
        counts["shortcut"] += out is not None
        return out

    def both(*args, **kwargs):
        monkeypatch.setattr(mechanism, "_renew_all", counted)
        fast = mechanism.plan_round(*args, **kwargs)
        monkeypatch.setattr(mechanism, "_renew_all", lambda *a: None)
        full = mechanism.plan_round(*args, **kwargs)
        counts["rounds"] += 1
        assert fast == full
        assert [id(a) for a in fast.keep] == [id(a) for a in full.keep]     # the very same leases
        return fast

    monkeypatch.setattr(engine_mod, "plan_round", both)
    # every round through plan_round (no quiet rounds renewed by the engine alone)
    monkeypatch.setattr(SimulatedCluster, "quiet_until", property(lambda self: None))
    table = small_table()
    jobs = generate_trace(table, n_jobs=25, rate_per_hour=10, seed=seed)
    # every third job of a model with a 2-GPU throughput takes two GPUs
    jobs = [replace(j, scale_factor=2) if i % 3 == 0 and j.job_type in ("fast", "mid") else j
            for i, j in enumerate(jobs)]
    clock = SimulatedClock()
    cost = 18.0 if churn else 0.0
    backend = SimulatedCluster(jobs, table, {"v100": 3, "p100": 3, "k80": 3}, clock, gpus_per_node=2,
                               restart_seconds=cost)
    engine = Engine(clock, backend, Immediate(make_policy("max_min_fairness")), TableThroughputs(table),
                    MemoryStore(keep_rounds=False), 360.0, hysteresis=2.0 if churn else 0.0,
                    restart_seconds=cost, move_hysteresis=5.0 if churn else 0.0)
    for _ in range(2000):
        if backend.finished:
            break
        engine.step()
    assert backend.finished and counts["rounds"] > 50
    assert counts["shortcut"] > 10        # the shortcut's rounds were among them


@pytest.mark.parametrize("mid_round", [False, True])
def test_rounds_renewed_without_planning_give_the_same_run(monkeypatch, mid_round):
    """A round the simulator says is quiet (no arrival, no completion before it ends) whose
    last plan renewed every lease is renewed without plan_round: the same results, job by
    job, as planning every round (`quiet_until` turned off)."""
    from dataclasses import replace

    from slurm_gavel.core import engine as engine_mod
    from slurm_gavel.sim.simulator import simulate
    from slurm_gavel.sim.workloads import generate_trace

    table = small_table()
    jobs = generate_trace(table, n_jobs=40, rate_per_hour=4, seed=7)
    jobs = [replace(j, scale_factor=2) if i % 4 == 0 and j.job_type in ("fast", "mid") else j
            for i, j in enumerate(jobs)]
    planned = []
    real = engine_mod.plan_round

    def counted(*args, **kwargs):
        planned.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(engine_mod, "plan_round", counted)

    def run():
        planned.clear()
        sim = simulate(jobs, table, {"v100": 3, "p100": 3, "k80": 3}, make_policy("max_min_fairness"),
                       gpus_per_node=2, restart_seconds=18.0, mid_round_starts=mid_round)
        return sim, len(planned)

    skipping, planned_some = run()
    monkeypatch.setattr(SimulatedCluster, "quiet_until", property(lambda self: None))
    every, planned_all = run()
    assert skipping.rounds == every.rounds and planned_all >= every.rounds
    assert planned_some < planned_all * 0.8          # rounds were renewed without planning
    assert {k: (r.finish, r.starts, r.seconds, r.steps_done) for k, r in skipping.results.items()} == \
        {k: (r.finish, r.starts, r.seconds, r.steps_done) for k, r in every.results.items()}
    assert skipping.busy_gpu_seconds == every.busy_gpu_seconds


def test_the_ledger_keeps_nothing_of_jobs_that_left():
    """A job that departs is forgotten, and a later reset must not carry its rows' deficits
    back in: on a long run they piled up (hundreds of dead rows, each departure scanning them)."""
    engine, backend = _engine(MemoryStore(keep_rounds=False))
    seen_alive = False
    for _ in range(400):
        engine.step()
        alive = set(backend.active_ids())
        seen_alive = seen_alive or bool(engine.ledger.jobs & alive)
        assert engine.ledger.jobs <= alive
        if not alive:
            break
    assert seen_alive and not backend.active_ids()
    assert engine.ledger.jobs == set()

"""The direct HiGHS route (policies/direct.py) against the cvxpy formulation.

Both solve the same LP: the same objective, a feasible X, an X that attains
that objective.  The Pareto stage and tie-break (policies/lp.py) make the X
the same too; tests/unit/test_pareto.py checks that on random inputs.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from slurm_gavel.core.errors import SolverError
from slurm_gavel.policies import direct, make_policy

from tests.support.inputs import DEGENERATE, assert_feasible, make_input, random_input

POLICIES = ["max_min_fairness", "makespan", "max_throughput", "fifo_ranked", "sjf"]


def inner(policy):
    """The LinearPolicy inside make_policy's wrappers."""
    while hasattr(policy, "policy"):
        policy = policy.policy
    return policy


def both(name: str, agnostic: bool = False):
    fast = make_policy(name, agnostic=agnostic)
    slow = make_policy(name, agnostic=agnostic)
    inner(slow).use_direct = False
    return fast, slow


def attained(policy, alloc, inp) -> float:
    """The policy's objective evaluated at the allocation's X (per job, no classes)."""
    lp = inner(policy)
    coef = lp.coefficients(inp)
    rate = coef * alloc.effective_throughputs(inp)
    if lp.name in ("max_min_fairness", "makespan"):
        return lp.objective_value(rate.min(), inp)
    return rate.sum()


def check_same_optimum(name: str, inp, agnostic: bool = False):
    fast, slow = both(name, agnostic)
    a, b = fast.allocate(inp), slow.allocate(inp)
    assert not inner(fast)._cache._entries, "the direct route compiles nothing"
    assert inner(slow)._cache._entries
    assert a.objective == pytest.approx(b.objective, rel=1e-6, abs=1e-9)
    assert_feasible(a, inp)
    assert_feasible(b, inp)
    if not agnostic:
        assert attained(fast, a, inp) == pytest.approx(a.objective, rel=1e-6, abs=1e-9)
    return a, b


@pytest.mark.parametrize("name", POLICIES)
@pytest.mark.parametrize("seed", range(6))
def test_same_optimum_on_random_inputs(name, seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(2, 30)), int(rng.integers(1, 5))
    check_same_optimum(name, random_input(rng, n, k, multi_gpu=seed % 2 == 1))


@pytest.mark.parametrize("name", POLICIES)
def test_same_optimum_with_identical_jobs(name):
    """Classes of identical jobs (symmetry.py): the direct route solves the class problem."""
    rng = np.random.default_rng(7)
    base = random_input(rng, 5, 3, multi_gpu=True)
    rows = rng.integers(0, 5, size=40)
    inp = make_input(base.throughputs[rows], base.counts * 3, scale_factors=base.scale_factors[rows],
                     weights=base.weights[rows], steps_remaining=base.steps_remaining[rows],
                     time_since_arrival=base.time_since_arrival[rows])
    check_same_optimum(name, inp)


@pytest.mark.parametrize("seed", range(4))
def test_same_optimum_agnostic(seed):
    rng = np.random.default_rng(100 + seed)
    check_same_optimum("max_min_fairness", random_input(rng, int(rng.integers(2, 25)), 3), agnostic=True)




@pytest.mark.parametrize("name", POLICIES)
@pytest.mark.parametrize("case", sorted(DEGENERATE))
def test_same_optimum_on_degenerate_inputs(name, case):
    check_same_optimum(name, DEGENERATE[case])


@pytest.mark.parametrize("name", ["max_min_fairness", "max_throughput"])
def test_same_x_where_the_optimum_is_unique(name):
    # One job: all its time on its fastest type.
    one = make_input([[10.0, 5.0, 1.0]], [1, 1, 1])
    # Each job fits one type only, one GPU each: each gets its GPU.
    split = make_input([[4.0, 0.0], [0.0, 9.0]], [1, 1])
    for inp in (one, split):
        a, b = check_same_optimum(name, inp)
        np.testing.assert_allclose(a.x, b.x, atol=1e-7)


def test_answer_depends_on_the_input_alone():
    """No state from earlier solves (no warm start): re-solving gives the same bits."""
    rng = np.random.default_rng(11)
    inputs = [random_input(rng, int(rng.integers(5, 30)), 3) for _ in range(4)]
    policy = make_policy("max_min_fairness")
    first = policy.allocate(inputs[0])
    for inp in inputs[1:]:
        policy.allocate(inp)
    again = make_policy("max_min_fairness").allocate(inputs[0])
    assert np.array_equal(first.x, policy.allocate(inputs[0]).x)
    assert np.array_equal(first.x, again.x)


def test_space_sharing_with_pricing_prices_on_highs():
    """Jobs all different: pair rows are priced on HiGHS' duals (direct_pairs.py), with the
    optimum of cvxpy's column generation (more in tests/unit/test_priced_pairs.py)."""
    rng = np.random.default_rng(5)
    inp = random_input(rng, 8, 3, pairs=10)
    policy = make_policy("max_min_fairness", space_sharing=True)
    slow = make_policy("max_min_fairness", space_sharing=True)
    inner(slow).use_direct = False
    a, b = policy.allocate(inp), slow.allocate(inp)
    assert not inner(policy)._cache._entries
    assert a.objective == pytest.approx(b.objective, rel=1e-6)


def classes_with_pairs(rng, kinds: int, copies: int, k: int = 3):
    """`kinds` kinds of job, `copies` of each, every two jobs of one scale factor a pair whose
    shared throughputs depend on the two kinds alone: the simulator's packed problems."""
    base = random_input(rng, kinds, k, multi_gpu=True)
    kind = np.repeat(np.arange(kinds), copies)
    share = rng.uniform(0.3, 0.8, size=(kinds, kinds, k))
    sf = base.scale_factors[kind]
    a, b = np.triu_indices(len(kind), k=1)
    keep = sf[a] == sf[b]
    a, b = a[keep], b[keep]
    solo = base.throughputs[kind]
    pair = np.stack([solo[a] * share[kind[a], kind[b]], solo[b] * share[kind[b], kind[a]]], axis=2)
    return make_input(solo, base.counts * copies, scale_factors=sf, weights=base.weights[kind],
                      steps_remaining=base.steps_remaining[kind],
                      time_since_arrival=base.time_since_arrival[kind],
                      pair_jobs=np.stack([a, b], axis=1), pair_throughputs=pair)


@pytest.mark.parametrize("seed", range(6))
def test_space_sharing_class_problems_take_the_direct_route(seed):
    """Identical jobs with pair rows (the simulator's packed rounds): HiGHS directly, the cvxpy
    route's optimum, primary level and Pareto stage alike."""
    rng = np.random.default_rng(40 + seed)
    inp = classes_with_pairs(rng, int(rng.integers(2, 6)), int(rng.integers(2, 5)))
    fast = make_policy("max_min_fairness", space_sharing=True)
    slow = make_policy("max_min_fairness", space_sharing=True)
    inner(slow).use_direct = False
    a, b = fast.allocate(inp), slow.allocate(inp)
    assert a.info.get("job_classes"), "the input is solved by classes"
    assert not inner(fast)._cache._entries, "the direct route compiles nothing"
    assert a.objective == pytest.approx(b.objective, rel=1e-6, abs=1e-9)
    assert_feasible(a, inp)
    # the Pareto stage's sum of weighted normalized throughputs: the same optimum
    lp = inner(fast)
    weight = lp.pareto_weights(inp, lp.coefficients(inp))
    assert (weight * a.effective_throughputs(inp)).sum() == pytest.approx(
        (weight * b.effective_throughputs(inp)).sum(), rel=1e-5)
    assert a.x_pairs.sum() > 0 or b.x_pairs.sum() == 0


def test_large_problems_keep_the_cvxpy_route():
    """Thousands of different jobs: cvxpy's interior point is faster there than a simplex."""
    rng = np.random.default_rng(6)
    n = direct.MAX_COLUMNS // 3 + 1
    inp = make_input(rng.uniform(1, 10, (n, 3)), [50, 50, 50])
    policy = make_policy("max_min_fairness")
    policy.allocate(inp)
    assert inner(policy)._cache._entries
    small = make_policy("max_min_fairness")
    small.allocate(make_input(rng.uniform(1, 10, (n // 2, 3)), [50, 50, 50]))
    assert not inner(small)._cache._entries


@pytest.fixture
def failing_highs(monkeypatch):
    """The direct route's HiGHS stops before optimality (an iteration limit of 0)."""
    monkeypatch.setattr(direct, "OPTIONS", {**direct.OPTIONS, "simplex_iteration_limit": 0})
    monkeypatch.setattr(direct, "_local", threading.local())


def test_a_failed_direct_solve_falls_back_to_cvxpy(failing_highs):
    inp = random_input(np.random.default_rng(3), 10, 3)
    assert direct.max_min(np.ones(10), inp.solo_throughputs, inp.feasible, inp.counts,
                          np.ones(10), inp.scale_factors.astype(float)) is None
    policy = make_policy("max_min_fairness")
    alloc = policy.allocate(inp)
    assert inner(policy)._cache._entries            # solved by the cvxpy route
    _, reference = both("max_min_fairness")
    assert alloc.objective == pytest.approx(reference.allocate(inp).objective, rel=1e-6)


def test_a_failed_solve_raises_solver_error(failing_highs):
    policy = make_policy("max_min_fairness")
    inner(policy).solvers = ()                       # and no solver to fall back to
    with pytest.raises(SolverError, match="no optimal solution"):
        policy.allocate(random_input(np.random.default_rng(4), 6, 2))


def test_the_primal_simplex_only_where_the_rates_are_within_its_range():
    """The primal simplex is picked for well-scaled rates and gives the dual's X there; on
    rates many orders apart (where it can stop at a wrong optimum) the dual is kept."""
    from slurm_gavel.policies import direct
    rng = np.random.default_rng(3)
    solo = rng.uniform(0.1, 5.0, (12, 3))
    coef = rng.uniform(0.5, 2.0, 12)
    assert direct._strategy(coef[:, None] * solo) == direct.PRIMAL
    assert direct._strategy(np.array([[1e-11, 0.0], [1.0, 2.0]])) == direct.DUAL
    assert direct._strategy(np.zeros((2, 2))) == direct.DUAL
    args = (coef, solo, solo > 0, np.array([4.0, 6.0, 2.0]), np.ones(12), np.ones(12))
    chosen = direct.max_min(*args, second=solo)
    real = direct._solve
    try:
        direct._solve = lambda *a, **kw: real(*a[:8], direct.DUAL, **kw)
        dual = direct.max_min(*args, second=solo)
    finally:
        direct._solve = real
    assert chosen is not None and dual is not None
    assert np.allclose(chosen.x, dual.x, atol=1e-9) and chosen.value == pytest.approx(dual.value, rel=1e-9)

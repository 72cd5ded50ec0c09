"""The min-cost policies' second stage (issue 12, section 1, for min_cost and min_cost_slo).

Their objective, throughput per dollar summed over every job, is already
work conserving: every usable entry has a positive value, so idle capacity
that a job with time left could use would raise it.  What it leaves open are
ties: two types of exactly equal value per dollar for a job (equal prices and
speeds, or a type twice as fast at twice the price), or two jobs that could
swap types at no change of the sum.  A solver then returns whichever vertex
(or, interior point, whichever blend) it reaches.  The second stage keeps the
cost objective and maximizes the jobs' normalized throughputs with the fixed
tie-break of lp.py.  Checks, in the style of test_pareto.py:

* the same X on either route for min_cost (HiGHS direct, cvxpy), and on the
  cvxpy route whichever HiGHS method solves it (simplex below HIGHS_SIMPLEX_BELOW
  variables, interior point with crossover above), on inputs full of ties and
  on random ones; within 1e-4 for min_cost with Clarabel (the fallback, an
  interior-point method without crossover, run here with tight tolerances);
* among the cost optima, no job's throughput can rise without lowering
  another's;
* the cost objective is what a solve without the second stage gives;
* no GPU type keeps capacity while a job that runs on it has time left.
"""
from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest

from tests.support.inputs import make_input, random_input
from slurm_gavel.core.model import PolicyInput
from slurm_gavel.policies import make_policy
from slurm_gavel.policies.cost import value_per_dollar
from slurm_gavel.policies.program import AllocationProgram
from slurm_gavel.policies import solver
from slurm_gavel.policies.solver import solve
from tests.support.pareto import EXACT, idle_while_waiting, inner, space_sharing_runs

COST = ["min_cost", "min_cost_slo"]
SIMPLEX = (("HIGHS", {"highs_options": {"solver": "simplex"}}),)
IPM = (("HIGHS", {"highs_options": {"solver": "ipm"}}),)
CLARABEL = (("CLARABEL", {"tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-10,
                          "max_iter": 400}),)


def policy(name: str, solvers=None, symmetry: bool = True, pareto: bool = True):
    """`name` as made; given `solvers`, on the cvxpy route with them (min_cost has a direct one)."""
    made = make_policy(name)
    lp = inner(made)
    if solvers is not None:
        lp.solvers, lp.use_direct = solvers, False
    lp.use_symmetry, lp.pareto = symmetry, pareto
    return made


def tied(seed: int) -> PolicyInput:
    """Four kinds of job, every type the same speed, two types the same price: ties everywhere."""
    rng = np.random.default_rng(seed)
    base = np.repeat(rng.uniform(1, 10, (4, 1)), 3, axis=1)
    rows = rng.integers(0, 4, size=30)
    return make_input(base[rows], [4, 6, 5], prices=np.array([1.0, 1.0, 2.0]),
                      scale_factors=rng.choice([1, 2], size=4)[rows],
                      steps_remaining=rng.uniform(1e3, 1e5, 4)[rows],
                      time_since_arrival=rng.uniform(0, 1e3, 4)[rows],
                      slo=np.where(rng.random(30) < 0.3, 2e4, np.nan))


def instance(seed: int) -> PolicyInput:
    rng = np.random.default_rng(seed)
    inp = random_input(rng, int(rng.integers(3, 30)), int(rng.integers(2, 5)), multi_gpu=seed % 2 == 1)
    slo = np.where(rng.random(inp.n_jobs) < 0.3, rng.uniform(1e4, 1e6, inp.n_jobs), np.nan)
    return make_input(inp.throughputs, inp.counts, scale_factors=inp.scale_factors,
                      weights=inp.weights, steps_remaining=inp.steps_remaining,
                      time_since_arrival=inp.time_since_arrival, prices=inp.prices, slo=slo)


def cost_value(alloc, inp: PolicyInput) -> float:
    solo, _ = value_per_dollar(inp)
    return float((alloc.x * solo).sum())


def on_every_route(name: str, inp: PolicyInput, monkeypatch, pareto: bool = True) -> list:
    """X from HiGHS simplex, HiGHS interior point (forced on a small LP) and Clarabel, through cvxpy."""
    simplex = policy(name, SIMPLEX, pareto=pareto).allocate(inp)
    with monkeypatch.context() as patch:
        patch.setattr(solver, "HIGHS_SIMPLEX_BELOW", 0)
        ipm = policy(name, IPM, pareto=pareto).allocate(inp)
    clarabel = policy(name, CLARABEL, pareto=pareto).allocate(inp)
    return [simplex, ipm, clarabel]


CASES = [("tied", s) for s in range(4)] + [("random", 50 + s) for s in range(6)]


def make(case) -> PolicyInput:
    kind, seed = case
    return tied(seed) if kind == "tied" else instance(seed)


@pytest.mark.parametrize("name", COST)
@pytest.mark.parametrize("case", CASES)
def test_same_x_on_either_highs_route(name, case, monkeypatch):
    inp = make(case)
    simplex, ipm, clarabel = on_every_route(name, inp, monkeypatch)
    np.testing.assert_allclose(ipm.x, simplex.x, atol=1e-6)
    if name == "min_cost":
        np.testing.assert_allclose(clarabel.x, simplex.x, atol=1e-4)
    for alloc in (simplex, ipm, clarabel):
        assert idle_while_waiting(alloc, inp) <= 1e-5


@pytest.mark.parametrize("case", CASES)
def test_min_cost_same_x_on_both_routes(case):
    """min_cost without pair rows goes to HiGHS directly (direct.py); cvxpy gives the same X."""
    inp = make(case)
    fast, slow = policy("min_cost"), policy("min_cost")
    inner(slow).use_direct = False
    a, b = fast.allocate(inp), slow.allocate(inp)
    assert not inner(fast)._cache._entries and inner(slow)._cache._entries
    np.testing.assert_allclose(a.x, b.x, atol=1e-6)
    assert a.objective == pytest.approx(b.objective, rel=1e-7)
    assert idle_while_waiting(a, inp) <= 1e-5


def test_without_the_second_stage_the_routes_disagree(monkeypatch):
    """What the second stage fixes: the cost objective alone ties, and the two HiGHS methods part."""
    inp = tied(0)
    simplex, ipm, clarabel = on_every_route("min_cost", inp, monkeypatch, pareto=False)
    assert np.abs(ipm.x - simplex.x).max() > 0.1 and np.abs(clarabel.x - simplex.x).max() > 0.1
    assert cost_value(ipm, inp) == pytest.approx(cost_value(simplex, inp), rel=1e-7)


def largest_gain_among_cost_optima(alloc, inp: PolicyInput) -> float:
    """max sum_m s_m / fastest_m over X as cheap as `alloc` (within 1e-7) with throughput_m >= have_m + s_m."""
    program = AllocationProgram(inp)
    program.set_numbers(inp)
    value = program.rate("value")
    solo, shared = value_per_dollar(inp)
    program.set_rate("value", solo, shared)
    have = alloc.effective_throughputs(inp)
    gain = cp.Variable(inp.n_jobs, nonneg=True)
    problem = cp.Problem(cp.Maximize(cp.sum(cp.multiply(1 / inp.fastest_throughputs(), gain))),
                         program.constraints + [program.total(value) >= cost_value(alloc, inp) * (1 - 1e-7),
                                                program.throughput >= have * (1 - 1e-9) + gain])
    return solve(problem, EXACT, "pareto check") / inp.n_jobs


@pytest.mark.parametrize("seed", range(4))
def test_min_cost_is_pareto_efficient_among_its_optima(seed):
    for inp in (tied(seed), instance(60 + seed)):
        assert largest_gain_among_cost_optima(policy("min_cost").allocate(inp), inp) <= 1e-6


@pytest.mark.parametrize("name", COST)
@pytest.mark.parametrize("seed", range(3))
def test_cost_objective_is_kept(name, seed):
    for inp in (tied(seed), instance(70 + seed)):
        a, b = policy(name).allocate(inp), policy(name, pareto=False).allocate(inp)
        assert a.objective == pytest.approx(b.objective, rel=1e-6)
        assert cost_value(a, inp) == pytest.approx(cost_value(b, inp), rel=1e-6)
        assert a.info.get("slo_violations") == b.info.get("slo_violations")


def test_equal_value_per_dollar_goes_to_the_faster_type():
    """Twice as fast at twice the price: the same value per dollar, twice the throughput."""
    inp = make_input([[2.0, 1.0]], [1, 1], types=("v100", "k80"), prices=np.array([2.0, 1.0]))
    for solvers in (None, SIMPLEX, CLARABEL):          # direct, then cvxpy
        alloc = policy("min_cost", solvers).allocate(inp)
        assert alloc.x == pytest.approx(np.array([[1.0, 0.0]]), abs=1e-6)


@pytest.mark.parametrize("name", COST)
@pytest.mark.parametrize("seed", range(2))
def test_space_sharing_keeps_the_cost_and_prices_the_second_stage(name, seed):
    """Pair rows: the second stage prices its own columns after the cost objective's (lp.py's
    pricing on cvxpy; HiGHS' pricing, direct_pairs.py, reaches the same cost)."""
    inp, a, b = space_sharing_runs(name, 80 + seed, use_direct=False)
    highs = make_policy(name, space_sharing=True).allocate(inp)
    assert highs.objective == pytest.approx(a.objective, rel=1e-6)
    assert a.info["pricing_rounds"] > b.info["pricing_rounds"] >= 1
    assert a.objective >= b.objective * (1 - 2e-6)
    assert idle_while_waiting(a, inp) <= 1e-5

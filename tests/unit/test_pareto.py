"""Pareto-efficient, route-independent allocations (issue 12, section 1).

A policy whose primary objective has many optimal X (max-min fairness is
indifferent to every job above the minimum) must return one that is Pareto
efficient among them, and the same one on both routes (HiGHS direct and
cvxpy).  The checks here:

* work conservation: no GPU type keeps unallocated capacity while a job that
  runs on it (throughput > 0) has a total time share below 1;
* Pareto efficiency: no job's throughput can rise while every job keeps at
  least what it has (one LP, solved with tight tolerances);
* the primary objective is what a solve without the second stage gives;
* the same X on either route, on random instances.
"""
from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest

from tests.support.inputs import make_input, random_input
from slurm_gavel.core.model import PolicyInput
from slurm_gavel.policies import make_policy
from slurm_gavel.policies.program import AllocationProgram
from slurm_gavel.policies.solver import solve
from tests.support.pareto import EXACT, idle_while_waiting, inner, space_sharing_runs

LP_POLICIES = ["max_min_fairness", "makespan", "fifo_ranked", "sjf", "max_throughput"]
ALL = LP_POLICIES + ["finish_time_fairness"]


def routes(name: str):
    """(direct route, cvxpy route) instances of policy `name`."""
    fast, slow = make_policy(name), make_policy(name)
    inner(slow).use_direct = False
    return fast, slow


def instance(seed: int) -> PolicyInput:
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(3, 30)), int(rng.integers(2, 5))
    return random_input(rng, n, k, multi_gpu=seed % 2 == 1)


def largest_pareto_gain(alloc, inp: PolicyInput) -> float:
    """max sum_m s_m / iso_m over X with throughput_m >= have_m + s_m, s >= 0 (0: Pareto efficient)."""
    program = AllocationProgram(inp)
    program.set_numbers(inp)
    have = alloc.effective_throughputs(inp)
    iso = inp.isolated_throughputs()
    gain = cp.Variable(inp.n_jobs, nonneg=True)
    problem = cp.Problem(cp.Maximize(cp.sum(cp.multiply(1 / iso, gain))),
                         program.constraints + [program.throughput >= have * (1 - 1e-9) + gain])
    return solve(problem, EXACT, "pareto check") / inp.n_jobs


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("seed", range(6))
def test_no_gpu_idle_while_a_job_that_fits_it_waits(name, seed):
    inp = instance(seed)
    for policy in routes(name):
        alloc = policy.allocate(inp)
        assert idle_while_waiting(alloc, inp) <= 1e-5, (name, seed)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("seed", range(4))
def test_pareto_efficient(name, seed):
    inp = instance(10 + seed)
    for policy in routes(name):
        assert largest_pareto_gain(policy.allocate(inp), inp) <= 1e-6, (name, seed)


@pytest.mark.parametrize("name", LP_POLICIES)
@pytest.mark.parametrize("seed", range(8))
def test_same_x_on_both_routes(name, seed):
    inp = instance(20 + seed)
    fast, slow = routes(name)
    a, b = fast.allocate(inp), slow.allocate(inp)
    assert not inner(fast)._cache._entries and inner(slow)._cache._entries
    np.testing.assert_allclose(a.x, b.x, atol=1e-6)


@pytest.mark.parametrize("name", LP_POLICIES)
def test_same_x_with_identical_jobs_and_ties(name):
    """Classes of identical jobs and types of equal speed: ties everywhere, one answer."""
    rng = np.random.default_rng(7)
    base = np.repeat(rng.uniform(1, 10, (4, 1)), 3, axis=1)       # every type the same speed
    rows = rng.integers(0, 4, size=30)
    inp = make_input(base[rows], [4, 6, 5], steps_remaining=rng.uniform(1e3, 1e5, 4)[rows],
                     time_since_arrival=rng.uniform(0, 1e3, 4)[rows])
    fast, slow = routes(name)
    a, b = fast.allocate(inp), slow.allocate(inp)
    np.testing.assert_allclose(a.x, b.x, atol=1e-6)
    assert idle_while_waiting(a, inp) <= 1e-5


@pytest.mark.parametrize("name", ["max_min_fairness", "makespan", "finish_time_fairness"])
@pytest.mark.parametrize("seed", range(3))
def test_primary_objective_is_kept(name, seed):
    """The second stage never gives up the primary objective (beyond a 1e-6 tolerance)."""
    inp = instance(30 + seed)
    pareto, plain = make_policy(name), make_policy(name)
    inner(plain).pareto = False
    a, b = pareto.allocate(inp), plain.allocate(inp)
    assert a.objective == pytest.approx(b.objective, rel=1e-6)
    lp = inner(pareto)
    if name == "finish_time_fairness":
        params = lp.parameters(inp)
        speedup = params["inv_isolated"] * a.effective_throughputs(inp)
        rho = params["fixed"] + params["scaled"] / speedup
        assert rho.max() <= a.objective * (1 + 2e-6)
    else:
        attained = (lp.coefficients(inp) * a.effective_throughputs(inp)).min()
        assert lp.objective_value(attained, inp) == pytest.approx(a.objective, rel=1e-6)


def test_max_min_hands_leftover_gpus_out():
    """The example of issue 12: a vertex left K80s idle; the second stage gives them to a job."""
    # Job 0 is fast on the V100 only, job 1 runs nearly as fast on the K80.
    inp = make_input([[10.0, 1.0], [4.0, 3.0]], [1, 1], types=("v100", "k80"))
    alloc = make_policy("max_min_fairness").allocate(inp)
    assert alloc.gpus_used(np.ones(2)) == pytest.approx([1.0, 1.0], abs=1e-6)
    assert alloc.time_fractions() == pytest.approx([1.0, 1.0], abs=1e-6)


def test_agnostic_baseline_has_no_second_stage():
    """The agnostic baseline stays Gavel's reference: one max-min solve, spread by GPU counts."""
    rng = np.random.default_rng(3)
    inp = random_input(rng, 12, 3)
    agnostic = make_policy("max_min_fairness", agnostic=True)
    assert inner(agnostic).pareto is False
    reference = make_policy("max_min_fairness", agnostic=True)
    np.testing.assert_allclose(agnostic.allocate(inp).x, reference.allocate(inp).x)


@pytest.mark.parametrize("name", ["max_min_fairness", "makespan", "finish_time_fairness"])
@pytest.mark.parametrize("seed", range(3))
def test_space_sharing_is_pareto_efficient_and_keeps_the_primary(name, seed):
    """Pair rows (priced columns): the second stage prices its own columns after the primary's
    (lp.py's pricing on cvxpy); that answer and HiGHS' (direct_pairs.py) Pareto efficient."""
    inp, a, b = space_sharing_runs(name, 40 + seed, use_direct=False)
    assert a.info["pricing_rounds"] > b.info["pricing_rounds"] >= 1
    on_highs = make_policy(name, space_sharing=True)
    highs = on_highs.allocate(inp)
    assert not inner(on_highs)._cache._entries, "HiGHS' route compiles nothing"
    for alloc in (a, highs):
        # Never worse than the one-stage answer (higher is better for max-min fairness only).
        better = 1 if name == "max_min_fairness" else -1
        assert better * (alloc.objective - b.objective) >= -2e-6 * abs(b.objective)
        assert idle_while_waiting(alloc, inp) <= 1e-5
        assert largest_pareto_gain(alloc, inp) <= 1e-6

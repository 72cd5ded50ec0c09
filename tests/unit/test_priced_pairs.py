"""Pair rows priced on HiGHS' duals (policies/direct_pairs.py) against the cvxpy route.

Jobs all different with pair rows: the LP holds every pair row on both routes
(cvxpy's column generation in lp.py, HiGHS' in direct_pairs.py), so the
optimum must be the same, the X feasible, and nothing compiled by cvxpy.
"""
from __future__ import annotations

import numpy as np
import pytest

from slurm_gavel.policies import make_policy

from tests.support.inputs import assert_feasible, random_input


def inner(policy):
    while hasattr(policy, "policy"):
        policy = policy.policy
    return policy


def routes(name: str):
    fast = make_policy(name, space_sharing=True)
    slow = make_policy(name, space_sharing=True)
    inner(slow).use_direct = False
    return fast, slow


def check(name: str, inp, rel: float = 1e-6):
    fast, slow = routes(name)
    a, b = fast.allocate(inp), slow.allocate(inp)
    assert not a.info.get("job_classes") and not b.info.get("job_classes")
    assert not inner(fast)._cache._entries, "HiGHS directly: nothing compiled by cvxpy"
    assert inner(slow)._cache._entries
    assert_feasible(a, inp)
    assert a.objective == pytest.approx(b.objective, rel=rel, abs=1e-12)
    return a, b


@pytest.mark.parametrize("seed", range(8))
def test_makespan_with_pairs_same_optimum(seed):
    rng = np.random.default_rng(300 + seed)
    n, k = int(rng.integers(4, 25)), int(rng.integers(1, 4))
    inp = random_input(rng, n, k, pairs=n * (n - 1) // 2, multi_gpu=seed % 3 == 2)
    a, b = check("makespan", inp)
    # the makespan the allocation attains is the optimum
    steps = inp.steps_remaining
    attained = (steps / a.effective_throughputs(inp)).max()
    assert attained == pytest.approx(a.objective, rel=1e-5)


def test_pairs_are_used_where_they_pay():
    """Pairs twice as good as taking turns on one GPU: the optimum shares it, on both routes."""
    rng = np.random.default_rng(7)
    inp = random_input(rng, 6, 1, pairs=15)
    from dataclasses import replace
    solo = inp.solo_throughputs
    a, b = inp.pair_jobs[:, 0], inp.pair_jobs[:, 1]
    shared = np.stack([solo[a] * 0.9, solo[b] * 0.9], axis=2)
    inp = replace(inp, counts=np.array([1.0]), pair_throughputs=shared)
    fast, slow = check("makespan", inp)
    assert fast.x_pairs.sum() > 0.5


@pytest.mark.parametrize("seed", range(4))
def test_max_min_fairness_with_pairs_same_pareto_sum(seed):
    """The Pareto stage goes on pricing: the same weighted sum as cvxpy's column generation."""
    rng = np.random.default_rng(400 + seed)
    n = int(rng.integers(4, 16))
    inp = random_input(rng, n, 3, pairs=n * (n - 1) // 2)
    a, b = check("max_min_fairness", inp)
    lp = inner(make_policy("max_min_fairness"))
    weight = lp.pareto_weights(inp, lp.coefficients(inp))
    assert (weight * a.effective_throughputs(inp)).sum() == pytest.approx(
        (weight * b.effective_throughputs(inp)).sum(), rel=1e-5)


def ftf_rho(inp, alloc) -> float:
    params = inner(make_policy("finish_time_fairness")).parameters(inp)
    speedup = params["inv_isolated"] * alloc.effective_throughputs(inp)
    return float((params["fixed"] + np.divide(params["scaled"], speedup, out=np.full(len(speedup), np.inf),
                                              where=speedup > 0)).max())


@pytest.mark.parametrize("seed", range(8))
def test_finish_time_fairness_with_pairs_same_rho_as_the_conic_route(seed):
    """direct.min_max_ratio with pair rows (levels priced on HiGHS) against Clarabel via cvxpy."""
    from slurm_gavel.policies.fairness import RHO_SLACK
    rng = np.random.default_rng(500 + seed)
    n, k = int(rng.integers(3, 14)), int(rng.integers(1, 4))
    inp = random_input(rng, n, k, pairs=n * (n - 1) // 2, multi_gpu=seed % 3 == 2)
    a, b = check("finish_time_fairness", inp, rel=2e-6)
    assert ftf_rho(inp, a) <= a.objective * (1 + 2 * RHO_SLACK) + 1e-12


def with_slos(rng, inp):
    """Some jobs with SLOs, a few of them impossible to meet."""
    from dataclasses import replace
    duration = inp.steps_remaining / inp.solo_throughputs.max(axis=1)
    slo = inp.time_since_arrival + duration * rng.choice([0.5, 1.5, 4.0, np.nan], size=inp.n_jobs)
    return replace(inp, slo=slo)


@pytest.mark.parametrize("name", ["min_cost", "min_cost_slo"])
@pytest.mark.parametrize("seed", range(6))
def test_cost_policies_with_pairs_same_optimum(name, seed):
    """min_cost (and with SLOs, its shortfall first) with every pair row priced on HiGHS:
    the cost cvxpy's column generation reaches, and the same Pareto-stage sum."""
    rng = np.random.default_rng(600 + seed)
    n, k = int(rng.integers(3, 16)), int(rng.integers(1, 4))
    inp = random_input(rng, n, k, pairs=n * (n - 1) // 2, multi_gpu=seed % 3 == 2)
    if name == "min_cost_slo":
        inp = with_slos(rng, inp)
    a, b = check(name, inp, rel=1e-6)
    fast = make_policy(name, space_sharing=True)
    assert inner(fast).info(a, inp) == inner(fast).info(b, inp)
    from slurm_gavel.policies.cost import second_gains
    _, own = second_gains(inp.weights, inp.solo_throughputs, np.ones(inp.n_jobs))
    assert (own * a.effective_throughputs(inp)).sum() == pytest.approx(
        (own * b.effective_throughputs(inp)).sum(), rel=1e-5)


@pytest.mark.parametrize("seed", range(6))
def test_min_cost_slo_without_pairs_on_highs(seed):
    """min_cost_slo without pair rows on HiGHS too (direct_pairs.cost_stages_priced with no
    pairs): the cost and SLO violations of the cvxpy route, nothing compiled."""
    rng = np.random.default_rng(700 + seed)
    n = int(rng.integers(3, 30))
    inp = with_slos(rng, random_input(rng, n, 3, multi_gpu=seed % 2 == 1))
    if seed >= 4:       # throughputs of three kinds: many ties between jobs
        from dataclasses import replace
        inp = replace(inp, throughputs=np.repeat(inp.throughputs[:3], n // 3 + 1, axis=0)[:n])
    fast, slow = make_policy("min_cost_slo"), make_policy("min_cost_slo")
    inner(slow).use_direct = False
    a, b = fast.allocate(inp), slow.allocate(inp)
    assert not inner(fast)._cache._entries and inner(slow)._cache._entries
    assert_feasible(a, inp)
    assert a.objective == pytest.approx(b.objective, rel=1e-6)
    assert inner(fast).info(a, inp) == inner(slow).info(b, inp)

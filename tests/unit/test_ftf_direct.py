"""Finish-time fairness solved as a few max-min LPs (policies/direct.py) against the conic route.

min_X max_m rho_m(X) with rho_m = fixed_m + scaled_m / speedup_m(X) is a min-max of
ratios; `direct.min_max_ratio` walks it down with max-min LPs on HiGHS.  The optimum
must be the conic route's (Clarabel) to its tolerance, the Pareto stage the same LP,
and nothing compiled through cvxpy.
"""
from __future__ import annotations

import numpy as np
import pytest

from slurm_gavel.policies import make_policy
from slurm_gavel.policies.fairness import RHO_SLACK

from tests.support.inputs import DEGENERATE, assert_feasible, make_input, random_input


def inner(policy):
    while hasattr(policy, "policy"):
        policy = policy.policy
    return policy


def routes():
    fast = make_policy("finish_time_fairness")
    slow = make_policy("finish_time_fairness")
    inner(slow).use_direct = False
    return fast, slow


def rho(policy, alloc, inp) -> np.ndarray:
    params = inner(policy).parameters(inp)
    speedup = params["inv_isolated"] * alloc.effective_throughputs(inp)
    return params["fixed"] + np.divide(params["scaled"], speedup, out=np.full(len(speedup), np.inf),
                                       where=speedup > 0)


def check(inp):
    fast, slow = routes()
    a, b = fast.allocate(inp), slow.allocate(inp)
    assert not inner(fast)._cache._entries, "the direct route compiles nothing"
    assert inner(slow)._cache._entries
    assert_feasible(a, inp)
    assert a.objective == pytest.approx(b.objective, rel=2e-6)
    # the X returned attains that rho (within the Pareto stage's slack)
    assert rho(fast, a, inp).max() <= a.objective * (1 + 2 * RHO_SLACK) + 1e-12
    return fast, a, b


@pytest.mark.parametrize("seed", range(8))
def test_same_rho_as_the_conic_route(seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(2, 40)), int(rng.integers(1, 5))
    check(random_input(rng, n, k, multi_gpu=seed % 2 == 1))


def test_same_pareto_sum_as_the_conic_route():
    """The second stage is the same LP on both routes: the same sum of normalized throughputs."""
    rng = np.random.default_rng(21)
    for _ in range(4):
        inp = random_input(rng, int(rng.integers(5, 30)), 3)
        fast, a, b = check(inp)
        iso = inner(fast).parameters(inp)["inv_isolated"]
        assert (iso * a.effective_throughputs(inp)).sum() == pytest.approx(
            (iso * b.effective_throughputs(inp)).sum(), rel=1e-5)


def test_jobs_with_nothing_left_or_unknown_work():
    """A job with no steps left has a constant rho; one without steps= gets max-min's floor."""
    rng = np.random.default_rng(5)
    inp = random_input(rng, 12, 3)
    steps = inp.steps_remaining.copy()
    steps[0] = 0.0
    steps[3] = np.nan
    t = inp.time_since_arrival.copy()
    t[1] = 0.0
    changed = make_input(inp.throughputs, inp.counts, scale_factors=inp.scale_factors,
                         weights=inp.weights, steps_remaining=steps, time_since_arrival=t)
    check(changed)


def test_agnostic_baseline_keeps_the_conic_route():
    """No Pareto stage there: the optimum is not one X, and the baseline stays as measured."""
    rng = np.random.default_rng(60)
    policy = make_policy("finish_time_fairness", agnostic=True)
    policy.allocate(random_input(rng, 12, 3))
    assert inner(policy)._cache._entries


def test_a_job_at_time_zero_is_max_min_fairness():
    """At arrival (nothing done, no wait) rho_m = 1 / speedup_m: FTF is max-min on speedups."""
    inp = make_input([[10.0, 4.0], [3.0, 2.0], [8.0, 8.0]], [1, 1],
                     steps_remaining=np.array([1e4, 1e4, 1e4]), time_since_arrival=np.zeros(3))
    fast, a, _ = check(inp)
    mmf = make_policy("max_min_fairness").allocate(inp)
    assert a.objective == pytest.approx(1 / mmf.objective, rel=1e-5)


@pytest.mark.parametrize("case", sorted(DEGENERATE))
def test_same_rho_on_degenerate_inputs(case):
    inp = DEGENERATE[case]
    if inp.time_since_arrival is None or np.ndim(inp.time_since_arrival) == 0:
        inp = make_input(inp.throughputs, inp.counts, scale_factors=inp.scale_factors,
                         weights=inp.weights, steps_remaining=inp.steps_remaining,
                         time_since_arrival=np.linspace(0, 5e3, inp.n_jobs))
    fast, slow = routes()
    a, b = fast.allocate(inp), slow.allocate(inp)
    assert_feasible(a, inp)
    assert a.objective == pytest.approx(b.objective, rel=2e-6)

"""Properties of the policy library that the paper (seed 1.2, 4.4, 5.9, 6.1, 7.8) promises."""
from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.inputs import assert_feasible, make_input, random_input
from slurm_gavel.core.errors import InputError, SolverError, UnknownPolicyError
from slurm_gavel.policies import POLICIES, make_policy
from slurm_gavel.policies.solver import LP_SOLVERS, solve

SEED_T = [[40.0, 10.0], [12.0, 4.0], [100.0, 50.0]]
LP_POLICIES = ["max_min_fairness", "finish_time_fairness", "fifo_ranked", "sjf", "makespan",
               "max_throughput", "min_cost", "min_cost_slo"]
SPACE_SHARING = ["max_min_fairness", "finish_time_fairness", "makespan", "min_cost"]


def seed_input(**fields):
    return make_input(SEED_T, [1, 1], types=("v100", "k80"), **fields)


def test_seed_example_max_min_fairness():
    """Seed 5.9: X close to the paper's, every job at 12/11 of its isolated throughput."""
    inp = seed_input()
    alloc = make_policy("max_min_fairness").allocate(inp)
    expected = np.array([[0.45, 0.00], [0.45, 0.09], [0.09, 0.91]])
    assert np.abs(alloc.x - expected).max() < 0.02, alloc.x
    ratio = alloc.effective_throughputs(inp) / inp.isolated_throughputs()
    assert np.allclose(ratio, 12 / 11, atol=1e-4), ratio
    assert alloc.objective == pytest.approx(12 / 11, rel=1e-5)


def test_agnostic_baseline_is_worse_on_seed_example():
    inp = seed_input()
    aware = make_policy("max_min_fairness").allocate(inp)
    blind = make_policy("max_min_fairness", agnostic=True).allocate(inp)
    assert_feasible(blind, inp)
    worst = lambda a: (a.effective_throughputs(inp) / inp.isolated_throughputs()).min()
    assert worst(aware) > worst(blind) + 0.05
    assert blind.policy == "max_min_fairness_agnostic"


@pytest.mark.parametrize("name", LP_POLICIES)
def test_one_type_aware_equals_agnostic(name):
    """Seed 6.1: on a homogeneous cluster the aware policy reduces to the original one."""
    rng = np.random.default_rng(7)
    inp = random_input(rng, 6, 1)
    inp = make_input(np.maximum(inp.throughputs, 1.0), [3], **_fields(inp))
    aware = make_policy(name).allocate(inp)
    blind = make_policy(name, agnostic=True).allocate(inp)
    assert aware.objective == pytest.approx(blind.objective, rel=1e-5, abs=1e-7)


def _fields(inp, **over):
    fields = dict(scale_factors=inp.scale_factors, weights=inp.weights,
                  steps_remaining=inp.steps_remaining, time_since_arrival=inp.time_since_arrival,
                  prices=inp.prices[: 1] if len(inp.prices) else None)
    fields.update(over)
    return fields


instances = st.builds(
    lambda seed, n, k, multi: random_input(np.random.default_rng(seed), n, k, multi_gpu=multi),
    st.integers(0, 2**31), st.integers(1, 9), st.integers(1, 4), st.booleans())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inp=instances)
def test_every_policy_respects_constraints(inp):
    for name in sorted(POLICIES):
        for agnostic in (False, True):
            alloc = make_policy(name, agnostic=agnostic).allocate(inp)
            assert_feasible(alloc, inp)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inp=instances)
def test_max_min_fairness_sharing_incentive(inp):
    """Seed 7.8: with equal weights every job does at least as well as under isolation."""
    inp = make_input(inp.throughputs, inp.counts, scale_factors=inp.scale_factors)
    alloc = make_policy("max_min_fairness").allocate(inp)
    got = alloc.effective_throughputs(inp)
    assert (got >= inp.isolated_throughputs() * (1 - 1e-5) - 1e-7).all()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), n=st.integers(2, 8), k=st.integers(1, 3))
def test_space_sharing_feasible_and_never_worse(seed, n, k):
    """Seed 7.8: a solution with colocation is at least as good as one without."""
    inp = random_input(np.random.default_rng(seed), n, k, pairs=min(6, n * (n - 1) // 2))
    for name in SPACE_SHARING:
        packed = make_policy(name, space_sharing=True).allocate(inp)
        alone = make_policy(name).allocate(inp)
        assert_feasible(packed, inp)
        better = {"max_min_fairness": 1, "min_cost": 1, "finish_time_fairness": -1,
                  "makespan": -1}[name]
        assert better * packed.objective >= better * alone.objective - 1e-5 * abs(alone.objective) - 1e-7


def test_space_sharing_uses_a_good_pair():
    """Two jobs that lose little when sharing one GPU: sharing beats time slicing."""
    inp = make_input([[10.0], [10.0]], [1], pair_jobs=[[0, 1]],
                     pair_throughputs=[[[8.0, 8.0]]])
    packed = make_policy("max_min_fairness", space_sharing=True).allocate(inp)
    alone = make_policy("max_min_fairness").allocate(inp)
    assert alone.effective_throughputs(inp) == pytest.approx([5.0, 5.0], rel=1e-5)
    assert packed.effective_throughputs(inp) == pytest.approx([8.0, 8.0], rel=1e-5)
    assert packed.x_pairs[0, 0] == pytest.approx(1.0, rel=1e-5)


def test_pairs_ignored_without_space_sharing():
    inp = make_input([[10.0], [10.0]], [1], pair_jobs=[[0, 1]], pair_throughputs=[[[8.0, 8.0]]])
    alloc = make_policy("max_min_fairness").allocate(inp)
    assert alloc.x_pairs.size == 0 or alloc.x_pairs.sum() == 0


def a3c_like(slo=None):
    # Seed 5.1: A3C gains ~2.2x from a V100 over a K80; ResNet-50 ~9.6x.
    # GCP on-demand $/GPU-hour of the paper's time: V100 2.48, K80 0.45.
    fields = dict(prices=np.array([2.48, 0.45]), steps_remaining=np.array([36_000.0, 36_000.0]))
    if slo is not None:
        fields["slo"] = np.array([slo, np.nan])
    return make_input([[2.2, 1.0], [9.6, 1.0]], [1, 1], types=("v100", "k80"), **fields)


def test_min_cost_sends_a3c_to_the_cheap_gpu():
    inp = a3c_like()
    alloc = make_policy("min_cost").allocate(inp)
    assert alloc.x[0, 1] == pytest.approx(1.0, abs=1e-6)   # A3C on K80
    assert alloc.x[1, 0] == pytest.approx(1.0, abs=1e-6)   # ResNet-50 on V100


def test_min_cost_slo_moves_a3c_to_the_fast_gpu_when_slo_is_tight():
    # 36,000 steps in 6 hours needs 1.67 steps/s: more than the K80's 1.0.
    inp = a3c_like(slo=6 * 3600.0)
    alloc = make_policy("min_cost_slo").allocate(inp)
    assert alloc.effective_throughputs(inp)[0] >= 36_000 / (6 * 3600) - 1e-6
    assert alloc.x[0, 0] > 0.5
    assert "slo_violations" not in alloc.info
    loose = make_policy("min_cost_slo").allocate(a3c_like(slo=100 * 3600.0))
    assert loose.x[0, 1] == pytest.approx(1.0, abs=1e-6)


def test_min_cost_slo_reports_impossible_slo():
    inp = a3c_like(slo=60.0)            # 36,000 steps in a minute: impossible
    alloc = make_policy("min_cost_slo").allocate(inp)
    assert alloc.info["slo_violations"] == ["0"]
    assert alloc.x[0].sum() == pytest.approx(1.0, abs=1e-6)


def test_makespan_objective_is_seconds():
    inp = make_input([[2.0], [1.0]], [1], steps_remaining=np.array([100.0, 100.0]))
    alloc = make_policy("makespan").allocate(inp)
    # Both must finish: 100/2 + 100/1 = 150 s on one GPU.
    assert alloc.objective == pytest.approx(150.0, rel=1e-5)


def test_sjf_gives_the_gpu_to_the_shortest_job():
    inp = make_input([[1.0], [1.0], [1.0]], [1], steps_remaining=np.array([300.0, 100.0, 200.0]))
    alloc = make_policy("sjf").allocate(inp)
    assert alloc.x[:, 0] == pytest.approx([0.0, 1.0, 0.0], abs=1e-6)


def test_sjf_compares_remaining_time_per_type():
    # Job 0 is shorter in steps but 10x slower on the K80-like type 1.
    inp = make_input([[10.0, 1.0], [10.0, 5.0]], [1, 1], steps_remaining=np.array([100.0, 150.0]))
    alloc = make_policy("sjf").allocate(inp)
    assert alloc.x[0, 0] == pytest.approx(1.0, abs=1e-6)
    assert alloc.x[1, 1] == pytest.approx(1.0, abs=1e-6)


def test_fifo_serves_earliest_first():
    inp = make_input([[1.0], [1.0], [1.0]], [2], time_since_arrival=np.array([10.0, 30.0, 20.0]))
    alloc = make_policy("fifo").allocate(inp)
    assert alloc.x[:, 0] == pytest.approx([0.0, 1.0, 1.0], abs=1e-6)


def test_finish_time_fairness_equals_max_min_at_arrival():
    """With t=0 for every job, rho_m = iso_m / thr_m: FTF and max-min fairness agree."""
    inp = seed_input(steps_remaining=np.array([1e4, 2e4, 3e4]))
    ftf = make_policy("ftf").allocate(inp)
    mmf = make_policy("las").allocate(inp)
    assert ftf.objective == pytest.approx(1 / mmf.objective, rel=1e-4)


def test_infeasible_entries_stay_zero_and_big_jobs_skip_small_types():
    with pytest.raises(InputError, match=r"jobs\[0\]: fits no worker type"):
        inp = make_input([[10.0, 0.0]], [1, 4], scale_factors=np.array([2]))
    inp = make_input([[10.0, 7.0], [5.0, 3.0]], [1, 4], scale_factors=np.array([2, 1]))
    alloc = make_policy("max_min_fairness").allocate(inp)
    assert alloc.x[0, 0] == 0.0            # 2 GPUs needed, type 0 has 1
    assert_feasible(alloc, inp)


def test_missing_fields_name_the_field():
    inp = seed_input()
    with pytest.raises(InputError, match=r"jobs\[0\]\.steps_remaining: is required by policy makespan"):
        make_policy("makespan").allocate(inp)
    with pytest.raises(InputError, match=r"worker_types\.v100\.price_per_hour"):
        make_policy("min_cost").allocate(inp)
    with pytest.raises(UnknownPolicyError, match="unknown policy 'nope'"):
        make_policy("nope")


def test_aliases_carry_gavel_meaning():
    packed = make_policy("max_min_fairness_packed")
    assert packed.name == "max_min_fairness" and packed.supports_space_sharing
    assert not make_policy("max_min_fairness_perf").supports_space_sharing
    assert make_policy("min_total_duration").name == "makespan_agnostic"
    assert make_policy("las").name == "max_min_fairness"


def test_compiled_problem_is_reused_for_new_numbers():
    policy = make_policy("max_min_fairness").policy
    policy.use_direct = False          # the cvxpy route (direct.py compiles nothing)
    rng = np.random.default_rng(3)
    first = random_input(rng, 12, 3)
    policy.allocate(first)
    (compiled,) = policy._cache._entries.values()
    second = make_input(first.throughputs * rng.uniform(0.5, 2.0, first.throughputs.shape),
                        first.counts, scale_factors=first.scale_factors, weights=first.weights)
    again = policy.allocate(second)
    assert list(policy._cache._entries.values()) == [compiled]      # no rebuild
    fresh = make_policy("max_min_fairness").allocate(second)
    assert again.objective == pytest.approx(fresh.objective, rel=1e-6)


def test_solver_status_is_checked():
    x = cp.Variable(2)
    infeasible = cp.Problem(cp.Maximize(cp.sum(x)), [x >= 1, x <= 0])
    with pytest.raises(SolverError, match="no optimal solution"):
        solve(infeasible, LP_SOLVERS, "test")
    unbounded = cp.Problem(cp.Maximize(cp.sum(x)), [x >= 0])
    with pytest.raises(SolverError):
        solve(unbounded, LP_SOLVERS, "test")


def test_unconsolidated_throughput_where_a_job_must_spread():
    """Seed 1.3: a job wider than a server of a type runs at its unconsolidated speed there."""
    inp = make_input([[100.0, 100.0]], [8, 8], types=("small_nodes", "big_nodes"),
                     scale_factors=np.array([8]),
                     unconsolidated_throughputs=np.array([[60.0, 60.0]]),
                     gpus_per_node=np.array([4.0, 8.0]))
    assert inp.solo_throughputs.tolist() == [[60.0, 100.0]]
    alloc = make_policy("max_throughput").allocate(inp)
    assert alloc.x[0].tolist() == pytest.approx([0.0, 1.0], abs=1e-6)
    # Unknown server size or unknown unconsolidated speed: the given throughput stands.
    plain = make_input([[100.0, 100.0]], [8, 8], scale_factors=np.array([8]),
                       gpus_per_node=np.array([4.0, 8.0]))
    assert plain.solo_throughputs.tolist() == [[100.0, 100.0]]


def test_agnostic_allocation_does_not_depend_on_the_order_of_types():
    t = np.array([[10.0, 5.0, 1.0], [3.0, 3.0, 2.5], [6.0, 4.0, 2.0]])
    counts = np.array([1.0, 2.0, 3.0])
    order = [2, 0, 1]
    policy = make_policy("max_min_fairness", agnostic=True)
    a = policy.allocate(make_input(t, counts, types=("v100", "p100", "k80")))
    b = policy.allocate(make_input(t[:, order], counts[order], types=("k80", "v100", "p100")))
    assert np.allclose(a.x[:, order], b.x, atol=1e-6)
    # a lone job's time is spread over the types by their GPU counts
    lone = policy.allocate(make_input(t[:1], counts, types=("v100", "p100", "k80")))
    assert np.allclose(lone.x[0] / lone.x[0].sum(), counts / counts.sum(), atol=1e-6)

"""Hierarchical policy (water filling, seed 4.5)."""
from __future__ import annotations

import json

import cvxpy as cp
import numpy as np
import pytest

from slurm_gavel.core.errors import SolverError
from slurm_gavel.core.model import Allocation, PolicyInput
from slurm_gavel.policies import ALIASES, POLICIES, make_policy
from slurm_gavel.policies.fairness import MaxMinFairness
from slurm_gavel.policies.hierarchical import Hierarchical
from slurm_gavel.policies.program import AllocationProgram
from slurm_gavel.policies.solver import solve

# The Pareto checker's own solvers: tolerances far below the 1e-6 it checks.
RELAX = 1e-12
EXACT = [("HIGHS", {"highs_options": {"solver": method, "primal_feasibility_tolerance": 1e-10,
                                      "dual_feasibility_tolerance": 1e-10, "time_limit": 5.0}})
         for method in ("simplex", "ipm")]


def solve_exactly(problem):
    for solver in EXACT:
        try:
            return solve(problem, (solver,), "pareto check")
        except (SolverError, ValueError):   # cvxpy raises ValueError on HiGHS status UNKNOWN
            continue
    raise SolverError("pareto check: no solver reached optimality")


def homogeneous(n, gpus, **kw):
    kw.setdefault("weights", np.ones(n))
    return PolicyInput(worker_types=("gpu",), counts=np.array([float(gpus)]),
                       job_ids=tuple(f"j{i}" for i in range(n)), throughputs=np.ones((n, 1)),
                       scale_factors=np.ones(n, dtype=np.int64), **kw)


def heterogeneous(seed, n=8, pairs=False):
    rng = np.random.default_rng(seed)
    types = ("v100", "p100", "k80")
    base = rng.uniform(0.5, 2.0, n)
    speed = rng.uniform(1.0, 4.0, (n, 3)) * np.array([3.0, 2.0, 1.0])
    t = base[:, None] * speed
    t[rng.random((n, 3)) < 0.15] = np.nan
    t[:, 2] = np.where(np.isnan(t).all(axis=1), 1.0, t[:, 2])   # every job fits somewhere
    sf = rng.choice([1, 1, 2], n)
    kw = {}
    if pairs:
        cand = [(a, b) for a in range(n) for b in range(a + 1, n) if sf[a] == sf[b]]
        chosen = [cand[i] for i in rng.choice(len(cand), min(6, len(cand)), replace=False)]
        solo = np.nan_to_num(t)[np.array(chosen)].transpose(0, 2, 1)      # (P, k, 2)
        kw = {"pair_jobs": np.array(chosen),
              "pair_throughputs": solo * rng.uniform(0.4, 0.8, solo.shape)}
    return PolicyInput(
        worker_types=types, counts=np.array([2.0, 3.0, 4.0]),
        job_ids=tuple(f"j{i}" for i in range(n)), throughputs=t, scale_factors=sf,
        weights=rng.choice([1.0, 2.0], n),
        entities=tuple(rng.choice(["alice", "bob", "carol"], n)),
        entity_weights={"alice": 1.0, "bob": 2.0, "carol": 0.5},
        entity_policies={"bob": "fifo"},
        time_since_arrival=rng.uniform(0, 1000, n), **kw)


def first_iteration(alloc):
    return np.array(alloc.info["iterations"][0]["normalized_throughputs"])


def assert_feasible(inp, alloc):
    assert (alloc.x >= 0).all() and (alloc.x_pairs >= 0).all()
    assert (alloc.time_fractions() <= 1 + 1e-6).all()
    assert (alloc.gpus_used(inp.scale_factors.astype(float)) <= inp.counts + 1e-6).all()
    assert (alloc.x[~inp.feasible] == 0).all()


# -- (1) the seed's worked example --------------------------------------------------

@pytest.mark.parametrize("layout", ["one_entity", "own_entities"])
def test_seed_example_weights_3_1_1_1(layout):
    if layout == "one_entity":
        inp = homogeneous(4, 4, weights=np.array([3.0, 1.0, 1.0, 1.0]))
    else:
        inp = homogeneous(4, 4, entities=("e0", "e1", "e2", "e3"),
                          entity_weights={"e0": 3.0, "e1": 1.0, "e2": 1.0, "e3": 1.0})
    policy = Hierarchical()
    policy.use_shortcut = False     # (with it, no iteration is needed: the last check below)
    alloc = policy.allocate(inp)
    # Iteration 1 is weighted max-min fairness: job 1 hits one full GPU, the
    # others get a third of it each; job 1 is the bottleneck.
    np.testing.assert_allclose(first_iteration(alloc), [1.0, 1 / 3, 1 / 3, 1 / 3], atol=1e-6)
    assert alloc.info["iterations"][0]["bottlenecked"] == ["j0"]
    # Iteration 2 fills the two idle GPUs: every job ends on a full GPU.
    assert len(alloc.info["iterations"]) == 2
    np.testing.assert_allclose(alloc.x.sum(axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(alloc.effective_throughputs(inp), 1.0, atol=1e-6)
    assert alloc.objective == pytest.approx(1.0, abs=1e-6)
    # Every job can have a full GPU at once: the shortcut gives that answer without an LP.
    direct = Hierarchical()
    direct.use_direct = True        # the shortcut is the direct route's (off by default for now)
    quick = direct.allocate(inp)
    assert quick.info["shortcut"] and quick.info["lps"] == 0
    np.testing.assert_allclose(quick.x, alloc.x, atol=1e-6)


# -- (2) FIFO entity ----------------------------------------------------------------

def test_fifo_entity_gives_the_gpu_to_the_earliest_job():
    inp = homogeneous(3, 1, entities=("team",) * 3, entity_policies={"team": "fifo"},
                      time_since_arrival=np.array([50.0, 90.0, 10.0]))   # j1 arrived first
    alloc = Hierarchical().allocate(inp)
    np.testing.assert_allclose(alloc.x.ravel(), [0.0, 1.0, 0.0], atol=1e-6)
    assert alloc.info["iterations"][0]["weights"] == [0.0, 1.0, 0.0]


def test_fifo_weight_moves_to_next_job_when_first_is_bottlenecked():
    # Each job can use at most one GPU: with 2 GPUs, the second job in the
    # queue gets the GPU the first one cannot use; the third gets nothing.
    inp = homogeneous(3, 2, entities=("team",) * 3, entity_policies={"team": "fifo"},
                      time_since_arrival=np.array([30.0, 20.0, 10.0]))
    alloc = Hierarchical().allocate(inp)
    np.testing.assert_allclose(alloc.x.ravel(), [1.0, 1.0, 0.0], atol=1e-6)
    assert alloc.info["iterations"][0]["weights"] == [1.0, 0.0, 0.0]


# -- (3) two entities, known by hand ------------------------------------------------

def test_two_fairness_entities_weights_1_and_2():
    # 3 GPUs, 4 jobs of at most 1 GPU each.  Entity A (weight 1) splits its
    # weight 1/2, 1/2; entity B (weight 2) 1, 1.  Isolated share = 3/4 GPU.
    # Level L: A's jobs get 3/4 * L/2, B's 3/4 * L; using all 3 GPUs gives
    # L = 4/3: A's jobs 0.5 GPU each, B's jobs a full GPU each.
    inp = homogeneous(4, 3, entities=("A", "A", "B", "B"), entity_weights={"A": 1.0, "B": 2.0})
    alloc = Hierarchical().allocate(inp)
    np.testing.assert_allclose(alloc.effective_throughputs(inp), [0.5, 0.5, 1.0, 1.0], atol=1e-6)
    assert alloc.objective == pytest.approx(0.5 / 0.75, abs=1e-6)


def test_fairness_entity_next_to_fifo_entity():
    # 2 GPUs.  A (weight 1, fairness): a1, a2.  B (weight 2, FIFO): b1 before b2.
    # Isolated share = 1/2 GPU, so normalized throughput = 2 * throughput.
    # Iteration 1, weights a: 1/2, 1/2, b1: 2.  b1 gets L, each a L/4;
    #   b1 is capped at 1 GPU -> L = 1: b1 = 1, a1 = a2 = 1/4; 1/2 GPU left.
    # Iteration 2, weights a: 1/2, 1/2, b2: 2.  Rise L': b2 L', each a L'/4;
    #   3/2 L' = 1/2 -> L' = 1/3: b2 = 1/3, a1 = a2 = 1/3.
    inp = homogeneous(4, 2, entities=("A", "A", "B", "B"), entity_weights={"A": 1.0, "B": 2.0},
                      entity_policies={"B": "fifo"},
                      time_since_arrival=np.array([0.0, 0.0, 10.0, 5.0]))
    alloc = Hierarchical().allocate(inp)
    its = alloc.info["iterations"]
    assert its[0]["weights"] == [0.5, 0.5, 2.0, 0.0]
    np.testing.assert_allclose(first_iteration(alloc), 2 * np.array([0.25, 0.25, 1.0, 0.0]), atol=1e-6)
    assert its[0]["bottlenecked"] == ["j2"]
    assert its[1]["weights"] == [0.5, 0.5, 0.0, 2.0]
    np.testing.assert_allclose(alloc.effective_throughputs(inp), [1 / 3, 1 / 3, 1.0, 1 / 3], atol=1e-6)


def test_fairness_entity_uses_job_weights():
    # One entity, job weights 2 and 1, one GPU: shares 2/3 and 1/3.
    inp = homogeneous(2, 1, weights=np.array([2.0, 1.0]))
    alloc = Hierarchical().allocate(inp)
    np.testing.assert_allclose(alloc.x.ravel(), [2 / 3, 1 / 3], atol=1e-6)


def test_space_sharing_pair_rows_are_used():
    # Two jobs, one GPU; sharing it, each runs at 0.8 of its solo speed, so
    # both get 0.8 instead of the 0.5 time sharing gives.
    inp = homogeneous(2, 1, pair_jobs=np.array([[0, 1]]),
                      pair_throughputs=np.full((1, 1, 2), 0.8))
    alloc = Hierarchical().allocate(inp)
    np.testing.assert_allclose(alloc.effective_throughputs(inp), [0.8, 0.8], atol=1e-6)
    np.testing.assert_allclose(alloc.x_pairs, [[1.0]], atol=1e-6)


# -- (4) constraints; (5) Pareto efficiency -----------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("pairs", [False, True])
def test_constraints_hold_on_heterogeneous_instances(seed, pairs):
    inp = heterogeneous(seed, pairs=pairs)
    alloc = Hierarchical().allocate(inp)
    assert_feasible(inp, alloc)
    assert alloc.info.get("uncertified_bottlenecks", 0) == 0
    # Every job appears frozen exactly once.
    frozen = [j for it in alloc.info["iterations"] for j in it["bottlenecked"]]
    assert sorted(frozen) == sorted(inp.job_ids)


def max_single_raise(inp: PolicyInput, alloc: Allocation) -> np.ndarray:
    """(n,) most each job's throughput can rise (normalized by its isolated
    throughput) while every other job keeps at least what `alloc` gives it."""
    n = inp.n_jobs
    program = AllocationProgram(inp)
    program.set_numbers(inp)
    gain = program.rate("gain")
    floor = cp.Parameter(n)
    problem = cp.Problem(cp.Maximize(cp.sum(gain)),
                         program.constraints + [program.throughput >= floor])
    have = alloc.effective_throughputs(inp)
    floor.value = have - RELAX * np.maximum(have, 1.0)
    iso = inp.isolated_throughputs()
    out = np.zeros(n)
    for m in range(n):
        solo = np.zeros_like(inp.solo_throughputs)
        solo[m] = inp.solo_throughputs[m]
        shared = np.zeros_like(inp.shared_throughputs)
        for side in (0, 1):
            hit = inp.pair_jobs[:, side] == m
            shared[hit, :, side] = inp.shared_throughputs[hit, :, side]
        program.set_rate("gain", solo, shared)
        out[m] = (solve_exactly(problem) - have[m]) / iso[m]
    return out


@pytest.mark.parametrize("seed", [3, 4])
@pytest.mark.parametrize("pairs", [False, True])
def test_result_is_pareto_efficient(seed, pairs):
    inp = heterogeneous(seed, pairs=pairs)
    alloc = Hierarchical().allocate(inp)
    assert max_single_raise(inp, alloc).max() <= 1e-6
    assert alloc.info["pareto_tolerance"] <= 1e-6
    json.dumps(alloc.as_dict(inp))     # info is plain data


def test_pareto_check_detects_slack():
    # The checker itself: two jobs on half a GPU each of a 2-GPU cluster can each rise by 1/2.
    inp = homogeneous(2, 2)
    half = Allocation(inp.job_ids, inp.worker_types, np.full((2, 1), 0.5), "test")
    assert max_single_raise(inp, half).min() > 0.4


# -- relation to max-min fairness; registration -------------------------------------

@pytest.mark.parametrize("seed", [5, 6])
def test_single_entity_dominates_max_min_fairness_at_the_minimum(seed):
    base = heterogeneous(seed)
    inp = PolicyInput(worker_types=base.worker_types, counts=base.counts, job_ids=base.job_ids,
                      throughputs=base.throughputs, scale_factors=base.scale_factors,
                      weights=base.weights)
    mmf = MaxMinFairness().allocate(inp)
    alloc = Hierarchical().allocate(inp)
    level = alloc.effective_throughputs(inp) / (inp.weights * inp.isolated_throughputs())
    assert level.min() >= mmf.objective * (1 - 1e-6)
    # Iteration 1 is exactly weighted max-min fairness.
    first = first_iteration(alloc) / inp.weights
    assert first.min() == pytest.approx(mmf.objective, rel=1e-5)


def test_registered_with_gavel_aliases():
    assert POLICIES["hierarchical"] is Hierarchical
    for name in ("max_min_fairness_water_filling", "max_min_fairness_water_filling_perf"):
        assert ALIASES[name].policy == "hierarchical" and not ALIASES[name].space_sharing
    assert ALIASES["max_min_fairness_water_filling_packed"].space_sharing
    policy = make_policy("max_min_fairness_water_filling_packed")
    inp = heterogeneous(7, pairs=True)
    alloc = policy.allocate(inp)
    assert alloc.policy == "hierarchical"
    assert_feasible(inp, alloc)
    assert make_policy("hierarchical", agnostic=True).allocate(inp).policy == "hierarchical_agnostic"


def test_no_jobs():
    inp = PolicyInput(worker_types=("gpu",), counts=np.array([1.0]), job_ids=(),
                      throughputs=np.zeros((0, 1)), scale_factors=np.zeros(0, dtype=np.int64),
                      weights=np.zeros(0))
    assert Hierarchical().allocate(inp).x.shape == (0, 1)

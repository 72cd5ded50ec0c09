"""The AlloX and Gandiva baselines: constraints, known optima, determinism."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.support.inputs import make_input, random_input
from slurm_gavel.core.errors import InputError
from slurm_gavel.policies import POLICIES, make_policy
from slurm_gavel.policies.baselines import AlloX, Gandiva

TOL = 1e-9


def check_constraints(alloc, inp):
    """0 <= X <= 1, time per job <= 1, GPUs per type <= count, nothing on infeasible entries."""
    assert alloc.x.shape == (inp.n_jobs, inp.n_types)
    assert (alloc.x >= 0).all() and (alloc.x <= 1 + TOL).all()
    assert (alloc.x_pairs >= 0).all() and (alloc.x_pairs <= 1 + TOL).all()
    assert (alloc.time_fractions() <= 1 + TOL).all()
    assert (alloc.gpus_used(inp.scale_factors.astype(float)) <= inp.counts + TOL).all()
    assert (alloc.x[~inp.feasible] == 0).all()
    if len(alloc.pair_jobs):
        assert np.array_equal(alloc.pair_jobs, inp.pair_jobs)
        assert (alloc.x_pairs[~inp.pair_feasible] == 0).all()


# -- AlloX ------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("multi_gpu", [False, True])
def test_allox_constraints_random(seed, multi_gpu):
    rng = np.random.default_rng(seed)
    inp = random_input(rng, int(rng.integers(3, 25)), int(rng.integers(1, 4)), multi_gpu=multi_gpu)
    alloc = AlloX().allocate(inp)
    check_constraints(alloc, inp)
    assert set(np.unique(alloc.x)) <= {0.0, 1.0}            # whole GPUs, one type per job
    assert (alloc.x.sum(axis=1) <= 1).all()
    assert alloc.x.any()


def test_allox_one_gpu_shortest_first():
    inp = make_input([[1.0], [1.0], [1.0]], [1], steps_remaining=[300.0, 100.0, 200.0])
    alloc = AlloX().allocate(inp)
    assert alloc.x[:, 0].tolist() == [0.0, 1.0, 0.0]
    # Queue 100, 200, 300 s: completions 100, 300, 600.
    assert alloc.objective == pytest.approx(1000 / 3)


def test_allox_each_job_on_its_better_type():
    inp = make_input([[10.0, 1.0], [1.0, 10.0]], [1, 1], steps_remaining=[100.0, 100.0])
    assert AlloX().allocate(inp).x.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    flipped = make_input([[1.0, 10.0], [10.0, 1.0]], [1, 1], steps_remaining=[100.0, 100.0])
    assert AlloX().allocate(flipped).x.tolist() == [[0.0, 1.0], [1.0, 0.0]]


def test_allox_beats_greedy_fastest_type():
    """Both jobs are fastest on A; the matching sends the one that barely cares to B."""
    inp = make_input([[10.0, 9.0], [10.0, 1.0]], [1, 1], steps_remaining=[100.0, 100.0])
    alloc = AlloX().allocate(inp)
    assert alloc.x.tolist() == [[0.0, 1.0], [1.0, 0.0]]
    assert alloc.objective == pytest.approx((100 / 9 + 10) / 2)


def brute_force_total_jct(p, counts):
    """Least sum of completion times over every job -> type assignment (SPT on each type)."""
    m, k = p.shape
    best = np.inf
    for assign in itertools.product(range(k), repeat=m):
        total = 0.0
        for j in range(k):
            times = np.sort(p[[i for i in range(m) if assign[i] == j], j])[::-1]
            # r-th longest job on c identical GPUs (round robin, shortest first)
            # delays floor(r / c) + 1 completions.
            total += (times * (np.arange(len(times)) // counts[j] + 1)).sum()
        best = min(best, total)
    return best


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("m,k", [(5, 2), (6, 3)])
def test_allox_matches_brute_force(seed, m, k):
    rng = np.random.default_rng(100 + seed)
    t = rng.uniform(1.0, 10.0, size=(m, k))
    t[rng.random((m, k)) < 0.2] = 0.0
    t[np.arange(m), rng.integers(0, k, m)] = rng.uniform(1.0, 10.0, m)
    counts = rng.integers(1, 4, size=k)
    steps = rng.uniform(10.0, 100.0, m)
    inp = make_input(t, counts, steps_remaining=steps)
    alloc = AlloX().allocate(inp)
    check_constraints(alloc, inp)
    p = np.where(inp.feasible, steps[:, None] / np.where(t > 0, t, 1.0), np.inf)
    assert alloc.objective * m == pytest.approx(brute_force_total_jct(p, counts), rel=1e-9)
    assert 1 <= alloc.x.sum() <= min(m, counts.sum())


def test_allox_alpha_restricts_to_oldest_jobs():
    inp = make_input([[1.0], [1.0], [1.0]], [1], steps_remaining=[300.0, 100.0, 200.0],
                     time_since_arrival=[50.0, 10.0, 20.0])
    assert AlloX(alpha=1.0).allocate(inp).x[:, 0].tolist() == [0.0, 1.0, 0.0]
    # alpha = 0.3 looks at max(1 GPU, ceil(0.9)) = 1 job: the oldest.
    assert AlloX(alpha=0.3).allocate(inp).x[:, 0].tolist() == [1.0, 0.0, 0.0]
    with pytest.raises(InputError):
        AlloX(alpha=0.0)


def test_allox_requires_steps_remaining():
    inp = make_input([[1.0], [2.0]], [1])
    with pytest.raises(InputError, match="steps_remaining"):
        AlloX().allocate(inp)


def test_allox_multi_gpu_job_runs_when_shorter_than_the_jobs_it_displaces():
    fields = dict(scale_factors=[2, 1, 1])
    short_gang = make_input([[1.0], [1.0], [1.0]], [2], steps_remaining=[10.0, 100.0, 100.0],
                            **fields)
    assert AlloX().allocate(short_gang).x[:, 0].tolist() == [1.0, 0.0, 0.0]
    long_gang = make_input([[1.0], [1.0], [1.0]], [2], steps_remaining=[1000.0, 100.0, 100.0],
                           **fields)
    assert AlloX().allocate(long_gang).x[:, 0].tolist() == [0.0, 1.0, 1.0]
    # A long multi-GPU job still runs when the single-GPU job can move elsewhere.
    two_types = make_input([[1.0, 1.0], [1.0, 1.0]], [1, 2], steps_remaining=[1000.0, 100.0],
                           scale_factors=[2, 1])
    assert AlloX().allocate(two_types).x.tolist() == [[0.0, 1.0], [1.0, 0.0]]


# -- Gandiva ----------------------------------------------------------------------

def packing_input(share=0.8, counts=(2,)):
    """Four jobs on one type with two GPUs; pairs (0,1), (2,3), (1,2) share at `share` each."""
    t = np.array([[10.0], [20.0], [30.0], [40.0]])
    pairs = np.array([[0, 1], [2, 3], [1, 2]])
    pt = np.stack([t[pairs[:, 0]], t[pairs[:, 1]]], axis=2) * share      # (P, k, 2)
    return make_input(t, list(counts), pair_jobs=pairs, pair_throughputs=pt)


@pytest.mark.parametrize("seed", range(6))
def test_gandiva_constraints_random(seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(3, 25)), int(rng.integers(1, 4))
    inp = random_input(rng, n, k, pairs=int(rng.integers(1, 2 * n)), multi_gpu=seed % 2 == 1)
    # Oversubscribe so that Gandiva packs; make most pairs worth it.
    counts = np.full(k, inp.scale_factors.max())
    inp = make_input(inp.throughputs, counts, scale_factors=inp.scale_factors,
                     pair_jobs=inp.pair_jobs, pair_throughputs=inp.pair_throughputs * 1.8)
    alloc = Gandiva(seed=seed).allocate(inp)
    check_constraints(alloc, inp)
    assert alloc.info["packing"] == (inp.scale_factors.sum() > counts.sum())
    # Each job is in at most one kept pair, and then has no single row.
    used = alloc.x_pairs.sum(axis=1) > 0
    members = inp.pair_jobs[used].ravel()
    assert len(members) == len(set(members.tolist()))
    assert (alloc.x[members] == 0).all()


def test_gandiva_without_pairs_is_equal_share():
    rng = np.random.default_rng(3)
    inp = make_input(rng.uniform(1.0, 10.0, size=(7, 3)), [2, 3, 1])
    alloc = Gandiva().allocate(inp)
    check_constraints(alloc, inp)
    assert np.allclose(alloc.x, inp.isolated_allocation())
    # Pairs exist but the cluster is not oversubscribed: no packing either.
    roomy = packing_input(counts=(4,))
    alloc = Gandiva().allocate(roomy)
    assert not alloc.info["packing"] and (alloc.x_pairs == 0).all()
    assert np.allclose(alloc.x, roomy.isolated_allocation())


def test_gandiva_packs_beneficial_pairs():
    inp = packing_input(share=0.8)
    kept = set()
    for seed in range(10):
        alloc = Gandiva(seed=seed).allocate(inp)
        check_constraints(alloc, inp)
        assert alloc.info["packing"] and alloc.info["pairs_kept"] >= 1
        assert (alloc.x_pairs > 0).any()
        kept.add(alloc.info["pairs_kept"])
        if alloc.info["pairs_kept"] == 2:      # (0,1) and (2,3): one GPU per pair, all the time
            assert np.allclose(alloc.x_pairs[:2, 0], 1.0) and alloc.x_pairs[2, 0] == 0
            assert (alloc.x == 0).all()
            assert (alloc.effective_throughputs(inp) > inp.isolated_throughputs()).all()
        else:                                  # (1,2) and jobs 0, 3 alone: 2/3 of a GPU each
            assert np.allclose(alloc.x_pairs[:, 0], [0, 0, 2 / 3])
            assert np.allclose(alloc.x[[0, 3], 0], 2 / 3) and (alloc.x[[1, 2]] == 0).all()
    assert kept == {1, 2}


def test_gandiva_drops_harmful_pairs():
    alloc = Gandiva().allocate(packing_input(share=0.4))    # 0.4 + 0.4 < 1
    assert alloc.info["pairs_kept"] == 0 and (alloc.x_pairs == 0).all()
    assert np.allclose(alloc.x, packing_input().isolated_allocation())


def test_gandiva_is_deterministic_per_seed_and_random_across_seeds():
    inp = packing_input(share=0.8)
    first = Gandiva(seed=5).allocate(inp)
    again = Gandiva(seed=5).allocate(inp)
    assert np.array_equal(first.x, again.x) and np.array_equal(first.x_pairs, again.x_pairs)
    outcomes = {tuple(Gandiva(seed=s).allocate(inp).x_pairs[:, 0] > 0) for s in range(20)}
    assert len(outcomes) > 1                   # (1,2) or (0,1)+(2,3), depending on the draw


# -- registry ---------------------------------------------------------------------

def test_registered():
    assert POLICIES["allox"] is AlloX and POLICIES["gandiva"] is Gandiva
    inp = packing_input(share=0.8)
    inp = make_input(inp.throughputs, inp.counts, pair_jobs=inp.pair_jobs,
                     pair_throughputs=inp.pair_throughputs, steps_remaining=[1.0, 2.0, 3.0, 4.0])
    assert make_policy("allox").allocate(inp).x.sum() == 2
    with pytest.raises(InputError):
        make_policy("allox", space_sharing=True)
    for policy in (make_policy("gandiva", space_sharing=True), make_policy("gandiva_packed")):
        alloc = policy.allocate(inp)
        check_constraints(alloc, inp)
        assert (alloc.x_pairs > 0).any()
    assert (make_policy("gandiva").allocate(inp).x_pairs == 0).all()

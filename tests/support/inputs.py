"""Small builders of policy inputs shared by the policy tests (no solver, no I/O)."""
from __future__ import annotations

import numpy as np

from slurm_gavel.core.model import Allocation, PolicyInput

TOL = 1e-6


def make_input(throughputs, counts, types=None, **fields) -> PolicyInput:
    t = np.asarray(throughputs, dtype=float)
    n, k = t.shape
    types = tuple(types or (f"t{j}" for j in range(k)))
    fields.setdefault("scale_factors", np.ones(n, dtype=int))
    fields.setdefault("weights", np.ones(n))
    return PolicyInput(worker_types=types, counts=np.asarray(counts, dtype=float),
                       job_ids=tuple(str(i) for i in range(n)), throughputs=t, **fields)


def random_input(rng: np.random.Generator, n: int, k: int, pairs: int = 0,
                 multi_gpu: bool = False) -> PolicyInput:
    """A random heterogeneous instance; every job fits at least one type."""
    t = rng.uniform(0.5, 100.0, size=(n, k))
    t[rng.random((n, k)) < 0.2] = 0.0              # some infeasible entries
    t[np.arange(n), rng.integers(0, k, n)] = rng.uniform(0.5, 100.0, n)
    counts = rng.integers(1, 6, size=k).astype(float)
    sf = np.ones(n, dtype=int)
    if multi_gpu:
        sf = rng.choice([1, 1, 2, 4], size=n)
        counts = np.maximum(counts, 4)
    fields = dict(scale_factors=sf, weights=rng.choice([1.0, 1.0, 2.0, 0.5], size=n),
                  steps_remaining=rng.uniform(1e3, 1e6, n),
                  time_since_arrival=rng.uniform(0, 1e4, n),
                  prices=rng.uniform(0.3, 3.0, k))
    if pairs and n >= 2:
        a, b = np.triu_indices(n, k=1)
        same = np.flatnonzero(sf[a] == sf[b])          # only jobs of one scale factor pair up
        pick = np.sort(rng.choice(same, size=min(pairs, len(same)), replace=False))
        pj = np.stack([a[pick], b[pick]], axis=1).reshape(-1, 2)
        solo = t[pj]                                   # (P, 2, k)
        share = rng.uniform(0.3, 0.8, size=(len(pj), k, 2))
        pt = np.transpose(solo, (0, 2, 1)) * share
        fields.update(pair_jobs=pj, pair_throughputs=pt)
    return make_input(t, counts, **fields)


def relative_speeds(inp: PolicyInput) -> np.ndarray:
    """Each job's throughput on each type over its best (0 where it cannot run): the `usable`
    the engine hands plan_round."""
    best = inp.solo_throughputs.max(axis=1, keepdims=True)
    return np.divide(inp.solo_throughputs, best, out=np.zeros_like(best * inp.solo_throughputs),
                     where=best > 0)


def assert_feasible(alloc: Allocation, inp: PolicyInput, tol: float = TOL):
    """A feasible allocation: every share in [0, 1], each job's shares summing to at most 1,
    no type given more GPUs than it has, and infeasible entries at 0."""
    assert alloc.x.shape == (inp.n_jobs, inp.n_types)
    assert (alloc.x >= -tol).all() and (alloc.x <= 1 + tol).all()
    assert (alloc.x_pairs >= -tol).all() and (alloc.x_pairs <= 1 + tol).all()
    assert (alloc.time_fractions() <= 1 + tol).all(), alloc.time_fractions()
    used = alloc.gpus_used(inp.scale_factors.astype(float))
    assert (used <= inp.counts + tol).all(), (used, inp.counts)
    assert (alloc.x[~inp.feasible] <= tol).all()
    if len(alloc.pair_jobs):
        rows, found, _ = alloc.pair_rows_in(inp)
        assert found[alloc.x_pairs.sum(axis=1) > tol].all()
        feasible = inp.pair_feasible[rows] & found[:, None]
        assert (alloc.x_pairs[~feasible] <= tol).all()


# Inputs where solvers disagree or stumble: shared by the tests of the direct HiGHS routes.
DEGENERATE = {
    "one job": make_input([[10.0, 5.0, 1.0]], [2, 2, 2], steps_remaining=np.array([100.0])),
    "one job, one type": make_input([[3.0]], [1], steps_remaining=np.array([100.0])),
    "zero throughputs on a type": make_input(
        [[10.0, 0.0, 2.0], [4.0, 0.0, 3.0], [7.0, 0.0, 0.0]], [1, 4, 1],
        steps_remaining=np.array([10.0, 20.0, 30.0])),
    "more jobs than GPUs": make_input(
        np.random.default_rng(1).uniform(1, 10, (40, 3)), [1, 1, 1],
        steps_remaining=np.random.default_rng(2).uniform(1e3, 1e5, 40)),
    "all jobs alike": make_input(np.full((12, 3), 5.0), [2, 3, 4], steps_remaining=np.full(12, 1e4)),
    "all throughputs equal across types": make_input(
        np.repeat(np.array([[1.0], [2.0], [3.0]]), 3, axis=1), [1, 1, 1],
        steps_remaining=np.array([5.0, 6.0, 7.0])),
    "a job too wide for a type": make_input(
        [[10.0, 6.0], [8.0, 8.0], [5.0, 1.0]], [8, 2], scale_factors=np.array([4, 1, 1]),
        steps_remaining=np.array([1e4, 2e4, 3e4])),
    "tiny and huge throughputs": make_input(
        [[1e-4, 2e-4], [5e3, 1e4], [3.0, 0.0]], [2, 2], steps_remaining=np.array([1e7, 1.0, 50.0])),
}

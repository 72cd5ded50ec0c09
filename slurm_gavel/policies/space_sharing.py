"""Which job pairs get rows in the allocation LP.

With n jobs there are n(n-1)/2 pairs, and a row per pair and type makes the
LP quadratic in n (Gavel's dense pair matrix needs 48 GiB at 2048 jobs).  Only
pairs that run better together than one after the other can ever get a share,
so only those need rows.  Two cuts:

1. Exact: a pair whose combined normalized throughput on a type,
   T_pair_a / T_a + T_pair_b / T_b, is at most 1 is dominated there: running
   the two jobs one after the other on that type gives both the same
   throughput for no more GPU time.  Such entries are dropped (set
   infeasible) and a pair with no useful type loses its row.  No loss.
2. Heuristic: each job keeps the `per_job` partners with the largest gain
   (combined normalized throughput - 1, best type); a pair stays if either
   member keeps it.  This bounds the rows by n * per_job; what it costs in
   objective is measured by bench/policy_scaling.py against the LP with all
   undominated pairs.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..core.model import Allocation, PolicyInput

DEFAULT_PARTNERS_PER_JOB = 8


def pair_gains(inp: PolicyInput) -> np.ndarray:
    """(P, k) combined normalized throughput of each pair on each type, minus 1."""
    solo = inp.solo_throughputs
    shared = inp.shared_throughputs
    a, b = inp.pair_jobs[:, 0], inp.pair_jobs[:, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        combined = shared[:, :, 0] / solo[a] + shared[:, :, 1] / solo[b]
    combined = np.where(inp.pair_feasible & (solo[a] > 0) & (solo[b] > 0), combined, 0.0)
    return combined - 1.0


def prune_pairs(inp: PolicyInput, per_job: int | None = DEFAULT_PARTNERS_PER_JOB) -> PolicyInput:
    """The input with dominated pair entries removed and at most ~per_job partners per job.

    per_job=None keeps every undominated pair (exact).
    """
    if inp.n_pairs == 0:
        return inp
    useful = pair_gains(inp) > 1e-9
    keep = useful.any(axis=1)
    throughputs = np.where(useful[:, :, None], inp.pair_throughputs, 0.0)
    pruned = replace(inp, pair_jobs=inp.pair_jobs[keep], pair_throughputs=throughputs[keep])
    if per_job is None:
        return pruned
    return pruned.pairs_subset(initial_pairs(pruned, per_job))


def top_per_job(pair_jobs: np.ndarray, score: np.ndarray, per_job: int) -> np.ndarray:
    """(P,) bool: pairs among the `per_job` highest-scoring pairs of either of their jobs."""
    chosen = np.zeros(len(pair_jobs), dtype=bool)
    for side in (0, 1):
        jobs = pair_jobs[:, side]
        order = np.lexsort((-score, jobs))          # by job, best score first
        sorted_jobs = jobs[order]
        rank = np.arange(len(order)) - np.searchsorted(sorted_jobs, sorted_jobs, side="left")
        chosen[order[rank < per_job]] = True
    return chosen


def initial_pairs(inp: PolicyInput, per_job: int) -> np.ndarray:
    """(P,) bool: each job's `per_job` best partners by gain, a start for pricing."""
    best = np.where(inp.pair_feasible, pair_gains(inp), -np.inf).max(axis=1)
    return top_per_job(inp.pair_jobs, best, per_job) & (best > 1e-9)


class WithPairs:
    """Runs a policy with space sharing on.

    Policies that handle every pair themselves (`takes_all_pairs`: the LP
    policies price them, Gandiva samples them) get every pair; others get the
    dominated ones removed and ~per_job partners per job.
    """

    def __init__(self, policy, per_job: int | None = DEFAULT_PARTNERS_PER_JOB):
        self.policy = policy
        self.per_job = None if getattr(policy, "takes_all_pairs", False) else per_job
        self.name, self.summary = policy.name, policy.summary
        self.supports_space_sharing = True

    def allocate(self, inp: PolicyInput) -> Allocation:
        # A policy may know its answer before any pruning (`before_pruning`: the
        # hierarchical policy when every job can have its best type): pruning
        # every pair costs more than such an answer.
        quick = getattr(self.policy, "before_pruning", None)
        if quick is not None and self.per_job is not None:
            alloc = quick(inp)
            if alloc is not None:
                return alloc
        return self.policy.allocate(inp if self.per_job is None else prune_pairs(inp, self.per_job))

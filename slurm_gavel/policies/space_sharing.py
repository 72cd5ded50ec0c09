"""Which job pairs get rows in the allocation LP (seed 1.3 and 6.2).

With n jobs there are n(n-1)/2 pairs, and a row per pair and type makes the
LP quadratic in n (Gavel's dense pair matrix needs 48 GiB at 2048 jobs).  The
seed notes that only pairs that perform well need rows.  Two cuts:

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

from ..model import Allocation, PolicyInput

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

    per_job=None keeps every undominated pair (the exact LP).
    """
    if inp.n_pairs == 0:
        return inp
    gains = pair_gains(inp)
    useful = gains > 1e-9
    keep = useful.any(axis=1)
    if per_job is not None:
        best = np.where(keep, gains.max(axis=1), -np.inf)
        chosen = np.zeros(inp.n_pairs, dtype=bool)
        for side in (0, 1):
            jobs = inp.pair_jobs[:, side]
            # Sort by (job, -gain) and keep the first per_job of each job.
            order = np.lexsort((-best, jobs))
            sorted_jobs = jobs[order]
            starts = np.searchsorted(sorted_jobs, sorted_jobs, side="left")
            rank = np.arange(len(order)) - starts
            chosen[order[rank < per_job]] = True
        keep &= chosen
    throughputs = np.where(useful[:, :, None], inp.pair_throughputs, 0.0)
    return replace(inp, pair_jobs=inp.pair_jobs[keep], pair_throughputs=throughputs[keep])


class WithPairs:
    """Runs a policy with space sharing on, over the pruned pair rows."""

    def __init__(self, policy, per_job: int | None = DEFAULT_PARTNERS_PER_JOB):
        self.policy = policy
        self.per_job = per_job
        self.name, self.summary = policy.name, policy.summary
        self.supports_space_sharing = True

    def allocate(self, inp: PolicyInput) -> Allocation:
        return self.policy.allocate(prune_pairs(inp, self.per_job))

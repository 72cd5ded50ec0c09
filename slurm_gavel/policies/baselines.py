"""Baselines that are not Gavel optimizations: isolated, AlloX and Gandiva.

* `Isolated`: every job gets 1/n of each type (the sharing-incentive reference).
* `AlloX` (Le et al., EuroSys '20): minimize average job completion time on
  heterogeneous GPUs with a min-cost matching of jobs to (type, queue position)
  slots.  Gavel's "best case" baseline for average JCT.
* `Gandiva` (Xiao et al., OSDI '18) as Gavel's ad-hoc space-sharing baseline:
  heterogeneity-agnostic equal time shares, with random pairs of jobs packed
  onto one GPU when that is seen to help.
"""
from __future__ import annotations

import math
import time

import numpy as np

from ..core.errors import InputError
from ..core.model import Allocation, PolicyInput
from .space_sharing import pair_gains


class Isolated:
    """Every job gets 1/n of each type's GPUs (the sharing-incentive reference)."""

    name = "isolated"
    summary = "isolated: every job gets an equal 1/n share of every GPU type"
    supports_space_sharing = False

    def allocate(self, inp: PolicyInput) -> Allocation:
        started = time.perf_counter()
        x = inp.isolated_allocation()
        objective = float(np.min(inp.isolated_throughputs())) if inp.n_jobs else float("nan")
        return Allocation(inp.job_ids, inp.worker_types, x, self.name, objective=objective,
                          solve_seconds=time.perf_counter() - started)


# -- AlloX ------------------------------------------------------------------------

def _processing_times(inp: PolicyInput) -> np.ndarray:
    """(n, k) seconds each job needs to finish alone on each type; inf where it cannot run."""
    thr = inp.solo_throughputs
    with np.errstate(divide="ignore", invalid="ignore"):
        p = inp.steps_remaining[:, None] / thr
    return np.where(thr > 0, p, np.inf)


def _match(p: np.ndarray, gpus: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """AlloX's matching of single-GPU jobs to (type, position-from-the-end) slots.

    p: (m, k) processing times (inf = cannot run); gpus: (k,) whole GPUs free.
    Returns (type, head, cost): the type each job is queued on (-1 if none is
    free for it), whether it is first in its GPU's queue (runs now), and the
    total completion time of the queue order.

    The job q-th from the end of a GPU's queue delays q completions (its own
    and the q-1 after it), so it costs q * p; the min-cost matching orders
    every queue shortest-first and spreads jobs over GPUs.  GPUs of one type
    are identical, and with n_j jobs on c_j of them the cheapest slots are
    c_j at each position 1, 2, ... (round robin); so ceil(m / c_j) positions
    of min(c_j, m) slots each suffice per type (about m + c_j columns, not
    m * c_j), and which GPU of the type holds a job does not matter.
    """
    m, k = p.shape
    types = np.full(m, -1)
    head = np.zeros(m, dtype=bool)
    usable = np.isfinite(p) & (gpus[None, :] > 0)
    rows = np.flatnonzero(usable.any(axis=1))
    if len(rows) == 0:
        return types, head, 0.0
    mm = len(rows)
    open_types = np.flatnonzero(gpus > 0)
    slots = np.minimum(gpus[open_types], mm)
    depth = -(-mm // gpus[open_types])                      # ceil(mm / c_j)
    col_type = np.repeat(open_types, slots * depth)
    col_pos = np.concatenate([np.repeat(np.arange(1, d + 1), s) for s, d in zip(slots, depth)])
    cost = p[rows][:, col_type] * col_pos[None, :]                # inf where the job cannot run
    from scipy.optimize import linear_sum_assignment    # imported here: it takes a second

    r, c = linear_sum_assignment(cost)
    job, jtype, pos = rows[r], col_type[c], col_pos[c]
    types[job] = jtype
    # On each type the jobs furthest from the end of a queue run first: the
    # min(c_j, n_j) largest positions (ties: shortest job).
    order = np.lexsort((job, p[job, jtype], -pos, jtype))
    sorted_types = jtype[order]
    first = np.searchsorted(sorted_types, sorted_types, side="left")
    rank = np.arange(len(order)) - first
    head[job[order][rank < gpus[sorted_types]]] = True
    return types, head, float(cost[r, c].sum())


class AlloX:
    """AlloX: minimize average completion time by matching jobs to queue slots.

    Each GPU's queue is ordered; a job at position q from the end of a queue
    on type j delays q completions and costs q * p_mj, with p_mj =
    steps_remaining_m / T_mj its processing time there.  The min-cost
    bipartite matching of jobs to (GPU, position) slots (scipy's
    linear_sum_assignment) minimizes the sum of completion times of a
    non-preemptive schedule.  The jobs first in some queue run now: X = 1 on
    that type; every other job waits (X = 0).  The policy is recomputed each
    time it is asked, so queued jobs are reordered as the workload changes
    (Gavel's version instead pins jobs already placed).

    `alpha` (Gavel's knob, default 1 = plain AlloX): only the oldest
    max(#GPUs, ceil(alpha * n)) jobs are considered, the rest wait; smaller
    alpha trades average JCT for less starvation of long jobs.  Job weights
    are ignored (AlloX minimizes the unweighted mean); Gavel also added each
    job's waiting time to its costs, a per-job constant that cannot change
    the matching and is left out.

    Scale factors (our extension).  AlloX, and Gavel's copy of it, handles
    single-GPU jobs only; only those enter the matching.  A job of scale
    factor s > 1 needs s GPUs of one type and is admitted greedily: the
    single-GPU jobs are matched on all GPUs; then the multi-GPU jobs,
    shortest first, each try their types fastest first.  Job m takes s GPUs
    of type j if, with them reserved, the matching of the single-GPU jobs on
    the rest only pushes back jobs that would have taken longer than m
    (every job that stops running now had p > p_mj; jobs that merely move
    to another GPU are fine): shortest remaining time first, as AlloX's
    order would have it.  A multi-GPU job that gets no GPUs waits; it is
    never queued, so the objective counts single-GPU jobs only.  This costs
    up to one extra matching per (multi-GPU job, type) tried; two shortcuts
    skip most: idle GPUs are taken without one, and a type is not retried
    for a job at least as big and as long as one it just refused.

    objective: mean completion time (seconds from now) of the matched
    single-GPU jobs under the computed queue order.
    """

    name = "allox"
    summary = "AlloX: min-cost matching of jobs to GPU queue slots, minimizing average JCT"
    supports_space_sharing = False

    def __init__(self, alpha: float = 1.0):
        if not 0 < alpha <= 1:
            raise InputError("alpha", f"must be in (0, 1], got {alpha}")
        self.alpha = alpha

    def allocate(self, inp: PolicyInput) -> Allocation:
        inp.require("steps_remaining", self.name)
        started = time.perf_counter()
        n, k = inp.n_jobs, inp.n_types
        x = np.zeros((n, k))
        if n == 0:
            return Allocation(inp.job_ids, inp.worker_types, x, self.name)
        gpus = np.floor(inp.counts).astype(np.int64)
        considered = min(n, max(int(gpus.sum()), math.ceil(self.alpha * n)))
        candidate = inp.arrival_order() < considered
        p = _processing_times(inp)
        rows = np.flatnonzero(candidate & (inp.scale_factors == 1))
        multi = np.flatnonzero(candidate & (inp.scale_factors > 1))
        types, head, cost = _match(p[rows], gpus)
        reserved = np.zeros(k, dtype=np.int64)
        # Multi-GPU jobs, shortest first (ties: oldest first), see the class doc.
        order = np.lexsort((inp.arrival_order()[multi], p[multi].min(axis=1)))
        refused: list[list] = [[] for _ in range(k)]   # (s, p) refused per type since last change
        for m in multi[order]:
            s = inp.scale_factors[m]
            for j in np.argsort(p[m], kind="stable"):
                if not np.isfinite(p[m, j]):
                    break
                if reserved[j] + s > gpus[j]:
                    continue
                idle = gpus - reserved - np.bincount(types[head], minlength=k)
                if idle[j] >= s:
                    # GPUs no single-GPU job uses: the matching stays optimal without them.
                    x[m, j] = 1.0
                    reserved[j] += s
                    break
                # At least s - (idle GPUs) running jobs must give way, all longer than m;
                # and a job as big and as long as one refused here would be refused too.
                longer = (p[rows[head], types[head]] > p[m, j]).sum()
                if longer < s - idle.sum() or any(s0 <= s and p0 <= p[m, j] for s0, p0 in refused[j]):
                    continue
                trial = gpus - reserved
                trial[j] -= s
                t_types, t_head, t_cost = _match(p[rows], trial)
                displaced = head & ~t_head
                if (p[rows[displaced], types[displaced]] > p[m, j]).all():
                    x[m, j] = 1.0
                    reserved[j] += s
                    types, head, cost = t_types, t_head, t_cost
                    refused = [[] for _ in range(k)]
                    break
                refused[j].append((s, p[m, j]))
        x[rows[head], types[head]] = 1.0
        matched = int((types >= 0).sum())
        objective = cost / matched if matched else float("nan")
        info = {"considered_jobs": considered, "queued_jobs": matched - int(head.sum())}
        return Allocation(inp.job_ids, inp.worker_types, x, self.name, objective=objective,
                          solve_seconds=time.perf_counter() - started, info=info)


# -- Gandiva ----------------------------------------------------------------------

class Gandiva:
    """Gandiva-style ad-hoc space sharing, as Gavel's baseline for space sharing.

    Heterogeneity-agnostic.  When the jobs ask for no more GPUs than the
    cluster has (sum of scale factors <= total GPUs), there is no packing.
    Otherwise Gandiva explores random pairings and keeps those that work:
    the candidate pairs (pair rows of the input that can share some type)
    are visited in a random order (numpy default_rng(seed)), and a pair
    whose jobs are both still alone is kept iff its combined normalized
    throughput, T_pair_a / T_a + T_pair_b / T_b averaged over the types
    where it can share, exceeds 1 (packing beats time-slicing the two on one
    GPU).  The measurement that Gandiva would make by trying the pair for a
    while is read from the input's pair throughputs, so one call does the
    exploration that Gandiva spreads over rounds; it is stateless and the
    same input and seed give the same allocation.  Which good pair a job
    ends up in is left to chance: no packing optimization.

    Time is then shared equally, round-robin like, among the M "units"
    (kept pairs and unpaired jobs): each unit gets counts_j / M GPUs of
    every type it can run on, i.e. a time share counts_j / (M * s) of type j
    for scale factor s, and a unit whose shares add up to more than 1 is
    scaled down to 1 (as Gavel's baseline does, row by row).  With no pairs
    kept this is an equal-share allocation like `Isolated`'s (identical when
    every job fits every type with one scale factor).
    """

    name = "gandiva"
    summary = "Gandiva: equal time shares, random job pairs packed on a GPU when it helps"
    supports_space_sharing = True
    takes_all_pairs = True          # it draws its random pairs from all of them

    def __init__(self, seed: int = 0):
        self.seed = seed

    def allocate(self, inp: PolicyInput) -> Allocation:
        started = time.perf_counter()
        n, npair = inp.n_jobs, inp.n_pairs
        a, b = inp.pair_jobs[:, 0], inp.pair_jobs[:, 1]
        solo = inp.solo_throughputs
        can_share = inp.pair_feasible & (solo[a] > 0) & (solo[b] > 0)       # (P, k)
        kept = np.zeros(npair, dtype=bool)
        packing = bool(npair) and bool(inp.scale_factors.sum() > inp.counts.sum())
        if packing:
            combined = np.where(can_share, pair_gains(inp) + 1.0, 0.0)
            tries = can_share.sum(axis=1)
            mean = combined.sum(axis=1) / np.maximum(tries, 1)
            works = (tries > 0) & (mean > 1.0)
            paired = np.zeros(n, dtype=bool)
            for r in np.random.default_rng(self.seed).permutation(npair):
                if works[r] and not paired[a[r]] and not paired[b[r]]:
                    kept[r] = True
                    paired[a[r]] = paired[b[r]] = True
        alone = np.ones(n, dtype=bool)
        alone[a[kept]] = alone[b[kept]] = False
        units = int(alone.sum() + kept.sum())
        share = inp.counts / max(units, 1)                                   # GPUs per unit
        sf = inp.scale_factors.astype(float)
        x = np.where(inp.feasible & alone[:, None], share[None, :] / sf[:, None], 0.0)
        xp = np.where(can_share & kept[:, None], share[None, :] / sf[a][:, None], 0.0)
        x /= np.maximum(x.sum(axis=1, keepdims=True), 1.0)
        xp /= np.maximum(xp.sum(axis=1, keepdims=True), 1.0)
        info = {"packing": packing, "pairs_kept": int(kept.sum())}
        return Allocation(inp.job_ids, inp.worker_types, x, self.name,
                          solve_seconds=time.perf_counter() - started,
                          pair_jobs=inp.pair_jobs, x_pairs=xp, info=info)

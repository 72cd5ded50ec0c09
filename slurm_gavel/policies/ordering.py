"""Order-based policies: strict FIFO, the FIFO-ranked LP and shortest job first."""
from __future__ import annotations

import time

import numpy as np

from ..core.model import Allocation, PolicyInput
from .lp import MaxSumPolicy


class Fifo:
    """First in, first out, heterogeneity-aware (Gavel's `fifo_perf`).

    Jobs are taken in arrival order (time since arrival, ties by input
    order; weights do not reorder).  Each takes, whole, the free type that
    runs it fastest among those with room for its scale factor (ties: the
    type with more free GPUs, then the first listed): X_mj = 1 there.
    When no type has room for the next job the queue stops, so no later
    job overtakes it.  A job that has room only on types it cannot run on
    waits without holding the queue (it could never use those GPUs), as in
    Gavel.  Recomputed from scratch each round, so a running job moves to a
    faster type that an earlier job has freed.  Objective: the number of
    jobs running.
    """

    name = "fifo"
    summary = "first in, first out: in arrival order, each job takes the free type that runs it fastest"
    supports_space_sharing = True
    takes_all_pairs = True          # a waiting job looks for its best partner among all pairs
    # Gavel's fifo_packed packs only where the pair's combined normalized throughput beats this.
    packing_threshold = 1.5

    def allocate(self, inp: PolicyInput) -> Allocation:
        started = time.perf_counter()
        x = np.zeros((inp.n_jobs, inp.n_types))
        # Plain Python floats over the few types: the per-job numpy calls
        # (any, lexsort on 3-element arrays) cost far more than the work.
        free = [float(c) for c in inp.counts]
        solo = inp.solo_throughputs       # rows read one by one: the queue stops early
        scales = inp.scale_factors.tolist()
        types = range(inp.n_types)
        order = np.argsort(inp.arrival_order(), kind="stable").tolist()
        placed = set()
        for m in order:
            s = scales[m]
            row = solo[m].tolist()
            best = None
            roomy = False
            for j in types:
                f = free[j]
                if f >= s:
                    roomy = True
                    t = row[j]
                    # fastest, then most free GPUs, then first listed
                    if t > 0 and (best is None or t > best_t or (t == best_t and f > best_f)):
                        best, best_t, best_f = j, t, f
            if not roomy:
                break
            if best is None:
                continue
            x[m, best] = 1.0
            free[best] -= s
            placed.add(m)
        x_pairs = np.zeros((inp.n_pairs, inp.n_types))
        if inp.n_pairs:
            self._pack(inp, x, x_pairs, [m for m in order if m not in placed])
        return Allocation(inp.job_ids, inp.worker_types, x, self.name,
                          objective=float(x.sum() + 2 * x_pairs.sum()),
                          solve_seconds=time.perf_counter() - started,
                          pair_jobs=inp.pair_jobs, x_pairs=x_pairs)

    def _pack(self, inp: PolicyInput, x: np.ndarray, x_pairs: np.ndarray, waiting: list):
        """Gavel's fifo_packed: waiting jobs, in order, join the running job they pack best with.

        A waiting job shares the GPUs of a running job alone on them (same
        scale factor) when their combined normalized throughput there,
        T_pair_a / T_a + T_pair_b / T_b, is above `packing_threshold`; the
        best such partner wins.  The first waiting job without one stops the
        packing, so nobody overtakes it.
        """
        solo = inp.solo_throughputs
        shared = inp.shared_throughputs
        partners: dict[int, list[tuple[int, int]]] = {}        # job -> [(pair row, side of the job)]
        for p, (a, b) in enumerate(inp.pair_jobs):
            partners.setdefault(int(a), []).append((p, 0))
            partners.setdefault(int(b), []).append((p, 1))
        for q in waiting:
            best, best_gain = None, self.packing_threshold
            for p, side in partners.get(int(q), ()):
                r = int(inp.pair_jobs[p, 1 - side])
                if not x[r].any() or inp.scale_factors[r] != inp.scale_factors[q]:
                    continue                    # not running alone
                j = int(np.argmax(x[r]))
                if not inp.pair_feasible[p, j] or solo[q, j] <= 0:
                    continue
                gain = shared[p, j, side] / solo[q, j] + shared[p, j, 1 - side] / solo[r, j]
                if gain > best_gain:
                    best, best_gain = (p, r, j), gain
            if best is None:
                break
            p, r, j = best
            x[r, j] = 0.0
            x_pairs[p, j] = 1.0


class FifoRanked(MaxSumPolicy):
    """A FIFO-like ranking LP (this project's earlier `fifo`; not strict FIFO).

        maximize_X sum_m (n - rank_m) * throughput(m, X) / fastest_m

    rank_m is the job's arrival rank (0 = earliest, from time_since_arrival).
    Earlier jobs weigh more, so they mostly take the GPUs first; but a later
    job that suits a free type can overtake an earlier one that does not, as
    the LP trades ranks against relative speed.
    """

    name = "fifo_ranked"
    summary = "FIFO-ranked LP: earlier jobs weigh more, later ones may overtake on types that suit them"

    def coefficients(self, inp: PolicyInput) -> np.ndarray:
        return (inp.n_jobs - inp.arrival_order()) / inp.fastest_throughputs()


class ShortestJobFirst(MaxSumPolicy):
    """Shortest (remaining) job first, as an LP.

        maximize_X sum_m w_m * throughput(m, X) / s_m

    throughput(m, X)/s_m is the rate at which job m's remaining work shrinks,
    so the objective is the rate at which jobs complete in the fluid model.
    Per GPU type it favours the job that would finish soonest *on that type*
    (T_mj / s_m = 1 / remaining time on j): on one GPU it gives the whole GPU
    to the job with the least remaining time, which is SRPT, the rule that
    minimizes average completion time; on a heterogeneous cluster it compares
    jobs by remaining time on each type rather than by a single length.  Gavel
    never shipped SJF; ranking by steps alone would ignore that the same steps
    take 10x longer on a K80 for some models and 2x for others.
    """

    name = "sjf"
    summary = "shortest job first: favour jobs with the least remaining time on each type"

    def check(self, inp: PolicyInput):
        inp.require("steps_remaining", self.name)

    def coefficients(self, inp: PolicyInput) -> np.ndarray:
        # Normalize so the largest coefficient is 1: keeps the LP well scaled.
        coef = inp.weights / inp.steps_remaining.clip(min=1e-9)
        return coef / coef.max()

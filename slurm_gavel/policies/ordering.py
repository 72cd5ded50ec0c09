"""Order-based policies: FIFO and shortest job first."""
from __future__ import annotations

import numpy as np

from ..core.model import PolicyInput
from .lp import MaxSumPolicy


class Fifo(MaxSumPolicy):
    """First in, first out, heterogeneity-aware (Gavel's FIFO as a max-sum objective).

        maximize_X sum_m (n - rank_m) * throughput(m, X) / fastest_m

    rank_m is the job's arrival rank (0 = earliest, from time_since_arrival).
    Earlier jobs weigh more, so they take the GPUs first; among GPU types the
    LP picks what makes each job fastest relative to its own best.
    """

    name = "fifo"
    summary = "first in, first out: earlier jobs get GPUs first, on the types that suit them"

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

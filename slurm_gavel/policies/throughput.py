"""Throughput-oriented policies: makespan and total throughput."""
from __future__ import annotations

import numpy as np

from ..core.model import PolicyInput
from .lp import MaxMinPolicy, MaxSumPolicy


class Makespan(MaxMinPolicy):
    """Minimize the time until the last job finishes, were X held fixed.

        minimize_X max_m s_m / throughput(m, X)  ==  maximize_X min_m throughput(m, X) / s_m

    The second form is one LP (Gavel bisects over the first); the objective is
    reported in seconds.
    """

    name = "makespan"
    summary = "minimize makespan: the time until every job has finished"

    def check(self, inp: PolicyInput):
        inp.require("steps_remaining", self.name)

    def coefficients(self, inp: PolicyInput) -> np.ndarray:
        # A job with no steps left finishes at once: it must not bind the min.
        return 1.0 / inp.steps_remaining.clip(min=1e-9)

    def objective_value(self, value: float, inp: PolicyInput) -> float:
        return 1.0 / value if value > 0 else float("inf")


class MaxThroughput(MaxSumPolicy):
    """Maximize the total normalized throughput, sum_m w_m * throughput(m, X) / fastest_m.

    Raw steps/s of different models are not comparable, so each job counts its
    throughput as a fraction of its speed on its fastest type.
    """

    name = "max_throughput"
    summary = "maximize total throughput (each job's throughput relative to its fastest type)"

    def coefficients(self, inp: PolicyInput) -> np.ndarray:
        return inp.weights / inp.fastest_throughputs()

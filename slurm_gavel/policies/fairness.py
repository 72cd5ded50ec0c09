"""Fairness policies: max-min fairness (LAS) and finish-time fairness (Themis)."""
from __future__ import annotations

import numpy as np

from .lazy import cvxpy as cp
from ..core.model import PolicyInput
from .lp import LinearPolicy, MaxMinPolicy
from .program import AllocationProgram
from .solver import CONIC_SOLVERS


class MaxMinFairness(MaxMinPolicy):
    """Maximize the smallest weighted, normalized effective throughput.

    Each job's throughput is normalized by its throughput under the isolated
    allocation (1/n of every type's GPUs, see `PolicyInput.isolated_allocation`)
    and divided by its weight:

        maximize_X  min_m  throughput(m, X) / (w_m * throughput(m, X_isolated))

    The seed writes this with equal *time* shares and a factor scale_factor_m;
    an equal GPU share gives a job of scale factor s 1/s of that time, so the
    two are the same objective.  X_isolated is feasible with value 1 for every
    job, which is the sharing-incentive guarantee.
    """

    name = "max_min_fairness"
    summary = "max-min fairness / least attained service: maximize the smallest normalized throughput"

    def coefficients(self, inp: PolicyInput) -> np.ndarray:
        return 1.0 / (inp.weights * inp.isolated_throughputs())


class FinishTimeFairness(LinearPolicy):
    """Minimize the largest finish-time fairness ratio rho (Themis).

    rho_m = (t_m + s_m / throughput(m, X)) / (t_m + s_m / throughput(m, X_isolated)),
    t_m the time since arrival and s_m the steps remaining.  Weights scale
    rho (a job of weight 2 counts its slowdown twice).  rho is convex in X
    (inv_pos), so this is a conic problem: Clarabel solves it in one go.
    """

    name = "finish_time_fairness"
    summary = "finish-time fairness (Themis): minimize the largest ratio of finish time to isolated finish time"
    solvers = CONIC_SOLVERS

    def check(self, inp: PolicyInput):
        inp.require("steps_remaining", self.name)

    def formulate(self, program: AllocationProgram):
        fixed = cp.Parameter(program.n_jobs, nonneg=True, name="fixed")
        scaled = cp.Parameter(program.n_jobs, nonneg=True, name="scaled")
        inv_isolated = cp.Parameter(program.n_jobs, nonneg=True, name="inv_isolated")
        # In units of the isolated throughput every term is of order 1,
        # which keeps the conic solver accurate.
        speedup = cp.multiply(inv_isolated, program.throughput)
        rho = fixed + cp.multiply(scaled, cp.inv_pos(speedup))
        return cp.Problem(cp.Minimize(cp.max(rho)), program.constraints), {
            "fixed": fixed, "scaled": scaled, "inv_isolated": inv_isolated}

    def parameters(self, inp: PolicyInput) -> dict:
        t, s = inp.time_since_arrival, inp.steps_remaining
        isolated = inp.isolated_throughputs()
        isolated_finish = t + s / isolated
        # A job that arrived just now with nothing left to do has rho = 1
        # whatever X is; it contributes nothing rather than 0/0.
        scale = np.divide(inp.weights, isolated_finish, out=np.zeros_like(t),
                          where=isolated_finish > 0)
        return {"fixed": scale * t, "scaled": scale * s / isolated, "inv_isolated": 1.0 / isolated}

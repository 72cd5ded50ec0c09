"""Throughput-oriented policies: makespan and total throughput."""
from __future__ import annotations

import cvxpy as cp

from ..model import PolicyInput
from .lp import AllocationProgram, LinearPolicy


class Makespan(LinearPolicy):
    """Minimize the time until the last job finishes, were X held fixed.

        minimize_X max_m s_m / throughput(m, X)  ==  maximize_X min_m throughput(m, X) / s_m

    The second form is one LP (Gavel bisects over the first); the objective is
    reported in seconds.
    """

    name = "makespan"
    summary = "minimize makespan: the time until every job has finished"

    def check(self, inp: PolicyInput):
        inp.require("steps_remaining", self.name)

    def formulate(self, program: AllocationProgram):
        inv_steps = cp.Parameter(program.n_jobs, nonneg=True, name="inv_steps")
        objective = cp.Maximize(cp.min(cp.multiply(inv_steps, program.throughput)))
        return cp.Problem(objective, program.constraints), {"inv_steps": inv_steps}

    def parameters(self, inp: PolicyInput) -> dict:
        # A job with no steps left finishes at once: it must not bind the min.
        steps = inp.steps_remaining
        return {"inv_steps": 1.0 / steps.clip(min=1e-9)}

    def objective_value(self, value: float, inp: PolicyInput) -> float:
        return 1.0 / value if value > 0 else float("inf")


class MaxThroughput(LinearPolicy):
    """Maximize the total normalized throughput, sum_m w_m * throughput(m, X) / fastest_m.

    Raw steps/s of different models are not comparable, so each job counts its
    throughput as a fraction of its speed on its fastest type.
    """

    name = "max_throughput"
    summary = "maximize total throughput (each job's throughput relative to its fastest type)"

    def formulate(self, program: AllocationProgram):
        coef = cp.Parameter(program.n_jobs, nonneg=True, name="coef")
        objective = cp.Maximize(program.total(cp.multiply(coef, program.throughput)))
        return cp.Problem(objective, program.constraints), {"coef": coef}

    def parameters(self, inp: PolicyInput) -> dict:
        return {"coef": inp.weights / inp.fastest_throughputs()}

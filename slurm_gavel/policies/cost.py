"""Cost policies: most throughput per dollar, with and without SLOs."""
from __future__ import annotations

import numpy as np

from .lazy import cvxpy as cp
from ..core.errors import InputError
from ..core.model import Allocation, PolicyInput
from .lp import LinearPolicy
from .program import AllocationProgram
from .solver import Compiled, solve


def value_per_dollar(inp: PolicyInput) -> tuple[np.ndarray, np.ndarray]:
    """Normalized throughput per dollar of each entry: (n, k) and pairs (P, k, 2).

    A job's throughput counts relative to its fastest type (steps of different
    models are not comparable), and costs price_j * scale_factor dollars per
    hour; a pair's GPUs are paid once and shared by its two jobs.
    """
    fastest = inp.fastest_throughputs()
    dollars = inp.prices[None, :] * inp.scale_factors[:, None]
    solo = inp.solo_throughputs / fastest[:, None] / dollars
    shared = inp.shared_throughputs
    if inp.n_pairs:
        a, b = inp.pair_jobs[:, 0], inp.pair_jobs[:, 1]
        per = inp.prices[None, :] * inp.scale_factors[a][:, None]
        shared = np.stack([shared[:, :, 0] / fastest[a][:, None] / per,
                           shared[:, :, 1] / fastest[b][:, None] / per], axis=2)
    return solo, shared


def check_prices(inp: PolicyInput, policy: str):
    for j, wt in enumerate(inp.worker_types):
        if not inp.prices[j] > 0:
            raise InputError(f"worker_types.{wt}.price_per_hour",
                             f"policy {policy} needs a price > 0 for every worker type")


class MinCost(LinearPolicy):
    """Maximize normalized throughput per dollar, sum over jobs and types.

    Each job is pushed to the type where it gets the most of its own peak
    speed per dollar (Gavel's cost policy); capacity decides the rest.
    """

    name = "min_cost"
    summary = "minimize cost: the most throughput per dollar (needs price_per_hour)"

    def check(self, inp: PolicyInput):
        check_prices(inp, self.name)

    def formulate(self, program: AllocationProgram):
        value = program.rate("value")
        return cp.Problem(cp.Maximize(program.total(value)), program.constraints), {}

    def rates(self, inp: PolicyInput) -> dict:
        return {"value": value_per_dollar(inp)}


class MinCostSLO(LinearPolicy):
    """Minimize cost subject to SLOs, in two LPs over the same constraints.

    A job with an SLO must reach throughput s_m / (slo_m - t_m).  SLOs may be
    impossible to meet together, and a daemon must still schedule: the first
    LP minimizes the total relative shortfall below those throughputs (0 when
    every SLO can be met), the second maximizes throughput per dollar while
    keeping that shortfall.  Jobs still short are listed in `info`.
    """

    name = "min_cost_slo"
    summary = "minimize cost subject to SLOs (needs price_per_hour, steps_remaining, slo)"

    def check(self, inp: PolicyInput):
        check_prices(inp, self.name)
        has_slo = ~np.isnan(inp.slo)
        missing = has_slo & np.isnan(inp.steps_remaining)
        if missing.any():
            i = int(np.argmax(missing))
            raise InputError(f"jobs[{inp.job_ids[i]}].steps_remaining",
                             f"is required by policy {self.name} for a job with an slo")

    def formulate(self, program: AllocationProgram):
        value = program.rate("value")
        required = cp.Parameter(program.n_jobs, nonneg=True, name="required")
        inv_required = cp.Parameter(program.n_jobs, nonneg=True, name="inv_required")
        budget = cp.Parameter(nonneg=True, name="budget")
        shortfall = cp.Variable(program.n_jobs, nonneg=True, name="shortfall")
        relative = program.total(cp.multiply(inv_required, shortfall))
        meet = [program.throughput + shortfall >= required]
        first = cp.Problem(cp.Minimize(relative), program.constraints + meet)
        second = cp.Problem(cp.Maximize(program.total(value)),
                            program.constraints + meet + [relative <= budget])
        return second, {"required": required, "inv_required": inv_required, "budget": budget,
                        "_first": first, "_shortfall": shortfall}

    def required_throughputs(self, inp: PolicyInput) -> np.ndarray:
        """(n,) throughput each job needs to meet its SLO (inf once the deadline has passed)."""
        has_slo = ~np.isnan(inp.slo)
        left = np.where(has_slo, inp.slo - inp.time_since_arrival, np.inf)
        need = np.divide(np.nan_to_num(inp.steps_remaining), left,
                         out=np.full(inp.n_jobs, np.inf), where=left > 0)
        return np.where(has_slo, need, 0.0)

    def parameters(self, inp: PolicyInput) -> dict:
        # Past the fastest speed a job cannot go: ask for no more than that,
        # so the shortfall measures what other jobs could give up.
        need = np.minimum(self.required_throughputs(inp), inp.fastest_throughputs())
        inv = np.divide(1.0, need, out=np.zeros_like(need), where=need > 0)
        return {"required": need, "inv_required": inv}

    def rates(self, inp: PolicyInput) -> dict:
        return {"value": value_per_dollar(inp)}

    def solve(self, compiled: Compiled, inp: PolicyInput) -> float:
        short = solve(compiled.params["_first"], self.solvers, self.name + " (SLO shortfall)")
        # Slack for solver tolerance; the shortfall is a sum of relative terms.
        compiled.params["budget"].value = max(short, 0.0) * (1 + 1e-6) + 1e-7
        return solve(compiled.problem, self.solvers, self.name)

    def info(self, allocation: Allocation, inp: PolicyInput) -> dict:
        need = self.required_throughputs(inp)
        got = allocation.effective_throughputs(inp)
        missed = [inp.job_ids[i] for i in np.flatnonzero(got < need * (1 - 1e-4))]
        return {"slo_violations": missed} if missed else {}

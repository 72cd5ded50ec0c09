"""Cost policies: most throughput per dollar, with and without SLOs.

Their objective, value per dollar summed over every job, is work conserving
by itself (every usable entry has a positive value), but it ties a lot: a
job on its own fastest type is worth exactly 1 / price there, so every job
whose fastest type is j is worth the same on j, and a type twice as fast at
twice the price is worth the same as the slower one.  A solver then returns
whichever optimum it reaches (HiGHS a vertex, Clarabel a blend).  So after
the cost objective both policies solve a second stage, as max-min fairness
does (lp.py): the cost objective kept within PRIMARY_SLACK, the weighted
normalized throughputs sum_m mult_m * w_m * throughput_m / fastest_m
maximized with lp.py's fixed tie-break on each entry.  The answer is Pareto
efficient among the cost optima and the same whichever solver finds it.
`pareto = False` (the agnostic baseline) switches it off.
"""
from __future__ import annotations

import numpy as np

from .lazy import cvxpy as cp
from ..core.errors import InputError
from ..core.model import Allocation, PolicyInput
from . import direct
from .lp import PRIMARY_SLACK, LinearPolicy, _unit_scale, pareto_gains
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


def pareto_problem(program: AllocationProgram, constraints: list, total) -> dict:
    """The second stage over `constraints`: cost `total` kept at `_floor` or more (module doc)."""
    n, k = program.n_jobs, program.n_types
    p = {"_gain": cp.Parameter(n, nonneg=True), "_tie": cp.Parameter(n * k, nonneg=True),
         "_floor": cp.Parameter(name="floor")}
    # "_second": the key lp.py's pricing reads as the Pareto stage.
    p["_second"] = cp.Problem(cp.Maximize(p["_gain"] @ program.throughput + p["_tie"] @ program.x),
                              constraints + [total >= p["_floor"]])
    p["_total"] = total
    return p


def second_gains(weights: np.ndarray, solo: np.ndarray,
                 multiplicity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n, k) the second stage's coefficient of each X_mj (w_m / fastest_m * T_mj, with the
    tie-break), and (n,) w_m / fastest_m."""
    fastest = solo.max(axis=1)
    own = np.divide(weights, fastest, out=np.zeros_like(fastest), where=fastest > 0)
    return pareto_gains(own, solo, multiplicity), own


def pareto_stage(policy: LinearPolicy, compiled: Compiled, value: float) -> float:
    """Solve the second stage after a cost optimum `value`; the cost its X attains."""
    program, p = compiled.program, compiled.params
    solo = program.rate_values("throughputs")
    gains, own = second_gains(np.asarray(p["weights"].value, dtype=float), solo, program.multiplicity)
    scale = _unit_scale(gains)
    weight = program.multiplicity * own
    # gain @ throughput + tie @ x puts gains_mj on X_mj (as in MaxMinPolicy).
    p["_gain"].value = weight * scale
    p["_tie"].value = (np.maximum(gains - weight[:, None] * solo, 0.0) * scale).ravel()
    p["_floor"].value = value - PRIMARY_SLACK * abs(value)
    solve(p["_second"], policy.solvers, policy.name + " (Pareto stage)")
    return float(p["_total"].value)


class MinCost(LinearPolicy):
    """Maximize normalized throughput per dollar, sum over jobs and types.

    Each job is pushed to the type where it gets the most of its own peak
    speed per dollar (Gavel's cost policy); capacity decides the rest.
    """

    name = "min_cost"
    summary = "minimize cost: the most throughput per dollar (needs price_per_hour)"
    second_stage = True

    def check(self, inp: PolicyInput):
        check_prices(inp, self.name)

    def formulate(self, program: AllocationProgram):
        total = program.total(program.rate("value"))
        weights = cp.Parameter(program.n_jobs, nonneg=True, name="weights")
        return (cp.Problem(cp.Maximize(total), program.constraints),
                {"weights": weights, **pareto_problem(program, program.constraints, total)})

    def parameters(self, inp: PolicyInput) -> dict:
        return {"weights": inp.weights}

    def rates(self, inp: PolicyInput) -> dict:
        return {"value": value_per_dollar(inp)}

    def solve(self, compiled: Compiled, inp: PolicyInput) -> float:
        value = solve(compiled.problem, self.solvers, self.name)
        return pareto_stage(self, compiled, value) if self.pareto else value

    def direct_priced(self, inp: PolicyInput, params: dict, rates: dict):
        return cost_priced(self, MinCost, inp, params, rates)

    def direct(self, structure, numbers, rates, params):
        """Both stages handed to HiGHS as arrays (direct.py) where that applies: no pair rows."""
        if not (self.use_direct and self.pareto and not len(structure.pair_jobs)
                and set(rates) == {"value"} and type(self).formulate is MinCost.formulate
                and direct.applies(structure.n_jobs, structure.n_types)):
            return None
        mult = structure.multiplicity
        second, _ = second_gains(np.asarray(params["weights"], dtype=float), numbers.solo, mult)
        return direct.max_sum_then(mult[:, None] * rates["value"][0], second, numbers.feasible,
                                   numbers.counts, mult, structure.scale_factors, slack=PRIMARY_SLACK)


def cost_stages(policy: LinearPolicy, base: type, structure, numbers, rates: dict, params: dict,
                slos: bool = False):
    """Every stage on HiGHS, pair rows (if any) priced on its duals (direct_pairs.py), or None."""
    from . import direct_pairs
    if not (policy.use_direct and policy.pareto and set(rates) == {"value"}
            and type(policy).formulate is base.formulate and type(policy).solve is base.solve
            and direct_pairs.applies(structure.n_jobs, len(structure.pair_jobs), structure.n_types)):
        return None
    mult = np.asarray(structure.multiplicity, dtype=float)
    second, own = second_gains(np.asarray(params["weights"], dtype=float), numbers.solo, mult)
    value, pair_value = rates["value"]
    pairs = direct_pairs.Pairs(structure.pair_jobs, numbers.shared, numbers.pair_feasible)
    return direct_pairs.cost_stages_priced(
        value, pair_value, numbers.solo, second, own, numbers.feasible, numbers.counts, mult,
        structure.scale_factors, pairs, slos=(params["required"], params["inv_required"]) if slos else None,
        slack=PRIMARY_SLACK)


def cost_priced(policy: LinearPolicy, base: type, inp: PolicyInput, params: dict, rates: dict,
                slos: bool = False):
    """Jobs all different with pair rows: `cost_stages` on the whole input."""
    from .program import Numbers, Structure
    return cost_stages(policy, base, Structure.of(inp), Numbers.of(inp), rates, params, slos)


class MinCostSLO(LinearPolicy):
    """Minimize cost subject to SLOs, in two LPs over the same constraints (then the second stage).

    A job with an SLO must reach throughput s_m / (slo_m - t_m).  SLOs may be
    impossible to meet together, and a daemon must still schedule: the first
    LP minimizes the total relative shortfall below those throughputs (0 when
    every SLO can be met), the second maximizes throughput per dollar while
    keeping that shortfall.  Jobs still short are listed in `info`.
    """

    name = "min_cost_slo"
    summary = "minimize cost subject to SLOs (needs price_per_hour, steps_remaining, slo)"
    second_stage = True

    def direct_priced(self, inp: PolicyInput, params: dict, rates: dict):
        return cost_priced(self, MinCostSLO, inp, params, rates, slos=True)

    def direct(self, structure, numbers, rates, params):
        """The three LPs on one HiGHS model (direct_pairs.cost_stages_priced), pair rows or not."""
        return cost_stages(self, MinCostSLO, structure, numbers, rates, params, slos=True)

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
        # Bounded: a shortfall past what a job needs is meaningless, and an
        # unbounded optimal face costs an interior-point solver its accuracy.
        meet = [program.throughput + shortfall >= required, shortfall <= required]
        first = cp.Problem(cp.Minimize(relative), program.constraints + meet)
        kept = program.constraints + meet + [relative <= budget]
        total = program.total(value)
        second = cp.Problem(cp.Maximize(total), kept)
        weights = cp.Parameter(program.n_jobs, nonneg=True, name="weights")
        # The cost LP is the problem (pricing reads its duals); the Pareto stage comes third.
        return second, {"required": required, "inv_required": inv_required, "budget": budget,
                        "weights": weights, "_first": first, "_shortfall": shortfall,
                        **pareto_problem(program, kept, total)}

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
        return {"required": need, "inv_required": inv, "weights": inp.weights}

    def rates(self, inp: PolicyInput) -> dict:
        return {"value": value_per_dollar(inp)}

    def solve(self, compiled: Compiled, inp: PolicyInput) -> float:
        short = solve(compiled.params["_first"], self.solvers, self.name + " (SLO shortfall)")
        # Slack for solver tolerance; the shortfall is a sum of relative terms.
        compiled.params["budget"].value = max(short, 0.0) * (1 + 1e-6) + 1e-7
        value = solve(compiled.problem, self.solvers, self.name)
        return pareto_stage(self, compiled, value) if self.pareto else value

    def info(self, allocation: Allocation, inp: PolicyInput) -> dict:
        need = self.required_throughputs(inp)
        got = allocation.effective_throughputs(inp)
        missed = [inp.job_ids[i] for i in np.flatnonzero(got < need * (1 - 1e-4))]
        return {"slo_violations": missed} if missed else {}

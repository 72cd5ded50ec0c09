"""Policies that are one optimization over the allocation program (`LinearPolicy`).

The base compiles a policy's problem once per structure, refills numbers,
solves, checks the status and returns an `Allocation`.  Before that it
shrinks the problem without changing the optimum: identical jobs share one
row (symmetry.py), and with space sharing, pair rows are priced (column
generation) so that the LP holds only the pairs that matter.  Max-min and
max-sum problems without pair rows, and max-min class problems with them (no
pricing there), skip cvxpy: direct.py hands the same LP to HiGHS as arrays
(the simulator solves thousands of them).  With pair rows and jobs all
different, a policy's `direct_priced` hands the LP with every pair row to
HiGHS, pricing the pair columns on HiGHS' duals (direct_pairs.py); `_priced`
(cvxpy's duals) stays where it does not apply.

Pareto efficiency and one answer per input.  A max-min LP has many optimal X
(it is indifferent to every job above the minimum), and a solver returns
whichever vertex its pivoting reaches: often one where every job sits at the
minimum and GPUs stay idle.  So `MaxMinPolicy` solves a second stage with the
primary objective kept (within PRIMARY_SLACK, relative):

    maximize_X  sum_m mult_m * v_m * throughput(m, X)   s.t.  c_m * throughput(m, X) >= t*

with v_m = `pareto_weights` (by default c_m, the policy's own rates; for
max-min fairness w_m / isolated_m, weighted normalized throughputs).  Every
v_m is positive, so any X that raised one job without
lowering another would score higher: the answer is Pareto efficient among
the primary optima, and no GPU type keeps capacity while a job that runs on
it has time left.  Max-sum policies are Pareto efficient by themselves.  Both
kinds may still tie (two jobs, or two types, worth the same); the objective
on each entry X_mj is multiplied by 1 + TIE_BREAK * u_mj, u a fixed
pseudo-random table, which leaves one optimum (for all but a measure-zero set
of inputs) whichever route or solver finds it.  `pareto = False` switches
both off (the heterogeneity-agnostic baseline does, see base.Agnostic).
"""
from __future__ import annotations

import time
from dataclasses import replace
from functools import lru_cache

import numpy as np

from .lazy import cvxpy as cp
from ..core.model import Allocation, PolicyInput
from . import direct
from .program import AllocationProgram, Numbers, Structure, clean, repair
from .solver import LP_SOLVERS, Compiled, ProgramCache, solve

# The second stage keeps the primary objective within this (relative): above
# the solvers' own feasibility tolerance, far below anything a round can show.
PRIMARY_SLACK = 1e-7
# Relative size of the tie-break on each entry's objective coefficient: well
# above the solvers' optimality tolerance (1e-7 on objectives scaled to ~1),
# far below any real difference between jobs.
TIE_BREAK = 1e-4


def tie_break(n: int, k: int) -> np.ndarray:
    """(n, k) fixed numbers in [0, 1): the first n*k of one seeded stream, the same on every call."""
    return _stream(n * k)[:n * k].reshape(n, k)


_STREAM = np.zeros(0)


def _stream(size: int) -> np.ndarray:
    global _STREAM
    if len(_STREAM) < size:
        # A generic perturbation: an index-linear one (golden ratio, say) ties
        # on every swap of two jobs between two types.
        _STREAM = np.random.default_rng(20201104).random(max(size, 2 * len(_STREAM), 4096))
        _STREAM.flags.writeable = False
    return _STREAM


# No usable entry weighs less than this fraction of the largest in the Pareto
# stage: rates 1e15 apart (makespan's 1/steps on tiny throughputs) would leave
# some below the solvers' tolerance, and whether such a job gets an idle GPU
# would be the solver's whim.
SMALLEST_GAIN = 1e-6


def pareto_gains(weights: np.ndarray, solo: np.ndarray, multiplicity: np.ndarray) -> np.ndarray:
    """(n, k) objective coefficient of each X_mj in a sum of weighted rates, with the tie-break."""
    n, k = solo.shape
    gain = (multiplicity * weights)[:, None] * solo * (1.0 + TIE_BREAK * tie_break(n, k))
    top = float(gain.max()) if gain.size else 0.0
    return np.where(solo > 0, np.maximum(gain, SMALLEST_GAIN * top), 0.0)


_NO_PAIR_JOBS = np.zeros((0, 2), dtype=np.int64)
_NO_PAIR_JOBS.flags.writeable = False


@lru_cache(maxsize=64)
def _no_pairs(k: int, ndim: int) -> np.ndarray:
    """Read-only empty pair numbers: (0, k, 2) shared throughputs (ndim 3) or (0, k) bounds (ndim 2)."""
    empty = np.zeros((0, k, 2) if ndim == 3 else (0, k))
    empty.flags.writeable = False
    return empty


def _unit_scale(values: np.ndarray) -> float:
    """A power of two that brings max|values| into [1, 2) (exact; solver tolerances stay meaningful)."""
    top = float(np.max(np.abs(values))) if np.size(values) else 0.0
    return float(2.0 ** -np.floor(np.log2(top))) if top > 0 and np.isfinite(top) else 1.0


class LinearPolicy:
    """Base of the policies that are one optimization over the allocation program.

    A subclass gives `formulate(program) -> (problem, params)`,
    `parameters(inp) -> {name: value}` and, for rates other than throughput,
    `rates(inp) -> {name: (solo (n, k), shared (P, k, 2))}`; this class
    compiles once per structure, refills, solves and checks the status.
    `objective_value` may turn the solver's value into the policy's own unit
    (e.g. seconds of makespan).

    With pair rows (space sharing) it prices them: it solves over a few
    promising pairs, computes every other pair's reduced cost from the duals,
    adds those that would improve the objective and solves again, until none
    would (column generation).  The result is the optimum over *all* pairs
    while the LP holds only the pairs that matter.
    """

    name = ""
    summary = ""
    supports_space_sharing = True
    takes_all_pairs = True          # it prices pair rows itself
    solvers = LP_SOLVERS
    # Pricing: pairs per job to start from, pairs per job added per round, rounds.
    initial_partners = 2
    max_pricing_rounds = 30
    # Pricing drops pair rows left empty this many rounds in a row.
    idle_rounds = 2
    # Solve identical jobs as one row (exact; see symmetry.py).
    use_symmetry = True
    pricing_batch = 4
    # Solve LPs that direct.py writes out without cvxpy (same LP, no overhead).
    use_direct = True
    # Pareto stage and tie-break where the policy has them (module doc).
    pareto = True
    second_stage = False            # a Pareto stage after the primary objective

    def __init__(self):
        self._cache = ProgramCache()

    def formulate(self, program: AllocationProgram):
        raise NotImplementedError

    def parameters(self, inp: PolicyInput) -> dict:
        return {}

    def rates(self, inp: PolicyInput) -> dict:
        return {}

    def check(self, inp: PolicyInput):
        """Raise InputError when `inp` lacks what this policy needs."""

    def objective_value(self, value: float, inp: PolicyInput) -> float:
        return value

    def solve(self, compiled: Compiled, inp: PolicyInput) -> float:
        return solve(compiled.problem, self.solvers, self.name)

    def info(self, allocation: Allocation, inp: PolicyInput) -> dict:
        """Extra facts for the caller (e.g. SLOs that cannot be met)."""
        return {}

    def allocate(self, inp: PolicyInput) -> Allocation:
        from .space_sharing import prune_pairs
        from .symmetry import find_classes

        self.check(inp)
        started = time.perf_counter()
        if inp.n_jobs == 0:
            return Allocation(inp.job_ids, inp.worker_types, np.zeros((0, inp.n_types)), self.name)
        # Pairs that can never help (sharing is no better than taking turns on any type)
        # go first: they could only get a share of 0, so that loses nothing.
        work = prune_pairs(inp, per_job=None) if inp.n_pairs else inp
        # The policy's numbers, computed once: per job, and per rate.
        params, rates = self.parameters(work), self.rates(work)
        classes = (find_classes(work, self._per_job_numbers(work, params, rates))
                   if self.use_symmetry else None)
        if classes is not None:
            allocation = self._solve_classes(work, classes, params, rates)
            extra = {"job_classes": classes.n_classes}
        elif work.n_pairs:
            found = self.direct_priced(work, params, rates) if self.use_direct else None
            if found is not None:
                allocation, extra = self._priced_allocation(work, found)
            else:
                allocation, extra = self._priced(work, params, rates)
        else:
            allocation, _ = self._solve_once(work, params, rates)
            extra = {}
        extra.update(self.info(allocation, inp))
        return replace(allocation, solve_seconds=time.perf_counter() - started,
                       info={**allocation.info, **extra})

    @staticmethod
    def _per_job_numbers(inp: PolicyInput, params: dict, rates: dict) -> list:
        """Everything per job this policy looks at, to tell identical jobs apart."""
        numbers = [np.asarray(v, dtype=float) for v in params.values()]
        numbers += [solo for solo, _ in rates.values()]
        return [v for v in numbers if v.ndim and v.shape[0] == inp.n_jobs]

    def direct(self, structure: Structure, numbers: Numbers, rates: dict,
               params: dict):
        """The same LP solved without cvxpy (direct.py), or None where that does not apply."""
        return None

    def direct_priced(self, inp: PolicyInput, params: dict, rates: dict):
        """The LP with every pair row on HiGHS, pair columns priced on its duals
        (direct_pairs.py), or None where that does not apply (then `_priced`, on cvxpy)."""
        return None

    def _priced_allocation(self, inp: PolicyInput, found) -> tuple[Allocation, dict]:
        """The Allocation of a `direct_priced` solution: the pair rows it uses, repaired."""
        x = clean(found.x, inp.feasible)
        xp = clean(found.pairs, inp.pair_feasible)
        used = xp.sum(axis=1) > 0
        pair_jobs, xp = inp.pair_jobs[used], xp[used]
        x, xp = repair(inp, x, xp, pair_jobs)
        allocation = Allocation(inp.job_ids, inp.worker_types, x, self.name,
                                objective=self.objective_value(found.value, inp),
                                pair_jobs=pair_jobs, x_pairs=xp)
        return allocation, {"pair_rows": int(used.sum()), "pricing_rounds": found.rounds}

    def _run(self, structure: Structure, numbers: Numbers, rates: dict, params: dict,
             inp: PolicyInput, direct_ok: bool = True
             ) -> tuple[float, np.ndarray, np.ndarray, Compiled | None]:
        """Solve the problem of `structure` with these numbers: (value, X, pair X, compiled).

        The direct route when the policy has one and `direct_ok` (compiled is
        then None), else the cvxpy formulation: compiled once per structure,
        refilled.
        """
        found = self.direct(structure, numbers, rates, params) if direct_ok else None
        if found is not None:
            pairs = (np.zeros((0, structure.n_types)) if found.pairs is None
                     else clean(found.pairs, numbers.pair_feasible))
            return found.value, clean(found.x, numbers.feasible), pairs, None
        compiled = self._compiled(structure, numbers, rates, params)
        value = self.solve(compiled, inp)
        return value, *compiled.program.values(), compiled

    def _compiled(self, structure: Structure, numbers: Numbers, rates: dict, params: dict) -> Compiled:
        """Compile (or reuse) the problem of `structure` and fill in the numbers."""
        def build():
            program = AllocationProgram(structure=structure)
            problem, handles = self.formulate(program)
            return Compiled(program, problem, handles)

        compiled = self._cache.get(structure.key(multiplicity=False), build)
        program = compiled.program
        if program.fixed_multiplicity and not np.array_equal(program.multiplicity, structure.multiplicity):
            compiled = self._cache.put(structure.key(multiplicity=False), build())
        compiled.program.set_multiplicity(structure.multiplicity)
        compiled.program.set_numbers(numbers)
        for name, (solo, shared) in rates.items():
            compiled.program.set_rate(name, solo, shared)
        for name, value in params.items():
            compiled.params[name].value = value
        return compiled

    def _solve_once(self, inp: PolicyInput, params: dict | None = None,
                    rates: dict | None = None, direct_ok: bool = True) -> tuple[Allocation, Compiled | None]:
        params = self.parameters(inp) if params is None else params
        rates = self.rates(inp) if rates is None else rates
        value, x, xp, compiled = self._run(Structure.of(inp), Numbers.of(inp), rates, params, inp,
                                           direct_ok)
        x, xp = repair(inp, x, xp)
        allocation = Allocation(inp.job_ids, inp.worker_types, x, self.name,
                                objective=self.objective_value(value, inp),
                                pair_jobs=inp.pair_jobs, x_pairs=xp)
        return allocation, compiled

    def _solve_classes(self, inp: PolicyInput, classes, params: dict, rates: dict) -> Allocation:
        """Solve with one row per class of identical jobs, then give every job its class's row."""
        from .symmetry import class_pair_numbers, expand

        reps, n = classes.representatives, inp.n_jobs
        params = {name: (np.asarray(v)[reps] if np.ndim(v) and np.shape(v)[0] == n else v)
                  for name, v in params.items()}
        if not inp.n_pairs and not rates:
            return self._solve_classes_alone(inp, classes, params)
        structure = Structure(classes.n_classes, inp.n_types, inp.scale_factors[reps],
                              classes.pair_classes, classes.sizes.astype(float))
        # A class pair row holds the total time of many job pairs: it is
        # bounded by its members' time, not by 1.
        qa, qb = classes.pair_classes[:, 0], classes.pair_classes[:, 1]
        bound = np.minimum(classes.sizes[qa], classes.sizes[qb]).astype(float)
        pair_feasible = inp.pair_feasible[classes.pair_rows] * bound[:, None]
        numbers = Numbers(inp.solo_throughputs[reps], inp.feasible[reps], inp.counts,
                          class_pair_numbers(inp, classes, inp.shared_throughputs), pair_feasible)
        rates = {name: (solo[reps], class_pair_numbers(inp, classes, shared))
                 for name, (solo, shared) in rates.items()}
        value, y, z, _ = self._run(structure, numbers, rates, params, inp)
        x, pair_jobs, x_pairs = expand(inp, classes, y, z)
        x, x_pairs = repair(inp, x, x_pairs, pair_jobs)
        return Allocation(inp.job_ids, inp.worker_types, x, self.name,
                          objective=self.objective_value(value, inp),
                          pair_jobs=pair_jobs, x_pairs=x_pairs)

    def _solve_classes_alone(self, inp: PolicyInput, classes, params: dict) -> Allocation:
        """`_solve_classes` without pair rows or other rates: the same numbers, none of the
        pair bookkeeping on empty arrays (the simulator's thousands of solves)."""
        reps, k = classes.representatives, inp.n_types
        structure = Structure(classes.n_classes, k, inp.scale_factors[reps], _NO_PAIR_JOBS,
                              classes.sizes.astype(float))
        numbers = Numbers(inp.solo_throughputs[reps], inp.feasible[reps], inp.counts,
                          _no_pairs(k, 3), _no_pairs(k, 2))
        value, y, z, _ = self._run(structure, numbers, {}, params, inp)
        x, x_pairs = repair(inp, y[classes.labels], z, _NO_PAIR_JOBS)
        return Allocation(inp.job_ids, inp.worker_types, x, self.name,
                          objective=self.objective_value(value, inp),
                          pair_jobs=_NO_PAIR_JOBS, x_pairs=x_pairs)

    def _priced(self, full: PolicyInput, params: dict, rates: dict) -> tuple[Allocation, dict]:
        """Column generation over pair rows; with a second stage, first for the primary objective alone.

        The duals of a Pareto stage price columns for that stage, which keeps
        the primary level fixed: a pair that would raise the level need not
        raise the stage's sum.  So pricing runs to the end with the primary
        objective, then goes on from those rows with the second stage.
        """
        from .space_sharing import initial_pairs

        state = {"active": initial_pairs(full, self.initial_partners),
                 "idle": np.zeros(full.n_pairs, dtype=np.int64)}
        pareto, total = self.pareto, 0
        try:
            for stage in ((False, True) if pareto and self.second_stage else (pareto,)):
                self.pareto = stage
                allocation, rows, rounds = self._price(full, params, rates, state)
                total += rounds
        finally:
            self.pareto = pareto
        return allocation, {"pair_rows": len(rows), "pricing_rounds": total}

    def _price(self, full: PolicyInput, params: dict, rates: dict, state: dict):
        from .space_sharing import top_per_job

        shared = {"throughputs": full.shared_throughputs}
        shared.update({name: pair for name, (_, pair) in rates.items()})
        feasible = full.pair_feasible
        active, idle = state["active"], state["idle"]
        for rounds in range(1, self.max_pricing_rounds + 1):
            rows = np.flatnonzero(active)
            # Pricing needs the duals of the cvxpy route.
            allocation, compiled = self._solve_once(
                full.pairs_subset(rows), params,
                {name: (solo, pair[rows]) for name, (solo, pair) in rates.items()}, direct_ok=False)
            gain = compiled.program.reduced_costs(full.pair_jobs, full.scale_factors, shared)
            gain = np.where(feasible, gain, -np.inf).max(axis=1)
            # Improvements below this are solver noise, not better pairs.
            last = compiled.params["_second"] if self.pareto and "_second" in compiled.params \
                else compiled.problem
            tolerance = 1e-7 * max(1.0, abs(float(last.value)))
            score = np.where(active | (gain <= tolerance), -np.inf, gain)
            if not np.isfinite(score).any():
                break
            # Rows the solutions have left empty for a while, and that would
            # not improve this one, leave the LP: it stays small, and pricing
            # brings a row back whenever it would help.
            used = allocation.x_pairs.sum(axis=1) > 0
            idle[rows] = np.where(used, 0, idle[rows] + 1)
            active[rows[(idle[rows] >= self.idle_rounds) & (gain[rows] < -tolerance)]] = False
            # Each job takes its few most improving partners this round: the
            # best columns are often many copies of one kind of pair, and a
            # few per job is what the next LP can use.
            active |= top_per_job(full.pair_jobs, score, self.pricing_batch) & np.isfinite(score)
        return allocation, rows, rounds


class CoefficientPolicy(LinearPolicy):
    """A policy whose numbers are one coefficient per job, `coefficients(inp)`."""

    def coefficients(self, inp: PolicyInput) -> np.ndarray:
        raise NotImplementedError

    def parameters(self, inp: PolicyInput) -> dict:
        return {"coef": self.coefficients(inp)}


class MaxMinPolicy(CoefficientPolicy):
    """maximize_X min_m c_m * throughput(m, X), then the Pareto stage (module doc)."""

    second_stage = True

    def direct(self, structure, numbers, rates, params):
        if not _direct_applies(self, MaxMinPolicy, structure, rates, params, pairs=True):
            return None
        coef = np.asarray(params["coef"], dtype=float)
        own = np.asarray(params["pareto_weight"], dtype=float) if self.pareto else None
        second = pareto_gains(own, numbers.solo, structure.multiplicity) if self.pareto else None
        if len(structure.pair_jobs):
            # Class problems with pair rows (symmetry.py): no pricing, so no duals needed.
            return direct.max_min_pairs(coef, numbers.solo, numbers.feasible, numbers.counts,
                                        structure.multiplicity, structure.scale_factors,
                                        structure.pair_jobs, numbers.shared, numbers.pair_feasible,
                                        second=second, pareto_weight=own, slack=PRIMARY_SLACK)
        return direct.max_min(coef, numbers.solo, numbers.feasible, numbers.counts,
                              structure.multiplicity, structure.scale_factors, second=second,
                              slack=PRIMARY_SLACK)

    def direct_priced(self, inp: PolicyInput, params: dict, rates: dict):
        """Every pair row, priced on HiGHS (direct_pairs.max_min_priced): jobs all different."""
        from . import direct_pairs
        if not (_direct_applies(self, MaxMinPolicy, Structure.of(inp), rates, params, pairs=True,
                                limit=False)
                and direct_pairs.applies(inp.n_jobs, inp.n_pairs, inp.n_types)):
            return None
        coef = np.asarray(params["coef"], dtype=float)
        mult = np.ones(inp.n_jobs)
        own = np.asarray(params["pareto_weight"], dtype=float) if self.pareto else None
        second = pareto_gains(own, inp.solo_throughputs, mult) if self.pareto else None
        pairs = direct_pairs.Pairs(inp.pair_jobs, inp.shared_throughputs, inp.pair_feasible)
        return direct_pairs.max_min_priced(coef, inp.solo_throughputs, inp.feasible, inp.counts, mult,
                                           inp.scale_factors, pairs, second=second, pareto_weight=own,
                                           slack=PRIMARY_SLACK)

    def formulate(self, program: AllocationProgram):
        n, k = program.n_jobs, program.n_types
        coef = cp.Parameter(n, nonneg=True, name="coef")
        rate = cp.multiply(coef, program.throughput)
        primary = cp.Problem(cp.Maximize(cp.min(rate)), program.constraints)
        # The Pareto stage: rates scaled by 1/t* stay at 1 - PRIMARY_SLACK or
        # more; the weighted sum of throughputs (gain = mult * v, scaled) plus
        # the tie-break on X is maximized.
        p = {"level_coef": cp.Parameter(n, nonneg=True), "floor": cp.Parameter(nonneg=True),
             "gain": cp.Parameter(n, nonneg=True), "tie": cp.Parameter(n * k, nonneg=True)}
        second = cp.Problem(
            cp.Maximize(p["gain"] @ program.throughput + p["tie"] @ program.x),
            program.constraints + [cp.multiply(p["level_coef"], program.throughput) >= p["floor"]])
        return primary, {"coef": coef, "pareto_weight": cp.Parameter(n, nonneg=True), "_second": second,
                         **{"_" + name: v for name, v in p.items()}}

    def parameters(self, inp: PolicyInput) -> dict:
        coef = self.coefficients(inp)
        # Only with the Pareto stage: these numbers tell jobs apart (symmetry.py).
        return {"coef": coef, "pareto_weight": self.pareto_weights(inp, coef)} if self.pareto else \
            {"coef": coef}

    def pareto_weights(self, inp: PolicyInput, coef: np.ndarray) -> np.ndarray:
        """(n,) each job's weight in the Pareto stage's sum: by default its own rate's coefficient."""
        return coef

    def solve(self, compiled: Compiled, inp: PolicyInput) -> float:
        level = solve(compiled.problem, self.solvers, self.name)
        if not self.pareto:
            return level
        self._pareto_stage(compiled, level)
        # What the final X attains (as on the direct route).
        coef = np.asarray(compiled.params["coef"].value, dtype=float)
        return float(np.min(coef * compiled.program.throughput.value))

    def _pareto_stage(self, compiled: Compiled, level: float):
        program, p = compiled.program, compiled.params
        coef = np.asarray(p["coef"].value, dtype=float)
        solo = program.rate_values("throughputs")
        own = np.asarray(p["pareto_weight"].value, dtype=float)
        weight = program.multiplicity * own
        gains = pareto_gains(own, solo, program.multiplicity)
        scale = _unit_scale(gains)
        # gain @ throughput + tie @ x puts gains_mj on X_mj, as the direct route does.
        p["_gain"].value = weight * scale
        p["_tie"].value = (np.maximum(gains - weight[:, None] * solo, 0.0) * scale).ravel()
        # A level within solver noise of 0 is no floor (as on the direct route).
        positive = level * _unit_scale(coef[:, None] * solo) > direct.NOISE
        p["_level_coef"].value = coef / level if positive else coef
        p["_floor"].value = 1.0 - PRIMARY_SLACK if positive else 0.0
        solve(p["_second"], self.solvers, self.name + " (Pareto stage)")


class MaxSumPolicy(CoefficientPolicy):
    """maximize_X sum_m c_m * throughput(m, X), ties broken as the module doc says."""

    def direct(self, structure, numbers, rates, params):
        if not _direct_applies(self, MaxSumPolicy, structure, rates, params):
            return None
        return direct.max_sum(np.asarray(params["coef"], dtype=float), numbers.solo, numbers.feasible,
                              numbers.counts, structure.multiplicity, structure.scale_factors,
                              tie=TIE_BREAK * tie_break(*numbers.solo.shape) if self.pareto else None)

    def formulate(self, program: AllocationProgram):
        coef = cp.Parameter(program.n_jobs, nonneg=True, name="coef")
        tie = cp.Parameter(program.n_jobs * program.n_types, nonneg=True)
        total = program.total(cp.multiply(coef, program.throughput))
        problem = cp.Problem(cp.Maximize(total + tie @ program.x), program.constraints)
        return problem, {"coef": coef, "_tie": tie, "_total": total}

    def solve(self, compiled: Compiled, inp: PolicyInput) -> float:
        program, p = compiled.program, compiled.params
        coef = np.asarray(p["coef"].value, dtype=float)
        solo = program.rate_values("throughputs")
        # The objective scaled to ~1, so that the tie-break is above the solver's tolerance.
        scale = _unit_scale((program.multiplicity * coef)[:, None] * solo)
        p["coef"].value = coef * scale
        tie = TIE_BREAK * tie_break(*solo.shape) if self.pareto else np.zeros(solo.shape)
        p["_tie"].value = ((program.multiplicity * coef * scale)[:, None] * solo * tie).ravel()
        solve(compiled.problem, self.solvers, self.name)
        return float(p["_total"].value) / scale


def _direct_applies(policy: LinearPolicy, base: type, structure: Structure, rates: dict,
                    params: dict, pairs: bool = False, limit: bool = True) -> bool:
    """direct.py solves `base`'s own LP: no other rates, the formulation not overridden, and
    no pair rows unless `pairs` (the route has them); `limit`: the whole LP small enough
    (direct_pairs.py checks its own)."""
    n_pairs = len(structure.pair_jobs)
    return (policy.use_direct and (pairs or not n_pairs) and not rates
            and set(params) <= {"coef", "pareto_weight"}
            and type(policy).formulate is base.formulate and type(policy).solve is base.solve
            and (not limit or direct.applies(structure.n_jobs + n_pairs, structure.n_types)))

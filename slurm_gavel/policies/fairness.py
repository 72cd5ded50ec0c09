"""Fairness policies: max-min fairness (LAS) and finish-time fairness (Themis)."""
from __future__ import annotations

import logging

import numpy as np

from .lazy import cvxpy as cp
from ..core.model import PolicyInput
from . import direct
from .lp import PRIMARY_SLACK, TIE_BREAK, LinearPolicy, MaxMinPolicy, _unit_scale, tie_break
from .program import AllocationProgram
from .solver import CONIC_SOLVERS, LP_SOLVERS, Compiled, solve

# Clarabel's rho is accurate to about 1e-8 (relative); the Pareto stage keeps
# rho within this of it.
RHO_SLACK = 1e-6

log = logging.getLogger("slurm_gavel.policies")


def _json_number(v: float):
    """JSON has no NaN (a job without steps=): a string keeps it."""
    v = float(v)
    return v if np.isfinite(v) else repr(v)


class MaxMinFairness(MaxMinPolicy):
    """Maximize the smallest weighted, normalized effective throughput.

    Each job's throughput is normalized by its throughput under the isolated
    allocation (1/n of every type's GPUs, see `PolicyInput.isolated_allocation`)
    and divided by its weight:

        maximize_X  min_m  throughput(m, X) / (w_m * throughput(m, X_isolated))

    Gavel's paper writes this with equal *time* shares and a factor scale_factor_m;
    an equal GPU share gives a job of scale factor s 1/s of that time, so the
    two are the same objective.  X_isolated is feasible with value 1 for every
    job, which is the sharing-incentive guarantee.
    """

    name = "max_min_fairness"
    summary = "max-min fairness / least attained service: maximize the smallest normalized throughput"

    def coefficients(self, inp: PolicyInput) -> np.ndarray:
        return 1.0 / (inp.weights * self._isolated(inp))

    def _isolated(self, inp: PolicyInput) -> np.ndarray:
        """inp.isolated_throughputs(), computed once for the coefficients and the Pareto weights."""
        last = getattr(self, "_last_isolated", None)
        if last is None or last[0] is not inp:
            last = self._last_isolated = (inp, inp.isolated_throughputs())
        return last[1]

    def pareto_weights(self, inp: PolicyInput, coef: np.ndarray) -> np.ndarray:
        """The Pareto stage maximizes sum_m w_m * throughput_m / isolated_m.

        The job weight multiplies (a weight-2 job's share of leftover GPUs
        counts twice), where in the primary rate it divides.  Tried on
        Gavel's jobs (bench/gavel_cases.py): weighting by 1 / steps remaining
        instead (leftovers to the jobs nearest completion) gave the same
        average JCT to 0.01 h in cases 1 and 2 and split every class of
        identical jobs (symmetry.py), which made the runs 2-3x slower.
        """
        return inp.weights / self._isolated(inp)


class FinishTimeFairness(LinearPolicy):
    """Minimize the largest finish-time fairness ratio rho (Themis, as in Gavel).

        rho_m = (t_m + s_m / throughput(m, X)) / (e_m + s_m / throughput(m, X_isolated))

    t_m the time since arrival, s_m the steps remaining, and e_m the
    isolated-equivalent time of the work already done: the sum over past
    calls of the steps done since the call before divided by the job's
    isolated throughput at that call.  The denominator is the job's finish
    time had it always held an isolated share; the numerator its finish
    time here.  A job that has waited without progress has a small e_m and
    so a large rho: it gets pushed.  e_m is state the policy keeps per job
    id (`isolated_seconds`), as Gavel's does; a job first seen with work
    already done (after a daemon restart, or in a one-off `slurm-gavel solve`)
    starts at e_m = 0, which overstates its rho until it finishes.  Asking
    again about an unchanged input adds nothing.  Weights scale rho (a job
    of weight 2 counts its slowdown twice).  rho is convex in X (inv_pos),
    so this is a conic problem: Clarabel solves it in one go.

    Pareto stage (see lp.py): rho_m <= R reads speedup_m >= scaled_m / (R -
    fixed_m), a floor on each job's normalized throughput.  With R the
    optimum (plus RHO_SLACK), an LP maximizes the sum of normalized
    throughputs above those floors (with lp.py's tie-break), so no job can
    finish sooner without another finishing later, and the interior-point
    answer's arbitrary spread over ties is replaced by the LP's one optimum.

    A job whose total work is unknown (no steps=: s_m NaN) has no finish time.  It is taken
    to have run at its isolated share since it arrived and to have as much left as it did
    (e_m = s_m / isolated = t_m): rho_m = w_m (1 + 1 / speedup_m) / 2, 1 at its isolated
    share, whatever its age.  It is thus shared out as max-min fairness would (a floor on
    its normalized throughput), never pushed for having waited nor left out; said once per
    job (`unknown_work`), not each call.
    """

    name = "finish_time_fairness"
    summary = "finish-time fairness (Themis): minimize the largest ratio of finish time to isolated finish time"
    solvers = CONIC_SOLVERS
    second_stage = True

    def __init__(self):
        super().__init__()
        self.isolated_seconds: dict[str, float] = {}
        self._last: dict[str, tuple[float, float]] = {}    # job -> (steps remaining, isolated thr)
        self.unknown_work: set[str] = set()     # jobs without steps= already said

    def check(self, inp: PolicyInput):
        """Every input solves: a job without steps_remaining gets the rho of the class docstring."""

    def memory(self) -> dict:
        """e_m and what it was last computed from, per job, as plain data: the daemon keeps it
        with the engine's state, so that a restart does not reset every job's e_m to 0 (which
        would overstate the rho of every job that has made progress)."""
        seconds, last = self.isolated_seconds, self._last      # (each replaced whole, never edited)
        return {"policy": self.name,
                "isolated_seconds": {job: float(v) for job, v in seconds.items()},
                "last": {job: [_json_number(a), _json_number(b)] for job, (a, b) in last.items()}}

    def remember(self, memory: dict) -> None:
        """Take back what `memory` returned (another policy's memory, or none, is ignored)."""
        if not memory or memory.get("policy") != self.name:
            return
        seconds = {str(job): float(v) for job, v in memory["isolated_seconds"].items()}
        last = {str(job): (float(a), float(b)) for job, (a, b) in memory["last"].items()}
        if any(not np.isfinite(v) or v < 0 for v in seconds.values()):
            raise ValueError("isolated_seconds must be finite and >= 0")
        self.isolated_seconds, self._last = seconds, last

    def allocate(self, inp: PolicyInput):
        self._say_unknown(inp)
        self._account(inp)
        return super().allocate(inp)

    def _say_unknown(self, inp: PolicyInput):
        """One line for the jobs without steps= not said before (a job said once, ever)."""
        unknown = [job for job, s in zip(inp.job_ids, inp.steps_remaining) if np.isnan(s)]
        new = [job for job in unknown if job not in self.unknown_work]
        if new:
            log.info("%s: job(s) %s%s have no steps= (total work unknown): each gets the share "
                     "max-min fairness would give it (rho as if it ran at its isolated share)",
                     self.name, ", ".join(new[:10]), " ..." if len(new) > 10 else "")
        self.unknown_work = set(unknown)

    def _account(self, inp: PolicyInput):
        """Add each job's work since the last call at the isolated share it had then."""
        isolated = inp.isolated_throughputs()
        seconds, last = {}, {}
        for job, steps, thr in zip(inp.job_ids, inp.steps_remaining, isolated):
            done = self.isolated_seconds.get(job, 0.0)
            if job in self._last:
                before, thr_before = self._last[job]
                if before > steps and thr_before > 0:
                    done += (before - steps) / thr_before
            seconds[job], last[job] = done, (float(steps), float(thr))
        # Jobs no longer in the input are finished (or gone): forget them.
        self.isolated_seconds, self._last = seconds, last

    def formulate(self, program: AllocationProgram):
        fixed = cp.Parameter(program.n_jobs, nonneg=True, name="fixed")
        scaled = cp.Parameter(program.n_jobs, nonneg=True, name="scaled")
        inv_isolated = cp.Parameter(program.n_jobs, nonneg=True, name="inv_isolated")
        # In units of the isolated throughput every term is of order 1,
        # which keeps the conic solver accurate.
        speedup = cp.multiply(inv_isolated, program.throughput)
        rho = fixed + cp.multiply(scaled, cp.inv_pos(speedup))
        primary = cp.Problem(cp.Minimize(cp.max(rho)), program.constraints)
        # The Pareto stage: speedup_m / need_m >= 1 (bar_m = 0 where a job needs nothing).
        n, k = program.n_jobs, program.n_types
        p = {"level_coef": cp.Parameter(n, nonneg=True), "bar": cp.Parameter(n, nonneg=True),
             "gain": cp.Parameter(n, nonneg=True), "tie": cp.Parameter(n * k, nonneg=True)}
        second = cp.Problem(
            cp.Maximize(p["gain"] @ program.throughput + p["tie"] @ program.x),
            program.constraints + [cp.multiply(p["level_coef"], program.throughput) >= p["bar"]])
        return primary, {"fixed": fixed, "scaled": scaled, "inv_isolated": inv_isolated,
                         "_second": second, **{"_" + name: v for name, v in p.items()}}

    def direct(self, structure, numbers, rates, params):
        """The same optimum as a few max-min LPs on HiGHS (direct.min_max_ratio), no conic solve."""
        # Only with the Pareto stage, which makes the answer one X: without it (the agnostic
        # baseline) the conic route's interior point and a simplex vertex are different optima,
        # and the baseline is kept as it was measured (docs/simulation.md).
        # With pair rows (class problems), every pair row is in HiGHS' model, priced (direct_pairs.py).
        from . import direct_pairs
        n_pairs = len(structure.pair_jobs)
        if not (self.use_direct and self.pareto and not rates
                and type(self).formulate is FinishTimeFairness.formulate
                and type(self).solve is FinishTimeFairness.solve
                and direct_pairs.applies(structure.n_jobs, n_pairs, structure.n_types)):
            return None
        fixed, scaled, inv_isolated = (np.asarray(params[name], dtype=float)
                                       for name in ("fixed", "scaled", "inv_isolated"))
        mult = structure.multiplicity
        # the cvxpy route's Pareto objective: gain @ throughput + tie @ x, gain = mult * inv_isolated
        solo = numbers.solo
        weight = mult * inv_isolated
        second = weight[:, None] * solo * (1.0 + TIE_BREAK * tie_break(*solo.shape))
        pairs = second_pairs = None
        if n_pairs:
            pairs = direct_pairs.Pairs(structure.pair_jobs, numbers.shared, numbers.pair_feasible)
            a, b = structure.pair_jobs[:, 0], structure.pair_jobs[:, 1]
            # a pair row's throughput to a member is shared / mult: gain_a * shared_a / mult_a
            second_pairs = (inv_isolated[a, None] * numbers.shared[:, :, 0]
                            + inv_isolated[b, None] * numbers.shared[:, :, 1])
        return direct.min_max_ratio(fixed, scaled, inv_isolated, numbers.solo, numbers.feasible,
                                    numbers.counts, mult, structure.scale_factors,
                                    second=second, rho_slack=RHO_SLACK, slack=PRIMARY_SLACK,
                                    pairs=pairs, second_pairs=second_pairs)

    def direct_priced(self, inp: PolicyInput, params: dict, rates: dict):
        """Jobs all different, with pair rows: `direct` on the whole input (Z priced on HiGHS)."""
        from .program import Numbers, Structure
        return self.direct(Structure.of(inp), Numbers.of(inp), rates, params)

    def solve(self, compiled: Compiled, inp: PolicyInput) -> float:
        rho = solve(compiled.problem, self.solvers, self.name)
        if self.pareto:
            self._pareto_stage(compiled, rho)
        return rho

    def _pareto_stage(self, compiled: Compiled, rho: float):
        program, p = compiled.program, compiled.params
        fixed, scaled = p["fixed"].value, p["scaled"].value
        inv_isolated = np.asarray(p["inv_isolated"].value, dtype=float)
        room = rho * (1 + RHO_SLACK) - fixed
        need = np.divide(scaled, room, out=np.zeros_like(room), where=(scaled > 0) & (room > 0))
        p["_level_coef"].value = np.divide(inv_isolated, need, out=inv_isolated.copy(), where=need > 0)
        p["_bar"].value = np.where(need > 0, 1.0 - PRIMARY_SLACK, 0.0)
        solo = program.rate_values("throughputs")
        weight = program.multiplicity * inv_isolated
        scale = _unit_scale(weight[:, None] * solo)
        p["_gain"].value = weight * scale
        p["_tie"].value = (weight[:, None] * solo * TIE_BREAK * tie_break(*solo.shape) * scale).ravel()
        solve(p["_second"], LP_SOLVERS, self.name + " (Pareto stage)")

    def parameters(self, inp: PolicyInput) -> dict:
        t, s = inp.time_since_arrival, inp.steps_remaining
        done = np.array([self.isolated_seconds.get(job, 0.0) for job in inp.job_ids])
        isolated = inp.isolated_throughputs()
        isolated_finish = done + s / isolated
        # A job with nothing done and nothing left has rho = 1 whatever X is;
        # it contributes nothing rather than 0/0.
        known = ~np.isnan(s)
        scale = np.divide(inp.weights, isolated_finish, out=np.zeros_like(t),
                          where=known & (isolated_finish > 0))
        # unknown work: e_m = s_m / isolated = t_m, so rho = w (t + t / speedup) / 2t
        half = np.where(known, 0.0, inp.weights / 2)
        return {"fixed": np.where(known, scale * t, half),
                "scaled": np.where(known, scale * np.nan_to_num(s) / isolated, half),
                "inv_isolated": 1.0 / isolated}

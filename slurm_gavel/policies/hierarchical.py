"""Hierarchical policies by water filling (Gavel's hierarchical max-min fairness).

Entities (users, teams; `PolicyInput.entities`) share the cluster by weighted
max-min fairness with weights `entity_weights` (default 1).  Inside an entity
the share goes to its jobs by the entity's own policy (`entity_policies`):

* ``fairness`` (default): the entity weight is split over the entity's jobs
  that are not yet bottlenecked, in proportion to the jobs' own
  `PolicyInput.weights` (equal split when all job weights are 1, as in
  Gavel; a job of weight 2 gets twice its sibling's share).
* ``fifo``: the whole entity weight goes to the earliest-arrived job (by
  `PolicyInput.arrival_order`) that is not yet bottlenecked; later jobs have
  weight 0 until every earlier one is bottlenecked.  Job weights are ignored.

Throughputs are normalized as in `MaxMinFairness`: n_m = throughput(m, X) /
throughput(m, X_isolated).  The hierarchy cannot be one LP, so it is filled
like water, level by level.  Iteration k, with w_m the job weights of this
iteration (0 for bottlenecked jobs and for waiting FIFO jobs) and t_m the
normalized throughput every job already has:

1. *fill*:    maximize_X,d  d   s.t.  n_m(X) >= t_m + w_m * d   for every job m
   (for w_m = 0 that reads "keep what you have"; every job keeps at least its
   throughput of the previous iteration, and every job with weight rises by
   w_m * d: weighted max-min fairness on what is left).
2. *settle*:  minimize_X  sum_{m not frozen} n_m(X)  s.t.  n_m(X) >= t_m + w_m * d*
   The fill LP is indifferent to jobs above the minimum, so its vertex may
   hand leftover GPUs to any job (a waiting FIFO job, say) and the next
   iteration's floors would lock that gift in.  Settling puts every job at its
   level, which is what progressive filling at rates w_m would do; leftovers
   stay free for the following iterations.
3. *bottlenecks*: a job is bottlenecked when its throughput cannot rise while
   every job keeps at least its current throughput.  Bottlenecked jobs are
   frozen (weight 0, their throughput kept as a floor) and their entity's
   weight moves to the entity's other jobs by its policy.
4. Repeat until every job is bottlenecked.  Every iteration freezes at least
   one job with weight (if all of them could still rise at once, d* was not
   the maximum), so there are at most n iterations.

Finding the bottlenecks.  Gavel uses an MILP with one binary per job ("rises
by at least eps").  Here a short sequence of LPs over one compiled problem
does it, with no eps to guess:

    maximize_X,s  sum_m s_m   s.t.  n(X) >= t + s,  0 <= s_m <= cap for m in C, s_m = 0 elsewhere

C are the candidates (jobs not yet frozen and not yet shown able to rise).  A
job with s_m > 0 in the solution can rise without anyone losing: it leaves C.
When the optimum is 0, no job left in C can rise at all (a job that could rise
by g > 0 alone would make the objective >= min(g, cap) > 0), so each of them
is bottlenecked; that last LP is the certificate.  Each LP either ends the
search or removes at least one job from C.  Because the feasible set is
convex, all jobs that can rise can rise *together* by some small amount, so
with a small cap the first LP usually gives each of them s_m = cap and the
second is the certificate: two LPs per iteration in the usual case.  The MILP
needs the same convexity argument plus an eps below every job's possible rise
(too large and raisable jobs are frozen, breaking Pareto efficiency; too small
and solver noise decides) and n binaries, where these LPs are plain LPs.

Numerics.  "0" above means at most TOL (normalized units).  Every LP keeps
every job at its floor - SLACK or more; floors are what jobs have after the
previous iteration, and never fall by the SLACK the LPs allow (else a job
could creep up on the SLACK others give away, iteration after iteration).  X
is scaled (`repair`) after each iteration so that it proves the next LPs
feasible.  Solver noise of 1e-9 can leave crumbs of 1e-6 that any one of many
jobs could take (a job whose throughput ratio between two types differs a lot
from another's turns a tiny GPU share into a larger rise): the probe would then
peel one job per LP.  From the CUT_ROUNDS-th LP on, an optimum below LOOSE
(< cap, so it bounds every remaining job's rise) also ends the search.  The
largest such bound is reported as ``info["pareto_tolerance"]``: no job of the
final X can rise by more than that without lowering another's by SLACK.  If
noise ever leaves an iteration with no job frozen, the active jobs with the
least room are frozen and ``info["uncertified_bottlenecks"]`` counts it (not
seen in tests).

Routes.  With `use_direct` (off by default for now, below) filling.py does all of this on one HiGHS
model per allocation, warm-started from LP to LP, with identical jobs as one
row, bottlenecks certified by the fill's duals where they can be, floors at
the levels instead of a settle LP, and no LP at all where every job can have
its fastest type at once (`use_shortcut`; `before_pruning` answers so for
space sharing before any pair is pruned).  What follows is the cvxpy route:
the fallback when HiGHS does not reach an optimum, and the reference the
tests compare the direct route with (tests/unit/test_hierarchical_direct.py).

LPs: HiGHS dual simplex with 100x tighter tolerances (the floors leave these
LPs without an interior, which interior-point methods misreport as
infeasible), then HiGHS IPM, then Clarabel.  Cost per iteration: fill, settle
and usually two probes; iterations are at most n, in practice the number of
distinct bottleneck levels (about 20-50 at 100-200 jobs: 0.5-3 s without
pairs, 2-10 s with ~2 pairs per job).

The final X is the settled allocation of the last iteration, in which every
job is bottlenecked: it is Pareto efficient (no job's throughput can rise
without lowering another's), up to the tolerances above.

All constraints are the shared `AllocationProgram` ones over whole vectors,
so pair rows (space sharing) need nothing special: a pair row raises both of
its jobs' normalized throughputs.

`Allocation.objective` is the smallest final normalized throughput among the
jobs that had weight in the first iteration (every job of a fairness entity,
the first job of each FIFO entity): how the worst-off job that the
inter-entity fairness guarantees something to fares against its isolated
share.  `Allocation.info["iterations"]` lists, per iteration, the job weights
used (entity shares, summing to each entity's weight), the level reached (the
rise of normalized throughput per unit of job weight), every job's normalized
throughput after the iteration and the jobs found bottlenecked in it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .lazy import cvxpy as cp
from ..core.errors import SolverError
from ..core.model import Allocation, PolicyInput
from . import filling
from .program import AllocationProgram, repair, structure_key
from .solver import CLARABEL, ProgramCache, solve

# All in normalized-throughput units (1.0 = the job's isolated throughput).
TOL = 3e-7        # a rise smaller than this does not count (solver noise)
SLACK = 1e-9      # LP floors sit this far below what the jobs have (the solver's own tolerance)
PROBE_CAP = 1e-4  # most a job may rise in a bottleneck probe
LOOSE = 1e-5      # from the CUT_ROUNDS-th probe on, a rise this small no longer counts either:
CUT_ROUNDS = 3    # the crumbs solver noise leaves, which any one of many jobs could take
SHORT = 1e-11     # the settle LP aims at most this far below the fill level (so that it stays
                  # feasible), well below TOL: a job at the level never looks able to rise

# The floors of each LP come from the previous solution, so its noise must stay
# well below TOL, and the floors leave the LPs no interior: HiGHS' dual simplex
# with feasibility tolerances 100x tighter than its defaults (interior point
# methods misreport such LPs as infeasible), then its interior point method,
# then Clarabel.
_TIGHT = {"primal_feasibility_tolerance": 1e-9, "dual_feasibility_tolerance": 1e-9}
SOLVERS = (("HIGHS", {"highs_options": {"solver": "simplex", **_TIGHT}}),
           ("HIGHS", {"highs_options": {"solver": "ipm", **_TIGHT}}),
           CLARABEL)


def _exact_values(program: AllocationProgram) -> tuple[np.ndarray, np.ndarray]:
    """The solved X and pair X, clipped to their bounds but not rounded.

    `AllocationProgram.values` zeroes entries below 1e-9; a job that takes a
    few 1e-9 of some GPU at a high throughput would then look as if it could
    still rise by more than TOL.  Rounding waits for the final answer.
    """
    x = np.clip(program.x.value, 0.0, program.solo_cap.value).reshape(program.n_jobs, program.n_types)
    xp = np.zeros((program.n_pairs, program.n_types))
    if program.n_pairs:
        xp = np.clip(program.x_pairs.value, 0.0, program.pair_cap.value).reshape(xp.shape)
    return x, xp


@dataclass
class _Compiled:
    program: AllocationProgram
    level: cp.Expression           # n(X), normalized throughputs (a rate of the program)
    delta: cp.Variable
    slack: cp.Variable
    fill: cp.Problem
    settle: cp.Problem
    probe: cp.Problem
    params: dict


class Hierarchical:
    """Weighted max-min fairness across entities, fairness or FIFO inside each (water filling)."""

    name = "hierarchical"
    summary = ("hierarchical: weighted max-min fairness across entities, fairness or FIFO "
               "within each, by water filling")
    supports_space_sharing = True
    solvers = SOLVERS
    # water filling on one HiGHS model (filling.py); False: the cvxpy route.  Off by default for
    # now: its X is as fair (per-job normalized throughputs within 1e-6 of the cvxpy route's)
    # but splits some jobs' time over fewer types, and with that X the daemon's mechanism kept
    # jobs whose whole share is one type waiting behind jobs filling that type without a share
    # (tests/cluster/test_preemption_cap_cluster.py: no preemption in 7 rounds); on once the
    # mechanism makes such fillers yield
    use_direct = False
    use_shortcut = True  # the direct route skips the LPs where every job can have its best type

    def __init__(self):
        self._cache = ProgramCache()

    # -- problem ------------------------------------------------------------
    def _build(self, inp: PolicyInput) -> _Compiled:
        program = AllocationProgram(inp)
        n = program.n_jobs
        level = program.rate("normalized")
        p = {name: cp.Parameter(n, name=name) for name in ("floor", "target", "probe_floor")}
        p["weight"] = cp.Parameter(n, nonneg=True, name="weight")
        p["cap"] = cp.Parameter(n, nonneg=True, name="cap")
        p["live"] = cp.Parameter(n, nonneg=True, name="live")
        delta = cp.Variable(name="delta")
        slack = cp.Variable(n, nonneg=True, name="slack")
        fill = cp.Problem(cp.Maximize(delta), program.constraints + [
            level >= p["floor"] + cp.multiply(p["weight"], delta)])
        settle = cp.Problem(cp.Minimize(p["live"] @ level), program.constraints + [
            level >= p["target"]])
        probe = cp.Problem(cp.Maximize(cp.sum(slack)), program.constraints + [
            level >= p["probe_floor"] + slack, slack <= p["cap"]])
        return _Compiled(program, level, delta, slack, fill, settle, probe, p)

    # -- weights ------------------------------------------------------------
    @staticmethod
    def job_weights(inp: PolicyInput, frozen: np.ndarray) -> np.ndarray:
        """(n,) this iteration's job weights: entity weight shared by its policy, 0 if frozen."""
        rank = inp.arrival_order()
        entities = np.asarray(inp.entities, dtype=object)
        w = np.zeros(inp.n_jobs)
        for entity in dict.fromkeys(inp.entities):
            live = np.flatnonzero((entities == entity) & ~frozen)
            if not live.size:
                continue
            total = float(inp.entity_weights.get(entity, 1.0))
            if inp.entity_policies.get(entity, "fairness") == "fifo":
                w[live[np.argmin(rank[live])]] = total
            else:
                w[live] = total * inp.weights[live] / inp.weights[live].sum()
        return w

    # -- steps --------------------------------------------------------------
    def _bottlenecked(self, c: _Compiled, floor: np.ndarray, candidates: np.ndarray):
        """Split `candidates`: (bottlenecked, first-probe slacks, bound on their rise).

        See the module docstring.  The returned bound is the most any job
        called bottlenecked could still rise (normalized): the last probe's
        optimum, which bounds every remaining job's rise once it is below
        PROBE_CAP.
        """
        c.params["probe_floor"].value = floor - SLACK
        remaining = candidates.copy()
        first, rounds, residual = None, 0, 0.0
        while remaining.any():
            c.params["cap"].value = np.where(remaining, PROBE_CAP, 0.0)
            self._solve(c.probe, "bottleneck probe")
            s = np.where(remaining, c.slack.value, 0.0)
            rounds += 1
            if first is None:
                first = s.copy()
            residual = float(s.sum())
            if residual <= TOL or (rounds >= CUT_ROUNDS and residual <= LOOSE):
                break
            up = remaining & (s > TOL)
            if not up.any():   # the rise is spread thin: the largest share is real
                up = remaining & (s >= s.max())
            remaining &= ~up
        return remaining, (first if first is not None else np.zeros_like(floor)), residual

    def before_pruning(self, inp: PolicyInput) -> Allocation | None:
        """The shortcut's answer on every pair (`WithPairs` asks before pruning pairs), or None.

        Fewer pairs only lower each job's bound, so where the shortcut holds
        with every pair it holds with the pruned ones, with the same X.
        """
        if not (self.use_direct and self.use_shortcut and inp.n_jobs and filling.available()):
            return None
        started = time.perf_counter()
        filled = filling.shortcut_only(inp)
        return None if filled is None else self._direct(inp, filled, started)

    def _direct(self, inp: PolicyInput, filled, started: float) -> Allocation:
        """The Allocation of filling.py's answer."""
        alloc = Allocation(inp.job_ids, inp.worker_types, filled.x, self.name,
                           pair_jobs=filled.pair_jobs, x_pairs=filled.x_pairs)
        final = alloc.effective_throughputs(inp) / inp.isolated_throughputs()
        initial = self.job_weights(inp, np.zeros(inp.n_jobs, dtype=bool)) > 0
        return Allocation(inp.job_ids, inp.worker_types, filled.x, self.name,
                          objective=float(final[initial].min()),
                          solve_seconds=time.perf_counter() - started,
                          pair_jobs=filled.pair_jobs, x_pairs=filled.x_pairs, info=filled.info)

    def _solve(self, problem: cp.Problem, what: str) -> float:
        return solve(problem, self.solvers, f"{self.name} ({what})")

    def allocate(self, inp: PolicyInput) -> Allocation:
        started = time.perf_counter()
        n = inp.n_jobs
        if n == 0:
            return Allocation(inp.job_ids, inp.worker_types, np.zeros((0, inp.n_types)), self.name)
        if self.use_direct and filling.available():
            filled = filling.water_fill(inp, self.job_weights, self.use_shortcut)
            if filled is not None:
                return self._direct(inp, filled, started)
        c = self._cache.get(structure_key(inp), lambda: self._build(inp))
        program = c.program
        program.set_numbers(inp)
        iso = inp.isolated_throughputs()
        shared = inp.shared_throughputs
        if inp.n_pairs:
            shared = shared / iso[inp.pair_jobs][:, None, :]
        program.set_rate("normalized", inp.solo_throughputs / iso[:, None], shared)

        def normalized(x, xp):
            alloc = Allocation(inp.job_ids, inp.worker_types, x, self.name,
                               pair_jobs=inp.pair_jobs, x_pairs=xp)
            return alloc.effective_throughputs(inp) / iso

        x = np.zeros((n, inp.n_types))
        xp = np.zeros((inp.n_pairs, inp.n_types))
        current = np.zeros(n)        # normalized throughputs under x, xp
        floor = np.zeros(n)          # what every job keeps in the next LPs
        frozen = np.zeros(n, dtype=bool)
        history, uncertified, tolerance = [], 0, 0.0
        initial = None
        while not frozen.all():
            w = self.job_weights(inp, frozen)
            if initial is None:
                initial = w > 0
            active = w > 0
            scale = w.max()
            c.params["floor"].value = floor - SLACK
            c.params["weight"].value = w / scale
            d = self._solve(c.fill, "water-filling level")
            if d > 1e-12:
                fill_x = _exact_values(program)
                c.params["target"].value = floor - SLACK + (w / scale) * (d - min(SHORT, 1e-3 * d))
                c.params["live"].value = (~frozen).astype(float)
                try:
                    self._solve(c.settle, "settle")
                    x, xp = _exact_values(program)
                except SolverError:
                    x, xp = fill_x
                # X must prove the next LPs feasible: scale away the solver's
                # tolerance-sized violations; floors rise with the jobs and fall
                # only as far as that takes them (see Numerics).
                x, xp = repair(inp, x, xp)
                current = normalized(x, xp)
                floor = np.minimum(np.where(frozen, floor, np.maximum(floor, current)),
                                   current + SLACK)
            stuck, first, residual = self._bottlenecked(c, floor, ~frozen)
            tolerance = max(tolerance, residual)
            if not (stuck & active).any():     # only solver noise (see Numerics)
                stuck, least = filling.freeze_least(stuck, active, first, TOL)
                tolerance = max(tolerance, least)
                uncertified += 1
            frozen |= stuck
            history.append({
                "weights": [float(v) for v in w],
                "level": float(d / scale),
                "normalized_throughputs": [float(v) for v in current],
                "bottlenecked": [inp.job_ids[i] for i in np.flatnonzero(stuck)],
            })
        # Drop entries of pure float noise.  Not the 1e-9 of `AllocationProgram.values`:
        # a job whose GPU is 100x its isolated share turns 1e-9 of time into a
        # 1e-7 normalized throughput, which Pareto efficiency counts.
        x, xp = repair(inp, np.where(x < 1e-12, 0.0, x), np.where(xp < 1e-12, 0.0, xp))
        final = normalized(x, xp)
        info = {"iterations": history, "pareto_tolerance": tolerance}
        if uncertified:
            info["uncertified_bottlenecks"] = uncertified
        return Allocation(inp.job_ids, inp.worker_types, x, self.name,
                          objective=float(final[initial].min()),
                          solve_seconds=time.perf_counter() - started,
                          pair_jobs=inp.pair_jobs, x_pairs=xp, info=info)

"""Water filling (the hierarchical policy) on one HiGHS model, without cvxpy.

hierarchical.py explains the method: fill LPs raise the jobs with weight
together, bottleneck probes find who can rise no further.  Through cvxpy every
one of those LPs is refilled, compiled-in and solved from scratch; here one
HiGHS model is built per allocation and every LP after the first is a change
of bounds, costs and a few coefficients of it, the simplex going on from the
last optimal basis.

The model.  Rows c stand for mult_c identical jobs (symmetry.py; the class key
adds the entity, the job weight and, in a FIFO entity, the job itself, so that
jobs of one class always get the same weight).  Columns: X (c, k), pair rows
Z (q, k), the level d and the probe slacks s (c).  Rows:

    rate c:   n_c(X, Z) - w_c d - s_c >= floor_c - SLACK    (n: normalized throughput)
    time c:   sum_j X_cj + pair shares <= 1
    GPUs j:   sum_c mult_c sf_c X_cj + sum_q sf_q Z_qj <= G_j

The fill LP is max d with s fixed at 0 (w_c enters as d's coefficients); a
probe is max sum_C s_c with d fixed at 0 and 0 <= s_c <= PROBE_CAP on the
candidates C.

No settle LP.  The cvxpy route settles (minimizes the jobs' throughputs at the
level) because it takes the next floors from the solved X, where the fill's
vertex may have handed a job a gift that would then be locked in.  Here the
floors are the levels themselves, floor_c += w_c d*, never read from an X, so
no gift is ever locked in; the fill's X still proves the next LPs feasible
(it attains every new floor, less SLACK).  At the end every job is
bottlenecked, so any X of the last LP has every job at its floor.

Bottlenecks from the duals.  With y the fill's duals on the rate rows (sum_c
y_c w_c = 1, d's reduced cost), weak duality gives, for every X of the
polytope, sum_c y_c (n_c(X) - floor_c + SLACK) <= d*, that is
sum_c y_c (n_c(X) - f_c) <= -SLACK sum_c y_c with f the new floors.  An X that
keeps every job at f - SLACK or more has each term >= -SLACK y_c, so a job with
y_c > 0 gets y_c (n_c - f_c) <= -SLACK y_c: it cannot rise at all, and needs
no probe.  Only the others are probed; usually they all rise in the first probe, which ends the
iteration, so an iteration costs one fill and at most one probe (the cvxpy
route: fill, settle, two probes).  The duals are trusted only where
y_c >= DUAL_FLOOR * sum(y) (a solver's dual error over a tiny y_c would bound
nothing).

The X kept.  Once every job is bottlenecked, every X of the last LP gives
each job its level, and which one the simplex returns depends on its path.  A
last LP (`tidy`) keeps the one using least GPU time, ties broken by lp.py's
fixed perturbation: the mechanism places X each round, and an X alternating
between equal answers moves jobs for nothing.

The shortcut.  A job's normalized throughput can never exceed its best solo
entry (time <= 1), nor its best pair entry.  When every job's best solo type
has GPUs for every job that wants it and no pair entry beats a job's best solo
one, giving each job its best type is the water-filling optimum (every job at
its bound, the only Pareto-efficient point): no LP at all.  Where a job runs as
fast on several types (every type, to a type-blind policy), any of them will
do (`_spread`).  Lightly loaded clusters are there every round.

Any status other than optimal returns None: the caller takes the cvxpy route.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from .direct import _strategy
from .solver import _silence_highs_banner, match_scheduler_threads
from .symmetry import class_pair_numbers, expand, find_classes

# The same tolerances as the cvxpy route (hierarchical.py), in normalized units.
TOL = 3e-7
SLACK = 1e-9
PROBE_CAP = 1e-4
LOOSE = 1e-5
CUT_ROUNDS = 3
DUAL_FLOOR = 1e-4   # a dual this small (relative to their sum) certifies nothing

# The cvxpy route's first solver: dual simplex, 100x tighter feasibility tolerances;
# no presolve, so that every LP goes on from the last basis.  Tests may add options.
OPTIONS = {"output_flag": False, "solver": "simplex", "presolve": "off",
           "primal_feasibility_tolerance": 1e-9, "dual_feasibility_tolerance": 1e-9}

_local = threading.local()


def _highs():
    """A fresh HiGHS instance with OPTIONS (one model per allocation; thread-local options)."""
    import highspy
    if getattr(_local, "banner", None) is None:
        _silence_highs_banner()
        _local.banner = True
    h = highspy.Highs()
    for name, value in OPTIONS.items():
        h.setOptionValue(name, value)
    match_scheduler_threads(h)
    return h


@dataclass
class Filled:
    """The water-filling answer, per job: X, pair rows and what the iterations found."""
    x: np.ndarray
    pair_jobs: np.ndarray
    x_pairs: np.ndarray
    info: dict = field(default_factory=dict)


def normalized_rates(inp) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(isolated throughputs, normalized solo (n, k), normalized shared (P, k, 2)), None if a job has no share."""
    iso = inp.isolated_throughputs()
    if not (iso > 0).all():
        return None
    shared = inp.shared_throughputs
    if inp.n_pairs:
        shared = shared / iso[inp.pair_jobs][:, None, :]
    return iso, inp.solo_throughputs / iso[:, None], shared


def shortcut(inp, rate: np.ndarray, shared: np.ndarray) -> np.ndarray | None:
    """X with every job on its best solo type, if that is the optimum (module docstring), else None."""
    n, k = rate.shape
    best = rate.argmax(axis=1)
    top = rate[np.arange(n), best]
    if inp.n_pairs:
        bound = top.copy()
        np.maximum.at(bound, inp.pair_jobs[:, 0], shared[:, :, 0].max(axis=1))
        np.maximum.at(bound, inp.pair_jobs[:, 1], shared[:, :, 1].max(axis=1))
        if (bound > top).any():
            return None
    sf = inp.scale_factors.astype(float)
    used = np.bincount(best, weights=sf, minlength=k)
    if (used > inp.counts).any():
        best = _spread(rate >= top[:, None] * (1 - 1e-12), sf, inp.counts)
        if best is None:
            return None
    x = np.zeros((n, k))
    x[np.arange(n), best] = 1.0
    return x


def _spread(tied: np.ndarray, sf: np.ndarray, counts: np.ndarray) -> np.ndarray | None:
    """A best type for each job among its tied ones (n, k) that fits the GPUs, or None if none found.

    Where jobs run as fast on several types (a type-blind input: all of them),
    any such choice is the shortcut's answer.  Greedy, the jobs with the fewest
    choices first, each to its choice with the most GPUs left: what it finds
    is an answer; what it misses goes to the LPs.
    """
    left = counts.astype(float).copy()
    best = np.empty(len(sf), dtype=np.int64)
    for m in np.argsort(tied.sum(axis=1), kind="stable"):
        options = np.flatnonzero(tied[m] & (left >= sf[m]))
        if not options.size:
            return None
        j = options[np.argmax(left[options])]
        left[j] -= sf[m]
        best[m] = j
    return best


def _shortcut_filled(x: np.ndarray, k: int) -> Filled:
    return Filled(x, np.zeros((0, 2), dtype=np.int64), np.zeros((0, k)),
                  {"iterations": [], "pareto_tolerance": 0.0, "shortcut": True, "lps": 0, "rows": 0})


def shortcut_only(inp) -> Filled | None:
    """The shortcut's answer for `inp`, or None where it does not hold."""
    rates = normalized_rates(inp)
    x = None if rates is None else shortcut(inp, rates[1], rates[2])
    return None if x is None else _shortcut_filled(x, inp.n_types)


def _class_key(inp) -> np.ndarray:
    """(n,) a number per job that only jobs always given the same weight share."""
    codes = {e: float(i) for i, e in enumerate(dict.fromkeys(inp.entities))}
    key = np.array([codes[e] for e in inp.entities])
    fifo = np.array([inp.entity_policies.get(e, "fairness") == "fifo" for e in inp.entities])
    return np.where(fifo, len(codes) + np.arange(inp.n_jobs), key)


class _Model:
    """The HiGHS model of one allocation, and the changes that turn it into each LP."""

    def __init__(self, rate, mult, sf, counts, feasible, pairs, shared, pair_cap):
        import highspy
        from .lazy import scipy_sparse as sp

        self.inf = highspy.kHighsInf
        c, k = rate.shape
        q = len(pairs)
        self.c, self.k, self.q = c, k, q
        nx, nz = c * k, q * k
        self.d = nx + nz                 # the level's column
        self.s0 = self.d + 1             # the first probe slack's
        n_cols = self.s0 + c
        m, j = np.repeat(np.arange(c), k), np.tile(np.arange(k), c)
        rows = [m, c + m, 2 * c + j]
        cols = [np.arange(nx)] * 3
        vals = [rate.ravel(), np.ones(nx), np.repeat(mult * sf, k)]
        if q:
            p, t = np.repeat(np.arange(q), k), np.tile(np.arange(k), q)
            a, b = pairs[p, 0], pairs[p, 1]
            rows += [a, b, c + a, c + b, 2 * c + t]
            cols += [nx + np.arange(nz)] * 5
            vals += [shared[:, :, 0].ravel() / mult[a], shared[:, :, 1].ravel() / mult[b],
                     1.0 / mult[a], 1.0 / mult[b], sf[a].astype(float)]
        rows += [np.arange(c), np.arange(c)]
        cols += [np.full(c, self.d), self.s0 + np.arange(c)]
        vals += [np.full(c, -1.0), np.full(c, -1.0)]   # d's entries: -w_c, set by `fill`
        matrix = sp.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                               shape=(2 * c + k, n_cols))     # duplicates (a == b) summed
        matrix.sort_indices()
        col_lower = np.zeros(n_cols)
        col_lower[self.d] = -self.inf
        col_upper = np.concatenate([feasible.astype(float).ravel(), pair_cap.astype(float).ravel(),
                                    [self.inf], np.zeros(c)])
        row_lower = np.concatenate([np.full(c, -SLACK), np.full(c + k, -self.inf)])
        row_upper = np.concatenate([np.full(c, self.inf), np.ones(c), counts.astype(float)])
        self.h = h = _highs()
        # The primal simplex where the entries allow it (direct.py's `_strategy`): on the
        # simulator's packed rounds it takes half the dual's iterations, 30% less CPU time.
        h.setOptionValue("simplex_strategy", _strategy(matrix.data))
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = n_cols, 2 * c + k
        lp.col_cost_ = np.zeros(n_cols)
        lp.col_lower_, lp.col_upper_ = col_lower, col_upper
        lp.row_lower_, lp.row_upper_ = row_lower, row_upper
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = matrix.indptr.astype(np.int32)
        lp.a_matrix_.index_ = matrix.indices.astype(np.int32)
        lp.a_matrix_.value_ = matrix.data
        lp.sense_ = highspy.ObjSense.kMaximize
        h.passModel(lp)
        self.rate_rows = np.arange(c, dtype=np.int32)
        self.slacks = (self.s0 + np.arange(c)).astype(np.int32)
        self.weights = np.full(c, 1.0)
        self.lps = 0

    def _run(self) -> bool:
        import highspy
        self.lps += 1
        self.h.run()
        return self.h.getModelStatus() == highspy.HighsModelStatus.kOptimal

    def _floors(self, floor):
        self.h.changeRowsBounds(self.c, self.rate_rows, floor - SLACK, np.full(self.c, self.inf))

    def fill(self, floor, weights) -> tuple[float, np.ndarray] | None:
        """max d s.t. n >= floor - SLACK + w d: (d*, the rate rows' duals), None unless optimal."""
        h = self.h
        for i in np.flatnonzero(weights != self.weights):
            h.changeCoeff(int(i), self.d, -float(weights[i]))
        self.weights = weights.copy()
        self._floors(floor)
        h.changeColBounds(self.d, -self.inf, self.inf)
        h.changeColsBounds(self.c, self.slacks, np.zeros(self.c), np.zeros(self.c))
        cost = np.zeros(self.c + 1)
        cost[0] = 1.0
        h.changeColsCost(self.c + 1, np.append(np.int32(self.d), self.slacks).astype(np.int32), cost)
        if not self._run():
            return None
        return h.getObjectiveValue(), np.abs(np.asarray(h.getSolution().row_dual)[:self.c])

    def probe(self, floor, candidates) -> np.ndarray | None:
        """max sum_C s s.t. n >= floor - SLACK + s, 0 <= s <= PROBE_CAP on C: s, None unless optimal."""
        h = self.h
        self._floors(floor)
        h.changeColBounds(self.d, 0.0, 0.0)
        cap = np.where(candidates, PROBE_CAP, 0.0)
        h.changeColsBounds(self.c, self.slacks, np.zeros(self.c), cap)
        cost = np.concatenate([[0.0], candidates.astype(float)])
        h.changeColsCost(self.c + 1, np.append(np.int32(self.d), self.slacks).astype(np.int32), cost)
        if not self._run():
            return None
        return np.where(candidates, np.asarray(h.getSolution().col_value)[self.s0:], 0.0)

    def tidy(self, floor, gpu_cost) -> bool:
        """min sum gpu_cost . (X, Z) s.t. n >= floor - SLACK: among the X that give every job
        its level, the one using least (perturbed) GPU time.  Whether HiGHS reached an optimum."""
        h = self.h
        self._floors(floor)
        h.changeColBounds(self.d, 0.0, 0.0)
        h.changeColsBounds(self.c, self.slacks, np.zeros(self.c), np.zeros(self.c))
        cost = np.zeros(self.s0 + self.c)
        cost[:self.d] = -gpu_cost / gpu_cost.max()
        h.changeColsCost(len(cost), np.arange(len(cost), dtype=np.int32), cost)
        return self._run()

    def solution(self) -> tuple[np.ndarray, np.ndarray]:
        """The last LP's X (c, k) and Z (q, k)."""
        col = np.asarray(self.h.getSolution().col_value)
        nx = self.c * self.k
        return col[:nx].reshape(self.c, self.k), col[nx:self.d].reshape(self.q, self.k)


def _gpu_cost(sf: np.ndarray, mult: np.ndarray, pairs: np.ndarray, k: int) -> np.ndarray:
    """GPUs per unit of each X then Z column (a row's multiplicity included), each
    perturbed by up to TIE_BREAK (relative) so that the least-GPU X is one vertex."""
    from .lp import TIE_BREAK, tie_break
    c, q = len(sf), len(pairs)
    per_unit = np.concatenate([np.repeat(mult * sf, k),
                               np.repeat(sf[pairs[:, 0]].astype(float), k) if q else np.zeros(0)])
    return per_unit * (1.0 + TIE_BREAK * tie_break(c + q, k).ravel())


def _bottlenecked(model: _Model, floor, candidates):
    """hierarchical.py's probe loop on the model: (bottlenecked, first probe's s, residual) or None."""
    remaining = candidates.copy()
    first, rounds, residual = None, 0, 0.0
    while remaining.any():
        s = model.probe(floor, remaining)
        if s is None:
            return None
        rounds += 1
        if first is None:
            first = s.copy()
        total = float(s.sum())
        if total <= TOL or (rounds >= CUT_ROUNDS and total <= LOOSE):
            residual = total     # bounds the rise of every job left: they are bottlenecked
            break
        up = remaining & (s > TOL)
        if not up.any():   # the rise is spread thin: the largest share is real
            up = remaining & (s >= s.max())
        remaining &= ~up
    return remaining, (first if first is not None else np.zeros_like(floor)), residual


def freeze_least(stuck: np.ndarray, active: np.ndarray, first: np.ndarray,
                 tol: float = TOL) -> tuple[np.ndarray, float]:
    """An iteration where no active job is bottlenecked (only solver noise gets there, on
    either route): `stuck` with the active jobs that could rise least (within `tol`) frozen
    too, so the loop ends, and that least rise (`first`: each job's possible rise)."""
    least = np.where(active, first, np.inf)
    return stuck | (active & (least <= least.min() + tol)), float(least.min())


def water_fill(inp, job_weights, use_shortcut: bool = True) -> Filled | None:
    """The hierarchical policy's allocation of `inp`; `job_weights(inp, frozen)` as in Hierarchical.

    `use_shortcut=False` fills even where the shortcut's answer is known (its
    iterations are then recorded).
    None when HiGHS does not reach an optimum (the caller falls back to cvxpy).
    """
    from .program import repair

    n, k = inp.n_jobs, inp.n_types
    rates = normalized_rates(inp)
    if rates is None:
        return None
    iso, rate, shared = rates
    x = shortcut(inp, rate, shared) if use_shortcut else None
    if x is not None:
        return _shortcut_filled(x, k)
    classes = find_classes(inp, [_class_key(inp), inp.weights, iso])
    if classes is None:
        labels, reps, mult = np.arange(n), np.arange(n), np.ones(n)
        pairs, pair_shared, pair_cap = inp.pair_jobs, shared, inp.pair_feasible
    else:
        labels, reps, mult = classes.labels, classes.representatives, classes.sizes.astype(float)
        pairs = classes.pair_classes
        pair_shared = class_pair_numbers(inp, classes, shared)
        qa, qb = pairs[:, 0], pairs[:, 1]
        bound = np.minimum(classes.sizes[qa], classes.sizes[qb]).astype(float)
        pair_cap = inp.pair_feasible[classes.pair_rows] * bound[:, None]
    model = _Model(rate[reps], mult, inp.scale_factors[reps], inp.counts, inp.feasible[reps],
                   pairs, pair_shared, pair_cap)
    c = len(reps)
    floor = np.zeros(c)
    frozen = np.zeros(c, dtype=bool)
    history, uncertified, tolerance, initial = [], 0, 0.0, None
    while not frozen.all():
        w_jobs = job_weights(inp, frozen[labels])
        w = w_jobs[reps]
        if initial is None:
            initial = w_jobs > 0
        active = w > 0
        scale = w.max()
        filled = model.fill(floor, w / scale)
        if filled is None:
            return None
        d, y = filled
        certified = np.zeros(c, dtype=bool)
        if d > 1e-12:
            floor = floor + (w / scale) * d
            # (the duals of a fill that raised nothing certify nothing new)
            certified = ~frozen & (y > 0) & (y >= DUAL_FLOOR * y.sum())
        found = _bottlenecked(model, floor, ~frozen & ~certified)
        if found is None:
            return None
        stuck, first, residual = found
        stuck = stuck | certified
        tolerance = max(tolerance, residual)
        if not (stuck & active).any():     # only solver noise (hierarchical.py, Numerics)
            stuck, least = freeze_least(stuck, active, first)
            tolerance = max(tolerance, least)
            uncertified += 1
        frozen |= stuck
        history.append({
            "weights": [float(v) for v in w_jobs],
            "level": float(d / scale),
            "normalized_throughputs": [float(v) for v in floor[labels]],
            "bottlenecked": [inp.job_ids[i] for i in np.flatnonzero(stuck[labels])],
        })
    # The last LP's X gives every job its level, but which of the many such X it is
    # depends on the path the simplex took; a round's X is what the mechanism
    # places, and one that jumps between equal answers from solve to solve makes
    # jobs move for nothing.  So the X kept is the one using least GPU time, ties
    # broken by lp.py's fixed perturbation (the same X for the same input).
    last = model.solution()
    if not model.tidy(floor, _gpu_cost(inp.scale_factors[reps].astype(float), mult, pairs, k)):
        model_x = last
    else:
        model_x = model.solution()
    y_x, z = model_x
    y_x = np.clip(y_x, 0.0, inp.feasible[reps])
    z = np.clip(z, 0.0, pair_cap) if len(z) else z
    if classes is None:
        x, pair_jobs, xp = y_x, inp.pair_jobs, z
    else:
        x, pair_jobs, xp = expand(inp, classes, y_x, z)
    x, xp = repair(inp, x, xp, pair_jobs)
    # Drop entries of pure float noise (as the cvxpy route does, hierarchical.py)
    x, xp = repair(inp, np.where(x < 1e-12, 0.0, x), np.where(xp < 1e-12, 0.0, xp), pair_jobs)
    info = {"iterations": history, "pareto_tolerance": tolerance, "shortcut": False,
            "lps": model.lps, "rows": c}
    if uncertified:
        info["uncertified_bottlenecks"] = uncertified
    return Filled(x, pair_jobs, xp, info)


def available() -> bool:
    """Whether highspy is there (else the cvxpy route does everything)."""
    from .direct import _have_highspy
    return _have_highspy()

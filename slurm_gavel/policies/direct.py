"""Max-min and max-sum over the allocation program, handed to HiGHS directly.

The simulator solves thousands of small class problems (one row per kind of
job: at most 26 rows in Gavel's workloads, 3 GPU types).  Through cvxpy each
costs about 1.5 ms of refilling parameters and unpacking results around a
solve that takes a fraction of that.  Without pair rows these LPs are simple
enough to write out as HiGHS's column-wise arrays, which is what this module
does; `LinearPolicy` uses it where it applies (fewer than MAX_COLUMNS entries
of X; pair rows in max-min's class problems, `max_min_pairs`, and in
finish-time fairness's levels, whose pair columns direct_pairs.py prices on
HiGHS' duals, as it does for the other LPs with pair rows) and the cvxpy
formulation (lp.py) everywhere else.
Rows m stand for mult_m identical jobs (symmetry.py).

Max-min (`MaxMinPolicy`), over X (rows m, types j) and t:

    maximize  t
    s.t.      t <= c_m * sum_j T_mj X_mj                for every row m
              sum_j X_mj <= 1                           for every row m    (2)
              sum_m mult_m * sf_m * X_mj <= G_j         for every type j   (3)
              0 <= X_mj <= F_mj                                            (1)

Max-sum (`MaxSumPolicy`): maximize sum_m mult_m * c_m * sum_j T_mj X_mj under
(1)-(3).  F_mj is 1 where row m can run on type j, else 0.  Min-cost (`MinCost`, cost.py):
maximize sum_mj gain_mj X_mj under (1)-(3), then a Pareto stage with that
objective kept (`max_sum_then`).

These are the cvxpy formulations' LPs (without cvxpy's auxiliary variables),
so the optimum is the same.  Where it is not unique, the Pareto stage and
the tie-break (lp.py) make both routes return the same X: for max-min the
second stage runs on the same HiGHS model (t's bound fixed at the level, a
new objective, the simplex going on from the first stage's basis), for
max-sum the tie-break is in the one objective.  Each call starts from
scratch (`passModel`), so the answer depends on the input alone.  A status
other than optimal returns None and the caller falls back to the cvxpy
route, which tries other solvers and raises `SolverError` when none
succeeds.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .solver import HIGHS_SIMPLEX_BELOW, _silence_highs_banner, match_scheduler_threads

# Only LPs below this many columns come here: there the cvxpy route's overhead
# (about 1.5 ms a solve) is most of the time, and HiGHS' simplex is fast.
# Larger ones (thousands of different jobs) stay with the cvxpy route and its
# interior point: on 8,192 different jobs this module's LP took 2.0 s with the
# interior point (16 s with the simplex) against 1.5 s through cvxpy.
MAX_COLUMNS = HIGHS_SIMPLEX_BELOW

# HiGHS options: its dual simplex (as the cvxpy route uses on small LPs)
# without presolve (on LPs this small presolve costs more than it saves).
# Tests may add options (an iteration limit, say) to exercise the fallback.
# Refactoring at every rebuild costs less on LPs this small than HiGHS' default test of
# whether it may skip one (solves with a made-up right-hand side to measure the error):
# 3% fewer instructions in a whole simulation (docs/benchmarks.md).
OPTIONS = {"output_flag": False, "solver": "simplex", "presolve": "off",
           "no_unnecessary_rebuild_refactor": False}

_local = threading.local()

# A max-min level below this, on rates scaled to a largest entry of ~1, is solver noise.
NOISE = 1e-12

# HiGHS' simplex strategies: dual (the default) and primal.  Max-min's starting
# basis (X = 0, t = 0) is primal feasible, so the primal simplex needs no first
# phase: on the simulator's max-min LPs it takes 19 iterations where the dual
# takes 45, and 400 us a solve against 750 (bench/highs_options.py).  On rates
# spread over many orders of magnitude (makespan's 1 / steps left, say) it can
# stop at a wrong optimum, so it is used only where the rates are within
# PRIMAL_RANGE of each other.
DUAL, PRIMAL = 1, 4
PRIMAL_RANGE = 1e6


def _highs():
    """This thread's HiGHS instance (made once; every model passed to it replaces the last)."""
    h = getattr(_local, "highs", None)
    if h is None:
        import highspy
        _silence_highs_banner()
        h = highspy.Highs()
        for name, value in OPTIONS.items():
            h.setOptionValue(name, value)
        match_scheduler_threads(h)
        _local.highs = h
        _local.strategy = None
    return h


def applies(n_rows: int, n_types: int) -> bool:
    """Whether an LP of X with these many rows and types is one for this module (small, highspy present)."""
    return n_rows * n_types + 1 < MAX_COLUMNS and _have_highspy()


@lru_cache(maxsize=1)
def _have_highspy() -> bool:
    try:
        import highspy  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class Solution:
    value: float        # the objective, in the policy's units
    x: np.ndarray       # (n, k)
    pairs: np.ndarray | None = None     # (P, k) pair rows' X (max_min_pairs, direct_pairs.py)
    rounds: int = 0                     # HiGHS solves of a priced LP (direct_pairs.py)


def _power_of_two_scale(values: np.ndarray) -> float:
    """2^e with max|values| * 2^e in [1, 2): an exact rescaling that keeps HiGHS' tolerances meaningful."""
    top = float(np.abs(values).max()) if values.size else 0.0     # (the method: no np.max dispatch)
    if not (top > 0 and math.isfinite(top)):
        return 1.0
    return math.ldexp(1.0, -math.frexp(top)[1] + 1)


@lru_cache(maxsize=256)
def _pattern(n: int, k: int, with_rate_rows: bool) -> tuple[np.ndarray, np.ndarray]:
    """Column starts and row indices of X's columns (job-major: column m*k + j).

    Each column X_mj has, in this order, an entry in row m's rate row (when
    `with_rate_rows`), in row m's time row and in type j's GPU row.  Rate rows
    come first (n of them), then time rows (n), then GPU rows (k).
    """
    m = np.repeat(np.arange(n), k)
    j = np.tile(np.arange(k), n)
    offset = n if with_rate_rows else 0
    rows = ([m] if with_rate_rows else []) + [offset + m, offset + n + j]
    index = np.stack(rows, axis=1).ravel().astype(np.int32)
    start = np.arange(n * k, dtype=np.int32) * len(rows)
    index.flags.writeable = start.flags.writeable = False
    return start, index


def _values(rate: np.ndarray | None, multiplicity: np.ndarray, scale_factors: np.ndarray,
            k: int) -> np.ndarray:
    """X's column entries in `_pattern`'s order: -rate_mj (if given), 1, mult_m * sf_m."""
    n = len(multiplicity)
    columns = [] if rate is None else [-rate.ravel()]
    columns += [np.ones(n * k), np.repeat(multiplicity * scale_factors, k)]
    return np.stack(columns, axis=1).ravel()


@lru_cache(maxsize=1)
def _enums() -> tuple[int, int]:
    """highspy's column-wise matrix format and maximize sense, as the ints passModel takes."""
    import highspy
    return int(highspy.MatrixFormat.kColwise), int(highspy.ObjSense.kMaximize)


@lru_cache(maxsize=256)
def _bounds(n_cols: int, n_x: int, n_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The arrays of a model's shape that never change (read-only; passModel copies them):
    column lower bounds (X >= 0, the rest free), row lower bounds (none), integrality (none)."""
    import highspy
    inf = highspy.kHighsInf
    col_lower = np.zeros(n_cols)
    col_lower[n_x:] = -inf          # t is free
    row_lower = np.full(n_rows, -inf)
    integrality = np.zeros(n_cols, dtype=np.int32)
    for a in (col_lower, row_lower, integrality):
        a.flags.writeable = False
    return col_lower, row_lower, integrality


def _solve(n_x: int, n_rows: int, cost, col_upper, row_upper, start, index, value, strategy: int = DUAL,
           columns: bool = True, t_lower: float | None = None):
    """HiGHS on: max cost.x s.t. rows <= row_upper, 0 <= X <= col_upper, t free.

    The first `n_x` columns are X (lower bound 0), any after them t (free);
    `col_upper` covers every column.  `strategy`: HiGHS' simplex strategy
    (DUAL or PRIMAL).  Returns (columns, objective), or None unless HiGHS
    reports an optimum; columns is None unless `columns` (a stage that goes on
    on the same model needs the objective alone, and the solution is a copy).
    """
    import highspy
    h = _highs()
    if _local.strategy != strategy:       # (setting an option costs a string lookup in HiGHS)
        h.setOptionValue("simplex_strategy", strategy)
        _local.strategy = strategy
    n_cols = len(col_upper)
    col_lower, row_lower, integrality = _bounds(n_cols, n_x, n_rows)
    if t_lower is not None:         # the columns after X (t) bounded below
        col_lower = col_lower.copy()
        col_lower[n_x:] = t_lower
    colwise, maximize = _enums()
    status = h.passModel(n_cols, n_rows, len(value), colwise, maximize, 0.0, cost, col_lower,
                         col_upper, row_lower, row_upper, start, index, value, integrality)
    if status == highspy.HighsStatus.kError:
        return None
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    # getObjectiveValue: the same number as getInfo's, without copying the whole info record
    return (np.asarray(h.getSolution().col_value) if columns else None), h.getObjectiveValue()


@lru_cache(maxsize=256)
def _max_min_shape(n: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The max-min model's arrays that depend on its shape alone (read-only; passModel copies them):
    column starts and row indices (`_pattern` plus t's column, a 1 in every rate row) and
    the first stage's cost (t alone)."""
    start, index = _pattern(n, k, True)
    start = np.append(start, 3 * n * k).astype(np.int32)
    index = np.concatenate([index, np.arange(n, dtype=np.int32)])
    cost = np.zeros(n * k + 1)
    cost[-1] = 1.0
    for a in (start, index, cost):
        a.flags.writeable = False
    return start, index, cost


@lru_cache(maxsize=256)
def _column_indices(n_cols: int) -> np.ndarray:
    """0 .. n_cols - 1 as the int32 array changeColsCost takes (read-only)."""
    columns = np.arange(n_cols, dtype=np.int32)
    columns.flags.writeable = False
    return columns


def _max_min_arrays(rate: np.ndarray, feasible: np.ndarray, counts: np.ndarray,
                    multiplicity: np.ndarray, scale_factors: np.ndarray, t_entries=1.0):
    """The max-min model's numbers for `_max_min_shape`'s pattern: (scale, value, row_upper,
    col_upper).  `rate` (n, k) is scaled by `scale` (a power of two); `t_entries` is t's entry
    in each rate row (1, or 0 for a row that only shares the GPUs)."""
    import highspy
    n, k = rate.shape
    nk = n * k
    scale = _power_of_two_scale(rate)
    # X's column entries in `_pattern`'s order (as `_values` writes them), then t's
    value = np.empty(3 * nk + n)
    entries = value[:3 * nk].reshape(n, k, 3)       # a view: the prefix is contiguous
    np.negative(rate * scale, out=entries[:, :, 0])
    entries[:, :, 1] = 1.0
    entries[:, :, 2] = (multiplicity * scale_factors)[:, None]
    value[3 * nk:] = t_entries
    row_upper = np.zeros(2 * n + k)
    row_upper[n:2 * n] = 1.0
    row_upper[2 * n:] = counts
    col_upper = np.empty(nk + 1)
    col_upper[:nk] = feasible.ravel()
    col_upper[nk] = highspy.kHighsInf
    return scale, value, row_upper, col_upper


def _pareto_stage(t_column: int, objective: float, slack: float, gain: np.ndarray) -> np.ndarray | None:
    """On the model HiGHS just solved for a level: t's lower bound at that level (less `slack`,
    relative), the objective `gain` on every column, the simplex going on from the optimal
    basis.  The columns' values, or None unless HiGHS reports an optimum."""
    import highspy
    h = _highs()
    # A level within solver noise of 0 (rates 1e15 apart) is no floor: both routes agree on that.
    floor = objective * (1 - slack) if objective > NOISE else 0.0
    h.changeColBounds(t_column, floor, highspy.kHighsInf)
    h.changeColsCost(len(gain), _column_indices(len(gain)), gain)
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    return np.asarray(h.getSolution().col_value)


def max_min(coef: np.ndarray, solo: np.ndarray, feasible: np.ndarray, counts: np.ndarray,
            multiplicity: np.ndarray, scale_factors: np.ndarray, second: np.ndarray | None = None,
            slack: float = 1e-7) -> Solution | None:
    """maximize_X min_m coef_m * sum_j T_mj X_mj under (1)-(3); None if HiGHS does not reach optimality.

    With `second` (n, k), the Pareto stage follows on the same HiGHS model:
    t's lower bound is set to the optimum (less `slack`, relative), the
    objective becomes sum second_mj X_mj, and the simplex goes on from the
    optimal basis of the first stage.  The value returned is then the
    minimum the second stage's X attains (on tiny rates, 1e-15 after scaling,
    the first stage may call 0 what the second stage's X makes positive).
    """
    n, k = solo.shape
    nk = n * k
    rate = coef[:, None] * solo
    start, index, cost = _max_min_shape(n, k)
    scale, value, row_upper, col_upper = _max_min_arrays(rate, feasible, counts, multiplicity,
                                                         scale_factors)
    found = _solve(nk, 2 * n + k, cost, col_upper, row_upper, start, index, value,
                   _strategy(value[:3 * nk:3]), columns=second is None)
    if found is None:
        return None
    columns, objective = found
    if second is not None:
        gain = np.zeros(nk + 1)
        np.multiply(second.ravel(), _power_of_two_scale(second), out=gain[:nk])
        columns = _pareto_stage(nk, objective, slack, gain)
        if columns is None:
            return None
        x = columns[:nk].reshape(n, k)
        return Solution(float((rate * x).sum(axis=1).min()), x)
    return Solution(objective / scale, columns[:nk].reshape(n, k))


def _strategy(rates: np.ndarray) -> int:
    """PRIMAL where the nonzero |rates| lie within PRIMAL_RANGE of each other, else DUAL."""
    magnitude = np.abs(rates)
    top = magnitude.max() if magnitude.size else 0.0
    positive = magnitude[magnitude > 0]
    if not positive.size or top > PRIMAL_RANGE * positive.min():
        return DUAL
    return PRIMAL


def max_sum(coef: np.ndarray, solo: np.ndarray, feasible: np.ndarray, counts: np.ndarray,
            multiplicity: np.ndarray, scale_factors: np.ndarray,
            tie: np.ndarray | None = None) -> Solution | None:
    """maximize_X sum_m mult_m * coef_m * sum_j T_mj X_mj under (1)-(3); None if not optimal.

    `tie` (n, k): each entry's coefficient is multiplied by 1 + tie_mj (a
    tie-break); the value returned is the objective without it.
    """
    n, k = solo.shape
    gain = (multiplicity * coef)[:, None] * solo
    cost = gain if tie is None else gain * (1.0 + tie)
    scale = _power_of_two_scale(cost)
    start, index = _pattern(n, k, False)
    value = _values(None, multiplicity, scale_factors, k)
    row_upper = np.concatenate([np.ones(n), counts])
    found = _solve(n * k, n + k, (cost * scale).ravel(), feasible.astype(float).ravel(), row_upper,
                   start, index, value)
    if found is None:
        return None
    columns, _ = found
    x = columns.reshape(n, k)
    return Solution(float((gain * x).sum()), x)


def max_sum_then(gain: np.ndarray, second: np.ndarray, feasible: np.ndarray, counts: np.ndarray,
                 multiplicity: np.ndarray, scale_factors: np.ndarray,
                 slack: float = 1e-7) -> Solution | None:
    """maximize_X sum_mj gain_mj X_mj under (1)-(3), then the same Pareto stage as `max_min`'s.

    `gain` (n, k) is each entry's objective coefficient, row multiplicity
    included (the min-cost policies' value per dollar).  One more row holds
    that objective: free in the first stage, then bounded below by the
    optimum (less `slack`, relative) while the objective becomes
    sum second_mj X_mj, the simplex going on from the first stage's basis.
    The value returned is the first objective that the final X attains.
    """
    import highspy
    n, k = gain.shape
    nk = n * k
    scale = _power_of_two_scale(gain)
    start, index = _cost_row_pattern(n, k)
    value = np.empty((nk, 3))
    value[:, 0] = 1.0
    value[:, 1] = np.repeat(multiplicity * scale_factors, k)
    value[:, 2] = gain.ravel() * scale
    row_upper = np.concatenate([np.ones(n), counts, [highspy.kHighsInf]])
    found = _solve(nk, n + k + 1, value[:, 2].copy(), feasible.astype(float).ravel(), row_upper,
                   start, index, value.ravel())
    if found is None:
        return None
    columns, objective = found
    h = _highs()
    h.changeRowBounds(n + k, objective - slack * abs(objective), highspy.kHighsInf)
    h.changeColsCost(nk, np.arange(nk, dtype=np.int32), second.ravel() * _power_of_two_scale(second))
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    x = np.asarray(h.getSolution().col_value)[:nk].reshape(n, k)
    return Solution(float((gain * x).sum()), x)


@lru_cache(maxsize=256)
def _cost_row_pattern(n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """`_pattern(n, k, False)` with one more row (n + k) in every column: the objective's."""
    m = np.repeat(np.arange(n), k)
    j = np.tile(np.arange(k), n)
    index = np.stack([m, n + j, np.full(n * k, n + k)], axis=1).ravel().astype(np.int32)
    start = np.arange(n * k, dtype=np.int32) * 3
    index.flags.writeable = start.flags.writeable = False
    return start, index


def max_min_pairs(coef: np.ndarray, solo: np.ndarray, feasible: np.ndarray, counts: np.ndarray,
                  multiplicity: np.ndarray, scale_factors: np.ndarray, pair_rows: np.ndarray,
                  shared: np.ndarray, pair_cap: np.ndarray, second: np.ndarray | None = None,
                  pareto_weight: np.ndarray | None = None,
                  slack: float = 1e-7) -> Solution | None:
    """`max_min` with pair rows Z (space sharing): the class problems of the simulator's packed rounds.

    Pair row p = (a, b) on type j yields shared[p, j, 0] steps/s to a and
    shared[p, j, 1] to b, takes one unit of each member's time and sf_a GPUs of
    type j; a row standing for mult identical jobs shares its pair rows'
    time and throughput among them (program.py's `_to_a`/`_to_b`).  So Z's
    columns enter row a's and b's rate and time rows with 1/mult, and type j's
    GPU row with sf_a; 0 <= Z <= pair_cap.  The Pareto stage puts `second` on X
    and pareto_weight_a * shared_a + pareto_weight_b * shared_b on Z: the
    cvxpy route's weighted sum of throughputs.  Returns x (n, k) and pairs (P, k).
    """
    import highspy
    from .lazy import scipy_sparse as sp

    n, k = solo.shape
    P = len(pair_rows)
    nk, pk = n * k, P * k
    rate = coef[:, None] * solo
    a, b = pair_rows[:, 0], pair_rows[:, 1]
    pair_rate = np.stack([coef[a, None] * shared[:, :, 0] / multiplicity[a, None],
                          coef[b, None] * shared[:, :, 1] / multiplicity[b, None]], axis=2)
    scale = _power_of_two_scale(np.concatenate([rate.ravel(), pair_rate.ravel()]))
    # Rows: rate rows (n), time rows (n), GPU rows (k).  Columns: X (job-major), Z, t.
    m, j = np.repeat(np.arange(n), k), np.tile(np.arange(k), n)
    p, q = np.repeat(np.arange(P), k), np.tile(np.arange(k), P)
    pa, pb = a[p], b[p]
    rows = np.concatenate([m, n + m, 2 * n + j,
                           pa, pb, n + pa, n + pb, 2 * n + q,
                           np.arange(n)])
    cols = np.concatenate([np.arange(nk)] * 3 + [nk + np.arange(pk)] * 5 + [np.full(n, nk + pk)])
    values = np.concatenate([-rate.ravel() * scale, np.ones(nk), np.repeat(multiplicity * scale_factors, k),
                             -pair_rate[:, :, 0].ravel() * scale, -pair_rate[:, :, 1].ravel() * scale,
                             1.0 / multiplicity[pa], 1.0 / multiplicity[pb],
                             scale_factors[pa].astype(float), np.ones(n)])
    matrix = sp.csc_matrix((values, (rows, cols)), shape=(2 * n + k, nk + pk + 1))   # sums a == b
    matrix.sort_indices()
    n_cols = nk + pk + 1
    cost = np.zeros(n_cols)
    cost[-1] = 1.0
    col_upper = np.concatenate([feasible.astype(float).ravel(), pair_cap.astype(float).ravel(),
                                [highspy.kHighsInf]])
    row_upper = np.concatenate([np.zeros(n), np.ones(n), counts.astype(float)])
    found = _solve(nk + pk, 2 * n + k, cost, col_upper, row_upper, matrix.indptr.astype(np.int32),
                   matrix.indices.astype(np.int32), matrix.data, DUAL, columns=second is None)
    if found is None:
        return None
    columns, objective = found
    if second is not None:
        weight = np.zeros(n) if pareto_weight is None else pareto_weight
        on_pairs = weight[a, None] * shared[:, :, 0] + weight[b, None] * shared[:, :, 1]
        gain = np.concatenate([second.ravel(), on_pairs.ravel(), [0.0]])
        gain *= _power_of_two_scale(gain)
        columns = _pareto_stage(nk + pk, objective, slack, gain)
        if columns is None:
            return None
    x = columns[:nk].reshape(n, k)
    z = columns[nk:nk + pk].reshape(P, k)
    attained = (rate * x).sum(axis=1)
    np.add.at(attained, a, (pair_rate[:, :, 0] * z).sum(axis=1))
    np.add.at(attained, b, (pair_rate[:, :, 1] * z).sum(axis=1))
    return Solution(float(attained.min()), x, z)


def _level(rate: np.ndarray, bound: np.ndarray, feasible: np.ndarray, counts: np.ndarray,
           multiplicity: np.ndarray, scale_factors: np.ndarray, floor: float | None = None,
           second: np.ndarray | None = None) -> tuple[float, np.ndarray] | None:
    """max t s.t. t <= sum_j rate_mj X_mj for the rows m with `bound`, under (1)-(3): (t, X).

    Rows without `bound` only share the GPUs.  With `floor`, t >= floor is a
    constraint instead and sum second_mj X_mj is maximized (one LP: the Pareto
    stage of a level already known); the t returned is then the floor.
    """
    n, k = rate.shape
    nk = n * k
    start, index, cost = _max_min_shape(n, k)
    scale, value, row_upper, col_upper = _max_min_arrays(rate, feasible, counts, multiplicity,
                                                         scale_factors, t_entries=bound.astype(float))
    t_lower = None
    if floor is not None:
        # t's floor in the model's scaled units; X's objective scaled to ~1
        cost = np.zeros(nk + 1)
        cost[:nk] = second.ravel() * _power_of_two_scale(second)
        t_lower = floor * scale
    found = _solve(nk, 2 * n + k, cost, col_upper, row_upper, start, index, value, DUAL,
                   t_lower=t_lower)
    if found is None:
        return None
    if floor is not None:
        return floor, found[0][:nk].reshape(n, k)
    columns, objective = found
    return objective / scale, columns[:nk].reshape(n, k)


def min_max_ratio(fixed: np.ndarray, scaled: np.ndarray, inv_isolated: np.ndarray, solo: np.ndarray,
                  feasible: np.ndarray, counts: np.ndarray, multiplicity: np.ndarray,
                  scale_factors: np.ndarray, second: np.ndarray | None = None,
                  rho_slack: float = 1e-6, slack: float = 1e-7, tolerance: float = 1e-9,
                  max_steps: int = 60, pairs=None, second_pairs: np.ndarray | None = None
                  ) -> Solution | None:
    """minimize_X max_m rho_m, rho_m = fixed_m + scaled_m / speedup_m(X), speedup_m = v_m sum_j T_mj X_mj.

    Finish-time fairness (fairness.py) without a conic solver.  rho_m <= R reads
    c_m(R) speedup_m >= 1 with c_m(R) = (R - fixed_m) / scaled_m, so for a trial R
    the max-min LP L(R) = max_X min_m c_m(R) speedup_m says how far R is: its X
    attains max_m rho_m(X), an upper bound, and since every X leaves some job at
    c_m(R) speedup_m <= L(R), min_m fixed_m + (R - fixed_m) / L(R) is a lower
    bound.  The next R is the best X's rho (Dinkelbach's step for a min-max of
    ratios, Crouzeix-Ferland-Schaible), a bisection where that stalls, until the
    bounds meet within `tolerance` (relative).  Jobs with scaled_m = 0 have a
    constant rho and only share the GPUs.

    With `second` (n, k), the Pareto stage: rho_m <= R*(1 + rho_slack) as floors
    on each job's speedup, sum second_mj X_mj maximized (the same LP as the
    cvxpy route's).  The value returned is the optimal rho (the final X is within
    rho_slack of it, as on the conic route).  None
    when HiGHS does not reach an optimum or a job can get no speedup at all.

    With `pairs` (direct_pairs.Pairs: space sharing) every level is an LP with
    pair rows Z, priced on HiGHS' duals (`pairs.level`); a pair row's
    speedup to each member counts as in `max_min_pairs`, `second_pairs` (P, k)
    is Z's objective in the Pareto stage, and the Solution has Z.
    """
    n, k = solo.shape
    speed = inv_isolated[:, None] * solo
    active = scaled > 0
    constant = float(fixed[~active].max()) if (~active).any() else 0.0
    if pairs is not None:       # (its methods: this module does not import direct_pairs)
        pair_speed = pairs.rates(inv_isolated, multiplicity)

    def level(rate_coef, bound, **extra):
        """(t, X, Z or None) of the level LP with these rows' coefficients (of speed)."""
        if pairs is None:
            found = _level(rate_coef[:, None] * speed, bound, feasible, counts, multiplicity,
                           scale_factors, **extra)
            return None if found is None else (*found, None)
        return pairs.level(rate_coef[:, None] * speed, bound, feasible, counts, multiplicity,
                           scale_factors, rate_coef * inv_isolated, second_pairs=second_pairs,
                           **extra)

    def speedups(x: np.ndarray, z) -> np.ndarray:
        if pairs is None:
            return (speed * x).sum(axis=1)
        return pairs.attained(speed, pair_speed, x, z)

    def attained(x: np.ndarray, z) -> float:
        got = speedups(x, z)[active]
        if (got <= 0).any():
            return math.inf
        return max(constant, float((fixed[active] + scaled[active] / got).max()))

    best_x = best_z = None
    if active.any():
        most = (speed * (feasible > 0)).max(axis=1)
        if pairs is not None and len(pairs.rows):
            # a unit of a member's time in a pair row yields mult * its pair speed
            per_time = pair_speed * multiplicity[pairs.rows][:, None, :] * (pairs.cap > 0)[:, :, None]
            np.maximum.at(most, pairs.rows[:, 0], per_time[:, :, 0].max(axis=1))
            np.maximum.at(most, pairs.rows[:, 1], per_time[:, :, 1].max(axis=1))
        most = most[active]
        if (most <= 0).any():
            return None
        low = max(constant, float((fixed[active] + scaled[active] / most).max()))
        high, trial = math.inf, low
        for _ in range(max_steps):
            coef = np.where(active, (trial - fixed) / np.where(active, scaled, 1.0), 0.0)
            found = level(coef, active)
            if found is None:
                return None
            top, x, z = found
            rho = attained(x, z)
            if rho < high:
                high, best_x, best_z = rho, x, z
            if top > 0:
                low = max(low, min(trial, float((fixed[active] + (trial - fixed[active]) / top).min())))
            if high - low <= tolerance * high:
                break
            # Dinkelbach's step; a bisection where it would not move
            trial = high if high < trial else 0.5 * (low + high)
        if best_x is None or not math.isfinite(high):
            return None
    else:
        high = constant
        best_x = np.zeros((n, k))
        best_z = None if pairs is None else np.zeros((len(pairs.rows), k))
    if second is None:
        return Solution(high, best_x, best_z)
    room = high * (1 + rho_slack) - fixed
    bound = active & (room > 0)
    coef = np.divide(room, scaled, out=np.zeros(n), where=bound)
    extra = {} if pairs is None else {"start": best_z > 0}
    found = level(coef, bound, floor=1.0 - slack, second=second, **extra)
    if found is None:
        return None
    # the primary optimum, as the conic route reports it; X is within rho_slack of it
    return Solution(high, found[1], found[2])

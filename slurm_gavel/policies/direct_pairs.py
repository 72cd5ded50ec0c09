"""LPs with pair rows (space sharing) on HiGHS, the pair columns priced on HiGHS' duals.

With space sharing the allocation LP has a column Z_pj per pair p and type j,
many more than the X columns (1,225 pairs for 50 jobs), and nearly all of them
get no share at the optimum.  `ColumnGeneration` keeps the whole LP as a
sparse matrix but hands HiGHS only the columns that matter: it solves with X
(and a few pair columns), reads the row duals y, computes every pair column's
reduced cost c_z - A_z^T y, adds those above `TOLERANCE` (they would raise
the objective) and lets the simplex go on from its basis, until none is
left: then the restricted LP's optimum is the full LP's.  A later stage (a
new objective, a floor on the first one) goes on pricing on the same model.

This is lp.py's column generation (`LinearPolicy._priced`) without cvxpy:
the same LP, the same optimum, a model that grows by a few columns a round
instead of one compiled anew.  Used by the policies whose jobs are all
different (no classes, symmetry.py) with pair rows: max-min (makespan,
`max_min_priced`), finish-time fairness (direct.min_max_ratio's levels,
`level`), min-cost (`max_sum_then_priced`) and min-cost with SLOs
(`slo_stages_priced`).

The model's rows, as direct.py writes them: rate rows (one per job, -rate X
- pair rate Z + t <= 0), time rows (X + Z/mult <= 1), GPU rows (sf X, sf_a Z
<= G); a policy may add its own (SLO shortfall, an objective kept).  Columns:
X (job-major, n*k), Z (pair-major, P*k), then the policy's own (t, ...).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import direct

# A pair column enters when its reduced cost is above this (the model's
# objective is scaled to ~1): HiGHS' own dual feasibility tolerance is 1e-7.
TOLERANCE = 1e-9
# Pair columns (P * k) up to this: the full matrix is numpy arrays, HiGHS sees a few.
MAX_PAIR_COLUMNS = 400_000


def applies(n_jobs: int, n_pairs: int, n_types: int) -> bool:
    """Whether an LP with these many jobs and pairs is one for this module."""
    return (direct.applies(n_jobs, n_types) and n_pairs * n_types <= MAX_PAIR_COLUMNS)


@dataclass(frozen=True)
class Pairs:
    """The pair rows of an LP: jobs (P, 2), numbers (P, k, 2) and bounds (P, k)."""
    rows: np.ndarray
    shared: np.ndarray
    cap: np.ndarray

    # What direct.min_max_ratio calls (direct.py does not import this module).
    def rates(self, coef: np.ndarray, multiplicity: np.ndarray) -> np.ndarray:
        return pair_rates(coef, self, multiplicity)

    def attained(self, rate, pair_rate, x, z) -> np.ndarray:
        return attained(rate, pair_rate, self, x, z)

    def level(self, *args, **kwargs):
        return level(self, *args, **kwargs)


class ColumnGeneration:
    """A maximization LP on this thread's HiGHS whose `priced` columns enter only when they pay.

    `matrix` (csc, rows x all columns), cost and bounds cover every column;
    `start` (bool, per column) are the priced columns in the first model.
    """

    def __init__(self, matrix, cost, col_lower, col_upper, row_lower, row_upper,
                 priced: np.ndarray, start: np.ndarray | None = None):
        import highspy
        self.matrix = matrix
        self.cost = np.asarray(cost, dtype=float).copy()
        self.col_lower = np.asarray(col_lower, dtype=float).copy()
        self.col_upper = np.asarray(col_upper, dtype=float).copy()
        self.priced = priced & (self.col_upper > 0)         # a column bounded at 0 never pays
        inside = ~priced if start is None else (~priced | (start & self.priced))
        self.order = np.flatnonzero(inside)                 # model column -> full column
        self.inside = inside
        self.rounds = 0
        sub = matrix[:, self.order]
        h = direct._highs()
        if direct._local.strategy != direct.DUAL:
            h.setOptionValue("simplex_strategy", direct.DUAL)
            direct._local.strategy = direct.DUAL
        colwise, maximize = direct._enums()
        n_rows = matrix.shape[0]
        status = h.passModel(len(self.order), n_rows, sub.nnz, colwise, maximize, 0.0,
                             self.cost[self.order], self.col_lower[self.order],
                             self.col_upper[self.order], np.asarray(row_lower, dtype=float),
                             np.asarray(row_upper, dtype=float), sub.indptr.astype(np.int32),
                             sub.indices.astype(np.int32), sub.data.astype(float),
                             np.zeros(len(self.order), dtype=np.int32))
        self.ok = status != highspy.HighsStatus.kError

    def run(self, max_rounds: int = 200) -> bool:
        """Solve, add the priced columns whose reduced cost is favourable, until none is."""
        import highspy
        if not self.ok:
            return False
        h = direct._highs()
        for _ in range(max_rounds):
            h.run()
            self.rounds += 1
            outside = np.flatnonzero(self.priced & ~self.inside)
            status = h.getModelStatus()
            if status == highspy.HighsModelStatus.kInfeasible and len(outside):
                # the columns in are not enough for a floor: every column in (no duals to price on)
                enter = outside
            elif status != highspy.HighsModelStatus.kOptimal:
                return False
            elif not len(outside):
                return True
            else:
                y = np.asarray(h.getSolution().row_dual)
                # every column's reduced cost in one product (csc's transpose is csr, no copy)
                reduced = (self.cost - self.matrix.T @ y)[outside]
                enter = outside[reduced > TOLERANCE]
                if not len(enter):
                    return True
            sub = self.matrix[:, enter]
            h.addCols(len(enter), self.cost[enter], self.col_lower[enter], self.col_upper[enter],
                      sub.nnz, sub.indptr[:-1].astype(np.int32), sub.indices.astype(np.int32),
                      sub.data.astype(float))
            self.inside[enter] = True
            self.order = np.append(self.order, enter)
        return False

    def objective(self) -> float:
        return direct._highs().getObjectiveValue()

    def values(self) -> np.ndarray:
        """Every column's value (0 for the priced ones never added)."""
        full = np.zeros(len(self.cost))
        full[self.order] = np.asarray(direct._highs().getSolution().col_value)
        return full

    def set_cost(self, cost: np.ndarray):
        """A new objective on every column (the simplex goes on from the basis)."""
        self.cost = np.asarray(cost, dtype=float).copy()
        h = direct._highs()
        h.changeColsCost(len(self.order), np.arange(len(self.order), dtype=np.int32),
                         self.cost[self.order])

    def set_col_lower(self, column: int, lower: float):
        """A column that is always in the model (t, say): its lower bound."""
        import highspy
        self.col_lower[column] = lower
        model_column = int(np.flatnonzero(self.order == column)[0])
        direct._highs().changeColBounds(model_column, lower, highspy.kHighsInf)

    def set_row_bounds(self, row: int, lower: float, upper: float):
        direct._highs().changeRowBounds(row, lower, upper)


def pair_block(n: int, k: int, rate_rows: list, pairs: Pairs, multiplicity: np.ndarray,
               scale_factors: np.ndarray, row_offset: dict):
    """(rows, cols, values) of the X and Z columns, columns numbered X then Z.

    `rate_rows`: [(first row, rate (n, k), pair rate (P, k, 2))], each a block of
    n rows where X_mj enters job m's row with -rate_mj and Z_pj job a's and b's
    with -pair rate.  `row_offset`: {"time": first time row, "gpu": first GPU row}.
    """
    P = len(pairs.rows)
    nk, pk = n * k, P * k
    a, b = pairs.rows[:, 0], pairs.rows[:, 1]
    m, j = np.repeat(np.arange(n), k), np.tile(np.arange(k), n)
    p, q = np.repeat(np.arange(P), k), np.tile(np.arange(k), P)
    pa, pb = a[p], b[p]
    t0, g0 = row_offset["time"], row_offset["gpu"]
    rows = [t0 + m, g0 + j, t0 + pa, t0 + pb, g0 + q]
    cols = [np.arange(nk), np.arange(nk), nk + np.arange(pk), nk + np.arange(pk), nk + np.arange(pk)]
    values = [np.ones(nk), np.repeat(multiplicity * scale_factors, k),
              1.0 / multiplicity[pa], 1.0 / multiplicity[pb], scale_factors[pa].astype(float)]
    for first, rate, pair_rate in rate_rows:
        rows += [first + m, first + pa, first + pb]
        cols += [np.arange(nk), nk + np.arange(pk), nk + np.arange(pk)]
        values += [-rate.ravel(), -pair_rate[:, :, 0].ravel(), -pair_rate[:, :, 1].ravel()]
    return rows, cols, values


def _csc(rows, cols, values, shape):
    from .lazy import scipy_sparse as sp
    matrix = sp.csc_matrix((np.concatenate(values), (np.concatenate(rows), np.concatenate(cols))),
                           shape=shape)        # duplicates (a pair of a row with itself) sum
    matrix.sum_duplicates()
    matrix.sort_indices()
    return matrix


def pair_rates(coef: np.ndarray, pairs: Pairs, multiplicity: np.ndarray) -> np.ndarray:
    """(P, k, 2) each member's rate from a pair column: coef times its share of the pair's steps."""
    a, b = pairs.rows[:, 0], pairs.rows[:, 1]
    return np.stack([coef[a, None] * pairs.shared[:, :, 0] / multiplicity[a, None],
                     coef[b, None] * pairs.shared[:, :, 1] / multiplicity[b, None]], axis=2)


class MaxMinModel:
    """max t s.t. t <= rate_m X + pair rate_m Z for the `bound` rows, (1)-(3), Z priced.

    The levels of max-min (`max_min_priced`) and of finish-time fairness
    (`level`, direct.min_max_ratio).  Rates are scaled by a power of two.
    """

    def __init__(self, rate, pair_rate, bound, feasible, counts, multiplicity, scale_factors,
                 pairs: Pairs, t_lower: float | None = None, cost: np.ndarray | None = None,
                 start: np.ndarray | None = None):
        import highspy
        n, k = rate.shape
        P = len(pairs.rows)
        nk, pk = n * k, P * k
        self.n, self.k, self.P = n, k, P
        self.scale = direct._power_of_two_scale(np.concatenate([rate.ravel(), pair_rate.ravel()]))
        rows, cols, values = pair_block(n, k, [(0, rate * self.scale, pair_rate * self.scale)], pairs,
                                        multiplicity, scale_factors, {"time": n, "gpu": 2 * n})
        t = nk + pk
        bound_rows = np.flatnonzero(bound)
        rows.append(bound_rows)
        cols.append(np.full(len(bound_rows), t))
        values.append(np.ones(len(bound_rows)))
        matrix = _csc(rows, cols, values, (2 * n + k, t + 1))
        if cost is None:
            cost = np.zeros(t + 1)
            cost[t] = 1.0
        col_lower = np.zeros(t + 1)
        col_lower[t] = -highspy.kHighsInf if t_lower is None else t_lower * self.scale
        col_upper = np.concatenate([feasible.astype(float).ravel(), pairs.cap.astype(float).ravel(),
                                    [highspy.kHighsInf]])
        row_upper = np.concatenate([np.zeros(n), np.ones(n), counts.astype(float)])
        priced = np.zeros(t + 1, dtype=bool)
        priced[nk:t] = True
        first = None
        if start is not None:       # (P, k) pair columns in the first model
            first = np.zeros(t + 1, dtype=bool)
            first[nk:t] = np.asarray(start, dtype=bool).ravel()
        self.lp = ColumnGeneration(matrix, cost, col_lower, col_upper, np.full(2 * n + k, -highspy.kHighsInf),
                                   row_upper, priced, first)
        self.t = t

    def split(self, columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        nk = self.n * self.k
        return columns[:nk].reshape(self.n, self.k), columns[nk:self.t].reshape(self.P, self.k)


def attained(rate, pair_rate, pairs: Pairs, x, z) -> np.ndarray:
    """(n,) each row's rate at (X, Z)."""
    got = (rate * x).sum(axis=1)
    np.add.at(got, pairs.rows[:, 0], (pair_rate[:, :, 0] * z).sum(axis=1))
    np.add.at(got, pairs.rows[:, 1], (pair_rate[:, :, 1] * z).sum(axis=1))
    return got


def max_min_priced(coef, solo, feasible, counts, multiplicity, scale_factors, pairs: Pairs,
                   second=None, pareto_weight=None, slack: float = 1e-7):
    """direct.max_min_pairs' LP (and Pareto stage) with every pair, Z priced: a direct.Solution."""
    rate = coef[:, None] * solo
    pair_rate = pair_rates(coef, pairs, multiplicity)
    model = MaxMinModel(rate, pair_rate, np.ones(len(coef), dtype=bool), feasible, counts,
                        multiplicity, scale_factors, pairs)
    lp = model.lp
    if not lp.run():
        return None
    objective = lp.objective()
    if second is not None:
        a, b = pairs.rows[:, 0], pairs.rows[:, 1]
        weight = np.zeros(len(coef)) if pareto_weight is None else pareto_weight
        on_pairs = weight[a, None] * pairs.shared[:, :, 0] + weight[b, None] * pairs.shared[:, :, 1]
        gain = np.concatenate([second.ravel(), on_pairs.ravel(), [0.0]])
        gain *= direct._power_of_two_scale(gain)
        floor = objective * (1 - slack) if objective > direct.NOISE else 0.0
        lp.set_col_lower(model.t, floor)
        lp.set_cost(gain)
        if not lp.run():
            return None
    x, z = model.split(lp.values())
    got = attained(rate, pair_rate, pairs, x, z)
    return direct.Solution(float(got.min()), x, z, lp.rounds)


def level(pairs: Pairs, rate, bound, feasible, counts, multiplicity, scale_factors, coef_of_speed,
          floor=None, second=None, second_pairs=None, start=None):
    """direct._level with pair rows: (t, X, Z) or None.

    `coef_of_speed` (n,): the factor that turns a job's speedup into its row's rate
    (rate = coef_of_speed * speed), applied to the pair speeds `pairs.shared` too.
    `start` (P, k bool): the pair columns to begin with (a floor may need them: the
    Pareto stage begins with those of the primary optimum's X, which meets it).
    """
    n, k = rate.shape
    pair_rate = pair_rates(coef_of_speed, pairs, multiplicity)
    cost = None
    if floor is not None:
        gain = np.concatenate([second.ravel(), second_pairs.ravel(), [0.0]])
        cost = gain * direct._power_of_two_scale(gain)
    model = MaxMinModel(rate, pair_rate, bound, feasible, counts, multiplicity, scale_factors,
                        pairs, t_lower=floor, cost=cost, start=start)
    if not model.lp.run():
        return None
    x, z = model.split(model.lp.values())
    if floor is not None:
        return floor, x, z
    return model.lp.objective() / model.scale, x, z


def _value_entries(value, pair_value, multiplicity, pairs: Pairs) -> np.ndarray:
    """Every X and Z column's share of sum_m mult_m * value_m (a pair row's /mult cancels)."""
    return np.concatenate([(multiplicity[:, None] * value).ravel(),
                           (pair_value[:, :, 0] + pair_value[:, :, 1]).ravel()])


def _pareto_cost(second, own, pairs: Pairs, extra: int) -> np.ndarray:
    """The Pareto stage's objective: `second` on X, own_a shared_a + own_b shared_b on Z (the
    cvxpy route's gain @ throughput), 0 on the `extra` columns after them; scaled to ~1."""
    a, b = pairs.rows[:, 0], pairs.rows[:, 1]
    on_pairs = own[a, None] * pairs.shared[:, :, 0] + own[b, None] * pairs.shared[:, :, 1]
    gain = np.concatenate([second.ravel(), on_pairs.ravel(), np.zeros(extra)])
    return gain * direct._power_of_two_scale(gain)


def cost_stages_priced(value, pair_value, solo, second, own, feasible, counts, multiplicity, scale_factors,
                       pairs: Pairs, slos=None, slack: float = 1e-7):
    """Min-cost's LPs with every pair row, Z priced on HiGHS: a direct.Solution or None.

    maximize sum_m mult_m value_m(X, Z) under (1)-(3), then the Pareto stage
    (cost.py): that total kept within `slack`, `second` on X and own-weighted
    throughputs on Z.  With `slos` = (required (n,), inv_required (n,)) first
    min-cost-with-SLOs' shortfall LP (cost.MinCostSLO): columns s_m in [0,
    required_m], rows throughput_m + s_m >= required_m, the total relative
    shortfall minimized and then kept (at most budget) through both later stages.
    """
    import highspy
    inf = highspy.kHighsInf
    n, k = feasible.shape
    P = len(pairs.rows)
    nk, pk = n * k, P * k
    n_s = n if slos is not None else 0
    # rows: [meet rows (n) if slos], time rows (n), GPU rows (k), value row, [relative row]
    meet = 0
    time0 = n if slos is not None else 0
    gpu0 = time0 + n
    value_row = gpu0 + k
    relative_row = value_row + 1
    n_rows = value_row + 1 + (1 if slos is not None else 0)
    rate_rows = []
    if slos is not None:
        rate_rows = [(meet, solo, pair_rates(np.ones(n), pairs, multiplicity))]
    rows, cols, values = pair_block(n, k, rate_rows, pairs, multiplicity, scale_factors,
                                    {"time": time0, "gpu": gpu0})
    entries = _value_entries(value, pair_value, multiplicity, pairs)
    scale = direct._power_of_two_scale(entries)
    rows.append(np.full(nk + pk, value_row))
    cols.append(np.arange(nk + pk))
    values.append(entries * scale)
    col_upper = [feasible.astype(float).ravel(), pairs.cap.astype(float).ravel()]
    row_upper = [np.ones(n), counts.astype(float), [inf]]
    if slos is not None:
        required, inv_required = slos
        s = nk + pk + np.arange(n)
        rows += [np.arange(n), np.full(n, relative_row)]
        cols += [s, s]
        values += [-np.ones(n), multiplicity * inv_required]
        col_upper.append(required.astype(float))
        row_upper = [-required.astype(float)] + row_upper + [[inf]]
    n_cols = nk + pk + n_s
    matrix = _csc(rows, cols, values, (n_rows, n_cols))
    priced = np.zeros(n_cols, dtype=bool)
    priced[nk:nk + pk] = True
    cost = np.zeros(n_cols)
    if slos is not None:
        cost[nk + pk:] = -multiplicity * inv_required        # minimize the relative shortfall
    else:
        cost[:nk + pk] = entries * scale
    lp = ColumnGeneration(matrix, cost, np.zeros(n_cols), np.concatenate(col_upper),
                          np.full(n_rows, -inf), np.concatenate([np.asarray(r, dtype=float)
                                                                for r in row_upper]), priced)
    if not lp.run():
        return None
    if slos is not None:
        short = -lp.objective()
        # as cost.MinCostSLO.solve: slack for the solver's tolerance
        lp.set_row_bounds(relative_row, -inf, max(short, 0.0) * (1 + 1e-6) + 1e-7)
        stage = np.zeros(n_cols)
        stage[:nk + pk] = entries * scale
        lp.set_cost(stage)
        if not lp.run():
            return None
    total = lp.objective()
    lp.set_row_bounds(value_row, total - slack * abs(total), inf)
    lp.set_cost(_pareto_cost(second, own, pairs, n_s))
    if not lp.run():
        return None
    columns = lp.values()
    x, z = columns[:nk].reshape(n, k), columns[nk:nk + pk].reshape(P, k)
    return direct.Solution(float(entries @ columns[:nk + pk]), x, z, lp.rounds)

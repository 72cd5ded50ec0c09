"""Throughput estimation: learn T online, fill in what was never measured.

Users never hand over a full throughput matrix, so the policy's T is built
here from these sources, best first:

1. **Measurements** (`Measured`): what running jobs made, smoothed with an
   exponential moving average (alpha 0.25, as in Gavel's scheduler) and
   counted, per job ``(job, worker type, partner job, spread)`` and per model
   ``(model, scale factor, worker type, partner model, spread)``; a job with no
   measurement of its own on a type uses its model's (other jobs of the same
   model taught us) unless `share_across_jobs` is off.  Reports are untrusted
   (estimator/trust.py): one that is not finite >= 0 or exceeds its ceiling is
   dropped, and a model's row learns from a job only when its user is trusted
   or enough distinct users agree; a job's own reports shape its own row.
2. **The user's hint** (``speeds=v100:4.2,...`` in the job's flags,
   `JobState.speeds`): steps/s on the types it names, rescaled to what the
   job was measured at, like a reference row; trusted below a measurement
   and above the table, since it is about this very job.
3. **The reference table** (a `ThroughputTable`, e.g. Gavel's measured one):
   a job of a model it knows starts from that model's row, rescaled to what
   the job was measured at (geometric mean of measured / reference).
4. **A fingerprint** for a model the reference does not know: after a
   bounded exploration (its estimate makes every type it has not been
   measured on, and has no hint for, look `optimism` times better than the best measured one, so
   the policy gives it time there, until it has run `explore_rounds` rounds),
   its partial row is completed against the reference rows by low-rank matrix
   completion (`ReferenceSet.fingerprint`: the reference rows' factors come
   from `complete`, the partial row is folded in), and the nearest reference
   row, scaled to the job's measurements, is the estimate (Quasar's technique,
   as Gavel's paper adopts it).  Rows are normalized so that scale does not
   matter: solo throughputs as logs, centred per row; pair throughputs as a
   fraction of the model's own solo throughput on that type (Gavel's
   normalization).  Pair throughputs (space sharing) of two jobs come from
   their reference models (themselves when known, the fingerprint's nearest
   model otherwise), scaled by the jobs' solo estimates, unless the pair was
   measured.

Every estimate carries a kind and a confidence in [0, 1] (`RowEstimate`);
measurements replace estimates as they arrive.  The policy never gets an
all-NaN row for a job that could run: with nothing known the row is 1.0 on
every type (the heterogeneity-agnostic guess), and a row whose measured
values are all 0 falls back to that too.

`EstimatingThroughputs` is a `ThroughputSource` (lookup, record, stale); it can
keep its measurements in a `MeasurementStore` (the daemon's SQLite store) across
restarts and writes its current estimates there for `slurm-gavel throughputs show`.
`stale()` says that estimates the policy was given have changed materially
since (the engine may then re-solve).  Pure numpy; no solver.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from ..core.interfaces import MeasurementStore, ThroughputSource
from ..core.throughputs import JobThroughputs
from .table import ThroughputTable
from .trust import Ceilings, DropLog, Trust, agreeing_users, within

log = logging.getLogger("slurm_gavel.estimator")

EMA_ALPHA = 0.25               # Gavel's scheduler smooths measured throughputs with this
DEFAULT_EXPLORE_ROUNDS = 6     # rounds an unknown model's job may spend exploring
DEFAULT_OPTIMISM = 3.0         # unexplored types look this much better than the best measured one
DEFAULT_RANK = 3
DEFAULT_REG = 0.1
DEFAULT_SOLO_WEIGHT = 5.0      # weight of a solo column against one pair column in a fingerprint
MATERIAL_CHANGE = 0.05         # a measurement moving this much (relative) invalidates cached rows
STALE_CHANGE = 0.10            # an estimate served to the policy moving this much makes it stale
DEFAULT_THROUGHPUT = 1.0       # nothing known: the same speed on every type

# kinds of estimate, best first, with the confidence each carries
MEASURED, LEARNED, HINT, REFERENCE, FINGERPRINT, EXPLORE, MEAN, DEFAULT = (
    "measured", "learned", "hint", "reference", "fingerprint", "explore", "mean", "default")
KINDS = (MEASURED, LEARNED, HINT, REFERENCE, FINGERPRINT, EXPLORE, MEAN, DEFAULT)
HINT_CONFIDENCE = 0.7


def measured_confidence(samples: int) -> float:
    """1 - 2^-n: 0.5 after one sample, 0.875 after three."""
    return 1.0 - 0.5 ** max(0, samples)


# ---------------------------------------------------------------------------
# Measurements
# ---------------------------------------------------------------------------
@dataclass
class Sample:
    value: float          # smoothed steps/s
    samples: int
    updated: float        # wall time of the last sample
    anchor: float         # the value when cached estimates last changed


class Measured:
    """Exponentially smoothed values with sample counts, by key."""

    def __init__(self, alpha: float = EMA_ALPHA):
        if not 0 < alpha <= 1:
            raise ValueError(f"EMA alpha must be in (0, 1], got {alpha}")
        self.alpha = alpha
        self.values: dict[tuple, Sample] = {}

    def add(self, key: tuple, value: float, now: float, count: bool = True) -> bool:
        """Fold one sample in (`count`: as a new sample); True when the value moved
        materially (first sample, or > 5% since the last material move)."""
        s = self.values.get(key)
        if s is None:
            self.values[key] = Sample(value, 1, now, value)
            return True
        s.value += self.alpha * (value - s.value)        # exact when the value repeats
        s.samples += int(count)
        s.updated = now
        if abs(s.value - s.anchor) > MATERIAL_CHANGE * max(abs(s.anchor), 1e-12):
            s.anchor = s.value
            return True
        return False

    def set(self, key: tuple, value: float, samples: int, updated: float) -> None:
        self.values[key] = Sample(float(value), int(samples), float(updated), float(value))

    def get(self, key: tuple) -> Sample | None:
        return self.values.get(key)

    def pop(self, key: tuple) -> None:
        self.values.pop(key, None)


# ---------------------------------------------------------------------------
# Matrix completion
# ---------------------------------------------------------------------------
def complete(matrix, mask=None, rank: int = DEFAULT_RANK, reg: float = DEFAULT_REG,
             weights=None, offset_columns=None, iters: int = 500, tol: float = 1e-9, seed: int = 0):
    """Low-rank completion of `matrix` from its entries where `mask` is True (default: finite ones).

    Alternating ridge least squares on ``X ~ mu + b 1_O^T + U V^T``:
    ``mu`` per-column means (fitted), ``b`` a free per-row offset on the
    columns in `offset_columns` (a boolean mask or None: e.g. log throughputs,
    where a row's scale is a nuisance), minimizing
    ``sum_obs w_j (x_ij - ...)^2 + reg (|U|^2 + |V|^2)``.  Returns
    ``(completed, mu, U, V)``; `completed` holds the model's value everywhere
    (callers keep the observations with ``np.where(mask, X, completed)``).
    """
    x = np.asarray(matrix, dtype=float)
    if x.ndim != 2:
        raise ValueError(f"expected a matrix, got shape {x.shape}")
    m = np.isfinite(x) if mask is None else (np.asarray(mask, dtype=bool) & np.isfinite(x))
    n, c = x.shape
    w = np.ones(c) if weights is None else np.asarray(weights, dtype=float)
    off = np.zeros(c) if offset_columns is None else np.asarray(offset_columns, dtype=float)
    counts = m.sum(axis=0)
    mu = np.where(counts > 0, np.where(m, x, 0.0).sum(axis=0) / np.maximum(counts, 1), 0.0)
    r = np.where(m, x - mu, 0.0)
    rank = max(1, min(rank, n, c))
    wm = m * w                                    # (n, c) weight of each observed entry
    b = np.zeros(n)
    if off.any():                                 # start the offsets at the rows' mean residual
        wo = wm * off
        b = (wo * r).sum(axis=1) / np.maximum(wo.sum(axis=1), 1e-12)
    resid0 = np.where(m, r - b[:, None] * off, 0.0)
    u0, s0, vt0 = np.linalg.svd(resid0, full_matrices=False)
    root = np.sqrt(s0[:rank] + 1e-12)
    u, v = u0[:, :rank] * root, vt0[:rank].T * root
    if not np.any(s0[:rank] > 1e-12):
        rng = np.random.default_rng(seed)
        u = rng.normal(scale=0.01, size=(n, rank))
        v = rng.normal(scale=0.01, size=(c, rank))
    use_off = bool(off.any())
    pen_row = np.diag(([1e-9] if use_off else []) + [reg] * rank)
    pen_col = reg * np.eye(rank)
    prev = np.inf
    for _ in range(iters):
        # rows: [b_i, u_i] from the columns' [offset indicator, v_j]
        design = np.concatenate([off[:, None], v], axis=1) if use_off else v
        a = np.einsum("ic,ck,cl->ikl", wm, design, design) + pen_row
        sol = np.linalg.solve(a, ((wm * r) @ design)[..., None])[..., 0]
        if use_off:
            b, u = sol[:, 0], sol[:, 1:]
        else:
            u = sol
        target = r - b[:, None] * off
        a = np.einsum("ic,ik,il->ckl", wm, u, u) + pen_col
        v = np.linalg.solve(a, ((wm * target).T @ u)[..., None])[..., 0]
        # the column means are part of the fit: re-centre on what U V^T leaves
        shift = np.where(counts > 0, np.where(m, target - u @ v.T, 0.0).sum(axis=0)
                         / np.maximum(counts, 1), 0.0)
        mu = mu + shift
        r = np.where(m, r - shift, 0.0)
        target = r - b[:, None] * off
        resid = np.where(m, target - u @ v.T, 0.0)
        loss = float((w * resid ** 2).sum() + reg * ((u ** 2).sum() + (v ** 2).sum()))
        if np.isfinite(prev) and prev - loss <= tol * max(1.0, prev):
            break
        prev = loss
    return mu + b[:, None] * off + u @ v.T, mu, u, v


@dataclass(frozen=True)
class Fingerprint:
    """A partial row matched against the reference rows."""

    nearest: str                 # the closest reference model
    index: int                   # its row in the ReferenceSet
    distance: float              # RMS distance in normalized space (0 = identical shape)
    scale: float                 # measured / reference, geometric mean over measured types
    solo: np.ndarray             # (k,) the nearest row scaled: the estimate (NaN where it has none)
    completed_solo: np.ndarray   # (k,) the completed row itself (steps/s)
    completed_pairs: np.ndarray  # (k, R) completed pair fractions, partner = reference model
    ranking: tuple[str, ...] = ()  # every reference model, nearest first


class ReferenceSet:
    """The reference rows of one scale factor on some worker types, normalized and factored.

    Row i (model ``models[i]``): ``k`` solo columns, log steps/s centred over
    the row's finite entries; then ``k * R`` pair columns, type-major: the
    model's throughput next to reference model j as a fraction of its own solo
    throughput on that type (NaN where the table has no such pair).
    """

    def __init__(self, table: ThroughputTable, scale_factor: int, worker_types: Sequence[str],
                 exclude: str | None = None, rank: int = DEFAULT_RANK, reg: float = DEFAULT_REG,
                 solo_weight: float = DEFAULT_SOLO_WEIGHT):
        self.scale_factor = scale_factor
        self.worker_types = tuple(worker_types)
        self.models = [m for m in table.models(scale_factor) if m != exclude]
        self.index = {m: i for i, m in enumerate(self.models)}
        self.rank, self.reg, self.solo_weight = rank, reg, solo_weight
        k, R = len(self.worker_types), len(self.models)
        self.solo = np.full((R, k), np.nan)
        self.unconsolidated = np.full((R, k), np.nan)
        for i, model in enumerate(self.models):
            s = table.solo(model, scale_factor)
            u = table.unconsolidated(model, scale_factor)
            for j, wt in enumerate(self.worker_types):
                if s.get(wt, 0.0) > 0:
                    self.solo[i, j] = s[wt]
                if u.get(wt, 0.0) > 0:
                    self.unconsolidated[i, j] = u[wt]
        # pairs[t, i, j]: model i's throughput next to model j on type t / its solo throughput
        self.pairs = np.full((k, R, R), np.nan)
        self.pair_steps = np.full((k, R, R), np.nan)     # the same in steps/s
        for i, a in enumerate(self.models):
            for j, b in enumerate(self.models):
                p = table.pair(a, b, scale_factor)
                for t, wt in enumerate(self.worker_types):
                    if wt in p and np.isfinite(self.solo[i, t]):
                        self.pair_steps[t, i, j] = p[wt][0]
                        self.pairs[t, i, j] = p[wt][0] / self.solo[i, t]
        self.log_solo = np.log(self.solo)
        finite = np.isfinite(self.log_solo)
        row_mean = (np.where(finite, self.log_solo, 0.0).sum(axis=1, keepdims=True)
                    / np.maximum(finite.sum(axis=1, keepdims=True), 1))
        centred = self.log_solo - row_mean
        self.features = np.concatenate([centred, self.pairs.transpose(1, 0, 2).reshape(R, k * R)], axis=1)
        self.mask = np.isfinite(self.features)
        self.weights = np.concatenate([np.full(k, solo_weight), np.ones(k * R)])
        self.mu = self.v = None
        if R >= 2 and self.mask.any():
            _, self.mu, _, self.v = complete(self.features, self.mask, rank=rank, reg=reg,
                                             weights=self.weights)

    def __len__(self) -> int:
        return len(self.models)

    @property
    def usable(self) -> bool:
        return self.v is not None

    def fingerprint(self, solo: Mapping[int, float],
                    pairs: Mapping[tuple[int, int], float] | None = None) -> Fingerprint | None:
        """Complete a partial row and find its nearest reference row.

        `solo`: type index -> measured steps/s (> 0); `pairs`: (type index,
        reference model index) -> measured fraction of the solo throughput.
        None when the set cannot fingerprint (fewer than two rows, no solo
        measurement).
        """
        solo = {t: v for t, v in solo.items() if v > 0 and math.isfinite(v)}
        if not self.usable or not solo:
            return None
        pairs = {key: v for key, v in (pairs or {}).items() if math.isfinite(v) and v >= 0}
        k, R = len(self.worker_types), len(self.models)
        cols = k + k * R
        x = np.full(cols, np.nan)
        for t, value in solo.items():
            x[t] = math.log(value)
        for (t, j), value in pairs.items():
            x[k + t * R + j] = value
        observed = np.flatnonzero(np.isfinite(x))
        # fold the row in: x_obs ~ c * [solo column] + mu + V a; c (the row's scale) is free
        design = np.concatenate([(observed < k)[:, None].astype(float), self.v[observed]], axis=1)
        w = self.weights[observed]
        target = x[observed] - self.mu[observed]
        penalty = np.diag([1e-9] + [self.reg] * self.v.shape[1])
        lhs = design.T @ (design * w[:, None]) + penalty
        coef = np.linalg.solve(lhs, design.T @ (w * target))
        c, a = coef[0], coef[1:]
        z = self.mu + self.v @ a
        z[:k] += c
        merged = np.where(np.isfinite(x), x, z)
        # distance to each reference row: solo part up to a scale (log offset), pair part as is
        ref_solo = self.log_solo                                  # (R, k)
        delta = merged[None, :k] - ref_solo
        both = np.isfinite(delta)
        nsolo = both.sum(axis=1)
        mean_delta = np.where(nsolo > 0, np.where(both, delta, 0).sum(axis=1) / np.maximum(nsolo, 1), 0)
        d_solo = np.where(both, (delta - mean_delta[:, None]) ** 2, 0).sum(axis=1)
        ref_pairs = self.features[:, k:]
        diff = merged[None, k:] - ref_pairs
        pmask = np.isfinite(diff)
        d_pair = np.where(pmask, diff ** 2, 0).sum(axis=1)
        denom = self.solo_weight * np.maximum(nsolo - 1, 0) + pmask.sum(axis=1)
        dist = (self.solo_weight * d_solo + d_pair) / np.maximum(denom, 1)
        dist = np.where(nsolo > 0, dist, np.inf)
        best = int(np.argmin(dist))
        # scale the nearest row to the measurements
        logs = [math.log(v) - self.log_solo[best, t] for t, v in solo.items()
                if np.isfinite(self.log_solo[best, t])]
        scale = math.exp(sum(logs) / len(logs)) if logs else math.exp(c)
        with np.errstate(over="ignore"):
            completed_solo = np.exp(z[:k])
        ranking = tuple(self.models[i] for i in np.argsort(dist, kind="stable"))
        return Fingerprint(self.models[best], best, float(math.sqrt(max(dist[best], 0.0))), scale,
                           self.solo[best] * scale, completed_solo, z[k:].reshape(k, R), ranking)


def _moved(new: np.ndarray, old: np.ndarray) -> bool:
    """Did any entry change by more than STALE_CHANGE (relative), or become (in)finite?"""
    if (np.isfinite(new) != np.isfinite(old)).any():
        return True
    both = np.isfinite(new) & np.isfinite(old)
    change = np.abs(new[both] - old[both]) / np.maximum(np.abs(old[both]), 1e-9)
    return bool((change > STALE_CHANGE).any())


def _neighbour_fractions(pairs: np.ndarray, pa: np.ndarray, pb: np.ndarray) -> np.ndarray:
    """(P, k) pair fractions of proxies pa[p] next to pb[p] ((P, n) reference indices each).

    The mean over the n x n neighbour combinations; 0 (cannot share) where any
    of them cannot share, NaN where any has no entry: when similar models do
    not fit together on a type, the estimate does not bet that these two do.
    """
    f = pairs[:, pa[:, :, None], pb[:, None, :]]          # (k, P, n, n)
    with np.errstate(invalid="ignore"):
        mean = f.mean(axis=(2, 3))
        blocked = (f <= 0).any(axis=(2, 3))
    return np.where(blocked & ~np.isnan(mean), 0.0, mean).T


# ---------------------------------------------------------------------------
# The throughput source
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class RowEstimate:
    """One job's throughputs per worker type, with where each number came from."""

    worker_types: tuple[str, ...]
    solo: np.ndarray              # (k,) steps/s; NaN = cannot run there (per the reference)
    unconsolidated: np.ndarray    # (k,) steps/s spread over servers; NaN = unknown
    kinds: tuple[str, ...]        # (k,) one of KINDS
    confidence: np.ndarray        # (k,) in [0, 1]
    samples: np.ndarray           # (k,) measurements behind each solo entry (job's own or model's)
    phase: str                    # "known" | "explore" | "fingerprint" | "unknown"
    proxy: str | None = None      # the reference model standing in for it (itself when known)
    proxies: tuple[str, ...] = () # the reference models whose pair fractions it gets
    fingerprint: Fingerprint | None = None


@dataclass
class _Job:
    model: str
    scale_factor: int
    speeds: tuple = ()            # the user's hint: ((worker type, steps/s), ...)
    user: str = ""                # whose job it is (for the consensus of shared rows)
    version: int = 0              # bumped when its own measurements move materially
    last_lookup: int = 0


class EstimatingThroughputs(ThroughputSource):
    """A `ThroughputSource` that learns T from measurements and estimates the rest.

    reference: a table of models profiled offline (None: learn everything).
    explore_rounds: rounds (measurements) an unknown model's job explores for.
    optimism: unexplored types look this much faster than its best measured type.
    method: "nearest" (the nearest reference row, scaled; the paper) or
        "completion" (the completed row's own values).
    leave_one_out: never use a job's own model from the reference (every job
        is new; experiments).
    share_across_jobs: jobs of a model learn from each other's measurements.
    neighbors: pair fractions of a fingerprinted job come from its n nearest
        reference models (mean; "cannot share" if any of them cannot).
    stale_rounds: `stale()` waits this many observed rounds after a lookup (a
        re-solve then takes several new measurements in at once).
    sample_seconds: measurements of a job closer together than this update the
        smoothed value but count as one sample and one round (a daemon that
        observes every few seconds: give it the round length; 0 = every
        `record` call is a round, as in the simulator).
    store: a `MeasurementStore` (the daemon's SqliteStore): keeps measurements
        across restarts and the current estimates.
    trust: what a report must pass (estimator/trust.py): reports above the
        ceiling are dropped; a model-level row learns from a job only when its
        user is trusted or enough users agree.  Default `Trust()`: every
        plausible report is shared (the simulator's honest jobs).
    """

    def __init__(self, reference: ThroughputTable | None = None, *,
                 explore_rounds: int = DEFAULT_EXPLORE_ROUNDS, optimism: float = DEFAULT_OPTIMISM,
                 alpha: float = EMA_ALPHA, rank: int = DEFAULT_RANK, reg: float = DEFAULT_REG,
                 solo_weight: float = DEFAULT_SOLO_WEIGHT, method: str = "nearest",
                 leave_one_out: bool = False, share_across_jobs: bool = True,
                 neighbors: int = 1, sample_seconds: float = 0.0, stale_rounds: int = 3,
                 default: float = DEFAULT_THROUGHPUT, store: MeasurementStore | None = None,
                 clock: Callable[[], float] = time.time, forget_after: int = 50,
                 trust: Trust | None = None):
        if method not in ("nearest", "completion"):
            raise ValueError(f"method must be 'nearest' or 'completion', got {method!r}")
        if explore_rounds < 0 or not optimism >= 1 or not default > 0:
            raise ValueError("explore_rounds must be >= 0, optimism >= 1, default > 0")
        self.reference = reference
        self.trust = trust if trust is not None else Trust()
        self.ceilings = Ceilings(self.trust, reference, self._known)
        self._drops = DropLog()
        # model key -> {job: (user, the job's smoothed value)}: who currently reports on a shared row
        self._contrib: dict[tuple, dict[str, tuple[str, float]]] = {}
        self._contrib_keys: dict[str, set] = {}   # job -> its model keys in _contrib
        self.explore_rounds, self.optimism = int(explore_rounds), float(optimism)
        self.rank, self.reg, self.solo_weight = rank, reg, solo_weight
        self.method = method
        self.leave_one_out, self.share = leave_one_out, share_across_jobs
        self.default = float(default)
        self.neighbors = max(1, int(neighbors))
        self.sample_seconds = float(sample_seconds)
        self.stale_rounds = int(stale_rounds)
        self._counted: dict[str, float] = {}      # job -> when its last counted sample was
        self.store, self.clock = store, clock
        self.forget_after = forget_after
        self.jobs_measured = Measured(alpha)      # (job, wt, partner job | "", spread)
        self.models_measured = Measured(alpha)    # (model, sf, wt, partner model | "", spread)
        self._jobs: dict[str, _Job] = {}
        self._rounds: dict[str, int] = {}         # measurements per job (one per round it ran)
        self._job_keys: dict[str, set] = {}       # job -> its keys in jobs_measured
        self._model_version: dict[tuple, int] = {}
        self._pending: list = []                  # measurements of jobs not looked up yet
        self._refsets: dict[tuple, ReferenceSet] = {}
        self._cache: dict[str, tuple] = {}
        self._served: dict[str, tuple] = {}       # job -> (worker types, solo row, proxy, kinds) given to the policy
        self._served_pairs: dict[tuple, float] = {}   # (job, partner, type) -> its pair steps/s given
        self._stale = False
        self._urgent = False                      # stale with news: a type measured for the first time
        self._rounds_since_lookup = 0
        self._last_round = -math.inf
        self._lookups = 0
        self.fingerprints = 0                     # how many were computed (for benchmarks)
        if store is not None:
            self._load(store)

    # -- persistence ----------------------------------------------------------------
    def _load(self, store: MeasurementStore) -> None:
        model_rows, job_rows = store.load_throughputs()
        dropped = 0
        for r in model_rows:
            key = (r["model"], int(r["scale_factor"]), r["worker_type"], r["partner"] or "",
                   bool(r["spread"]))
            if not self._plausible(r["steps_per_second"], self.ceilings(key[0], key[1], key[2])):
                dropped += 1              # kept by an older version that believed every report
                continue
            self.models_measured.set(key, r["steps_per_second"], r["samples"], r["updated"] or 0.0)
        for r in job_rows:
            key = (r["job"], r["worker_type"], r["partner"] or "", bool(r["spread"]))
            if not self._plausible(r["steps_per_second"], self.ceilings(None, None, key[1])):
                dropped += 1
                continue
            self.jobs_measured.set(key, r["steps_per_second"], r["samples"], r["updated"] or 0.0)
            self._job_keys.setdefault(r["job"], set()).add(key)
            self._rounds[r["job"]] = self._rounds.get(r["job"], 0) + int(r["samples"])
        if dropped:
            log.warning("%d stored throughputs above the plausibility ceiling were not loaded", dropped)

    @staticmethod
    def _plausible(value, ceiling: float) -> bool:
        return isinstance(value, (int, float)) and math.isfinite(value) and 0 <= value <= ceiling

    @staticmethod
    def _row_dict(key, s: Sample, job_level: bool) -> dict:
        if job_level:
            job, wt, partner, spread = key
            return {"job": job, "worker_type": wt, "partner": partner, "spread": int(spread),
                    "steps_per_second": s.value, "samples": s.samples, "updated": s.updated}
        model, sf, wt, partner, spread = key
        return {"model": model, "scale_factor": sf, "worker_type": wt, "partner": partner,
                "spread": int(spread), "steps_per_second": s.value, "samples": s.samples,
                "updated": s.updated}

    # -- learning -------------------------------------------------------------------
    def record(self, measurements: Iterable) -> None:
        """Fold in what running jobs made (`Measurement`s of one observation)."""
        now = self.clock()
        if now - self._last_round >= self.sample_seconds:
            self._last_round = now
            self._rounds_since_lookup += 1
        touched_jobs, touched_models = set(), set()
        job_keys, model_keys = set(), set()
        counted = {}
        for m in measurements:
            job = str(m.job)
            try:
                value = float(m.steps_per_second)
            except (TypeError, ValueError, OverflowError):
                value = math.nan
            j = self._jobs.get(job)
            ceiling = self.ceilings(j.model if j else None, j.scale_factor if j else None, m.worker_type)
            if not (value >= 0 and math.isfinite(value)):
                self._drops.dropped(job, m.worker_type, value, "not a finite number >= 0", now)
                continue
            if value > ceiling:
                self._drops.dropped(job, m.worker_type, value, f"above the ceiling of {ceiling:.6g}", now)
                continue
            key = (job, m.worker_type, str(m.partner) if m.partner is not None else "", bool(m.spread))
            if job not in counted:
                last = self._counted.get(job)
                counted[job] = last is None or now - last >= self.sample_seconds
                if counted[job]:
                    self._counted[job] = now
                    self._rounds[job] = self._rounds.get(job, 0) + 1
            if self.jobs_measured.add(key, value, now, counted[job]) and job in self._jobs:
                self._jobs[job].version += 1
            self._job_keys.setdefault(job, set()).add(key)
            job_keys.add(key)
            touched_jobs.add(job)
            mkey = self._model_key(key)
            if mkey is None:
                self._pending.append((key, value))
                continue
            if self._shareable(key, mkey):
                self._add_model(mkey, value, now, touched_models, counted[job])
                model_keys.add(mkey)
        if self.store is not None and (job_keys or model_keys):
            self.store.save_throughputs(
                [self._row_dict(k, self.models_measured.get(k), False) for k in model_keys],
                [self._row_dict(k, self.jobs_measured.get(k), True) for k in job_keys])
        self._check_stale(touched_jobs, touched_models, measurements)
        if len(self._pending) > 20000:
            self._pending = self._pending[-10000:]

    def _model_key(self, key) -> tuple | None:
        job, wt, partner, spread = key
        j = self._jobs.get(job)
        if j is None:
            return None
        p = ""
        if partner:
            pj = self._jobs.get(partner)
            if pj is None:
                return None
            p = pj.model
        return (j.model, j.scale_factor, wt, p, spread)

    def _shareable(self, key, mkey) -> bool:
        """May this job's measurement (job key `key`) teach the shared row `mkey`?  Its user is
        trusted, or enough distinct users agree and the job is one of them (estimator/trust.py)."""
        job = key[0]
        j = self._jobs[job]
        s = self.jobs_measured.get(key)
        mine = s.value if s is not None else math.nan
        self._contrib.setdefault(mkey, {})[job] = (j.user, mine)
        self._contrib_keys.setdefault(job, set()).add(mkey)
        if j.user and j.user in self.trust.trusted_users:
            return True
        by_user: dict[str, list[float]] = {}
        for user, v in self._contrib[mkey].values():
            by_user.setdefault(user, []).append(v)
        median, agree = agreeing_users(by_user, self.trust)
        return j.user in agree and within(mine, median, self.trust.agreement)

    def _add_model(self, mkey, value, now, touched_models, count: bool = True) -> None:
        if self.models_measured.add(mkey, value, now, count):
            self._model_version[mkey[:2]] = self._model_version.get(mkey[:2], 0) + 1
        touched_models.add(mkey[:2])

    def _check_stale(self, jobs: set, models: set, measurements) -> None:
        """Mark the estimates stale when what the policy was given has moved by > 10%:
        a solo row, a job's stand-in model (its pairs), or a pair it was told about."""
        if self._urgent or not self._served:
            return
        for m in measurements:
            if m.partner is None:
                continue
            given = self._served_pairs.get((str(m.job), str(m.partner), m.worker_type))
            if given is not None and _moved(np.array([m.steps_per_second]), np.array([given])):
                self._stale = True
                return
        for job, (wts, served, proxy, kinds) in self._served.items():
            j = self._jobs.get(job)
            if j is None or (job not in jobs and (j.model, j.scale_factor) not in models):
                continue
            row = self.estimate_job(job, wts)
            if row.proxy != proxy or _moved(row.solo, served):
                self._stale = True
                # For an exploring job, a type measured for the first time is news, not
                # noise: the policy should see it at once, so that the job moves on to
                # the next type instead of spending its exploration rounds where it is.
                if EXPLORE in kinds and any(new in (MEASURED, LEARNED) and old not in (MEASURED, LEARNED)
                                            for new, old in zip(row.kinds, kinds)):
                    self._urgent = True
                    return

    def set_reference(self, reference: ThroughputTable | None) -> None:
        """Use another reference table (a daemon reloading its configuration); what was
        measured stays."""
        self.reference = reference
        self.ceilings = Ceilings(self.trust, reference, self._known)
        self._refsets.clear()
        self._cache.clear()
        self._stale = bool(self._served)

    def set_trust(self, trust: Trust) -> None:
        """New plausibility and sharing rules (a daemon reloading its configuration); they apply
        to reports from now on."""
        self.trust = trust
        self.ceilings = Ceilings(trust, self.reference, self._known)
        self._cache.clear()

    def stale(self) -> bool:
        """True when an estimate the policy was last given has changed by more than 10%,
        and at least `stale_rounds` rounds were observed since it was given (at once
        when an exploring job was measured on a type for the first time)."""
        return self._stale and (self._urgent or self._rounds_since_lookup >= self.stale_rounds)

    def forget(self, jobs: Iterable[str]) -> None:
        """Drop what is kept per job for `jobs` (jobs that left); model-level data stays."""
        gone = [str(j) for j in jobs]
        for job in gone:
            for key in self._job_keys.pop(job, ()):
                self.jobs_measured.pop(key)
            self._jobs.pop(job, None)
            self._rounds.pop(job, None)
            self._counted.pop(job, None)
            self._cache.pop(job, None)
            self._served.pop(job, None)
            self._drops.forget(job)
            for mkey in self._contrib_keys.pop(job, ()):
                c = self._contrib.get(mkey)
                if c is not None:
                    c.pop(job, None)
                    if not c:
                        del self._contrib[mkey]
        if gone:
            left = set(gone)
            self._served_pairs = {k: v for k, v in self._served_pairs.items()
                                  if k[0] not in left and k[1] not in left}
        if self.store is not None and gone:
            self.store.forget_job_throughputs(gone)

    # -- estimating -----------------------------------------------------------------
    def _register(self, jobs) -> None:
        self._lookups += 1
        new = False
        for job in jobs:
            j = self._jobs.get(job.id)
            speeds = tuple(getattr(job, "speeds", ()) or ())
            user = str(getattr(job, "user", "") or "")
            if j is None or (j.model, j.scale_factor, j.speeds, j.user) != (job.job_type, job.scale_factor,
                                                                          speeds, user):
                self._jobs[job.id] = j = _Job(job.job_type, int(job.scale_factor), speeds, user)
                self._cache.pop(job.id, None)
                new = True
            j.last_lookup = self._lookups
        if new and self._pending:
            now = self.clock()
            pending, self._pending = self._pending, []
            touched, keys = set(), set()
            for key, value in pending:
                mkey = self._model_key(key)
                if mkey is None:
                    self._pending.append((key, value))
                elif value <= self.ceilings(*mkey[:3]) and self._shareable(key, mkey):
                    # (recorded before its model was known: against the type's ceiling only)
                    self._add_model(mkey, value, now, touched)
                    keys.add(mkey)
            if self.store is not None and keys:
                self.store.save_throughputs([self._row_dict(k, self.models_measured.get(k), False)
                                             for k in keys], [])
            self._pending = self._pending[-10000:]
        # jobs that have not been looked up for a while have left
        if self.forget_after and self._lookups % 10 == 0:
            old = [job for job, j in self._jobs.items()
                   if j.last_lookup < self._lookups - self.forget_after]
            if old:
                self.forget(old)

    def _known(self, model: str, sf: int) -> bool:
        return (self.reference is not None and not self.leave_one_out
                and bool(self.reference.solo(model, sf)))

    def refset(self, scale_factor: int, worker_types: Sequence[str],
               exclude: str | None = None) -> ReferenceSet | None:
        """The (cached) reference rows of a scale factor; None without a reference table."""
        if self.reference is None:
            return None
        key = (scale_factor, tuple(worker_types), exclude)
        rs = self._refsets.get(key)
        if rs is None:
            rs = self._refsets[key] = ReferenceSet(self.reference, scale_factor, worker_types, exclude,
                                                   self.rank, self.reg, self.solo_weight)
        return rs

    def _measured_row(self, job: str, j: _Job, wts, spread: bool):
        """(values, samples, kinds) of a job's measured entries on `wts` (its own, else its model's)."""
        k = len(wts)
        values, samples, kinds = np.full(k, np.nan), np.zeros(k, dtype=int), [""] * k
        for t, wt in enumerate(wts):
            s = self.jobs_measured.get((job, wt, "", spread))
            kind = MEASURED
            if s is None and self.share:
                s = self.models_measured.get((j.model, j.scale_factor, wt, "", spread))
                kind = LEARNED
            if s is not None:
                values[t], samples[t], kinds[t] = s.value, s.samples, kind
        return values, samples, kinds

    def _pair_fractions(self, job: str, j: _Job, rs: ReferenceSet, wts, solo: np.ndarray) -> dict:
        """Measured pair throughputs of a job as fractions of its solo throughput, by reference column."""
        out = {}
        col = {wt: t for t, wt in enumerate(wts)}
        for key in self._job_keys.get(job, ()):
            _, wt, partner, spread = key
            if not partner or spread or wt not in col or not solo[col[wt]] > 0:
                continue
            pj = self._jobs.get(partner)
            if pj is None or pj.model not in rs.index:
                continue
            out[(col[wt], rs.index[pj.model])] = self.jobs_measured.get(key).value / solo[col[wt]]
        if self.share:
            for t, wt in enumerate(wts):
                if not solo[t] > 0:
                    continue
                for other, r in rs.index.items():
                    s = self.models_measured.get((j.model, j.scale_factor, wt, other, False))
                    if s is not None:
                        out.setdefault((t, r), s.value / solo[t])
        return out

    def estimate_job(self, job_id: str, worker_types: Sequence[str]) -> RowEstimate:
        """The current best estimate of a (looked-up) job's row."""
        j = self._jobs[job_id]
        wts = tuple(worker_types)
        exploring = self._rounds.get(job_id, 0) < self.explore_rounds
        mv = self._model_version.get((j.model, j.scale_factor), 0) if self.share else 0
        key = (wts, j.version, mv, exploring)
        hit = self._cache.get(job_id)
        if hit is not None and hit[0] == key:
            return self._fresh_counts(job_id, j, hit[1])
        row = self._estimate(job_id, j, wts, exploring)
        self._cache[job_id] = (key, row)
        return row

    def _fresh_counts(self, job_id: str, j: _Job, row: RowEstimate) -> RowEstimate:
        """A cached row with today's sample counts (values move the cache; counts do not)."""
        samples, conf = row.samples.copy(), row.confidence.copy()
        changed = False
        for t, (wt, kind) in enumerate(zip(row.worker_types, row.kinds)):
            if kind == MEASURED:
                s = self.jobs_measured.get((job_id, wt, "", False))
                factor = 1.0
            elif kind == LEARNED:
                s = self.models_measured.get((j.model, j.scale_factor, wt, "", False))
                factor = 0.8
            else:
                continue
            if s is not None and s.samples != samples[t]:
                samples[t], conf[t] = s.samples, factor * measured_confidence(s.samples)
                changed = True
        return replace(row, samples=samples, confidence=conf) if changed else row

    def _estimate(self, job: str, j: _Job, wts, exploring: bool) -> RowEstimate:
        k = len(wts)
        ceilings = np.array([self.ceilings(j.model, j.scale_factor, wt) for wt in wts], dtype=float)
        values, samples, kinds = self._measured_row(job, j, wts, False)
        kinds = list(kinds)
        conf = np.zeros(k)
        for t in range(k):
            if kinds[t] == MEASURED:
                conf[t] = measured_confidence(samples[t])
            elif kinds[t] == LEARNED:
                conf[t] = 0.8 * measured_confidence(samples[t])
        measured = np.isfinite(values)
        positive = measured & (values > 0)
        if j.speeds:
            hint = dict(j.speeds)
            hint_row = np.array([hint.get(wt, np.nan) for wt in wts], dtype=float)
            hint_row = np.minimum(hint_row, ceilings)       # a hint is a report too (NaN stays)
            both = positive & np.isfinite(hint_row)
            # a hint off by a constant factor (another batch size, a slower node) is
            # still right about the shape: scale it to what was measured
            scale = math.exp(float(np.mean(np.log(values[both] / hint_row[both])))) if both.any() else 1.0
            for t in range(k):
                if not measured[t] and np.isfinite(hint_row[t]):
                    values[t], kinds[t], conf[t] = hint_row[t] * scale, HINT, HINT_CONFIDENCE
            measured = np.isfinite(values)
            positive = measured & (values > 0)
        known = self._known(j.model, j.scale_factor)
        ref_types = set(self.reference.worker_types) if self.reference is not None else set()
        phase, proxy, fp = ("known" if known else "unknown"), (j.model if known else None), None
        if known:
            ref = self.reference.solo(j.model, j.scale_factor)
            ref_row = np.array([ref.get(wt, np.nan) if ref.get(wt, 0.0) > 0 else np.nan for wt in wts])
            both = positive & np.isfinite(ref_row)
            scale = math.exp(float(np.mean(np.log(values[both] / ref_row[both])))) if both.any() else 1.0
            for t, wt in enumerate(wts):
                if measured[t] or wt not in ref_types:
                    continue
                values[t], kinds[t], conf[t] = ref_row[t] * scale, REFERENCE, 0.6
        missing = [t for t in range(k) if not kinds[t]]
        if missing and exploring:
            best = float(values[positive].max()) if positive.any() else self.default / self.optimism
            for t in missing:
                values[t], kinds[t], conf[t] = self.optimism * best, EXPLORE, 0.0
            phase = "explore"
        elif not known and positive.any():
            exclude = j.model if self.leave_one_out else None
            try:
                rs = self.refset(j.scale_factor, wts, exclude)
                if rs is not None and rs.usable:
                    solo_obs = {t: float(values[t]) for t in np.flatnonzero(positive)}
                    fp = rs.fingerprint(solo_obs, self._pair_fractions(job, j, rs, wts, values))
                    self.fingerprints += 1
            except (np.linalg.LinAlgError, ValueError, FloatingPointError) as e:
                # numerics must not stop the scheduler: the job falls back to the mean
                log.warning("fingerprint of job %s (%s) failed, using the mean: %s", job, j.model, e)
                fp = None
            if fp is not None:
                phase, proxy = "fingerprint", fp.nearest
                guess = fp.completed_solo if self.method == "completion" else fp.solo
                quality = 0.5 * math.exp(-fp.distance)
                for t in missing:
                    if np.isfinite(guess[t]) and guess[t] > 0:
                        values[t], kinds[t], conf[t] = float(guess[t]), FINGERPRINT, quality
        missing = [t for t in range(k) if not kinds[t]]
        if missing:
            ok = np.isfinite(values) & (values > 0)
            fill = float(np.exp(np.mean(np.log(values[ok])))) if ok.any() else self.default
            for t in missing:
                values[t], kinds[t], conf[t] = fill, (MEAN if ok.any() else DEFAULT), 0.0
        # nothing the estimate says exceeds what the type can plausibly do (hints, scaled rows);
        # exploration's optimism is bounded in time instead
        bounded = np.array([kind != EXPLORE for kind in kinds]) & np.isfinite(values)
        values = np.where(bounded, np.minimum(values, ceilings), values)
        if not (np.isfinite(values) & (values > 0)).any():
            # nothing positive known (e.g. every measurement was 0): never stall the job
            values = np.full(k, self.default)
            kinds, conf = [DEFAULT] * k, np.zeros(k)
        spread, _, _ = self._measured_row(job, j, wts, True)
        spread = self._spread_estimate(j, wts, values, spread, proxy)
        proxies = ((proxy,) if fp is None or proxy is None
                   else tuple(fp.ranking[:max(1, self.neighbors)]))
        return RowEstimate(wts, values, spread, tuple(kinds), conf, samples, phase, proxy, proxies, fp)

    def _spread_estimate(self, j: _Job, wts, solo, measured, proxy) -> np.ndarray:
        out = measured.copy()
        if proxy is None or self.reference is None:
            return out
        rs = self.refset(j.scale_factor, wts)
        i = rs.index.get(proxy)
        if i is None:
            return out
        ratio = rs.unconsolidated[i] / rs.solo[i]
        return np.where(np.isfinite(out), out, ratio * solo)

    def lookup(self, jobs: Sequence, worker_types: Sequence[str],
               include_pairs: bool = False) -> JobThroughputs:
        wts = tuple(worker_types)
        self._register(jobs)
        n, k = len(jobs), len(wts)
        rows = [self.estimate_job(job.id, wts) for job in jobs]
        solo = np.array([r.solo for r in rows], dtype=float).reshape(n, k)
        spread = np.array([r.unconsolidated for r in rows], dtype=float).reshape(n, k)
        for job, r in zip(jobs, rows):
            self._served[job.id] = (wts, r.solo.copy(), r.proxy, r.kinds)
        self._stale = self._urgent = False
        self._rounds_since_lookup = 0
        pair_jobs = np.zeros((0, 2), dtype=np.int64)
        pair_thr = np.zeros((0, k, 2))
        if include_pairs and n >= 2:
            pair_jobs, pair_thr = self._pairs(jobs, rows, wts)
            self._served_pairs = {}
            for (a, b), thr in zip(pair_jobs.tolist(), pair_thr):
                ja, jb = jobs[a].id, jobs[b].id
                for t, wt in enumerate(wts):
                    if np.isfinite(thr[t]).all():
                        self._served_pairs[(ja, jb, wt)] = float(thr[t, 0])
                        self._served_pairs[(jb, ja, wt)] = float(thr[t, 1])
        if self.store is not None:
            self.store.save_estimates([
                {"job": job.id, "model": job.job_type, "scale_factor": int(job.scale_factor),
                 "worker_type": wt, "steps_per_second": float(r.solo[t]), "kind": r.kinds[t],
                 "confidence": float(r.confidence[t]), "phase": r.phase, "proxy": r.proxy,
                 "time": self.clock()}
                for job, r in zip(jobs, rows) for t, wt in enumerate(wts)])
        return JobThroughputs(solo, spread, pair_jobs, pair_thr)

    def _pairs(self, jobs, rows, wts):
        k = len(wts)
        index = {job.id: i for i, job in enumerate(jobs)}
        out_jobs, out_thr = [], []
        sfs = np.array([job.scale_factor for job in jobs])
        for sf in np.unique(sfs):
            members = np.flatnonzero(sfs == sf)
            if len(members) < 2:
                continue
            rs = self.refset(int(sf), wts) if self.reference is not None else None
            a, b = np.triu_indices(len(members), k=1)
            a, b = members[a], members[b]
            thr = np.full((len(a), k, 2), np.nan)
            if rs is not None and len(rs):
                kn = max(1, self.neighbors)
                proxy = np.full((len(jobs), kn), -1)
                for i in members:
                    names = [x for x in rows[i].proxies if x in rs.index]
                    if names:
                        idx = [rs.index[x] for x in names]
                        proxy[i] = (idx * kn)[:kn]            # pad by repeating
                pa, pb = proxy[a], proxy[b]                   # (P, kn)
                ok = (pa[:, 0] >= 0) & (pb[:, 0] >= 0)
                if ok.any():
                    solo = np.array([r.solo for r in rows])
                    if kn == 1:
                        # the proxies' pair steps/s, scaled by how the jobs' solo estimates compare
                        # with the proxies' (exactly the table for jobs of known models)
                        x, y = pa[ok, 0], pb[ok, 0]
                        with np.errstate(invalid="ignore", divide="ignore"):
                            thr[ok, :, 0] = rs.pair_steps[:, x, y].T * (solo[a[ok]] / rs.solo[x])
                            thr[ok, :, 1] = rs.pair_steps[:, y, x].T * (solo[b[ok]] / rs.solo[y])
                    else:
                        thr[ok, :, 0] = _neighbour_fractions(rs.pairs, pa[ok], pb[ok]) * solo[a[ok]]
                        thr[ok, :, 1] = _neighbour_fractions(rs.pairs, pb[ok], pa[ok]) * solo[b[ok]]
            # measured pairs replace estimates
            where = {(int(x), int(y)): p for p, (x, y) in enumerate(zip(a, b))}
            col = {wt: t for t, wt in enumerate(wts)}
            for i in members:
                job = jobs[i]
                for key in self._job_keys.get(job.id, ()):
                    _, wt, partner, spread_ = key
                    if not partner or spread_ or wt not in col or partner not in index:
                        continue
                    other = index[partner]
                    p = where.get((i, other))
                    side = 0
                    if p is None:
                        p, side = where.get((other, i)), 1
                    if p is not None:
                        thr[p, col[wt], side] = self.jobs_measured.get(key).value
                if self.share:
                    j = self._jobs[job.id]
                    for other_i in members:
                        if other_i == i:
                            continue
                        oj = self._jobs[jobs[other_i].id]
                        for t, wt in enumerate(wts):
                            s = self.models_measured.get((j.model, j.scale_factor, wt, oj.model, False))
                            if s is None:
                                continue
                            p = where.get((i, other_i))
                            side = 0
                            if p is None:
                                p, side = where.get((other_i, i)), 1
                            jk = (job.id, wt, jobs[other_i].id, False)
                            if p is not None and self.jobs_measured.get(jk) is None:
                                thr[p, t, side] = s.value
            keep = np.isfinite(thr).any(axis=(1, 2))
            # a pair with one side unknown on a type cannot be planned there
            thr = np.where(np.isfinite(thr).all(axis=2, keepdims=True), thr, np.nan)
            keep &= np.isfinite(thr).any(axis=(1, 2))
            out_jobs.append(np.stack([a[keep], b[keep]], axis=1))
            out_thr.append(thr[keep])
        if not out_jobs:
            return np.zeros((0, 2), dtype=np.int64), np.zeros((0, k, 2))
        pj = np.concatenate(out_jobs).astype(np.int64)
        pt = np.concatenate(out_thr)
        order = np.lexsort((pj[:, 1], pj[:, 0]))
        return pj[order], pt[order]

    # -- for people -------------------------------------------------------------------
    def estimates(self, worker_types: Sequence[str]) -> dict[str, RowEstimate]:
        """The current estimate of every job looked up recently."""
        return {job: self.estimate_job(job, worker_types) for job in self._jobs}


__all__ = ["EMA_ALPHA", "EstimatingThroughputs", "Fingerprint", "KINDS", "Measured", "ReferenceSet",
           "RowEstimate", "complete", "measured_confidence"]

"""How much the estimator believes what a job says about itself.

A job's throughput reports (its progress file, its ``speeds=`` hint) are
written by its user.  Two rules keep a liar from fooling the scheduler:

* **Plausibility** (`Ceilings`): a report that is not a finite number >= 0,
  or exceeds the *ceiling* of its (model, scale factor, GPU type), is dropped
  (`DropLog` says so, naming the job, at most once per `LOG_EVERY` seconds per
  job).  The ceiling is `Trust.ceiling` times the reference table's row for
  the model, or, for a model the table does not know, times the fastest row
  the table has on that GPU type (at the same scale factor when it has one);
  never above `Trust.max_steps_per_second`.  Without a table only that
  absolute bound applies.  A hint above the ceiling is cut to it.
* **Consensus for shared rows** (`agreeing_users`): a job's own (plausible)
  measurements always shape its own row, but the model-level rows every job
  of the model learns from take a job's measurement only if its user is in
  `trusted_users`, or if at least `shared_min_users` distinct users currently
  report on that (model, scale factor, type), the job and its user are within
  a factor `agreement` of the median over users (each user counted once, by
  the median of their jobs), and at least `shared_min_users` users are.  One
  user with many jobs is one voice; an outlier is not folded in.

`Trust()` (the library's default, used by the simulator whose jobs are all
honest and have no users) shares every plausible measurement as before;
the daemon's defaults (slurm/config.py, ``[estimator]``) ask for two users.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

log = logging.getLogger("slurm_gavel.estimator")

DEFAULT_CEILING = 10.0
DEFAULT_AGREEMENT = 1.5
LOG_EVERY = 600.0            # seconds between two log lines about one job's implausible reports


@dataclass(frozen=True)
class Trust:
    ceiling: float = DEFAULT_CEILING               # x the table's row (known model) / fastest row on the type
    max_steps_per_second: float = math.inf         # absolute bound on any report
    shared_min_users: int = 1                      # distinct users who must agree before a shared row learns
    agreement: float = DEFAULT_AGREEMENT           # "agree": within this factor of the users' median
    trusted_users: frozenset = field(default_factory=frozenset)   # shared at once

    def problems(self) -> list[tuple[str, str]]:
        """(key, problem) for each bad value (empty when all are usable)."""
        out = []

        def number(v):
            return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)

        if not (number(self.ceiling) and self.ceiling >= 1):
            out.append(("ceiling", f"must be a number >= 1, got {self.ceiling!r}"))
        if not (number(self.max_steps_per_second) and self.max_steps_per_second > 0):
            out.append(("max_steps_per_second", f"must be a number > 0, got {self.max_steps_per_second!r}"))
        m = self.shared_min_users
        if not (isinstance(m, int) and not isinstance(m, bool) and 1 <= m <= 1000):
            out.append(("shared_min_users", f"must be a whole number 1-1000, got {m!r}"))
        if not (number(self.agreement) and self.agreement >= 1):
            out.append(("agreement", f"must be a number >= 1, got {self.agreement!r}"))
        if not (isinstance(self.trusted_users, (frozenset, set, list, tuple))
                and all(isinstance(u, str) and u for u in self.trusted_users)):
            out.append(("trusted_users", f"must be a list of user names, got {self.trusted_users!r}"))
        return out


class Ceilings:
    """The highest plausible steps/s per (model, scale factor, GPU type), from a reference table."""

    def __init__(self, trust: Trust, reference=None, known: Callable[[str, int], bool] = lambda m, sf: True):
        self.trust, self.reference, self.known = trust, reference, known
        self._cache: dict[tuple, float] = {}

    def __call__(self, model: str | None, scale_factor: int | None, worker_type: str) -> float:
        key = (model, scale_factor, worker_type)
        c = self._cache.get(key)
        if c is None:
            c = self._cache[key] = self._ceiling(model, scale_factor, worker_type)
        return c

    def _ceiling(self, model, sf, wt) -> float:
        bound = float(self.trust.max_steps_per_second)
        ref, factor = self.reference, float(self.trust.ceiling)
        if ref is None or not math.isfinite(factor):
            return bound
        if model is not None and self.known(model, sf):
            own = ref.solo(model, sf).get(wt, 0.0)
            if own > 0:
                return min(bound, factor * own)
        # the fastest row the table has on this type, at the same scale factor when it has one
        rows = getattr(ref, "solo_by_type", {}).get(wt, {})
        same = [v for (m, s), v in rows.items() if s == sf and v > 0]
        top = max(same or [v for v in rows.values() if v > 0] or [0.0])
        return min(bound, factor * top) if top > 0 else bound


def agreeing_users(values: Mapping[str, list[float]], trust: Trust) -> tuple[float, set[str]]:
    """(median over users, users within `agreement` of it) for per-user report lists;
    the agreeing set is empty unless at least `shared_min_users` users agree."""
    per_user = {u: float(np.median(v)) for u, v in values.items() if v}
    if not per_user:
        return math.nan, set()
    m = float(np.median(list(per_user.values())))
    f = float(trust.agreement)
    agree = {u for u, v in per_user.items() if within(v, m, f)}
    return m, (agree if len(agree) >= trust.shared_min_users else set())


def within(v: float, m: float, factor: float) -> bool:
    if m <= 0 or v <= 0:
        return v == m
    return m / factor <= v <= m * factor


class DropLog:
    """Logs dropped reports, at most one line per job per `every` seconds (with a count)."""

    def __init__(self, every: float = LOG_EVERY):
        self.every = every
        self._last: dict[str, float] = {}
        self._count: dict[str, int] = {}

    def dropped(self, job: str, worker_type: str, value: float, why: str, now: float) -> None:
        self._count[job] = self._count.get(job, 0) + 1
        last = self._last.get(job)
        if last is not None and now - last < self.every:
            return
        n, self._count[job] = self._count[job], 0
        self._last[job] = now
        log.warning("job %s: implausible throughput report dropped (%s steps/s on %s: %s)%s",
                    job, f"{value:.6g}", worker_type, why,
                    f"; {n - 1} more since the last such line" if n > 1 else "")

    def forget(self, job: str) -> None:
        self._last.pop(job, None)
        self._count.pop(job, None)


__all__ = ["Ceilings", "DropLog", "LOG_EVERY", "Trust", "agreeing_users", "within"]

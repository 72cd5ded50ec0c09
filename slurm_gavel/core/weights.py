"""Job weights as the policy sees them: bounded so that no user can zero out others.

A job's weight is whatever its user wrote (``weight=`` in the job's flags,
anything in (0, 1000000]).  Handed to a policy as is, ``weight=1000000`` next
to ``weight=0.000001`` makes max-min fairness's coefficients span twelve
orders of magnitude: the LP's optimum is 0 within the solver's tolerance and
*neither* job gets an allocation.  `WeightLimits.apply` is what the driver
does before building the `PolicyInput` (the policies stay pure):

1. a per-user or per-account cap, if the admin set one (``[weights.users]``,
   ``[weights.accounts]`` in gavel.toml; the user's entry wins over the
   account's), replaces the global maximum for that job;
2. the weight is clamped into [`min`, that maximum];
3. all weights are divided by their median.  The policies' optima do not
   depend on the weights' common scale, so this changes no allocation; it
   keeps the numbers near 1, where the solvers are accurate.

With the defaults ([0.1, 10]) two jobs' weights differ by at most 100x, so
every job a policy gives a share keeps a share.  Plain data; no I/O.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

DEFAULT_MIN_WEIGHT = 0.1
DEFAULT_MAX_WEIGHT = 10.0


@dataclass(frozen=True)
class WeightLimits:
    min: float = DEFAULT_MIN_WEIGHT
    max: float = DEFAULT_MAX_WEIGHT
    users: Mapping[str, float] = field(default_factory=dict)      # user -> its jobs' maximum
    accounts: Mapping[str, float] = field(default_factory=dict)   # account -> its jobs' maximum

    def problems(self) -> list[tuple[str, str]]:
        """(key, problem) for each bad value (empty when all are usable)."""
        out = []

        def positive(v):
            return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0

        for key in ("min", "max"):
            if not positive(getattr(self, key)):
                out.append((key, f"must be a number > 0, got {getattr(self, key)!r}"))
        if not out and self.min > self.max:
            out.append(("min", f"must not exceed max ({self.max})"))
        for table in ("users", "accounts"):
            for name, cap in getattr(self, table).items():
                if not positive(cap):
                    out.append((f"{table}.{name}", f"must be a number > 0, got {cap!r}"))
                elif not out and cap < self.min:
                    out.append((f"{table}.{name}", f"must not be below min ({self.min})"))
        return out

    def cap(self, user: str, account: str) -> float:
        """The largest weight a job of `user` in `account` may have."""
        if user and user in self.users:
            return float(self.users[user])
        if account and account in self.accounts:
            return float(self.accounts[account])
        return float(self.max)

    def bounded(self, weight: float, user: str = "", account: str = "") -> float:
        """One job's weight, capped and clamped (not yet normalized)."""
        w = float(weight)
        if not (math.isfinite(w) and w > 0):
            w = 1.0                      # the default weight; JobState should never carry this
        return min(max(w, float(self.min)), self.cap(user, account))

    def apply(self, jobs: Sequence) -> np.ndarray:
        """The weights of `jobs` (JobState-like: weight, user, account) as the policy gets them."""
        w = np.array([self.bounded(j.weight, getattr(j, "user", ""), getattr(j, "account", ""))
                      for j in jobs], dtype=float)
        if len(w):
            w = w / float(np.median(w))
        return w


__all__ = ["DEFAULT_MAX_WEIGHT", "DEFAULT_MIN_WEIGHT", "WeightLimits"]

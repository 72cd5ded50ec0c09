"""Time for the engine: a clock object, so the simulator and tests drive time themselves.

The engine never calls `time.time()` or `time.sleep()`.  It asks its clock
for `now()` and to `sleep_until(t)`.  `WallClock` is the daemon's (real
seconds since the epoch); `SimulatedClock` jumps straight to the requested
time, which is what makes a month of simulated rounds take seconds and the
same seed give the same result.
"""
from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep_until(self, t: float) -> None: ...


class WallClock:
    """Real time.  `sleep_until` can be cut short by `wake()` (a signal handler, a stop request)."""

    def __init__(self):
        self._wake = threading.Event()

    def now(self) -> float:
        return time.time()

    def sleep_until(self, t: float) -> None:
        self._wake.clear()
        delay = t - time.time()
        if delay > 0:
            self._wake.wait(delay)

    def wake(self) -> None:
        self._wake.set()


class SimulatedClock:
    """Simulated seconds: `sleep_until` moves time forward at once (never backward)."""

    def __init__(self, start: float = 0.0):
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def sleep_until(self, t: float) -> None:
        if t > self._now:
            self._now = float(t)


__all__ = ["Clock", "SimulatedClock", "WallClock"]

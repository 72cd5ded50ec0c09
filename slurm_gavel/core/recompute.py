"""When a new allocation is computed, and when the engine may use it.

The engine hands every new `PolicyInput` to an allocator (the interface is
`Allocator`, interfaces.py) with `submit` and asks it each round for the
newest finished allocation with `latest`.  The engine never waits on a solve
longer than the patience it is given (`Allocator.wait`): until a result is
ready it keeps the previous allocation (and gives newcomers an agnostic
share), so a slow or failed solve degrades the cluster to the baseline
scheduler, never stalls it.

* `Immediate`: solves inside `submit` (the simulator's, deterministic).
* `Delayed`: like `Immediate`, but the result only becomes visible a fixed
  number of (clock) seconds later: a slow solver, reproducibly, for the
  simulator and tests.
* `Background`: solves in a worker thread (the daemon's); newer inputs
  replace a queued one that has not started.

A solve that fails (`GavelError`: solver status, bad input) is recorded in
`errors` and leaves the previous allocation in force.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from .errors import GavelError
from .interfaces import Allocator
from .model import Allocation, PolicyInput


def policy_with(allocator, method: str):
    """The first policy along the allocator's chain of wrappers (`.policy`) that has `method`
    (e.g. `memory`, what a policy keeps between solves), or None."""
    obj = getattr(allocator, "policy", None)
    for _ in range(16):             # wrappers are a few deep; never loop on a cycle
        if obj is None:
            return None
        if callable(getattr(obj, method, None)):
            return obj
        obj = getattr(obj, "policy", None)
    return None


@dataclass(frozen=True)
class Failure:
    time: float
    error: str


class _Base(Allocator):
    def __init__(self, policy, on_error: Callable[[Failure], None] | None = None):
        self.policy = policy
        self.errors: list[Failure] = []
        self.solves = 0
        self.solve_seconds = 0.0
        self._on_error = on_error

    def _solve(self, inp: PolicyInput, now: float) -> Allocation | None:
        started = time.perf_counter()
        try:
            return self.policy.allocate(inp)
        except GavelError as e:
            failure = Failure(now, f"{type(e).__name__}: {e}")
            self.errors.append(failure)
            if self._on_error:
                self._on_error(failure)
            return None
        finally:
            self.solves += 1
            self.solve_seconds += time.perf_counter() - started


class Immediate(_Base):
    """Solve at once; `latest` returns the newest successful allocation."""

    def __init__(self, policy, on_error=None):
        super().__init__(policy, on_error)
        self._latest: Allocation | None = None

    def submit(self, inp: PolicyInput, now: float) -> None:
        result = self._solve(inp, now)
        if result is not None:
            self._latest = result

    def latest(self, now: float) -> Allocation | None:
        return self._latest


class Delayed(_Base):
    """A solver that takes `delay` clock seconds: one solve at a time, newest input next."""

    def __init__(self, policy, delay: float, on_error=None):
        super().__init__(policy, on_error)
        self.delay = float(delay)
        self._latest: Allocation | None = None
        self._running: tuple[float, PolicyInput] | None = None   # (ready at, input)
        self._queued: PolicyInput | None = None

    def submit(self, inp: PolicyInput, now: float) -> None:
        self._advance(now)
        if self._running is None:
            self._running = (now + self.delay, inp)
        else:
            self._queued = inp

    def _advance(self, now: float) -> None:
        while self._running is not None and self._running[0] <= now:
            ready, inp = self._running
            result = self._solve(inp, ready)
            if result is not None:
                self._latest = result
            self._running = None
            if self._queued is not None:
                self._running = (ready + self.delay, self._queued)
                self._queued = None

    def latest(self, now: float) -> Allocation | None:
        self._advance(now)
        return self._latest

    @property
    def pending(self) -> bool:
        return self._running is not None


class Background(_Base):
    """Solve in a daemon thread; `submit` never blocks.

    A solve longer than `budget` seconds is reported (`on_slow`): it cannot be
    cut short, but the rounds go on with the previous allocation meanwhile.
    """

    def __init__(self, policy, on_error=None, budget: float | None = None, on_slow=None):
        super().__init__(policy, on_error)
        self.budget, self._on_slow = budget, on_slow
        self._latest: Allocation | None = None
        self._queued: tuple[PolicyInput, float] | None = None
        self._busy = False
        self._closed = False
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._work, name="gavel-solver", daemon=True)
        self._thread.start()

    def submit(self, inp: PolicyInput, now: float) -> None:
        with self._cv:
            self._queued = (inp, now)      # a newer input replaces one that has not started
            self._cv.notify()

    def _work(self):
        while True:
            with self._cv:
                while self._queued is None and not self._closed:
                    self._cv.wait()
                if self._closed:
                    return
                inp, now = self._queued
                self._queued = None
                self._busy = True
            started = time.perf_counter()
            result = self._solve(inp, now)
            took = time.perf_counter() - started
            if self.budget is not None and took > self.budget and self._on_slow:
                self._on_slow(took)
            with self._cv:
                if result is not None:
                    self._latest = result
                self._busy = False
                self._cv.notify_all()

    def latest(self, now: float) -> Allocation | None:
        with self._cv:
            return self._latest

    @property
    def pending(self) -> bool:
        with self._cv:
            return self._busy or self._queued is not None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until no solve is queued or running (tests, --max-rounds)."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._busy and self._queued is None, timeout)

    def close(self):
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._thread.join(timeout=1.0)


__all__ = ["Background", "Delayed", "Failure", "Immediate"]

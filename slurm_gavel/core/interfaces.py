"""The interfaces the engine is driven through: Backend, Store, ThroughputSource, Allocator.

Each is an abstract base class that its implementations subclass: the engine
calls every member declared here directly, never probes for one.  A member
only some implementations have is declared with a default that means "this
implementation does not do that" (the engine then behaves as without it):

* `Backend.quiet_until` None: the backend cannot say when the next job arrives
  or finishes, so every round is planned;  `Backend.max_pair_gpus` None: it can
  run pairs of jobs of any size.
* `Store.keeps_usage` True: it is handed every usage record;
  `Store.engine_state` does nothing, and `Store.keeps_state` is True exactly
  when a subclass implements it (the engine then hands over its working state
  for a restart, and otherwise does not build it).
* `ThroughputSource.record` ignores measurements, and `ThroughputSource.learns`
  is True exactly when a subclass implements it (the simulator then reports
  measurements);  `ThroughputSource.stale` is False: its numbers never move
  on their own.
* `Allocator.pending` is False and `Allocator.wait` returns at once: it
  solves inside `submit` (or on a clock it cannot be waited on).

`MeasurementStore` is what the throughput estimator keeps its measurements and
estimates in (the daemon's SQLite store); the engine does not use it.

The data these members take and return (`Observation`, `RoundPlan`, ...) lives
in backend.py, plan.py, model.py, state.py and throughputs.py, which import
this module, not the other way round.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

if TYPE_CHECKING:
    from .backend import Departure, Measurement, Observation, Usage
    from .model import Allocation, PolicyInput
    from .plan import RoundPlan
    from .state import EngineState
    from .throughputs import JobThroughputs


class Backend(ABC):
    """A cluster the engine schedules: it reports what is, and carries out round plans."""

    worker_types: tuple[str, ...]
    # A time (the engine's clock) before which no job arrives or finishes, so that a round
    # in which nothing changed can renew every lease without being planned.  None: unknown.
    quiet_until: float | None = None
    # The most GPUs each job of a pair row may have (pairs the backend can run); None: any.
    max_pair_gpus: int | None = None

    @abstractmethod
    def observe(self) -> Observation:
        """The cluster now: active jobs, servers, what ran since the last observation, departures."""

    @abstractmethod
    def execute(self, plan: RoundPlan, round_end: float) -> None:
        """Carry out `plan`: leave `keep` alone, stop `preempt`, start `start`."""


class Store(ABC):
    """Where the engine writes down what it observed and decided (it never reads it back)."""

    # False: the store drops usage records, and the engine does not hand them over.
    keeps_usage: bool = True

    @abstractmethod
    def observe(self, time: float, observation: Observation) -> None: ...

    @abstractmethod
    def allocation(self, round: int, time: float, allocation: Allocation, fresh: bool) -> None: ...

    @abstractmethod
    def round(self, time: float, plan: RoundPlan) -> None: ...

    @abstractmethod
    def usage(self, time: float, usage: Usage) -> None: ...

    @abstractmethod
    def departure(self, departure: Departure) -> None: ...

    def engine_state(self, state: EngineState) -> None:
        """Keep the engine's working state for a restart (this default keeps nothing)."""

    @property
    def keeps_state(self) -> bool:
        """Whether `engine_state` keeps anything: a subclass implements it."""
        return type(self).engine_state is not Store.engine_state


class MeasurementStore(ABC):
    """Where the throughput estimator keeps measurements across restarts, and its estimates.

    Rows are plain dicts: a model-level row has model, scale_factor,
    worker_type, partner, spread, steps_per_second, samples, updated; a
    job-level row the same with job instead of model and scale_factor; an
    estimate row job, model, scale_factor, worker_type, steps_per_second,
    kind, confidence, phase, proxy, time.
    """

    @abstractmethod
    def load_throughputs(self) -> tuple[list[dict], list[dict]]:
        """(model-level rows, job-level rows) of the measurements kept."""

    @abstractmethod
    def save_throughputs(self, model_rows: Iterable[Mapping], job_rows: Iterable[Mapping] = ()) -> None:
        """Insert or replace measurement rows (keyed without their value, samples and time)."""

    @abstractmethod
    def forget_job_throughputs(self, jobs: Iterable[str]) -> None:
        """Drop the job-level rows and estimates of `jobs` (they left); model-level rows stay."""

    @abstractmethod
    def save_estimates(self, rows: Iterable[Mapping]) -> None:
        """The estimates the policy was given (one row per job and type; other jobs' stay)."""


class ThroughputSource(ABC):
    """What each job (and pair of jobs sharing GPUs) runs at, on each worker type."""

    @abstractmethod
    def lookup(self, jobs: Sequence, worker_types: Sequence[str],
               include_pairs: bool = False) -> JobThroughputs:
        """The throughputs of `jobs` (objects with id, job_type, scale_factor) on `worker_types`."""

    def record(self, measurements: Iterable[Measurement]) -> None:
        """Learn from what running jobs made (this default learns nothing)."""

    @property
    def learns(self) -> bool:
        """Whether `record` uses measurements: a subclass implements it."""
        return type(self).record is not ThroughputSource.record

    def stale(self) -> bool:
        """Whether numbers the policy was given have moved since (a re-solve is due)."""
        return False


class Allocator(ABC):
    """Turns policy inputs into allocations, in its own time: the engine never waits on it
    (but for `wait`, up to the patience it is given)."""

    @abstractmethod
    def submit(self, inp: PolicyInput, now: float) -> None:
        """A new input to solve (it may replace one not yet started)."""

    @abstractmethod
    def latest(self, now: float) -> Allocation | None:
        """The newest allocation solved by `now` (None: none yet)."""

    @property
    def pending(self) -> bool:
        """Whether a submitted input is still being solved."""
        return False

    def wait(self, timeout: float | None = None) -> bool:
        """Block until no solve is pending or `timeout` seconds passed; whether none is."""
        return not self.pending

    def close(self) -> None:
        """Stop solving (a worker thread ends)."""


__all__ = ["Allocator", "Backend", "MeasurementStore", "Store", "ThroughputSource"]

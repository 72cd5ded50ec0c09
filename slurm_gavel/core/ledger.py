"""The mechanism's memory: the time each row has received on each worker type, and churn.

`Ledger` keeps, per row (a job or a pair of jobs), the seconds it received on
each worker type since the last reset (what priorities are computed from),
what it was still owed at earlier resets, and each job's total.  `Churn` says
how those seconds are shifted before priorities are taken, so that renewing a
lease is preferred to moving a job (core/mechanism.py uses both).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Sequence

import numpy as np

from .plan import Assignment, Row


@dataclass(frozen=True)
class Churn:
    """How strongly the mechanism prefers renewing a lease to moving a job (seconds).

    `hysteresis`: a running row competes for its GPUs as if it had received
    this much less time on them, so another row takes them only when it is
    more behind its share by about that much (a bounded lease: once the
    running row is that far ahead, plain priorities decide again).
    `restart_seconds`: what a start or resume costs the job (requeue, launch,
    checkpoint load); a row that would start competes as if it had already
    received that time, so a move must gain more than it loses.
    `seed_seconds`: time every entry counts as received (Gavel seeds half a
    round), so that after a reset priorities are X / seed, finite and in the
    order of X, instead of all infinite at once.  `move_hysteresis`: a running
    row's other types compete as if it had received that much more there, so
    that it moves to another type of its own accord only when it is that far
    behind there (two running jobs no longer swap types to even out their
    time fractions; a waiting job still preempts after `hysteresis`).
    `max_preemptions`: at most this many jobs stopped in one round (0: no cap),
    so that a large reshuffle is spread over a few rounds instead of one wave
    of hundreds of preemptions that the workload manager must carry out at
    once; the jobs kept run on, the jobs kept waiting come first next round.
    `max_starts`: at most this many jobs that are not running started in one round
    (0: no cap), the ones most behind their share first, so that filling a large cluster
    is spread over a few rounds of Slurm work instead of one round of thousands of
    starts; the ones kept waiting are more behind next round, so they come first then.
    (A running job moved elsewhere is a preemption, bounded by `max_preemptions`.)
    `load_exponent` and `max_lease_scale`: how the two leases grow with the
    load, and by how much at most (`lease_scale`); exponent 0 keeps them as given.
    The defaults are the plain mechanism of the paper.
    """

    hysteresis: float = 0.0
    restart_seconds: float = 0.0
    seed_seconds: float = 0.0
    move_hysteresis: float = 0.0
    max_preemptions: int = 0
    max_starts: int = 0
    load_exponent: float = 0.0
    max_lease_scale: float = 1.0

    def __post_init__(self):
        for name in ("hysteresis", "restart_seconds", "seed_seconds", "move_hysteresis", "load_exponent"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a number of seconds >= 0, got {value}")
        if not (self.max_lease_scale >= 1 and math.isfinite(self.max_lease_scale)):
            raise ValueError(f"max_lease_scale must be a number >= 1, got {self.max_lease_scale}")
        for name in ("max_preemptions", "max_starts"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
                raise ValueError(f"{name} must be a whole number >= 0, got {value!r}")

    def lease_scale(self, load: float) -> float:
        """By how much the leases grow at `load` (GPUs the jobs ask for over the GPUs there are).

        A restart wastes `restart_seconds` of GPU time.  While every job fits
        (load <= 1) that delays only the job restarted.  When n jobs share G
        GPUs (load n / G > 1), every job runs at G / n of a GPU, so a GPU-second
        lost delays each of them by 1 / G of a second: the lost time costs the
        jobs' completion times load times what it costs the restarted job
        alone.  Leases `load` times longer cut the restarts per hour by as much,
        so the cost of restarts in completion time stays what it is on a cluster
        that is not oversubscribed.  The scale is load ** `load_exponent` (1 is
        that argument; more grows faster, 0 turns the rule off), at most
        `max_lease_scale`: a lease much longer than the one chosen for a cluster
        that is not oversubscribed keeps jobs from the split X gives them.  No
        restart cost, no growth.  (Measured: docs/simulation.md, "High load".)
        """
        if not (self.load_exponent and self.restart_seconds and load > 1.0):
            return 1.0
        return min(self.max_lease_scale, float(load) ** self.load_exponent)

    def under_load(self, load: float) -> "Churn":
        """These settings with both leases (`hysteresis`, `move_hysteresis`) times
        `lease_scale(load)`; self when they do not grow."""
        scale = self.lease_scale(load)
        if scale == 1.0:
            return self
        return replace(self, hysteresis=self.hysteresis * scale,
                       move_hysteresis=self.move_hysteresis * scale, load_exponent=0.0)

    def received(self, received: np.ndarray, staying: Sequence[tuple[int, int]]) -> np.ndarray:
        """The time each entry competes with (`received` is changed in place and returned):
        seeded, minus the lease credit of the (row, type) entries in `staying`, plus the
        restart cost for every other entry, plus `move_hysteresis` for the other types of
        a running row (a move of its own)."""
        if not staying:
            return self._shifted(received, None, None)
        return self._shifted(received, [rt[0] for rt in staying], [rt[1] for rt in staying])

    def _shifted(self, received: np.ndarray, r, t) -> np.ndarray:
        """`received` for the running (row, type) entries given as index arrays `r`, `t`
        (None: no row runs)."""
        shift = self.seed_seconds + self.restart_seconds
        if shift:
            received += shift
        credit = self.hysteresis + self.restart_seconds
        if (credit or self.move_hysteresis) and r is not None and len(r):
            if self.move_hysteresis:
                received[r] += self.move_hysteresis
                credit += self.move_hysteresis
            received[r, t] -= credit          # <= 0: an infinite priority while the lease lasts
        return received

    def running(self, received: list[float]) -> list[float]:
        """`_shifted` of entries each of which is a running row on the type it runs on
        (the same float operations, in plain Python for the few entries of a round)."""
        shift = self.seed_seconds + self.restart_seconds
        credit = self.hysteresis + self.restart_seconds
        move = self.move_hysteresis
        if move:
            credit += move
        out = []
        for seconds in received:
            if shift:
                seconds += shift
            if credit:       # (move > 0 makes credit > 0)
                if move:
                    seconds += move
                seconds -= credit
            out.append(seconds)
        return out


PLAIN = Churn()


class Ledger:
    """Seconds each row has received on each worker type.

    `since_reset` drives priorities and restarts at every reset event (a new
    allocation), so that it measures how well the current X is being met;
    `owed` carries over resets what each row was still owed (X times the
    interval, minus what it received; Gavel's deficits), bounded, so that a
    job kept on one type by the hysteresis is moved to the others in the long
    run; `total` keeps each job's time per type for good (a pair's time
    counts for both of its jobs).
    """

    def __init__(self, worker_types: Sequence[str]):
        self.worker_types = tuple(worker_types)
        self._column = {wt: j for j, wt in enumerate(self.worker_types)}
        self._since_reset: dict[Row, list[float]] = {}    # lists: cheaper to add to than arrays
        self._total: dict[str, list[float]] = {}
        self._owed: dict[Row, list[float]] = {}
        self._owed_seen: tuple = (None, -1, None)     # (rows, version, array): owed changes at resets
        self._owed_version = 0

    def record(self, assignments: Iterable[Assignment], seconds: float):
        """Credit `seconds` of a round to every row that ran in it."""
        self.record_each((a, seconds) for a in assignments)

    def record_each(self, timed: Iterable[tuple[Assignment, float]]):
        """Credit each (assignment, seconds) pair: what each row held since the last observation."""
        k = len(self.worker_types)
        since, total, column = self._since_reset, self._total, self._column
        for a, seconds in timed:
            j = column[a.worker_type]
            row = since.get(a.jobs)
            if row is None:
                row = since[a.jobs] = [0.0] * k
            row[j] += seconds
            for job in a.jobs:
                acc = total.get(job)
                if acc is None:
                    acc = total[job] = [0.0] * k
                acc[j] += seconds

    def reset(self, owed: Iterable[tuple[Row, Sequence[float]]] = (), cap: float = math.inf):
        """Restart the since-reset time; add `owed` (seconds per type, negative: received more
        than owed) to what each row is owed, each entry kept within +-`cap`."""
        self._since_reset.clear()
        self._owed_version += 1
        k = len(self.worker_types)
        book, low = self._owed, -cap
        for row, seconds in owed:
            acc = book.get(row)
            if acc is None:
                acc = book[row] = [0.0] * k
            new = [min(cap, max(low, v + float(s))) for v, s in zip(acc, seconds)]
            acc[:len(new)] = new

    @property
    def jobs(self) -> set[str]:
        """Every job the ledger holds time or a deficit for (what `forget` has not dropped)."""
        return set(self._total).union(*self._since_reset, *self._owed)

    def forget(self, job: str):
        """Drop a job that left the system (completed, cancelled)."""
        self._total.pop(job, None)
        for row in [r for r in self._since_reset if job in r]:
            del self._since_reset[row]
        gone = [r for r in self._owed if job in r]
        for row in gone:
            del self._owed[row]
        if gone:
            self._owed_version += 1

    def owed(self, rows: Sequence[Row]) -> np.ndarray | None:
        """(R, k) seconds each row was owed at the last reset (None: nothing is owed to anyone)."""
        if not self._owed:
            return None
        seen_rows, version, array = self._owed_seen
        if seen_rows is rows and version == self._owed_version:
            return array             # kept while neither the rows nor what is owed changed
        k = len(self.worker_types)
        zero = [0.0] * k
        get = self._owed.get
        # map, not a generator expression: no Python frame per row
        flat = itertools.chain.from_iterable(map(get, rows, itertools.repeat(zero)))
        array = np.fromiter(flat, dtype=float, count=len(rows) * k).reshape(len(rows), k)
        array.flags.writeable = False
        self._owed_seen = (rows, self._owed_version, array)
        return array

    def received(self, rows: Sequence[Row], columns: Sequence[int]) -> list[float]:
        """For each row, the seconds it received on the type in its column since the last
        reset, less what it was owed then: entries of `since_reset(rows) - owed(rows)`."""
        get, owed = self._since_reset.get, self._owed.get if self._owed else None
        out = []
        for row, j in zip(rows, columns):
            seconds = get(row)
            value = 0.0 if seconds is None else seconds[j]
            if owed is not None:
                o = owed(row)
                value -= 0.0 if o is None else o[j]
            out.append(value)
        return out

    def since_reset(self, rows: Sequence[Row]) -> np.ndarray:
        """(R, k) seconds each row received since the last reset."""
        k = len(self.worker_types)
        zero = [0.0] * k
        get = self._since_reset.get
        flat = itertools.chain.from_iterable(map(get, rows, itertools.repeat(zero)))
        return np.fromiter(flat, dtype=float, count=len(rows) * k).reshape(len(rows), k)

    def total(self, job: str) -> dict[str, float]:
        seconds = self._total.get(job, [0.0] * len(self.worker_types))
        return dict(zip(self.worker_types, map(float, seconds)))

    def snapshot(self) -> tuple[dict[Row, tuple[float, ...]], dict[str, tuple[float, ...]]]:
        """(since reset per row, total per job), seconds per worker type in column order."""
        return ({row: tuple(s) for row, s in self._since_reset.items()},
                {job: tuple(s) for job, s in self._total.items()})

    def owed_snapshot(self) -> dict[Row, tuple[float, ...]]:
        """What each row is owed from before the last reset, seconds per worker type."""
        return {row: tuple(s) for row, s in self._owed.items()}

    def restore(self, since_reset: Mapping[Row, Sequence[float]],
                total: Mapping[str, Sequence[float]],
                owed: Mapping[Row, Sequence[float]] | None = None) -> None:
        """Take over a snapshot (a restarted daemon picks up where its last run stopped)."""
        k = len(self.worker_types)
        owed = owed or {}
        for seconds in [*since_reset.values(), *total.values(), *owed.values()]:
            if len(seconds) != k:
                raise ValueError(f"ledger snapshot has {len(seconds)} worker types, not {k}")
        self._since_reset = {tuple(row): [float(s) for s in v] for row, v in since_reset.items()}
        self._total = {job: [float(s) for s in v] for job, v in total.items()}
        self._owed = {tuple(row): [float(s) for s in v] for row, v in owed.items()}
        self._owed_version += 1


__all__ = ["PLAIN", "Churn", "Ledger"]

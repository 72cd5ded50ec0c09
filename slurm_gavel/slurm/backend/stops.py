"""Preemption: which jobs a round stops, the signal, its delay for young jobs, its escalation.

A preempted job gets `scancel --batch --signal=USR2` (configurable); it saves a checkpoint
and exits with the requeue-hold code, and Slurm requeues it held.  A job still running
`grace_seconds` later is requeued held with `scontrol requeuehold` (`_escalate`).  A job
that started less than `min_run_seconds` ago (at most half a round; the daemon's default
30 s, 0 here) is signalled once it has run that long, so that a batch script has set its
trap (`young`, `_signal_young`).  A pair stops together: its partner cannot go on alone on
half a GPU's shards (`stops_for`); a pair released but not started is taken back whole
(`unstarts_for`).

`Stopping` holds this state for `SlurmBackend`: `_preempted`, `_signal_later`.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Collection, Mapping

from ...core.plan import Assignment, RoundPlan
from ..commands import SlurmCommandError, ended_jobs
from ..records import SlurmJob
from .pairs.sharing import partner

log = logging.getLogger("slurm_gavel.slurm")


@dataclass
class Preempted:
    at: float
    escalated: bool = False


def min_run(min_run_seconds: float, round_seconds: float | None) -> float:
    """How long a job runs before it is signalled: `min_run_seconds`, at most half
    of a round (a job started at a round's start is never held back)."""
    if round_seconds:
        return min(min_run_seconds, round_seconds / 2)
    return min_run_seconds


def young(stop: list[str], jobs: Mapping[str, SlurmJob], pairs: Mapping[str, Assignment],
          guard: float, now: float) -> dict[str, float]:
    """Of the jobs to signal, those that started less than `guard` seconds ago, with when
    their signal is due.  A batch script killed by the signal before it set its trap
    fails instead of being requeued (seen on both versions 3-8 s after a late start).
    The two jobs of a pair wait for the younger one: a pair stops together."""
    due = {}
    for job in stop:
        j = jobs.get(job)
        started = j.start_time if j is not None else None
        if guard > 0 and started is not None and now - started < guard:
            due[job] = started + guard
    for job in list(due):
        other = partner(pairs, job)
        if other in stop:
            due[other] = max(due.get(other, now), due[job])
            due[job] = due[other]
    return due


def stops_for(plan: RoundPlan, running: Collection[str], preempted: Collection[str],
              joining: Collection[str], signal_later: Collection[str],
              pairs: Mapping[str, Assignment]) -> list[str]:
    """The running jobs this plan preempts that are not stopping yet (nor joined by a new
    partner, nor waiting for their minimum run), with the partner of each: a pair stops
    together, unless the plan keeps the partner."""
    stop = [job for job in plan.preempt if job in running and job not in preempted
            and job not in joining and job not in signal_later]
    kept = {job for a in plan.keep for job in a.jobs}
    for job in plan.preempt:
        other = partner(pairs, job)
        if (other in running and other not in preempted
                and other not in stop and other not in kept):
            stop.append(other)
    return stop


def unstarts_for(plan: RoundPlan, starting: Collection[str], running: Collection[str],
                 pairs: Mapping[str, Assignment]) -> list[str]:
    """The jobs this plan preempts that were released and have not started (a pair: both,
    unless the plan keeps the partner): they are held again."""
    kept = {job for a in plan.keep for job in a.jobs}
    unstart = [job for job in plan.preempt if job in starting and job not in running]
    for job in plan.preempt:
        other = partner(pairs, job)
        if (other in starting and other not in running and other not in unstart
                and other not in kept):
            unstart.append(other)
    return unstart


class Stopping:
    """The preemptions of `SlurmBackend` (which sets the attributes used here)."""

    def _min_run(self) -> float:
        return min_run(self.min_run_seconds, self.round_seconds)

    def _young(self, stop: list[str], now: float) -> dict[str, float]:
        return young(stop, self._jobs, self._pairs, self._min_run(), now)

    def _stop(self, plan: RoundPlan, now: float) -> None:
        """Carry out the plan's preemptions: a job released and not started is held again,
        a running one is signalled (now, or once its minimum run is over)."""
        stop = stops_for(plan, self._running, self._preempted, self._joining, self._signal_later,
                         self._pairs)
        unstart = unstarts_for(plan, self._starting, self._running, self._pairs)
        if unstart:
            self._act("hold", unstart, lambda: self.cli.hold(unstart),
                      why=f"round {plan.round} gives its GPUs to another job before it started")
            for job in unstart:
                del self._starting[job]
        later = self._young(stop, now)
        if later:
            log.info("round %d preempts %s, started less than %.0f s ago: signalled once %s",
                     plan.round, ",".join(later), self._min_run(),
                     "it has" if len(later) == 1 else "they have")
            self._signal_later.update(later)
            stop = [job for job in stop if job not in later]
        self._signal_now(stop, f"preempted: round {plan.round} gives its GPUs to another job")

    def _signal_now(self, stop: list[str], why: str) -> None:
        if not stop:
            return
        self._act(f"signal {self.signal}", stop,
                  lambda: self._signal_live(stop), why=why)
        now = self.clock.now()
        for job in stop:
            self._preempted[job] = Preempted(now)

    def _signal_live(self, stop: list[str]) -> None:
        """Signal `stop` (in chunks, SlurmCLI.signal); a job that ended since the poll is not
        a failure (scancel signals the others and names it): said at INFO, the next poll sees
        it leave.  The jobs of a chunk that failed otherwise are said (`_act`) and, still
        running `grace_seconds` later, requeued held like any job that ignores its signal."""
        try:
            self.cli.signal(stop, self.signal, full=self.signal_all_steps)
        except SlurmCommandError as e:
            ended = ended_jobs(e.stderr, stop)
            if ended is None or set(e.failed) - ended:     # a chunk failed otherwise (timed out)
                raise
            for job in sorted(ended):
                log.info("signal %s: job %s had already ended (scancel: no such job to signal); "
                         "the others were signalled", self.signal, job)

    def _signal_young(self, now: float) -> None:
        """Signal the preempted jobs whose minimum run is over (`young`); one that stopped
        meanwhile is forgotten."""
        still = {job: at for job, at in self._signal_later.items()
                 if job in self._jobs and self._jobs[job].running}
        due = [job for job, at in still.items() if at <= now]
        self._signal_later = {job: at for job, at in still.items() if at > now}
        self._signal_now(due, f"preempted by round {self._round}: signalled after its minimum run")

    def _escalate(self, now: float) -> None:
        late = [job for job, p in self._preempted.items()
                if not p.escalated and now - p.at >= self.grace_seconds
                and job in self._jobs and self._jobs[job].running]
        if late:
            log.warning("jobs %s did not stop %.0f s after the signal: requeueing them held",
                        ",".join(late), self.grace_seconds)
            self._act("requeuehold", late, lambda: self.cli.requeue_hold(late),
                      why=f"still running {self.grace_seconds:.0f} s after the preemption signal")
            for job in late:
                self._preempted[job].escalated = True

"""What Slurm ran, credited to the ledger: usage between polls, departures, measurements.

Between polls the backend credits each running gavel job with the time it ran on its
partition's GPU type (`Run`: credited up to `since`), so the ledger matches what Slurm ran
to within a tick; a pair's two jobs are credited as their row (pairs/sharing.usage_rows).
Departures are read from Slurm's final state: `sacct` (one batched call per poll) where
accounting exists, else (and while slurmdbd has not caught up) the finished job slurmctld
still lists (MinJobAge); a job Slurm knows no more is "lost", never "completed".  A
restarted daemon passes the jobs its database holds as active (`active_jobs`): those Slurm
no longer runs depart on the first poll, with their real end, and what they ran since the
last run stopped crediting is credited.  Steps done and measured speeds come from the
progress files each job's iterator writes (read through `UserFiles`: users own them).

`Crediting` holds this state for `SlurmBackend`: `_running`, `_usage`, `_departures`,
`_last_poll`, `_credited_until`, `_unreconciled`, `_gone_since`, `_progress`,
`_progress_runs`, `_progress_paths`.
"""
from __future__ import annotations

import logging
import signal as signals
from dataclasses import dataclass
from typing import Iterable, Mapping

from ...core.backend import Departure, Measurement
from ...job.progress import candidate_paths, parse_records, summary
from ..commands import SlurmCommandError
from ..records import FinalState, SlurmJob, final_from_job, final_from_sacct, parse_sacct
from .snapshot import Snapshot
from .pairs.sharing import forget_request, partner

log = logging.getLogger("slurm_gavel.slurm")

# A job gone from the queue whose final state cannot be read (slurmdbd not answering) is
# recorded "lost" after this long; until then its departure waits.
FINAL_STATE_PATIENCE_SECONDS = 300.0


@dataclass
class Run:
    worker_type: str
    nodes: tuple[str, ...]
    since: float                # credited up to here


def credit_from(began: float | None, now: float, last_poll: float | None,
                credited_until: float | None) -> float:
    """Where a run first seen by this poll is credited from: its start if it started since
    the last poll; already running at the first poll (a daemon restart): from where the
    previous run stopped crediting, or from now if that is unknown."""
    began = began or now
    if last_poll is not None:
        start = max(began, last_poll) if began < last_poll else began
    elif credited_until is not None:
        start = max(began, credited_until)
    else:
        start = now
    return min(start, now)


def run_end(job_id: str, now: float, since: float, listed: Iterable[SlurmJob],
            final: FinalState | None) -> float:
    """When a run that stopped since the last poll ended: its final state's end, else the
    finished job's end Slurm lists, if it falls after `since`; else now."""
    finished = next((x for x in listed if x.job_id == job_id), None)
    ended = final.end if final is not None and final.end else (
        finished.end_time if finished is not None else None)
    return ended if ended and since < ended < now else now


def pick_finals(gone: list[str], listed: Iterable[SlurmJob], runs: Mapping, answered: bool,
                gone_since: dict[str, float], now: float) -> dict[str, FinalState | None]:
    """The final state of each job gone from the active queue (`runs`: sacct's answer, or
    {}); None: Slurm knows it no more (lost).  A job without one waits for the next poll
    (sacct failed: at most FINAL_STATE_PATIENCE_SECONDS after it was first missed)."""
    listed = {x.job_id: x for x in listed if x.job_id in set(gone) and x.finished}
    out: dict[str, FinalState | None] = {}
    for job in gone:
        final = final_from_sacct(runs.get(job, ()))
        if final is not None and final.finished:
            out[job] = final
        elif job in listed:               # slurmctld's record (slurmdbd may lag behind)
            out[job] = final_from_job(listed[job], runs.get(job, ()))
        elif answered or now - gone_since.setdefault(job, now) >= FINAL_STATE_PATIENCE_SECONDS:
            out[job] = final              # None, or sacct's record of a run Slurm lost
    return out


def departure(job_id: str, final: FinalState | None, now: float, signal: str,
              preempted_at: float | None, grace_seconds: float) -> tuple[str, float, str]:
    """(state, time, detail) of a departure, in words for the log and gqueue."""
    if final is None:
        log.warning("job %s: not known to Slurm any more: recorded lost", job_id)
        return "lost", now, "not known to Slurm any more"
    state = final.departure
    if state == "lost":
        log.warning("job %s: Slurm no longer runs it, but %s says %s: recorded lost",
                    job_id, final.source, final.state)
        return "lost", now, f"{final.source} says {final.state}, but Slurm no longer runs it"
    detail = final.state + (f", exit code {final.exit_code}" if final.exit_code else "")
    if final.signal:
        detail += f", killed by signal {signal_name(final.signal)}"
    t = final.end or now
    sig = getattr(signals, f"SIG{signal}", None)
    if state == "failed" and (sig is not None and final.signal == int(sig) or (
            preempted_at is not None and t - preempted_at <= grace_seconds + 5)):
        detail = (f"died at preemption: no signal handler? ({detail}; it was sent "
                  f"SIG{signal} to checkpoint)")
        log.warning("job %s %s", job_id, detail)
    else:
        log.info("job %s %s: %s (from %s)", job_id, state, detail, final.source)
    return state, t, detail


def signal_name(number: int) -> str:
    try:
        return signals.Signals(number).name.removeprefix("SIG")
    except ValueError:
        return str(number)


class Crediting:
    """The ledger's side of `SlurmBackend` (which sets the attributes used here)."""

    @property
    def accounting(self) -> bool:
        """Whether `sacct` can answer (AccountingStorageType=accounting_storage/slurmdbd)."""
        if self._accounting is None:
            try:
                self._accounting = self.cli.accounting()
            except SlurmCommandError as e:
                log.warning("cannot read Slurm's configuration (%s): departures are read "
                            "from slurmctld only", e)
                self._accounting = False
        return self._accounting

    def _final_states(self, gone: list[str], listed: Iterable[SlurmJob],
                      now: float) -> dict[str, FinalState | None]:
        """`pick_finals` from one batched `sacct` (backing off while it fails)."""
        if not gone:
            return {}
        runs: dict = {}
        answered = not self.accounting
        if self.accounting and self.final_backoff.ready(now):
            try:
                runs = parse_sacct(self.cli.sacct(gone))
                answered = True
                self.final_backoff.succeeded()
            except SlurmCommandError as e:
                delay = self.final_backoff.failed(now)
                log.warning("sacct failed (next try in %.0f s): %s", delay, e)
        return pick_finals(gone, listed, runs, answered, self._gone_since, now)

    def _run_type(self, partition: str | None, nodes) -> str | None:
        """The GPU type a job runs on: its partition's, or in a mixed partition its nodes'."""
        return self.types.run_type(partition, nodes, self.snapshot.type_of)

    def _credit(self, job_id: str, r: Run, until: float) -> None:
        if until > r.since:
            other = partner(self._pairs, job_id)
            key = (job_id, r.worker_type, r.nodes, other if other in self._running else None)
            self._usage[key] = self._usage.get(key, 0.0) + (until - r.since)
            r.since = until

    def _credit_runs(self, job_id: str, final: FinalState | None) -> None:
        """A job that ended while no daemon watched it: credit the part of each of its runs
        after the last run stopped crediting (credited_until)."""
        if self._credited_until is None or final is None:
            return
        for run in final.runs:
            wt = self._run_type(run.partition, run.nodes)
            if wt is None or run.end is None:
                continue
            begin = max(run.start or run.end, self._credited_until)
            if run.end > begin:
                self._credit(job_id, Run(wt, run.nodes, begin), run.end)

    def _credit_stopped(self, snap: Snapshot, gone: list[str], finals: Mapping, now: float) -> None:
        """Credit every known run up to now (or its end, if it stopped since the last poll);
        a stopped run is forgotten (`_stopped`: the restart guard; `_lost_with_node`)."""
        for job_id, r in list(self._running.items()):
            j = snap.gavel.get(job_id)
            still = j is not None and j.running and j.nodes == r.nodes
            if not still and job_id in gone and job_id not in finals:
                continue              # its end is not known yet: credited when it is
            end = now if still else run_end(job_id, now, r.since, snap.listed, finals.get(job_id))
            self._credit(job_id, r, end)
            if not still:
                del self._running[job_id]
                self._stopped[job_id] = (now, r.nodes)
                if job_id not in self._preempted and j is not None:
                    self._lost_with_node(job_id, r.nodes, now, snap)

    def _credit_started(self, snap: Snapshot, now: float) -> None:
        """Runs this poll sees first: credited from their start (`credit_from`)."""
        for job_id, j in snap.gavel.items():
            if j.running and job_id not in self._running:
                wt = self._run_type(j.partition, j.nodes)
                if wt is not None:
                    start = credit_from(j.start_time, now, self._last_poll, self._credited_until)
                    self._running[job_id] = Run(wt, j.nodes, start)
                    self._credit(job_id, self._running[job_id], now)
            if not j.running and job_id in self._preempted:
                del self._preempted[job_id]            # it stopped: checkpointed and requeued

    def _depart(self, gone: list[str], finals: Mapping, now: float) -> set[str]:
        """Record the departure of each gone job whose final state is known; the jobs whose
        final state is not known yet are returned (they wait)."""
        waiting = set()
        for job_id in gone:
            if job_id not in finals:
                waiting.add(job_id)           # its final state is not known yet
                continue
            p = self._preempted.get(job_id)
            state, t, detail = departure(job_id, finals[job_id], now, self.signal,
                                         p.at if p is not None else None, self.grace_seconds)
            self._departures.append(Departure(job_id, t, state, detail))
            self._gone_since.pop(job_id, None)
            self._running.pop(job_id, None)
            self._preempted.pop(job_id, None)
            self._deferred.pop(job_id, None)
            forget_request(self.requests, job_id)
        return waiting

    def _read_progress(self, states) -> tuple[dict[str, float], tuple[Measurement, ...], dict[str, float]]:
        """Steps done, measured steps/s and time lost to stops of each job, from the progress
        files its iterator writes.  Users control those files: they are read through `UserFiles` (regular files
        owned by the job's user only, no symlinks, a bounded tail, a bounded wait; a refused
        file is logged and costs its job its report); a file is parsed only when it changed.
        Only a job that runs, or whose run changed since its last read (it stopped, was
        requeued, or is new to this daemon), has its files read: a waiting job writes
        nothing, so its last report is kept and a quiet poll's reads do not grow with the queue."""
        done: dict[str, float] = {}
        lost: dict[str, float] = {}
        seen: list[Measurement] = []
        wanted: dict[str, list] = {}
        requests: dict[str, dict] = {}
        read: set[str] = set()
        for state in states:
            j = self._jobs.get(state.id)
            if j is None:
                continue
            uid = self._user_files.uid(j.user)
            if uid is None:
                self._user_files.warn(f"user {j.user}", f"job {state.id}: user {j.user!r} is "
                                      "unknown here, so its files cannot be checked")
                continue
            # an array task writes under its name (35_2) or, from an old iterator, its Slurm id
            where = (j.slurm_id, j.work_dir, self.progress_dir)
            cached_paths = self._progress_paths.get(state.id)
            if cached_paths is None or cached_paths[0] != where:     # worked out once per job
                names = [state.id] + ([j.slurm_id] if j.slurm_id not in ('', state.id) else [])
                cached_paths = self._progress_paths[state.id] = (where, [
                    str(p) for n in names for p in candidate_paths(n, j.work_dir or None, self.progress_dir)])
            paths = cached_paths[1]
            wanted[state.id] = paths
            run = (j.running, j.restarts)
            if j.running or self._progress_runs.get(state.id) != run:
                read.add(state.id)
                self._progress_runs[state.id] = run
                for i, path in enumerate(paths):
                    # the configured spool is the admin's (may be reached through a symlink)
                    requests[path] = {"owner_uid": uid, "trusted_dir": bool(self.progress_dir) and i == 0}
        tails = self._user_files.read_all(requests)
        refused = self._user_files.refused
        # a job none of whose files could be read, for a reason its owner can fix: said in gqueue
        # (a job not read this poll keeps what its last read said)
        self._progress_refused = {
            job_id: (self._progress_refused.get(job_id) if job_id not in read else
                     "no progress reports: " + next(refused[p] for p in paths if p in refused))
            for job_id, paths in wanted.items()
            if (job_id not in read and job_id in self._progress_refused) or (
                job_id in read and not any(tails.get(p) for p in paths)
                and any(p in refused for p in paths))}
        for job_id in read:          # a read that did not answer in time: tried again next poll
            if any(p not in tails and p not in refused for p in wanted[job_id]):
                self._progress_runs.pop(job_id, None)
        self._progress_runs = {job: r for job, r in self._progress_runs.items() if job in self._jobs}
        self._progress_paths = {job: p for job, p in self._progress_paths.items() if job in self._jobs}
        kept = {p for paths in wanted.values() for p in paths}
        self._progress = {p: v for p, v in self._progress.items() if p in kept}   # jobs gone
        for job_id, paths in wanted.items():
            j = self._jobs[job_id]
            for path in paths:
                if job_id in read:
                    tail = tails.get(path)
                    if tail is None:
                        self._progress.pop(path, None)    # gone, refused or not answered
                        continue
                    cached = self._progress.get(path)
                    if cached is None or cached[0] != tail.key:
                        cached = (tail.key, summary(parse_records(tail.data, torn_start=tail.truncated)))
                        self._progress[path] = cached
                else:
                    cached = self._progress.get(path)     # its last read's
                    if cached is None:
                        continue
                info = cached[1]
                if info is None:
                    continue
                if info.get("step") is not None:
                    done[job_id] = float(info["step"])
                if info.get("lost_seconds") is not None:
                    lost[job_id] = float(info["lost_seconds"])
                # the record's partition, and in a mixed partition its node, says the type
                wt = self._run_type(info.get("partition"), [info["node"]] if info.get("node") else j.nodes)
                if info.get("steps_per_second") and wt and j.running:
                    # Slurm's node list says whether the run was spread (unconsolidated)
                    other = partner(self._pairs, job_id)
                    seen.append(Measurement(job_id, wt, float(info["steps_per_second"]),
                                            partner=other if other in self._running else None,
                                            spread=len(j.nodes) > 1))
                break
        return done, tuple(seen), lost

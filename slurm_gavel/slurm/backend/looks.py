"""Between rounds: whether a tick needs the full poll, decided from a cheap look at the jobs' states.

The full poll (`SlurmBackend.poll`: `squeue --json` of the whole queue, and the nodes)
costs seconds and megabytes on a large queue (3.3 s and 16.7 MB at 5,000 jobs); the
daemon's tick, every few seconds between rounds, needs it only when something it acts on
changed or is under way.  `SlurmCLI.job_states` reads each job's base state alone
(`squeue --only-job-state` on 23.11+, a three-column squeue before), and `why_poll` says
why the tick must poll, or '' when it may skip the full read:

- no full poll yet, the last one failed, or it is `FULL_READ_SECONDS` old (so credited
  time, progress and gqueue never lag more than that);
- follow-up work is under way: starts released and not confirmed running (or taken back
  when stuck), starts waiting for a job to stop, a delayed signal or an escalation due,
  departures waiting for their final state, pending jobs that had to be held again;
- a gavel job's state is not what the last poll saw (started, ended, requeued), or it is
  no longer listed;
- with mid-round starts (`arrivals`), a job appeared, or any listed job changed (a new
  gavel job, GPUs freed or taken that a newcomer could use).

A job's state is compared with the last poll's when that is one word (PENDING, RUNNING:
what squeue's %T says too); a state with flags (24.11+ lists RUNNING, COMPLETING where %T
says COMPLETING) with the one the previous look read.  Skipping loses no credit, it only
comes later: each poll credits a running job from where the last one stopped (credit.py),
so the ledger after a poll is the same whether the ticks before it polled or not.  Nodes are
not looked at: a node that comes back (its GPUs free again) is seen at the next full read.
A CLI without `job_states` (a recording) and a look that fails: every tick polls, as before.

`Looking` holds this state for `SlurmBackend`: `_seen`, `_rehold`, `full_read_seconds`.
"""
from __future__ import annotations

from typing import Mapping

from ..commands import SlurmCommandError
from .snapshot import Snapshot

# The longest a tick goes without the full poll: credit, progress and gqueue lag at most this
FULL_READ_SECONDS = 60.0


def changed(snap: Snapshot, states: Mapping[str, str], seen: Mapping[str, str] | None,
            arrivals: bool = False) -> str:
    """Which job the look `states` shows changed since the poll `snap` (and the previous look
    `seen`), in words; '' if none.  `arrivals`: every listed job counts, and new ones."""
    seen = seen or {}
    jobs = snap.listed if arrivals else snap.gavel.values()
    for j in jobs:
        now = states.get(j.job_id)
        if now is None:
            if j.job_id in snap.gavel:
                return f"job {j.job_id} is no longer listed"
            continue            # a finished job Slurm stopped listing (MinJobAge)
        before = j.state[0] if len(j.state) == 1 else seen.get(j.job_id)
        if now != before:
            return f"job {j.job_id} is {now} (was {before or 'unknown'})"
    if arrivals:
        listed = {j.job_id for j in snap.listed}
        new = next((job for job in states if job not in listed), None)
        if new is not None:
            return f"job {new} is new"
    return ""


class Looking:
    """The tick's look of `SlurmBackend` (which sets the attributes used here)."""

    def why_poll(self, now: float, arrivals: bool = False) -> str:
        """Why this tick must poll Slurm in full, or '' when nothing it acts on changed."""
        look = getattr(self.cli, "job_states", None)
        if look is None:
            return "no cheap look at the job states (a recorded CLI)"
        try:
            states = look()
        except SlurmCommandError as e:
            self._seen = None
            return f"the job states could not be read: {e}"
        seen, self._seen = self._seen, states
        if self._last_poll is None:
            return "no full read yet"
        if self.backoff.failures:
            return "the last full read failed"
        if now - self._last_poll >= self.full_read_seconds:
            return f"the last full read is {now - self._last_poll:.0f} s old"
        return self._under_way(now) or changed(self.snapshot, states, seen, arrivals)

    def _under_way(self, now: float) -> str:
        """The follow-up work an observation does that is pending now, in words; '' if none."""
        if self._starting:
            return f"starts not confirmed yet: {','.join(sorted(self._starting))}"
        if self._deferred:
            return f"starts waiting for jobs to stop: {','.join(sorted(self._deferred))}"
        due = sorted(job for job, at in self._signal_later.items() if at <= now)
        if due:
            return f"signals due: {','.join(due)}"
        late = sorted(job for job, p in self._preempted.items()
                      if not p.escalated and now - p.at >= self.grace_seconds)
        if late:
            return f"preempted jobs to requeue held: {','.join(late)}"
        if self._unreconciled:
            return f"departures waiting for a final state: {','.join(sorted(self._unreconciled))}"
        if self._rehold:
            return "jobs held again to confirm"
        return ""

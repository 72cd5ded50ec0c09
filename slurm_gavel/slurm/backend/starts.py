"""Starts: a round's starts deferred until their jobs may start, then released in Slurm.

For a held pending job: `scontrol update` partition, node list and StartTime=now (a
requeued job otherwise waits ~121 s), then `scontrol release`.  A distributed job (its GPU
total per job, `--gpus=N`) gets its shape in the same call: NumNodes=k-k, the k nodes and
Gres=gpu:m on each (docs/distributed.md).  A job that must move first has to stop: its
start is carried out on the first poll that finds it pending again (`_deferred`).  A job
that stopped on a node less than `RESTART_GUARD_SECONDS` ago is not restarted on that node
yet: its slurmd still holds the job's revoked credential, and a new one issued within the
same second is refused ("Job credential revoked"), which fails the job.  A pair row starts
together or not at all (pairs/placing.py says where one may go now).

The release is cut in steps: `_choose_starts` (which deferred rows may start now),
`_prepare_starts` (each job's `scontrol update`, a few at once), `_whole_rows` (a pair
whose other half could not be prepared is not released), `_release` (one `scontrol
release` for all, one by one if that fails) and `_note_released`.

`Starting` holds this state for `SlurmBackend`: `_deferred`, `_planned`, `_starting`,
`_stopped`, `_released`, `_release_restarts`.
"""
from __future__ import annotations

import logging
from dataclasses import replace

from ...core.errors import GavelError
from ...core.plan import Assignment, RoundPlan
from ..commands import SlurmCommandError, reshape_fields
from ..records import SlurmJob
from .holds import unheld
from .pairs.placing import unplaced_shard_nodes
from .pairs.sharing import forget_request, share_fields

log = logging.getLogger("slurm_gavel.slurm")

# slurmd refuses a job credential created no later (in whole seconds) than the
# job's last revocation on that node; 2 s after the stop was seen is safe.
RESTART_GUARD_SECONDS = 2.0


def must_wait(j: SlurmJob, a: Assignment, stopped: tuple[float, tuple[str, ...]] | None,
              now: float) -> bool:
    """The job may not start as `a` yet: still stopping (next poll), or it stopped on one
    of `a`'s nodes less than RESTART_GUARD_SECONDS ago (`stopped`: when, where)."""
    if j.running or "COMPLETING" in j.state:
        return True
    return bool(stopped and set(stopped[1]) & set(a.nodes)
                and now - stopped[0] < RESTART_GUARD_SECONDS)


def shape_problem(a: Assignment, j: SlurmJob | None) -> str:
    """Why Slurm cannot start one job as planned in `a` (a plan from elsewhere); '' if it can."""
    if len(a.servers) > 1 and (j is None or not j.reshapeable):
        return (f"would span {len(a.servers)} nodes; it asks its GPUs per node, so it keeps "
                "one node and waits")
    if len({count for _, count in a.servers}) > 1:
        return (f"would hold {'+'.join(str(c) for _, c in a.servers)} GPUs on its nodes; Slurm "
                "gives a job one count per node, so it waits")
    return ""


def reshape_start(j: SlurmJob, a: Assignment) -> tuple[int, int | None]:
    """(GPUs per node, tasks per node) of a distributed job started as `a`: its own total over
    the planned nodes (an --exclusive job was planned as their whole GPUs, holds.held_gpus,
    but Slurm checks the total)."""
    per = max(1, j.total_gpus // len(a.servers))
    return per, j.tasks_per_node(per)


class Starting:
    """The starts of `SlurmBackend` (which sets the attributes used here)."""

    def _defer_starts(self, plan: RoundPlan) -> None:
        """Defer each start of the plan that Slurm can carry out (a pair: both of its jobs
        but a survivor that keeps running)."""
        for a in plan.start:
            job = a.jobs[0]
            if len(a.jobs) > 1:
                why = self._pair_problem(a)
                if why:
                    self.pair_log.warn_pair(plan.round, a, why)
                    continue
                for member in a.jobs:
                    if self._joining.get(member) != a:     # (a survivor joined keeps running)
                        self._deferred[member] = a
                continue
            why = shape_problem(a, self._jobs.get(job))
            if why:                           # the placement said otherwise: a plan from elsewhere
                log.warning("round %d: job %s %s", plan.round, job, why)
                continue
            self._deferred[job] = a

    def _start_deferred(self) -> None:
        """Start every deferred job that is no longer running (`_release_deferred`).  A node
        takes one pair per release (two released together can cross); the next pair of a
        node goes once Slurm has placed the previous one, read again within this call, so
        the pairs of a round start in that round (`_await_pairs`)."""
        settled: set[str] = set()
        while True:
            released = self._release_deferred(settled)
            if self.dry_run or not released:
                return
            pairs = [a for a in released if len(a.jobs) > 1]
            waiting = {a.nodes[0] for a in self._deferred.values() if len(a.jobs) > 1}
            more = waiting & {a.nodes[0] for a in released}
            # pairs are read back (a split is undone); before a node's next pair, a lone
            # shard job just released there is placed too (it changes which GPU is free),
            # if it can be now (a whole GPU free; else that pair waits for a later poll)
            lone = [a for a in released if len(a.jobs) == 1 and a.nodes[0] in more
                    and self._whole_gpu_free(a.nodes[0])]
            if not pairs and not lone:
                return
            if not self._await_pairs(pairs + lone, settled) or not more:
                return

    def _release_deferred(self, settled: set[str] = frozenset()) -> list[Assignment]:
        """Start every deferred job that is no longer running: one `scontrol update` per job
        (a distributed one gets its shape in it) and one `scontrol release` for all (Slurm
        takes id lists).  A pair only where both halves get one GPU now (pair room), one
        per node, none next to a shard job released but not placed yet (`settled` jobs are
        placed); the pairs and lone shard jobs released are returned."""
        joined: dict[str, int] = {}          # a survivor's new partner -> the shards it asks
        chosen = self._choose_starts(settled, joined)
        if not chosen:
            return []
        # `scontrol update` takes a list of job ids for Partition or StartTime, but
        # 22.05 answers "Invalid job ID" to a list together with NodeList: one
        # update per job, a few at once, then one release for all of them (in chunks).
        ready = self._prepare_starts(chosen, joined)
        ready = self._release(self._whole_rows(ready))
        self._note_released(ready)
        rows = [self._planned[job] for job in ready]
        released = list(dict.fromkeys(a for job, a in zip(ready, rows) if len(a.servers) == 1
                                      and (len(a.jobs) > 1 or job in self._jobs and self._jobs[job].shards)))
        self._planned.clear()
        return released

    def _choose_starts(self, settled: set[str], joined: dict[str, int]) -> list[str]:
        """The deferred jobs that start now, moved to `_planned` (grouped by partition and
        nodes, as they are updated): all of a row's jobs ready (not stopping, not within the
        restart guard), a pair only where the pair room has it (`_room_for`), one per node."""
        groups: dict[tuple[str, str], list[str]] = {}
        now = self.clock.now()
        pairing = unplaced_shard_nodes(self._starting, settled, self._jobs)
        for job, a in list(self._deferred.items()):
            if job not in self._deferred:
                continue                      # its pair's other job decided for both
            members = [m for m in a.jobs if self._joining.get(m) != a]   # to start
            survivor = next((m for m in a.jobs if m not in members), None)
            if not self._row_alive(a, members, survivor):
                for m in members:             # gone (or planned elsewhere): the pair cannot start
                    if self._deferred.get(m) == a:
                        del self._deferred[m]
                continue
            if any(must_wait(self._jobs[m], a, self._stopped.get(m), now) for m in members):
                continue                      # a pair starts together: both ready
            if len(a.jobs) > 1:
                # One pair per node at a time (two released together can cross: A and C on
                # one GPU, B and D on another), and only where first fit gives both halves
                # one GPU now (pair room); else it waits, deferred, for a later poll.
                if a.nodes[0] in pairing or not self._room_for(a, members, survivor, joined):
                    continue
                pairing.add(a.nodes[0])
            for m in members:
                del self._deferred[m]
                self._planned[m] = a
                groups.setdefault((self._partition_of[a.worker_type], ",".join(a.nodes)), []).append(m)
        return [job for jobs in groups.values() for job in jobs]

    def _row_alive(self, a: Assignment, members: list[str], survivor: str | None) -> bool:
        """Every job of the row to start is still listed and deferred as this row, and a
        survivor joined still runs."""
        if any(m not in self._jobs or self._deferred.get(m) != a for m in members):
            return False
        return survivor is None or (survivor in self._running and survivor in self._jobs
                                    and self._jobs[survivor].running)

    def _prepare_starts(self, chosen: list[str], joined: dict[str, int]) -> list[str]:
        """Each chosen job's `scontrol update` for its start (a few at once: 22.05 takes no
        list of ids with NodeList); the jobs to release (a refusal is remembered, holds.py)."""
        whats: dict[str, str] = {}
        fields: dict[str, dict[str, str]] = {}
        for job in chosen:
            a = self._planned[job]
            partition, nodes = self._partition_of[a.worker_type], ",".join(a.nodes)
            j = self._jobs.get(job)
            if j is not None and j.reshapeable:
                per, tasks = reshape_start(j, a)
                whats[job] = f"start on {partition} {nodes} ({len(a.servers)}x{per} GPUs)"
                fields[job] = reshape_fields(partition, a.nodes, per, tasks, **unheld(j))
                continue
            try:
                share, said = share_fields(self.snapshot, self.requests, job, a, joined.get(job, 0),
                                           self.dry_run)
            except GavelError as e:   # its request could not be remembered: not paired
                log.error("job %s not started in pair %s: %s", job, "+".join(a.jobs), e)
                continue
            whats[job] = f"start on {partition} {nodes}{said}"
            fields[job] = dict(Partition=partition, NodeList=nodes, StartTime="now", **unheld(j), **share)
        failures = self._update_each(whats, fields, why=self._why_start())
        ready = []
        for job, f in fields.items():
            if job not in failures:
                if not self.dry_run and "TresPerTask" in f and "Gres" in f:
                    forget_request(self.requests, job)          # its own request is back
                ready.append(job)
                continue
            a = self._planned[job]
            self.refusal = failures[job]
            if not self._refuse_partition(job, a, self._partition_of[a.worker_type]):
                self._refuse_shape(job, a)
        return ready

    def _whole_rows(self, ready: list[str]) -> list[str]:
        """A pair starts together or not at all: a job whose row's other job was not
        prepared (nor is a survivor joined) is not released."""
        ready = list(ready)
        for job in list(ready):
            a = self._planned[job]
            if len(a.jobs) > 1 and any(m not in ready and self._joining.get(m) != a for m in a.jobs):
                ready.remove(job)
                log.warning("job %s not released: its pair %s could not be prepared", job,
                            "+".join(a.jobs))
        return ready

    def _release(self, ready: list[str]) -> list[str]:
        """One `scontrol release` for all (in chunks); the jobs of a chunk Slurm refused are tried
        one by one: the released."""
        why = {job: self._why_start() for job in ready}
        failed: list[str] = []

        def release_all():
            try:
                self.cli.release(ready)
            except SlurmCommandError as e:    # the chunks that failed (the others are released)
                failed.extend(e.failed or ready)
                raise

        if ready and not self._act("release", ready, release_all, why=why) and len(ready) > 1:
            again = [job for job in ready if job in failed]
            ready = [job for job in ready if job not in failed] + [
                job for job in again
                if self._act("release", [job], lambda job=job: self.cli.release([job]), why=why)]
        return ready

    def _note_released(self, ready: list[str]) -> None:
        """The released jobs are starting (their rows pairs, a survivor joined paired again)."""
        now = self.clock.now()
        for job in ready:
            if len(self._planned[job].jobs) > 1:
                self._pairs[job] = self._planned[job]
            j = self._jobs.get(job)
            if j is not None:
                # as Slurm has it now (until the next poll): no longer held, so that this
                # poll's own follow-up (_take_back_stuck) does not take it for held by another
                self.snapshot = self.snapshot.with_job(replace(j, reason="", priority=None))
            self._starting[job] = (self._planned[job], now)
            self._released[job] = now
            j = self._jobs.get(job)
            self._release_restarts[job] = j.restarts if j is not None else 0
        pairs = list(dict.fromkeys(self._planned[job] for job in ready if len(self._planned[job].jobs) > 1))
        for a in pairs:                       # a survivor joined by its new partner: a pair again
            for m in a.jobs:
                if self._joining.get(m) == a:
                    del self._joining[m]
                    self._pairs[m] = a

    def _ran_since_release(self, j: SlurmJob) -> bool:
        """It started after this daemon released it (and was requeued since): its restart
        count rose, even if no poll saw it running."""
        before = self._release_restarts.get(j.job_id)
        return before is not None and j.restarts > before

    def _why_start(self) -> str:
        return f"started by round {self._round}'s plan" if self._round is not None else "started by the plan"

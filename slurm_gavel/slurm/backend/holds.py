"""Why a gavel job is held and not planned now, the backoffs, and the words Slurm shows.

A released job that Slurm has not started `start_timeout` seconds later (its pending
reason says why: Resources, ReqNodeNotAvail, PartitionNodeLimit, ...) is held again and
not planned for a backoff that doubles with each such failure (one round, two, four, ...
at most `MAX_BACKOFF_ROUNDS`: `Stuck`), so the GPUs planned for it go to other jobs.  A
start Slurm refused (its `scontrol update` failed) leaves those nodes out of the job's
placement for a backoff (`RefusedShape`); a partition Slurm refuses for the job's account,
QOS or user leaves that partition's types out for good.  What Slurm can run at all is read
from each job's request (feasibility.py: `_where`): a job that needs several nodes, fits
no node, waits for its dependency or for its begin time (`sbatch --begin`, which the
start's StartTime=now would override) is not planned, with the reason; one that fits only
some partitions or nodes is planned only there.  A job that asks its GPUs per node is
planned on one node, as the GPUs it keeps from others (`held_gpus`: --exclusive, the whole
node; more CPUs than its GPUs' share of the node, the GPUs whose CPUs it takes); a distributed job on as few nodes of one type as hold its total in
equal parts (Placement.same_gpus_per_server).  A released job whose planned GPUs a
non-gavel job took before Slurm started it is held at once and planned again (`replan`).
A job lost with its node waits until the node has answered `lost_settle_seconds`.  A
pending job not held and not released by the daemon (requeued by its owner) is held again.
A held job says why in Slurm too (`show_holds`, once a round): the daemon's reason after
its flags in the AdminComment (flags.with_status), which its owner reads in `scontrol
show job`; the start that releases it drops the text in the same update (`unheld`).

`Holding` holds this state for `SlurmBackend`: `_stuck`, `_holds`, `_shown`, `_refused`,
`_bad_shapes`, `_notes`, `_lost`, `_back`, `_taken`, `replan`.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace
from typing import Iterable, Mapping

from ...core.plan import Assignment, Placement
from ..capacity import cpus_of, gpus_kept, memory_of
from ..flags import admin_flags, admin_status, with_status
from ..records import SlurmJob
from .snapshot import Snapshot, id_order

log = logging.getLogger("slurm_gavel.slurm")

# A released job Slurm has not started after this long is taken back (held).
START_TIMEOUT_SECONDS = 30.0
MAX_BACKOFF_ROUNDS = 16
# Held jobs whose AdminComment a round writes with why they wait (show_holds).  Slurm
# updates a list of ids one RPC per job (sdiag on 22.05), ~0.5 ms of slurmctld's time
# each: 200 a round are ~0.1 s of it, and a fresh queue of 5,000 is marked in 25 rounds;
# a steady round changes far fewer (the jobs it preempted, held again).
STATUS_PER_ROUND = 200
ONE_NODE = Placement(one_server=True)     # a job asking GPUs per node keeps its one node
SPREAD = Placement(same_gpus_per_server=True)   # a distributed job: equal GPUs on each node
# A job lost with its node is offered to the scheduler again only when the node has
# answered (been usable) this long: its slurmd, registering, is told by slurmctld to
# kill the job's old copy, which a dead slurmd leaves running.
LOST_SETTLE_SECONDS = 5.0
# Slurm's refusals of a partition for a job's account, QOS or user (association
# limits with AccountingStorageEnforce, AllowAccounts/AllowQos/AllowGroups): the job
# may not run on that partition's GPU type, whatever the policy would like.
PARTITION_REFUSALS = ("account/partition", "invalid account", "invalid qos",
                      "not permitted to use this partition", "access/permission denied",
                      "user's group not permitted")


@dataclass
class Stuck:
    """A job that was released and did not start: held again until `until`."""

    failures: int
    released: float
    held: float
    until: float
    reason: str                 # Slurm's pending reason when it was taken back


@dataclass
class RefusedShape:
    """A start Slurm refused (its `scontrol update` failed: nodes gone, a shape it will not
    take): these nodes are left out of the job's placement until `until`, so the mechanism
    plans another shape, or the job waits, instead of asking the same every round."""

    worker_type: str
    nodes: tuple[str, ...]
    per_node: int
    failures: int
    until: float
    reason: str                 # Slurm's words (last line)

    def describe(self) -> str:
        return f"{self.worker_type} {','.join(self.nodes)} ({len(self.nodes)}x{self.per_node} GPUs)"


def backoff_delay(step: float, failures: int) -> float:
    """One step, two, four, ... at most MAX_BACKOFF_ROUNDS steps."""
    return step * min(MAX_BACKOFF_ROUNDS, 2 ** (failures - 1))


def rounds_text(seconds: float, round_seconds: float | None) -> str:
    if not round_seconds:
        return f"{seconds:.0f} s"
    n = max(1, math.ceil(seconds / round_seconds - 1e-9))
    return f"{n} round" + ("s" if n > 1 else "")


def begin_text(begin: float, now: float) -> str:
    """Why a job submitted with `sbatch --begin` waits: the time (the day too when it is not
    within a day), in the daemon's local time as Slurm prints it."""
    fmt = "%H:%M" if begin - now < 86400 else "%Y-%m-%d %H:%M"
    return f"waits for its begin time {time.strftime(fmt, time.localtime(begin))}"


def held_gpus(snap: Snapshot, j: SlurmJob, placement: Placement | None) -> int:
    """GPUs the job keeps from others: its own, or (--exclusive) every GPU of the largest
    node it may run on, so that the plan leaves that node to it alone; a one-node job asking
    more CPUs than its GPUs' share of a node keeps the GPUs whose CPUs it takes, on the node
    it may run on where that is most (capacity.gpus_kept), and so for memory where Slurm
    counts it (`snap.memory`)."""
    allowed = placement.servers if placement is not None else None
    mine = [n for n in snap.nodes if n.name in snap.type_of and (allowed is None or n.name in allowed)]
    if j.exclusive:
        return max([max(1, j.total_gpus)] + [n.gpus for n in mine])
    if j.reshapeable or j.node_count > 1:
        return max(1, j.total_gpus)
    return max([max(1, j.total_gpus)] + [gpus_kept(j, n, snap.memory) for n in mine if n.gpus >= j.gpus])


def could_hold(snap: Snapshot, j: SlurmJob, names: frozenset[str]) -> bool:
    """Whether these nodes (whole, free or not) can ever hold the job in the shapes Slurm
    gives it: one node, or (distributed) equal parts on nodes of one type."""
    size = held_gpus(snap, j, None)
    by_type: dict[str, list[int]] = {}
    for n in snap.nodes:
        if n.name in names:
            by_type.setdefault(snap.type_of.get(n.name), []).append(n.gpus)
    for gpus in by_type.values():
        if any(g >= size for g in gpus):
            return True
        if j.reshapeable and any(size % k == 0 and sum(g >= size // k for g in gpus) >= k
                                 for k in range(2, size + 1)):
            return True
    return False


def taken_from(snap: Snapshot, j: SlurmJob, a: Assignment) -> str:
    """Why the released, pending `j` cannot start where it was planned ("" if it can):
    a non-gavel job holds GPUs of a planned node that the plan counted as free, or the
    CPUs (or, counted, the memory) it needs there."""
    gavel: dict[str, int] = {}
    for other in snap.gavel.values():
        if other.running and other.job_id != j.job_id:
            for n in other.nodes:
                gavel[n] = gavel.get(n, 0) + other.gpus_on(n)
    short = []
    ours = [o for o in snap.gavel.values() if o.job_id != j.job_id]
    for name, need in a.servers:
        n, others = snap.node_named.get(name), snap.others_gpus.get(name, 0)
        if n is not None and others > 0 and n.gpus - others - gavel.get(name, 0) < need:
            short.append(f"{name} ({others} of its {n.gpus} GPUs)")
        elif n is not None and n.cpus and j.cpus_needed > n.cpus - n.alloc_cpus:
            # the CPUs non-gavel jobs hold there, as their records in the same poll say (the
            # node's own count may already hold a gavel job that started since)
            cpus = snap.others_cpus.get(name, 0)
            if cpus > 0 and j.cpus_needed > n.cpus - cpus - cpus_of(ours, name):
                short.append(f"{name} ({cpus} of its {n.cpus} CPUs)")
        elif snap.memory and n is not None and n.memory and (j.memory_needed or 0) > n.memory - n.alloc_memory:
            mem = snap.others_memory.get(name, 0.0)
            if mem > 0 and (j.memory_needed or 0) > n.memory - mem - memory_of(ours, name):
                short.append(f"{name} ({mem:.0f} of its {n.memory:.0f} MB memory)")
    return ", ".join(short)


def unheld(j: SlurmJob | None) -> dict[str, str]:
    """The start's extra field that drops the hold status from the job's AdminComment
    (in the same `scontrol update`: no call of its own); {} when it shows none."""
    if j is None or not admin_status(j.admin_comment):
        return {}
    return {"AdminComment": admin_flags(j.admin_comment)}


def status_groups(snap: Snapshot, reasons: Mapping[str, str], ours: Iterable[str],
                  shown: Mapping[str, str], dry_run: bool) -> dict[str, list[str]]:
    """AdminComment text -> the held jobs that should show it and do not yet (a dry run:
    not said again once said)."""
    ours = set(ours)
    groups: dict[str, list[str]] = {}
    for job, j in sorted(snap.gavel.items(), key=lambda kv: id_order(kv[0])):
        if j.primary_state != "PENDING" or "JobHeld" not in j.reason or job in ours:
            continue
        why = reasons.get(job) or "waiting for the next round"
        text = with_status(j.admin_comment, f"held by slurm-gavel: {why}")
        if text != j.admin_comment and not (dry_run and shown.get(job) == text):
            groups.setdefault(text, []).append(job)
    return groups


def status_batches(groups: Mapping[str, list[str]], comments: Mapping[str, str],
                   limit: int) -> list[tuple[str, list[str]]]:
    """(text, jobs) to write this round, at most `limit` jobs in all: the jobs that show no
    status yet (`comments`: their AdminComment now) before those whose status changed, each
    group's jobs in order; a job left out is written in a later round."""
    fresh = [(text, [j for j in jobs if not admin_status(comments.get(j, ""))]) for text, jobs in groups.items()]
    again = [(text, [j for j in jobs if admin_status(comments.get(j, ""))]) for text, jobs in groups.items()]
    out: dict[str, list[str]] = {}
    left = max(0, int(limit))
    for text, jobs in fresh + again:
        take = jobs[:left]
        if take:
            out.setdefault(text, []).extend(take)
            left -= len(take)
    return list(out.items())


class Holding:
    """The holds of `SlurmBackend` (which sets the attributes used here)."""

    def _where(self, j: SlurmJob, now: float) -> tuple[Placement, str]:
        """Where the job may run and, if it must not be planned now, why."""
        snap = self.snapshot
        verdict = self._verdicts.verdict(j, snap, self.partitions)     # verdicts.py: kept
        base = SPREAD if j.reshapeable else ONE_NODE
        if verdict.hold:
            return base, verdict.hold
        begin = j.begins_after(now)
        if begin is not None:       # a start (StartTime=now) would override the user's --begin
            return base, begin_text(begin, now)
        p = verdict.placement
        placement = base if p is None else replace(p, one_server=not j.reshapeable,
                                                   same_gpus_per_server=j.reshapeable)
        refused = self._refused.get(j.job_id)
        if refused:
            allowed = frozenset(placement.worker_types or self.worker_types) - set(refused)
            if not allowed:
                return placement, "Slurm refuses every GPU partition for it: " + "; ".join(
                    f"{wt}: {why}" for wt, why in sorted(refused.items()))
            servers = placement.servers
            if servers is not None:
                servers = frozenset(n for n in servers if snap.type_of.get(n) in allowed)
            placement = replace(placement, worker_types=allowed, servers=servers)
        placement, avoided = self._avoid_refused(j, placement, now)
        if avoided:
            return placement, avoided
        if j.job_id in self._lost:
            names, since = self._lost[j.job_id]
            return placement, (f"lost with node {','.join(names)} {now - since:.0f} s ago: waits "
                               f"until the node is back (Slurm then stops its old copy there)")
        stuck = self._stuck.get(j.job_id)
        if stuck is not None and now < stuck.until and not j.running:
            return placement, (f"released {stuck.held - stuck.released:.0f} s ago, Slurm says: "
                               f"{stuck.reason or 'nothing'}; held again, retry in "
                               f"{self._rounds(stuck.until - now)}")
        return placement, ""

    def _avoid_refused(self, j: SlurmJob, placement: Placement, now: float) -> tuple[Placement, str]:
        """The placement without the nodes of the job's refused shapes (while their backoff
        lasts), and a hold reason if no node left can hold the job at all."""
        self._notes.pop(j.job_id, None)
        active = [r for r in self._bad_shapes.get(j.job_id, {}).values() if now < r.until]
        if not active:
            return placement, ""
        snap = self.snapshot
        avoid = {n for r in active for n in r.nodes}
        types = placement.worker_types or frozenset(self.worker_types)
        names = [n.name for n in snap.nodes if n.usable and snap.type_of.get(n.name) in types
                 and (placement.servers is None or n.name in placement.servers)]
        left = frozenset(n for n in names if n not in avoid)
        last = max(active, key=lambda r: r.until)
        said = (f"Slurm refused to start it on {last.describe()}: {last.reason}; not asked again "
                f"for {self._rounds(last.until - now)}")
        placement = replace(placement, servers=left)
        if not could_hold(snap, j, left):
            return placement, said
        self._notes[j.job_id] = said + ", planned elsewhere"
        return placement, ""

    def _refuse_shape(self, job: str, a: Assignment) -> None:
        """Slurm refused to start `job` as `a`: avoid those nodes for it for a backoff that
        doubles with each refusal of the same shape (one round, two, ... MAX_BACKOFF_ROUNDS)."""
        now = self.clock.now()
        key = (a.worker_type, a.nodes)
        shapes = self._bad_shapes.setdefault(job, {})
        failures = shapes[key].failures + 1 if key in shapes else 1
        delay = backoff_delay(self.round_seconds or self.start_timeout, failures)
        words = (self.refusal or "").strip().splitlines()
        reason = (words[-1] if words else "refused")[:200]
        per = a.gpus // max(1, len(a.servers))
        shapes[key] = RefusedShape(a.worker_type, a.nodes, per, failures, now + delay, reason)
        log.warning("job %s: Slurm refused to start it on %s (%s): those nodes are avoided for "
                    "%.0f s", job, shapes[key].describe(), reason, delay)
        self.on_event("refused", job, f"Slurm refused {shapes[key].describe()}: {reason}; "
                                      f"avoided for {delay:.0f} s")

    def _refuse_partition(self, job: str, a: Assignment, partition: str) -> bool:
        """If Slurm refused the start for the job's account, QOS or user, leave out every
        type of that partition (a mixed one holds several) for good; False if not that."""
        if not any(r in (self.refusal or "").lower() for r in PARTITION_REFUSALS):
            return False
        why = self.refusal.strip().splitlines()[-1]
        left = [wt for wt, p in self._partition_of.items() if p == partition] or [a.worker_type]
        for wt in left:
            self._refused.setdefault(job, {})[wt] = why
        log.warning("job %s may not use partition %s (%s): %s left out of its row",
                    job, partition, why, ", ".join(left))
        return True

    def _held_gpus(self, j: SlurmJob, placement: Placement | None) -> int:
        return self._verdicts.held(j, self.snapshot, placement)

    def _rounds(self, seconds: float) -> str:
        return rounds_text(seconds, self.round_seconds)

    def _lost_with_node(self, job_id: str, nodes: tuple[str, ...], now: float, snap: Snapshot) -> None:
        """A run that stopped with a node down: not restarted until the node is back."""
        failed = [n for n in nodes if not _usable(n, snap)]
        if failed:
            self._lost[job_id] = (nodes, now)
            log.warning("job %s stopped running with its node %s down: not restarted until "
                        "the node is back (its old copy may still run there)",
                        job_id, ",".join(failed))
            self.on_event("lost_with_node", job_id, ",".join(failed))

    def _settle_lost(self, now: float, snap: Snapshot) -> None:
        """Jobs lost with a node become schedulable once every node of theirs is back."""
        for name in snap.node_named:
            if _usable(name, snap):
                self._back.setdefault(name, now)
            else:
                self._back.pop(name, None)
        for job, (names, _) in list(self._lost.items()):
            if job not in snap.gavel:
                del self._lost[job]                   # it left (cancelled, failed)
            elif all(now - self._back.get(n, now + 1) >= self.lost_settle_seconds for n in names):
                del self._lost[job]
                log.info("job %s: node %s is back; it may start again", job, ",".join(names))

    def _take_back_stuck(self, now: float) -> None:
        """Hold every released job that Slurm has not started within `start_timeout`, and
        back off before it is planned again (doubling, capped)."""
        self._stuck = {job: v for job, v in self._stuck.items() if job in self._jobs}
        # Nodes where a preempted job is still saving its checkpoint: a job released
        # onto them waits for its GPUs (Resources) through no fault of its own.
        freeing = {n for job in self._preempted if job in self._running for n in self._running[job].nodes}
        late, taken = [], {}
        for job_id, (a, at) in list(self._starting.items()):
            j = self._jobs.get(job_id)
            if j is not None and not j.running and freeing.intersection(a.nodes):
                self._starting[job_id] = (a, now)       # its bound starts once they are free
                continue
            why = taken_from(self.snapshot, j, a) if j is not None and not j.running \
                and "JobHeld" not in j.reason else ""
            if why:
                taken[job_id] = why
                continue
            if j is None or j.running or self._ran_since_release(j):
                del self._starting[job_id]
                if j is not None:
                    self._stuck.pop(job_id, None)        # it runs: its next failure starts afresh
            elif "JobHeld" in j.reason:
                del self._starting[job_id]               # held by someone else meanwhile
            elif now - at > self.start_timeout:
                late.append((job_id, j, at))
        if taken:
            self._take_back_taken(taken)
        if not late:
            return
        ids = [job_id for job_id, _, _ in late]
        self._act("hold (did not start)", ids, lambda: self.cli.hold(ids),
                  why={job_id: f"Slurm did not start it {now - at:.0f} s after its release: "
                               f"{j.reason or 'no reason'}" for job_id, j, at in late})
        for job_id, j, at in late:
            del self._starting[job_id]
            failures = self._stuck[job_id].failures + 1 if job_id in self._stuck else 1
            delay = backoff_delay(self.round_seconds or self.start_timeout, failures)
            self._stuck[job_id] = Stuck(failures, at, now, now + delay, j.reason)
            log.warning("job %s was released %.0f s ago and Slurm did not start it (%s): held "
                        "again, not planned for %.0f s", job_id, now - at, j.reason or "no reason", delay)
            self.on_event("stuck", job_id, f"not started {now - at:.0f} s after release, Slurm says: "
                                           f"{j.reason}; retry in {delay:.0f} s")

    def _take_back_taken(self, taken: Mapping[str, str]) -> None:
        """Hold at once each released job whose planned GPUs a non-gavel job took before Slurm
        started it (it would wait for them, pinned to those nodes), without a backoff: it
        is planned again at once (`replan`), on the GPUs that are free now."""
        ids = sorted(taken)
        if not self._act("hold (its planned GPUs were taken)", ids, lambda: self.cli.hold(ids)):
            return                    # the next poll sees what happened (it may have started)
        for job_id in ids:
            del self._starting[job_id]
            why = f"non-gavel jobs took the GPUs planned for it on {taken[job_id]} before it started"
            self._taken[job_id] = why + "; held and planned again at once"
            log.warning("job %s: %s: held, planned again at once", job_id, why)
            self.on_event("start_taken", job_id, why)
        self.replan = True

    def _hold_again(self) -> None:
        """Hold every gavel job that is pending, not held, and not released by this daemon.

        Only the daemon releases gavel jobs, but a job's owner can still
        `scontrol requeue` it while it runs: it comes back pending and not
        held, and Slurm would start it by itself within minutes. It is held
        again (a held requeue), and the daemon places it like any other.
        """
        now = self.clock.now()
        self._released = {job: at for job, at in self._released.items()
                          if now - at < self.grace_seconds and job in self._jobs
                          and not self._ran_since_release(self._jobs[job])}
        self._release_restarts = {job: n for job, n in self._release_restarts.items() if job in self._jobs}
        ours = self._starting.keys() | self._deferred.keys() | self._planned.keys() | self._released.keys()
        loose = sorted(job for job, j in self._jobs.items()
                       if j.primary_state == "PENDING" and not j.held and job not in ours)
        self._rehold = bool(loose)          # the next tick reads them again (looks.py)
        if loose:
            log.warning("jobs %s are pending but not held (requeued by their owner?): holding "
                        "them again", ",".join(loose))
            self._act("hold (requeued outside the daemon)", loose, lambda: self.cli.hold(loose),
                      why="pending but not held: requeued by its owner, only the daemon releases it")

    def show_holds(self, reasons: Mapping[str, str], limit: int = STATUS_PER_ROUND) -> None:
        """Say in Slurm why each held gavel job waits: its AdminComment, which every user
        reads in `scontrol show job` (and `squeue --json`), gets the daemon's reason after
        the flags ("... | held by slurm-gavel: waiting for its round (...)").  Written only
        when it changed; jobs given the same text share one `scontrol update` (Slurm takes
        a list of ids for one value, and each job's flags are its own, so a text is shared
        only by jobs with the same flags), at most `limit` jobs a round, the unmarked first
        (a long queue is marked over a few rounds: `status_batches`)."""
        ours = self._starting.keys() | self._deferred.keys() | self._planned.keys()
        groups = status_groups(self.snapshot, reasons, ours, self._shown, self.dry_run)
        comments = {job: self._jobs[job].admin_comment for jobs in groups.values() for job in jobs}
        for text, jobs in status_batches(groups, comments, limit):
            if self._act(f"show why held ({admin_status(text)})", jobs,
                         lambda jobs=jobs, text=text: self.cli.update(jobs, AdminComment=text),
                         why="it waits in slurm-gavel's queue"):
                for job in jobs:                # as Slurm has it now (until the next poll)
                    self.snapshot = self.snapshot.with_job(replace(self._jobs[job], admin_comment=text))
                    self._shown[job] = text     # a dry run says it once, not every round
        self._shown = {job: t for job, t in self._shown.items() if job in self._jobs}


def _usable(name: str, snap: Snapshot) -> bool:
    n = snap.node_named.get(name)
    return n is not None and n.usable

"""The Slurm cluster backend: what Slurm runs, read with one batched poll; round plans carried out.

Reading: one `squeue --json` and one `scontrol show nodes --json` per poll
(the daemon polls every tick, a few seconds, and at each round).  Gavel jobs
are those whose AdminComment the job_submit plugin marked (``gavel:v1 ...``);
every other job's GPUs are simply unavailable to the scheduler.  Between
polls the backend credits each running gavel job with the time it ran on its
partition's GPU type, so the ledger matches what Slurm ran to within a tick.

Acting (`execute`):
* keep: nothing at all (the lease is renewed; the job never notices);
* preempt: `scancel --batch --signal=USR2` (configurable); the job saves a
  checkpoint and exits with the requeue-hold code, and Slurm requeues it
  held.  A job still running `grace_seconds` later is requeued held with
  `scontrol requeuehold`.  A job that started less than `min_run_seconds`
  ago (at most half a round; the daemon's default 30 s, 0 here) is
  signalled once it has run that long, so that a batch script has set its
  trap;
* start: for a held pending job, `scontrol update` partition, node list and
  StartTime=now (a requeued job otherwise waits ~121 s), then
  `scontrol release`.  A distributed job (its GPU total per job, `--gpus=N`)
  gets its shape in the same call: NumNodes=k-k, the k nodes and Gres=gpu:m
  on each (docs/distributed.md).  A job that must move first has to stop: its start is
  carried out on the first poll that finds it pending again.  A job that
  stopped on a node less than `RESTART_GUARD_SECONDS` ago is not restarted on
  that node yet: its slurmd still holds the job's revoked credential, and a new
  one issued within the same second is refused ("Job credential revoked"),
  which fails the job.

GPU types (gputypes.py): a partition per type, or a partition of mixed GPU nodes
whose nodes' GRES type (or a configured node set) is the type; the node list a
start pins says the type, so a job's type is read from its partition and nodes.

A released job whose planned GPUs a non-gavel job took before Slurm started it
(the plain job won the race between plan and start) is held at the next poll and
planned again at once (`replan`: the daemon starts a new round), with the reason.

* a pair row (space sharing, docs/space-sharing.md): both one-GPU jobs ask
  gres/shard (job_submit.lua); each gets half of one GPU's shards on the node
  (`Gres=shard:S/2` in its update), both are released in one call, only where
  Slurm's first fit gives both one GPU now (pair_room.py), one pair per node per
  release, the node's next pair once Slurm lists the previous one on its GPU (in
  the same call); they are reported as the pair's row and usage, and stop
  together.  Each poll checks which jobs Slurm gave each GPU (gres_detail IDX).
  On 23.11+, when the admin opts in (`max_pair_gpus`, multi_pairs.py), a pair of two
  N-GPU jobs: each becomes N tasks of S/2 shards (`TresPerNode= TresPerTask=gres/shard:S/2
  NumTasks=N`), both on the same N GPUs; alone again, its remembered request comes back.
  The pair rows' own part lives in sharing.py (`SpaceSharing`, mixed in here).

A released job that Slurm has not started `start_timeout` seconds later
(its pending reason says why: Resources, ReqNodeNotAvail, PartitionNodeLimit,
...) is held again and not planned for a backoff that doubles with each such
failure (one round, two, four, ... at most `MAX_BACKOFF_ROUNDS`), so the GPUs
planned for it go to other jobs.  What Slurm can run at all is read from each
job's request (feasibility.py): a job that needs several nodes, fits no node
or waits for its dependency is not planned, with the reason; one that fits
only some partitions or nodes is planned only there.  A job that asks its GPUs
per node is planned on one node; a distributed job on as few nodes of one type
as hold its total in equal parts (Placement.same_gpus_per_server).
Departures are read from Slurm's final state: `sacct` (one batched call per poll)
where accounting exists, else (and while slurmdbd has not caught up) the finished
job slurmctld still lists (MinJobAge); a job Slurm knows no more is "lost", never
"completed".  A restarted daemon passes the jobs its database holds as active
(`active_jobs`): those Slurm no longer runs depart on the first poll, with their
real end, and what they ran since the last run stopped crediting is credited.

Each action's log line names every job with its partition, nodes and the reason.  A
held job says why in Slurm too (`show_holds`, once a round): the daemon's reason after
its flags in the AdminComment (flags.with_status), which its owner reads in `scontrol
show job`; the start that releases it drops the text in the same `scontrol update`.

With `dry_run` nothing is changed in Slurm: every action is only logged.
"""
from __future__ import annotations

import logging
import math
import signal as signals
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

from ..core.backend import Departure, JobState, Measurement, Observation, Usage
from ..core.errors import GavelError, InputError
from .flags import admin_flags, admin_status, from_admin_comment, with_status
from ..core.mechanism import Assignment, Placement, RoundPlan, Server
from ..job.progress import candidate_paths, parse_records, summary
from .multi_pairs import Requests
from .pair_room import NodeRoom, first_fit_gpus, gpu_room, pair_gpus, take
from .records import (FinalState, SlurmJob, SlurmNode, final_from_job, final_from_sacct,
                      parse_jobs, parse_nodes, parse_sacct)
from .commands import Backoff, SlurmCLI, SlurmCommandError, ended_jobs
from .feasibility import accepts, judge
from .gputypes import TypeMap, discover
from .sharing import SpaceSharing, _id_order, _indices
from .userfiles import UserFiles

log = logging.getLogger("slurm_gavel.slurm")

GAVEL_PREFIX = "gavel:"
UNKNOWN_MODEL = "unknown"
# slurmd refuses a job credential created no later (in whole seconds) than the
# job's last revocation on that node; 2 s after the stop was seen is safe.
RESTART_GUARD_SECONDS = 2.0
# A released job Slurm has not started after this long is taken back (held).
START_TIMEOUT_SECONDS = 30.0
# The pairs of one node are released one after another: the next once Slurm lists the
# previous one running on its GPU (read every PAIR_READ_SECONDS, at most PAIR_PLACED_SECONDS;
# Slurm places a released job within its next scheduling pass, well under a second here).
PAIR_READ_SECONDS = 0.2
PAIR_PLACED_SECONDS = 3.0
MAX_BACKOFF_ROUNDS = 16
# `scontrol update` calls a round that mark held jobs with why they wait (show_holds)
STATUS_PER_ROUND = 20
ONE_NODE = Placement(one_server=True)     # a job asking GPUs per node keeps its one node
SPREAD = Placement(same_gpus_per_server=True)   # a distributed job: equal GPUs on each node
# A job gone from the queue whose final state cannot be read (slurmdbd not answering) is
# recorded "lost" after this long; until then its departure waits.
FINAL_STATE_PATIENCE_SECONDS = 300.0
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


def discover_partitions(nodes: list[SlurmNode]) -> dict[str, str]:
    """partition -> GPU type, for partitions whose nodes all hold GPUs of one type."""
    types: dict[str, set] = {}
    for n in nodes:
        for p in n.partitions:
            types.setdefault(p, set()).add(n.gpu_type)
    return {p: next(iter(t)) for p, t in sorted(types.items()) if len(t) == 1 and None not in t}


@dataclass
class _Running:
    worker_type: str
    nodes: tuple[str, ...]
    since: float                # credited up to here


@dataclass
class _Preempted:
    at: float
    escalated: bool = False


@dataclass
class _Stuck:
    """A job that was released and did not start: held again until `until`."""

    failures: int
    released: float
    held: float
    until: float
    reason: str                 # Slurm's pending reason when it was taken back


@dataclass
class _RefusedShape:
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


class SlurmBackend(SpaceSharing):
    """`observe` / `execute` on a Slurm cluster through `SlurmCLI`."""

    def __init__(self, cli: SlurmCLI, clock, partitions: Mapping[str, str] | TypeMap | None = None,
                 signal: str = "USR2", signal_all_steps: bool = False, grace_seconds: float = 60.0,
                 dry_run: bool = False, on_event: Callable[[str, str | None, str], None] | None = None,
                 credited_until: float | None = None, progress_dir: str | None = None,
                 start_timeout: float = START_TIMEOUT_SECONDS,
                 active_jobs=(), accounting: bool | None = None,
                 lost_settle_seconds: float = LOST_SETTLE_SECONDS,
                 min_run_seconds: float = 0.0, requests: Requests | None = None):
        self.cli, self.clock = cli, clock
        self.signal, self.signal_all_steps = signal, signal_all_steps
        self.grace_seconds = grace_seconds
        self.min_run_seconds = float(min_run_seconds)
        self._signal_later: dict[str, float] = {}      # preempted job -> when it is signalled
        self.start_timeout = float(start_timeout)
        self.round_seconds: float | None = None        # learned from execute()
        self._executed_round: int | None = None
        self._round: int | None = None                 # the last plan's round (for the log)
        self._shown: dict[str, str] = {}               # job -> the hold status last written
        self._stuck: dict[str, _Stuck] = {}
        self._holds: dict[str, str] = {}               # job -> why it is not planned now
        self.lost_settle_seconds = lost_settle_seconds
        self.dry_run = dry_run
        self.on_event = on_event or (lambda kind, job, detail: None)
        self.backoff = Backoff()
        self.last_error: str | None = None
        self.refusal: str | None = None                 # Slurm's words when the last action failed
        self._nodes: list[SlurmNode] = []
        self._type_of: dict[str, str | None] = {}        # node -> its GPU type
        self._jobs: dict[str, SlurmJob] = {}          # gavel jobs Slurm lists as active
        self._bad_flags: dict[str, str] = {}
        self._others_gpus: dict[str, int] = {}        # node -> GPUs held by non-gavel jobs
        self._running: dict[str, _Running] = {}
        self._usage: dict[tuple, float] = {}    # (job, type, nodes, partner or None) -> seconds since observe
        self._departures: list[Departure] = []
        self._preempted: dict[str, _Preempted] = {}
        self._deferred: dict[str, Assignment] = {}     # starts waiting for the job to stop
        self._starting: dict[str, tuple[Assignment, float]] = {}   # released, not yet running
        self._planned: dict[str, Assignment] = {}
        self._stopped: dict[str, tuple[float, tuple[str, ...]]] = {}   # job -> (seen at, nodes)
        self._released: dict[str, float] = {}          # job -> when this daemon released it
        self._release_restarts: dict[str, int] = {}    # job -> its restart count at that release
        # job -> (nodes, since): stopped running because its node failed; its old copy may
        # still run there (a dead slurmd leaves its slurmstepds running)
        self._lost: dict[str, tuple[tuple[str, ...], float]] = {}
        self._back: dict[str, float] = {}              # node -> when it was first seen usable again
        self._refused: dict[str, dict[str, str]] = {}   # job -> {worker type: Slurm's refusal}
        # job -> why its last start was taken back at once: a non-gavel job took the GPUs
        # planned for it between the plan and the start (shown by gqueue until it runs)
        self._taken: dict[str, str] = {}
        self.replan = False       # such a start was taken back: the daemon plans again now
        # Space sharing (docs/space-sharing.md): job -> its partner, for pairs started
        # together on one GPU (half its shards each), until one of them stops
        self._pairs: dict[str, Assignment] = {}
        self._gpu_users: dict[tuple[str, str], list[str]] = {}   # (node, IDX) -> running jobs
        self._room: dict[str, NodeRoom] = {}          # shard node -> free shards per GPU (pair_room.py)
        # survivor of a pair (alone on half a GPU) -> the new pair row whose other job takes
        # the free half: the survivor keeps running (`_joins`)
        self._joining: dict[str, Assignment] = {}
        self._pair_warned: set[str] = set()            # one warning per reason, not per round
        self._pair_alarms: set[tuple] = set()          # pairs found split or shared: logged once
        self._shards_of: tuple | None = None           # (the nodes read, node -> shards per GPU)
        # job -> what it asked before a multi-GPU pair switched it to per-task shards
        # (multi_pairs.py; the daemon's are in its database), given back when it runs alone
        self.requests = requests if requests is not None else Requests()
        # job -> {(worker type, nodes): refusal}: shapes Slurm refused, avoided for a backoff
        self._bad_shapes: dict[str, dict[tuple[str, tuple[str, ...]], _RefusedShape]] = {}
        self._notes: dict[str, str] = {}               # job -> why it is planned elsewhere (gqueue)
        self._last_poll: float | None = None
        # A restarted daemon: running time up to here was credited by the last run.
        self._credited_until = credited_until
        self.progress_dir = progress_dir
        # Jobs a previous run recorded as active: reconciled with Slurm on the first poll.
        self._unreconciled: set[str] = {str(j) for j in active_jobs}
        self._accounting = accounting                  # None: ask slurmctld once
        self.final_backoff = Backoff()                 # sacct, separately from the poll
        self._gone_since: dict[str, float] = {}        # final state not read yet
        self._progress: dict[str, tuple] = {}          # path -> (file key, summary)
        self._user_files = UserFiles()                 # users' files: safe, bounded reads
        self._nodes = parse_nodes(self.cli.nodes())    # fail early: Slurm must answer once
        # GPU type -> partition (and, in a mixed partition, GRES type / node set): gputypes.py
        self.types = (partitions if isinstance(partitions, TypeMap) else
                      TypeMap.from_partitions(partitions) if partitions else discover(self._nodes))
        if not self.types.where:
            raise InputError("partitions", "no partition holds typed GPUs (Gres=gpu:TYPE:N); set "
                                           "[partitions] or [gpu_types] in the config")
        self.partitions = self.types.partitions     # partition -> type(s), for display
        self.worker_types = self.types.worker_types
        self._partition_of = {wt: w.partition for wt, w in self.types.where.items()}
        self._type_of = self.types.node_types(self._nodes)

    # -- polling ---------------------------------------------------------------
    def poll(self) -> None:
        now = self.clock.now()
        jobs = parse_jobs(self.cli.squeue())
        self._nodes = parse_nodes(self.cli.nodes())
        nodes = {n.name: n for n in self._nodes}
        self._type_of = self.types.node_types(self._nodes)
        gavel: dict[str, SlurmJob] = {}
        others: dict[str, int] = {}
        self._gpu_users = {}
        for j in jobs:
            if j.running:
                for n, idx in zip(j.nodes, j.gpu_indices):
                    for i in _indices(idx):
                        self._gpu_users.setdefault((n, i), []).append(j.job_id)
            if j.admin_comment.startswith(GAVEL_PREFIX):
                if not j.finished:
                    gavel[j.job_id] = j
            elif j.running:
                for n in j.nodes:                  # as Slurm split them (4+2 for --gpus=6)
                    others[n] = others.get(n, 0) + j.gpus_on(n)
        gone = [job for job in dict.fromkeys([*self._jobs, *sorted(self._unreconciled)])
                if job not in gavel]
        finals = self._final_states(gone, jobs, now)
        reconciled = {job for job in gone if job in finals and job not in self._running
                      and job in self._unreconciled}
        # credit running time since the last poll
        for job_id, r in list(self._running.items()):
            j = gavel.get(job_id)
            still = j is not None and j.running and j.nodes == r.nodes
            if not still and job_id in gone and job_id not in finals:
                continue              # its end is not known yet: credited when it is
            end = now
            if not still:
                finished = next((x for x in jobs if x.job_id == job_id), None)
                final = finals.get(job_id)
                ended = final.end if final is not None and final.end else (
                    finished.end_time if finished is not None else None)
                if ended and r.since < ended < now:
                    end = ended
            self._credit(job_id, r, end)
            if not still:
                del self._running[job_id]
                self._stopped[job_id] = (now, r.nodes)
                failed = [n for n in r.nodes if not self._node_usable(n, nodes)]
                if failed and job_id not in self._preempted and j is not None:
                    self._lost[job_id] = (r.nodes, now)
                    log.warning("job %s stopped running with its node %s down: not restarted until "
                                "the node is back (its old copy may still run there)",
                                job_id, ",".join(failed))
                    self.on_event("lost_with_node", job_id, ",".join(failed))
        self._stopped = {job: v for job, v in self._stopped.items()
                         if now - v[0] < RESTART_GUARD_SECONDS}
        for job_id, j in gavel.items():
            if j.running and job_id not in self._running:
                wt = self._run_type(j.partition, j.nodes)
                if wt is not None:
                    # Started since the last poll: credit from its start.  Already
                    # running at the first poll (a daemon restart): from where the
                    # previous run stopped crediting, or from now if that is unknown.
                    began = j.start_time or now
                    if self._last_poll is not None:
                        start = max(began, self._last_poll) if began < self._last_poll else began
                    elif self._credited_until is not None:
                        start = max(began, self._credited_until)
                    else:
                        start = now
                    start = min(start, now)
                    self._running[job_id] = _Running(wt, j.nodes, start)
                    self._credit(job_id, self._running[job_id], now)
            if not j.running and job_id in self._preempted:
                del self._preempted[job_id]            # it stopped: checkpointed and requeued
        for job_id in reconciled:
            self._credit_runs(job_id, finals[job_id])
        waiting = set()
        for job_id in gone:
            if job_id not in finals:
                waiting.add(job_id)           # its final state is not known yet
                continue
            state, t, detail = self._departure(job_id, finals[job_id], now)
            self._departures.append(Departure(job_id, t, state, detail))
            self._gone_since.pop(job_id, None)
            self._running.pop(job_id, None)
            self._preempted.pop(job_id, None)
            self._deferred.pop(job_id, None)
            self._forget_request(job_id)
            self.on_event(state, job_id, detail)
        self._unreconciled = waiting
        self._jobs = gavel
        self._others_gpus = others
        self._last_poll = now
        self._settle_lost(now, nodes)
        self._refused = {job: r for job, r in self._refused.items() if job in gavel}
        self._taken = {job: why for job, why in self._taken.items() if job in gavel and not gavel[job].running}
        # a pair lasts while both run or are released (a released job Slurm lists no more,
        # cancelled before it ran, ends its pair now: its partner runs on alone)
        self._pairs = {job: a for job, a in self._pairs.items()
                       if all(m in self._running or m in self._starting and m in gavel for m in a.jobs)}
        # each shard node's GPUs as Slurm's first fit sees them (pair_room.py): where a pair
        # released now would go, or why it waits
        self._room = gpu_room(jobs, {n.name: n.gpus for n in self._nodes}, self.shards_per_gpu,
                              self._leaving)
        self._adopt_pairs()
        self._check_pairs()
        # a job Slurm runs again starts its refusals afresh
        self._bad_shapes = {job: r for job, r in self._bad_shapes.items()
                            if job in gavel and not gavel[job].running}
        self._notes = {job: n for job, n in self._notes.items() if job in self._bad_shapes}

    @staticmethod
    def _node_usable(name: str, nodes: Mapping[str, SlurmNode]) -> bool:
        n = nodes.get(name)
        return n is not None and n.usable

    def _settle_lost(self, now: float, nodes: Mapping[str, SlurmNode]) -> None:
        """Jobs lost with a node become schedulable once every node of theirs is back."""
        for name in nodes:
            if self._node_usable(name, nodes):
                self._back.setdefault(name, now)
            else:
                self._back.pop(name, None)
        for job, (names, _) in list(self._lost.items()):
            if job not in self._jobs:
                del self._lost[job]                   # it left (cancelled, failed)
            elif all(now - self._back.get(n, now + 1) >= self.lost_settle_seconds for n in names):
                del self._lost[job]
                log.info("job %s: node %s is back; it may start again", job, ",".join(names))

    # -- departures: Slurm's final state ---------------------------------------------------
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

    def _final_states(self, gone: list[str], jobs: list[SlurmJob],
                      now: float) -> dict[str, FinalState | None]:
        """The final state of each job gone from the active queue; None: Slurm knows it
        no more (lost).  A job missing from the answer waits for the next poll (sacct
        failed: backing off, at most FINAL_STATE_PATIENCE_SECONDS)."""
        if not gone:
            return {}
        listed = {x.job_id: x for x in jobs if x.job_id in set(gone) and x.finished}
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
        out: dict[str, FinalState | None] = {}
        for job in gone:
            final = final_from_sacct(runs.get(job, ()))
            if final is not None and final.finished:
                out[job] = final
            elif job in listed:               # slurmctld's record (slurmdbd may lag behind)
                out[job] = final_from_job(listed[job], runs.get(job, ()))
            elif answered or now - self._gone_since.setdefault(job, now) >= FINAL_STATE_PATIENCE_SECONDS:
                out[job] = final              # None, or sacct's record of a run Slurm lost
        return out

    def _departure(self, job_id: str, final: FinalState | None, now: float) -> tuple[str, float, str]:
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
            detail += f", killed by signal {_signal_name(final.signal)}"
        t = final.end or now
        sig = getattr(signals, f"SIG{self.signal}", None)
        preempted = self._preempted.get(job_id)
        if state == "failed" and (sig is not None and final.signal == int(sig) or (
                preempted is not None and t - preempted.at <= self.grace_seconds + 5)):
            detail = (f"died at preemption: no signal handler? ({detail}; it was sent "
                      f"SIG{self.signal} to checkpoint)")
            log.warning("job %s %s", job_id, detail)
        else:
            log.info("job %s %s: %s (from %s)", job_id, state, detail, final.source)
        return state, t, detail

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
                self._credit(job_id, _Running(wt, run.nodes, begin), run.end)

    def _run_type(self, partition: str | None, nodes) -> str | None:
        """The GPU type a job runs on: its partition's, or in a mixed partition its nodes'."""
        return self.types.run_type(partition, nodes, self._type_of)

    def _credit(self, job_id: str, r: _Running, until: float) -> None:
        if until > r.since:
            partner = self._partner(job_id)
            key = (job_id, r.worker_type, r.nodes, partner if partner in self._running else None)
            self._usage[key] = self._usage.get(key, 0.0) + (until - r.since)
            r.since = until

    # -- backend interface --------------------------------------------------------
    def observe(self) -> Observation:
        """Poll Slurm, follow up on earlier actions (late preemptions, starts that waited
        for a job to stop), and report.  The daemon calls this every tick."""
        self.poll()
        now = self.clock.now()
        self._signal_young(now)
        self._escalate(now)
        self._start_deferred()
        self._take_back_stuck(now)
        self._hold_again()
        states, bad, holds, sizes = [], {}, {}, {}
        for job_id, j in sorted(self._jobs.items(), key=lambda kv: (kv[1].submit_time or 0, _id_order(kv[0]))):
            if j.partition and self._run_type(j.partition, j.nodes) is None and j.running:
                continue              # a gavel job someone placed outside the GPU partitions
            try:
                flags = from_admin_comment(j.admin_comment)
            except InputError as e:
                bad[job_id] = f"bad flags: {e.problem}"
                continue
            placement, hold = self._where(j, now)
            if not hold:        # the types it accepts (types=, the partitions it was submitted to)
                placement, hold = accepts(flags, placement, self._nodes, self._type_of)
            if hold:
                holds[job_id] = hold
            sizes[job_id] = self._held_gpus(j, placement)
            states.append(JobState(
                id=job_id, job_type=flags.model or UNKNOWN_MODEL,
                scale_factor=sizes[job_id], arrival_time=j.submit_time or now,
                total_steps=float(flags.steps) if flags.steps else math.nan,
                weight=flags.weight, entity=flags.entity or j.account,
                slo=flags.slo_seconds, name=j.name, user=j.user, account=j.account,
                speeds=flags.speeds or (), placement=placement, hold_reason=hold))
        for job_id, why in holds.items():
            if self._holds.get(job_id, "").split(";")[0] != why.split(";")[0]:
                log.warning("job %s is not planned: %s", job_id, why)
        self._holds = holds
        self._bad_flags = bad
        steps_done, measurements = self._read_progress(states)
        servers = []
        for n in self._nodes:
            wt = self._type_of.get(n.name)
            if wt is None or not n.usable:
                continue
            free = n.gpus - self._others_gpus.get(n.name, 0)
            if free > 0:
                servers.append(Server(n.name, wt, free))
        running = []
        for job_id, r in sorted(self._running.items()):
            j = self._jobs.get(job_id)
            if j is None or job_id in self._preempted:
                continue                      # stopping: not something the plan may keep
            if job_id in self._pairs:         # a pair row: both jobs on one GPU
                if self._pairs[job_id] not in running:
                    running.append(self._pairs[job_id])
                continue
            # an --exclusive job holds its whole node, as it was planned (see _held_gpus)
            running.append(Assignment((job_id,), r.worker_type, tuple(
                (n, sizes.get(job_id, j.gpus) if j.exclusive else j.gpus_on(n)) for n in r.nodes)))
        # Released but not started yet (Slurm starts a released job within seconds):
        # to the mechanism it already holds its GPUs, so it is kept, not started twice.
        # (One that does not start in time was taken back above.)
        for job_id, (a, at) in sorted(self._starting.items()):
            if a not in running:              # a pair is listed once
                running.append(a)
        usage = self._usage_rows()
        self._usage = {}
        departures, self._departures = tuple(self._departures), []
        return Observation(now, tuple(states), tuple(servers), steps_done, tuple(running), usage,
                           departures, measurements)

    def _where(self, j: SlurmJob, now: float) -> tuple[Placement, str]:
        """Where the job may run and, if it must not be planned now, why."""
        verdict = judge(j, self._nodes, self.partitions, node_types=self._type_of)
        base = SPREAD if j.reshapeable else ONE_NODE
        if verdict.hold:
            return base, verdict.hold
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
                servers = frozenset(n for n in servers if self._type_of.get(n) in allowed)
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

    def _held_gpus(self, j: SlurmJob, placement: Placement | None) -> int:
        """GPUs the job keeps from others: its own, or (--exclusive) every GPU of the largest
        node it may run on, so that the plan leaves that node to it alone."""
        if not j.exclusive:
            return max(1, j.total_gpus)
        allowed = placement.servers if placement is not None else None
        sizes = [n.gpus for n in self._nodes if n.name in self._type_of
                 and (allowed is None or n.name in allowed)]
        return max([max(1, j.total_gpus)] + sizes)

    def _rounds(self, seconds: float) -> str:
        if not self.round_seconds:
            return f"{seconds:.0f} s"
        n = max(1, math.ceil(seconds / self.round_seconds - 1e-9))
        return f"{n} round" + ("s" if n > 1 else "")

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
            why = self._taken_from(j, a) if j is not None and not j.running and "JobHeld" not in j.reason \
                else ""
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
        step = self.round_seconds or self.start_timeout
        for job_id, j, at in late:
            del self._starting[job_id]
            failures = self._stuck[job_id].failures + 1 if job_id in self._stuck else 1
            delay = step * min(MAX_BACKOFF_ROUNDS, 2 ** (failures - 1))
            self._stuck[job_id] = _Stuck(failures, at, now, now + delay, j.reason)
            log.warning("job %s was released %.0f s ago and Slurm did not start it (%s): held "
                        "again, not planned for %.0f s", job_id, now - at, j.reason or "no reason", delay)
            self.on_event("stuck", job_id, f"not started {now - at:.0f} s after release, Slurm says: "
                                           f"{j.reason}; retry in {delay:.0f} s")

    def _taken_from(self, j: SlurmJob, a: Assignment) -> str:
        """Why the released, pending `j` cannot start where it was planned ("" if it can):
        a non-gavel job holds GPUs of a planned node that the plan counted as free."""
        nodes = {n.name: n for n in self._nodes}
        gavel: dict[str, int] = {}
        for other in self._jobs.values():
            if other.running and other.job_id != j.job_id:
                for n in other.nodes:
                    gavel[n] = gavel.get(n, 0) + other.gpus_on(n)
        short = []
        for name, need in a.servers:
            n, others = nodes.get(name), self._others_gpus.get(name, 0)
            if n is not None and others > 0 and n.gpus - others - gavel.get(name, 0) < need:
                short.append(f"{name} ({others} of its {n.gpus} GPUs)")
        return ", ".join(short)

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

    def job_status(self) -> dict[str, dict]:
        """Per gavel job what Slurm really does with it, for `gqueue`: state R (Slurm runs it:
        `gpus`, `worker_type`, `nodes`), S (released, not started yet), W (not planned: `detail`), PD."""
        now = self.clock.now()
        out: dict[str, dict] = {}
        for job_id, j in self._jobs.items():
            if j.running:
                r = self._running.get(job_id)
                out[job_id] = {"state": "R", "gpus": j.total_gpus,
                               "worker_type": r.worker_type if r else self._run_type(j.partition, j.nodes),
                               "nodes": ",".join(r.nodes if r else j.nodes)}
            elif job_id in self._starting:
                _, at = self._starting[job_id]
                out[job_id] = {"state": "S", "gpus": 0,
                               "detail": f"released {now - at:.0f} s ago, not started yet; Slurm says: "
                                         f"{j.reason or 'nothing yet'}"}
            elif job_id in self._holds:
                out[job_id] = {"state": "W", "gpus": 0, "detail": self._holds[job_id]}
            elif job_id in self._taken:
                out[job_id] = {"state": "PD", "gpus": 0, "detail": self._taken[job_id]}
            else:
                out[job_id] = {"state": "PD", "gpus": 0}
                if job_id in self._notes:
                    out[job_id]["detail"] = self._notes[job_id]
        return out

    def _read_progress(self, states) -> tuple[dict[str, float], tuple[Measurement, ...]]:
        """Steps done and measured steps/s of each job, from the progress files its iterator
        writes.  Users control those files: they are read through `UserFiles` (regular files
        owned by the job's user only, no symlinks, a bounded tail, a bounded wait; a refused
        file is logged and costs its job its report); a file is parsed only when it changed."""
        done: dict[str, float] = {}
        seen: list[Measurement] = []
        wanted: dict[str, list] = {}
        requests: dict[str, dict] = {}
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
            names = [state.id] + ([j.slurm_id] if j.slurm_id not in ('', state.id) else [])
            paths = [str(p) for n in names for p in candidate_paths(n, j.work_dir or None, self.progress_dir)]
            wanted[state.id] = paths
            for i, path in enumerate(paths):
                # the configured spool is the admin's (may be reached through a symlink)
                requests[path] = {"owner_uid": uid, "trusted_dir": bool(self.progress_dir) and i == 0}
        tails = self._user_files.read_all(requests)
        self._progress = {p: v for p, v in self._progress.items() if p in requests}   # jobs gone
        for job_id, paths in wanted.items():
            j = self._jobs[job_id]
            for path in paths:
                tail = tails.get(path)
                if tail is None:
                    continue
                cached = self._progress.get(path)
                if cached is None or cached[0] != tail.key:
                    cached = (tail.key, summary(parse_records(tail.data, torn_start=tail.truncated)))
                    self._progress[path] = cached
                info = cached[1]
                if info is None:
                    continue
                if info.get("step") is not None:
                    done[job_id] = float(info["step"])
                # the record's partition, and in a mixed partition its node, says the type
                wt = self._run_type(info.get("partition"), [info["node"]] if info.get("node") else j.nodes)
                if info.get("steps_per_second") and wt and j.running:
                    # Slurm's node list says whether the run was spread (unconsolidated)
                    partner = self._partner(job_id)
                    seen.append(Measurement(job_id, wt, float(info["steps_per_second"]),
                                            partner=partner if partner in self._running else None,
                                            spread=len(j.nodes) > 1))
                break
        return done, tuple(seen)

    @property
    def bad_flags(self) -> dict[str, str]:
        return dict(self._bad_flags)

    def execute(self, plan: RoundPlan, round_end: float) -> None:
        now = self.clock.now()
        self._round = plan.round
        if round_end > now and plan.round != self._executed_round:   # not a start within the round
            self.round_seconds = round_end - now
        if plan.round != self._executed_round:
            # a pair still waiting for a GPU with room for both halves is the last round's:
            # this round starts it again or not
            for job, a in list(self._deferred.items()):
                if len(a.jobs) > 1 and a not in plan.start:
                    del self._deferred[job]
            self._joining = {}
            # a job whose signal waits (`_signal_young`) and that this round keeps runs on
            self._signal_later = {job: due for job, due in self._signal_later.items()
                                  if job in plan.preempt}
        self._executed_round = plan.round
        self._joining.update(self._joins(plan))
        stop = [job for job in plan.preempt if job in self._running and job not in self._preempted
                and job not in self._joining and job not in self._signal_later]
        # a pair stops together (its partner cannot go on alone on half a GPU's shards)
        kept = {job for a in plan.keep for job in a.jobs}
        for job in plan.preempt:
            partner = self._partner(job)
            if (partner in self._running and partner not in self._preempted
                    and partner not in stop and partner not in kept):
                stop.append(partner)
        unstart = [job for job in plan.preempt if job in self._starting and job not in self._running]
        for job in plan.preempt:              # a pair released but not started: both taken back
            partner = self._partner(job)
            if (partner in self._starting and partner not in self._running and partner not in unstart
                    and partner not in kept):
                unstart.append(partner)
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
        for a in plan.start:
            job = a.jobs[0]
            if len(a.jobs) > 1:
                why = self._pair_problem(a)
                if why:
                    self._warn_pair(plan.round, a, why)
                    continue
                for member in a.jobs:
                    if self._joining.get(member) != a:     # (a survivor joined keeps running)
                        self._deferred[member] = a
                continue
            j = self._jobs.get(job)
            if len(a.servers) > 1 and (j is None or not j.reshapeable):
                # the placement said one node: a plan from elsewhere
                log.warning("round %d: job %s would span %d nodes; it asks its GPUs per node, "
                            "so it keeps one node and waits", plan.round, job, len(a.servers))
                continue
            if len({count for _, count in a.servers}) > 1:
                log.warning("round %d: job %s would hold %s GPUs on its nodes; Slurm gives a job "
                            "one count per node, so it waits", plan.round, job,
                            "+".join(str(c) for _, c in a.servers))
                continue
            self._deferred[job] = a
        self._start_deferred()

    # -- helpers ---------------------------------------------------------------------
    def _min_run(self) -> float:
        """How long a job runs before it is signalled: `min_run_seconds`, at most half
        of a round (a job started at a round's start is never held back)."""
        if self.round_seconds:
            return min(self.min_run_seconds, self.round_seconds / 2)
        return self.min_run_seconds

    def _young(self, stop: list[str], now: float) -> dict[str, float]:
        """Of the jobs to signal, those that started less than `_min_run()` ago, with when
        their signal is due.  A batch script killed by the signal before it set its trap
        fails instead of being requeued (seen on both versions 3-8 s after a late start).
        The two jobs of a pair wait for the younger one: a pair stops together."""
        guard = self._min_run()
        due = {}
        for job in stop:
            j = self._jobs.get(job)
            started = j.start_time if j is not None else None
            if guard > 0 and started is not None and now - started < guard:
                due[job] = started + guard
        for job in list(due):
            partner = self._partner(job)
            if partner in stop:
                due[partner] = max(due.get(partner, now), due[job])
                due[job] = due[partner]
        return due

    def _signal_now(self, stop: list[str], why: str) -> None:
        if not stop:
            return
        self._act(f"signal {self.signal}", stop,
                  lambda: self._signal_live(stop), why=why)
        now = self.clock.now()
        for job in stop:
            self._preempted[job] = _Preempted(now)

    def _signal_live(self, stop: list[str]) -> None:
        """Signal `stop`; a job that ended since the poll is not a failure (scancel signals
        the others and names it): said at INFO, the next poll sees it leave."""
        try:
            self.cli.signal(stop, self.signal, full=self.signal_all_steps)
        except SlurmCommandError as e:
            ended = ended_jobs(e.stderr, stop)
            if ended is None:
                raise
            for job in sorted(ended):
                log.info("signal %s: job %s had already ended (scancel: no such job to signal); "
                         "the others were signalled", self.signal, job)

    def _signal_young(self, now: float) -> None:
        """Signal the preempted jobs whose minimum run is over (`_young`); one that stopped
        meanwhile is forgotten."""
        still = {job: at for job, at in self._signal_later.items()
                 if job in self._jobs and self._jobs[job].running}
        due = [job for job, at in still.items() if at <= now]
        self._signal_later = {job: at for job, at in still.items() if at > now}
        self._signal_now(due, f"preempted by round {self._round}: signalled after its minimum run")

    def _joins(self, plan: RoundPlan) -> dict[str, Assignment]:
        """Survivors of a pair (running alone on part of the shards of one GPU, or of each of
        a multi-GPU pair's GPUs) that this plan pairs with a new job on the same node, type and
        GPU count: the survivor keeps running (not preempted and restarted with its new
        partner), the partner takes the free half of each of its GPUs (`_lone_half`)."""
        out = {}
        for a in plan.start:
            if len(a.jobs) != 2 or self._pair_problem(a):
                continue
            running = [m for m in a.jobs if m in self._running and m not in self._preempted]
            if len(running) != 1 or running[0] in self._pairs:
                continue
            s = running[0]
            if self._running[s].worker_type == a.worker_type and self._lone_half(s, a) is not None:
                out[s] = a
        return out

    def _leaving(self, j: SlurmJob) -> bool:
        """A running job about to free its GPU: preempted by us, or completing."""
        return j.job_id in self._preempted or "COMPLETING" in j.state

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

    def _whole_gpu_free(self, node: str) -> bool:
        r = self._room.get(node)
        return r is not None and any(free >= self.shards_per_gpu(node) for free in r.free)

    def _await_pairs(self, pairs: list[Assignment], settled: set[str]) -> bool:
        """Read Slurm until every job of `pairs` (pairs and lone shard jobs just released)
        runs with its GPU listed (at most PAIR_PLACED_SECONDS), undo any pair that Slurm
        split (`_undo_split`), then take the GPUs' room from that read; False if not placed
        in time."""
        want = {m for a in pairs for m in a.jobs}
        deadline = time.monotonic() + PAIR_PLACED_SECONDS
        while True:
            # real time, not the clock's sleep: that one is the daemon's, woken by its signals
            time.sleep(PAIR_READ_SECONDS)
            jobs = parse_jobs(self.cli.squeue())
            seen = {j.job_id: j for j in jobs if j.job_id in want and j.running and any(j.gpu_indices)}
            if len(seen) == len(want):
                break
            if time.monotonic() >= deadline:
                return False
        for a in pairs:
            where = {seen[m].gpu_indices for m in a.jobs}
            if len(a.jobs) > 1 and len(where) > 1:
                self._undo_split(a, {m: seen[m].gpu_indices[0] for m in a.jobs})
        self._room = gpu_room(jobs, {n.name: n.gpus for n in self._nodes}, self.shards_per_gpu,
                              self._leaving)
        settled.update(want)
        return True

    def _undo_split(self, a: Assignment, gpus: Mapping[str, str]) -> None:
        """Slurm put the halves of a pair just released on two GPUs: a job left a GPU before
        the chosen one between the poll and Slurm's placement (first fit then gave it a half).
        The pair's new jobs are requeued held at once (seconds after their start: little
        lost) and start again, together, from a later poll; a survivor joined keeps running."""
        node = a.nodes[0]
        joined = [m for m in a.jobs if m in self._running]         # a survivor, running before
        new = [m for m in a.jobs if m not in joined]
        said = ", ".join(f"{m} GPU {node}:{gpus[m]}" for m in a.jobs)
        log.warning("pair %s landed on two GPUs (%s): a job left a GPU first fit took between "
                    "the poll and Slurm's placement; job %s requeued held, started again together",
                    "+".join(a.jobs), said, ",".join(new))
        for m in a.jobs:
            self.on_event("pair_split_undone", m, said)
        if not self._act("requeuehold (pair split by Slurm)", new, lambda: self.cli.requeue_hold(new),
                         why=f"its pair {'+'.join(a.jobs)} landed on two GPUs"):
            return                            # the next poll's check reports the split
        now = self.clock.now()
        for m in a.jobs:
            self._pairs.pop(m, None)
        for m in new:
            self._starting.pop(m, None)
            self._stopped[m] = (now, a.nodes)  # restart guard: not on that node within the second
            self._deferred[m] = a
        for m in joined:
            self._joining[m] = a

    def _release_deferred(self, settled: set[str] = frozenset()) -> list[Assignment]:
        """Start every deferred job that is no longer running: one `scontrol update` per job
        (a distributed one gets its shape in it) and one `scontrol release` for all (Slurm
        takes id lists).  A pair only where both halves get one GPU now (pair_room.py), one
        per node, none next to a shard job released but not placed yet (`settled` jobs are
        placed); the pairs and lone shard jobs released are returned."""
        groups: dict[tuple[str, str], list[str]] = {}

        def waits(job: str, a: Assignment) -> bool:
            j = self._jobs[job]
            if j.running or "COMPLETING" in j.state:
                return True                   # still stopping; next poll
            stopped = self._stopped.get(job)
            return bool(stopped and set(stopped[1]) & set(a.nodes)
                        and self.clock.now() - stopped[0] < RESTART_GUARD_SECONDS)  # too soon
        # nodes with a shard job released but not placed yet (a pair, or a lone job that
        # will take a whole GPU's shards): a pair there waits until it is placed
        pairing = {a.nodes[0] for job, (a, _) in self._starting.items()
                   if job not in settled and len(a.servers) == 1 and job in self._jobs
                   and self._jobs[job].shards and not self._jobs[job].running}
        joined: dict[str, int] = {}          # a survivor's new partner -> the shards it asks
        for job, a in list(self._deferred.items()):
            if job not in self._deferred:
                continue                      # its pair's other job decided for both
            members = [m for m in a.jobs if self._joining.get(m) != a]   # to start
            survivor = next((m for m in a.jobs if m not in members), None)
            if (any(m not in self._jobs or self._deferred.get(m) != a for m in members)
                    or survivor is not None and not (survivor in self._running and survivor in self._jobs
                                                     and self._jobs[survivor].running)):
                for m in members:             # gone (or planned elsewhere): the pair cannot start
                    if self._deferred.get(m) == a:
                        del self._deferred[m]
                continue
            if any(waits(m, a) for m in members):
                continue                      # a pair starts together: both ready
            if len(a.jobs) > 1:
                # One pair per node at a time (two released together can cross: A and C on
                # one GPU, B and D on another), and only where first fit gives both halves
                # one GPU now (pair_room.py); else it waits, deferred, for a later poll.
                node = a.nodes[0]
                if node in pairing:
                    continue
                room = self._room.get(node)
                if survivor is not None:      # the new partner takes the survivor's free halves
                    mine, held = self._lone_half(survivor, a) or ((), 0)
                    want = self.shards_per_gpu(node) - held
                    # a task per GPU, each on the first GPU with room it does not use yet
                    # (ONE_TASK_PER_SHARING_GRES): the survivor's GPUs must come first
                    gpus, why = (first_fit_gpus(room, want, a.gpus) if room is not None and mine
                                 else (None, "no shards listed" if mine else "the survivor holds no half"))
                    if gpus != mine:
                        if gpus is not None:  # first fit would put it elsewhere: said once
                            self._warn_pair(None, a, f"node {node}: first fit would give job {members[0]} "
                                            f"{_gpu_list(gpus)}, not {_gpu_list(mine)} beside job "
                                            f"{survivor}; it waits")
                        else:
                            log.debug("job %s waits to join %s on %s: %s", members[0], survivor, node, why)
                        continue
                    take(room, gpus, (want,), (members[0],))
                    joined[members[0]] = want
                else:
                    halves = self._halves(a)
                    gpus, why = pair_gpus(room, halves, a.gpus) if room is not None else (None, "no shards listed")
                    if gpus is None:
                        if "part of its shards" in why:   # a survivor of a pair in the way: said once
                            self._warn_pair(None, a, f"node {node}: {why}; it waits")
                        else:
                            log.debug("pair %s waits on %s: %s", "+".join(a.jobs), node, why)
                        continue
                    take(room, gpus, halves, a.jobs)
                pairing.add(node)
            for m in members:
                del self._deferred[m]
                self._planned[m] = a
                groups.setdefault((self._partition_of[a.worker_type], ",".join(a.nodes)), []).append(m)
        if not groups:
            return []
        # `scontrol update` takes a list of job ids for Partition or StartTime, but
        # 22.05 answers "Invalid job ID" to a list together with NodeList: one
        # update per job, then one release for all of them.
        ready = []
        for (partition, nodes), jobs in groups.items():
            for job in jobs:
                a = self._planned[job]
                j = self._jobs.get(job)
                extra: dict[str, str] = {}
                if j is not None and j.reshapeable:
                    # its own total over the planned nodes: an --exclusive job was planned
                    # as their whole GPUs (_held_gpus), but Slurm checks the total
                    per = max(1, j.total_gpus // len(a.servers))
                    what = f"start on {partition} {nodes} ({len(a.servers)}x{per} GPUs)"
                    tasks = j.tasks_per_node(per)
                    action = (lambda job=job, p=partition, n=a.nodes, per=per, tasks=tasks, x=self._unheld(j):
                              self.cli.reshape(job, p, n, per, tasks, **x))
                else:
                    try:
                        share, said = self._share_fields(job, a, joined.get(job, 0))
                    except GavelError as e:   # its request could not be remembered: not paired
                        log.error("job %s not started in pair %s: %s", job, "+".join(a.jobs), e)
                        continue
                    what = f"start on {partition} {nodes}{said}"
                    extra = {**self._unheld(j), **share}
                    action = (lambda job=job, p=partition, n=nodes, x=extra:
                              self.cli.update([job], Partition=p, NodeList=n, StartTime="now", **x))
                if self._act(what, [job], action, why=self._why_start()):
                    ready.append(job)
                    if not self.dry_run and "TresPerTask" in extra and "Gres" in extra:
                        self._forget_request(job)          # its own request is back
                elif any(r in (self.refusal or "").lower() for r in PARTITION_REFUSALS):
                    # every type of that partition (a mixed one holds several)
                    why = self.refusal.strip().splitlines()[-1]
                    left = [wt for wt, p in self._partition_of.items() if p == partition] or [a.worker_type]
                    for wt in left:
                        self._refused.setdefault(job, {})[wt] = why
                    log.warning("job %s may not use partition %s (%s): %s left out of its row",
                                job, partition, why, ", ".join(left))
                elif self.refusal is not None:
                    self._refuse_shape(job, a)
        for job in list(ready):               # a pair starts together or not at all
            a = self._planned[job]
            if len(a.jobs) > 1 and any(m not in ready and self._joining.get(m) != a for m in a.jobs):
                ready.remove(job)
                log.warning("job %s not released: its pair %s could not be prepared", job,
                            "+".join(a.jobs))
        why = {job: self._why_start() for job in ready}
        if ready and not self._act("release", ready, lambda: self.cli.release(ready), why=why) and len(ready) > 1:
            ready = [job for job in ready if self._act("release", [job], lambda job=job: self.cli.release([job]),
                                                       why=why)]
        now = self.clock.now()
        for job in ready:
            if len(self._planned[job].jobs) > 1:
                self._pairs[job] = self._planned[job]
            j = self._jobs.get(job)
            if j is not None:
                # as Slurm has it now (until the next poll): no longer held, so that this
                # poll's own follow-up (_take_back_stuck) does not take it for held by another
                self._jobs[job] = replace(j, reason="", priority=None)
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
        released = list(dict.fromkeys(self._planned[job] for job in ready if len(self._planned[job].servers) == 1
                                      and (len(self._planned[job].jobs) > 1 or job in self._jobs and self._jobs[job].shards)))
        self._planned.clear()
        return released

    @staticmethod
    def _unheld(j: SlurmJob | None) -> dict[str, str]:
        """The start's extra field that drops the hold status from the job's AdminComment
        (in the same `scontrol update`: no call of its own); {} when it shows none."""
        if j is None or not admin_status(j.admin_comment):
            return {}
        return {"AdminComment": admin_flags(j.admin_comment)}

    def show_holds(self, reasons: Mapping[str, str], limit: int = STATUS_PER_ROUND) -> None:
        """Say in Slurm why each held gavel job waits: its AdminComment, which every user
        reads in `scontrol show job` (and `squeue --json`), gets the daemon's reason after
        the flags ("... | held by slurm-gavel: waiting for its round (...)").  Written only
        when it changed; jobs given the same text share one `scontrol update` (Slurm takes
        a list of ids for one value, and each job's flags are its own, so a text is shared
        only by jobs with the same flags), at most `limit` calls a round (a long queue is
        marked over a few rounds)."""
        ours = self._starting.keys() | self._deferred.keys() | self._planned.keys()
        groups: dict[str, list[str]] = {}
        for job, j in sorted(self._jobs.items(), key=lambda kv: _id_order(kv[0])):
            if j.primary_state != "PENDING" or "JobHeld" not in j.reason or job in ours:
                continue
            why = reasons.get(job) or "waiting for the next round"
            text = with_status(j.admin_comment, f"held by slurm-gavel: {why}")
            if text != j.admin_comment and not (self.dry_run and self._shown.get(job) == text):
                groups.setdefault(text, []).append(job)
        for text, jobs in list(groups.items())[:limit]:
            if self._act(f"show why held ({admin_status(text)})", jobs,
                         lambda jobs=jobs, text=text: self.cli.update(jobs, AdminComment=text),
                         why="it waits in slurm-gavel's queue"):
                for job in jobs:                # as Slurm has it now (until the next poll)
                    self._jobs[job] = replace(self._jobs[job], admin_comment=text)
                    self._shown[job] = text     # a dry run says it once, not every round
        self._shown = {job: t for job, t in self._shown.items() if job in self._jobs}

    def _refuse_shape(self, job: str, a: Assignment) -> None:
        """Slurm refused to start `job` as `a`: avoid those nodes for it for a backoff that
        doubles with each refusal of the same shape (one round, two, ... MAX_BACKOFF_ROUNDS)."""
        now = self.clock.now()
        key = (a.worker_type, a.nodes)
        shapes = self._bad_shapes.setdefault(job, {})
        failures = shapes[key].failures + 1 if key in shapes else 1
        step = self.round_seconds or self.start_timeout
        delay = step * min(MAX_BACKOFF_ROUNDS, 2 ** (failures - 1))
        words = (self.refusal or "").strip().splitlines()
        reason = (words[-1] if words else "refused")[:200]
        per = a.gpus // max(1, len(a.servers))
        shapes[key] = _RefusedShape(a.worker_type, a.nodes, per, failures, now + delay, reason)
        log.warning("job %s: Slurm refused to start it on %s (%s): those nodes are avoided for "
                    "%.0f s", job, shapes[key].describe(), reason, delay)
        self.on_event("refused", job, f"Slurm refused {shapes[key].describe()}: {reason}; "
                                      f"avoided for {delay:.0f} s")

    def _avoid_refused(self, j: SlurmJob, placement: Placement, now: float) -> tuple[Placement, str]:
        """The placement without the nodes of the job's refused shapes (while their backoff
        lasts), and a hold reason if no node left can hold the job at all."""
        self._notes.pop(j.job_id, None)
        active = [r for r in self._bad_shapes.get(j.job_id, {}).values() if now < r.until]
        if not active:
            return placement, ""
        avoid = {n for r in active for n in r.nodes}
        types = placement.worker_types or frozenset(self.worker_types)
        names = [n.name for n in self._nodes if n.usable and self._type_of.get(n.name) in types
                 and (placement.servers is None or n.name in placement.servers)]
        left = frozenset(n for n in names if n not in avoid)
        last = max(active, key=lambda r: r.until)
        said = (f"Slurm refused to start it on {last.describe()}: {last.reason}; not asked again "
                f"for {self._rounds(last.until - now)}")
        placement = replace(placement, servers=left)
        if not self._could_hold(j, left):
            return placement, said
        self._notes[j.job_id] = said + ", planned elsewhere"
        return placement, ""

    def _could_hold(self, j: SlurmJob, names: frozenset[str]) -> bool:
        """Whether these nodes (whole, free or not) can ever hold the job in the shapes Slurm
        gives it: one node, or (distributed) equal parts on nodes of one type."""
        size = self._held_gpus(j, None)
        by_type: dict[str, list[int]] = {}
        for n in self._nodes:
            if n.name in names:
                by_type.setdefault(self._type_of.get(n.name), []).append(n.gpus)
        for gpus in by_type.values():
            if any(g >= size for g in gpus):
                return True
            if j.reshapeable and any(size % k == 0 and sum(g >= size // k for g in gpus) >= k
                                     for k in range(2, size + 1)):
                return True
        return False

    def _ran_since_release(self, j: SlurmJob) -> bool:
        """It started after this daemon released it (and was requeued since): its restart
        count rose, even if no poll saw it running."""
        before = self._release_restarts.get(j.job_id)
        return before is not None and j.restarts > before

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
        if loose:
            log.warning("jobs %s are pending but not held (requeued by their owner?): holding "
                        "them again", ",".join(loose))
            self._act("hold (requeued outside the daemon)", loose, lambda: self.cli.hold(loose),
                      why="pending but not held: requeued by its owner, only the daemon releases it")

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

    def _placed(self, job: str) -> tuple[str, tuple[str, ...]]:
        """(partition, nodes) an action concerns: where the job is being started, else
        where it runs, else its partition and no node yet."""
        j = self._jobs.get(job)
        a = self._planned.get(job) or (self._starting[job][0] if job in self._starting else None) \
            or self._deferred.get(job)
        if a is not None:
            return self._partition_of.get(a.worker_type, "?"), tuple(a.nodes)
        r = self._running.get(job)
        return (j.partition if j is not None else "?"), (r.nodes if r else (j.nodes if j else ()))

    def _why_start(self) -> str:
        return f"started by round {self._round}'s plan" if self._round is not None else "started by the plan"

    def _act(self, what: str, jobs: list[str], action: Callable[[], None],
             why: str | Mapping[str, str] = "") -> bool:
        """Carry out (or, dry run, only log) an action; False if Slurm refused it.  Its log
        line names each job with its partition, nodes and the reason (`why`: one for all
        or one per job); the recorded events keep `what`."""
        for job in jobs:
            self.on_event("dry_run" if self.dry_run else "action", job, what)
        details = []
        for job in jobs:
            partition, nodes = self._placed(job)
            reason = why.get(job, "") if isinstance(why, Mapping) else why
            details.append(f"job {job} on partition {partition}, nodes {','.join(nodes) or 'none yet'}"
                           + (f": {reason}" if reason else ""))
        said = f" -- {'; '.join(details)}"
        if self.dry_run:
            log.info("dry run: would %s: %s%s", what, ",".join(jobs), said)
            return True
        log.info("%s: %s%s", what, ",".join(jobs), said)
        self.refusal = None
        try:
            action()
            return True
        except SlurmCommandError as e:
            self.refusal = e.stderr or str(e)
            # A job can finish between the poll and the action (scancel then
            # says "Invalid job id"); the next poll shows what really happened.
            log.error("%s failed for %s: %s", what, ",".join(jobs), e)
            for job in jobs:
                self.on_event("action_failed", job, f"{what}: {e}")
            return False


def _gpu_list(gpus: tuple[int, ...]) -> str:
    """(1,) -> 'GPU 1', (2, 3) -> 'GPUs 2,3'."""
    return f"GPU{'s' if len(gpus) > 1 else ''} {','.join(map(str, gpus))}"


def _signal_name(number: int) -> str:
    try:
        return signals.Signals(number).name.removeprefix("SIG")
    except ValueError:
        return str(number)


__all__ = ["GAVEL_PREFIX", "SlurmBackend", "discover_partitions"]

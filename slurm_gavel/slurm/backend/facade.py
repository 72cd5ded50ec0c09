"""The Slurm cluster backend: what Slurm runs, read with one batched poll; round plans carried out.

Reading (`poll`): one `squeue --json` and one `scontrol show nodes --json` per poll (the
daemon polls at each round, and at a tick between rounds when a cheap look at the jobs'
states says something it acts on changed: looks.py), kept as one immutable
`Snapshot` (snapshot.py).  The poll is incremental: a job record whose fields did not change
since the last poll is not parsed again (records.JobReader; `reconciled` counts those that
were), and a job's flags and verdicts are kept until its record or the nodes change
(verdicts.py).  Gavel jobs are those whose AdminComment the job_submit plugin
marked (``gavel:v1 ...``); every other job's GPUs are simply unavailable to the scheduler.

Acting (`execute`): keep: nothing at all (the lease is renewed; the job never notices);
preempt: a signal, escalated to a held requeue (stops.py); start: `scontrol update` and
`scontrol release` of held pending jobs (starts.py), a pair row on one GPU's shards
(pairs/).  Why a job is not planned, the backoffs and the words Slurm shows: holds.py.
What ran, credited to the ledger, and departures: credit.py.

GPU types (gputypes.py): a partition per type, or a partition of mixed GPU nodes
whose nodes' GRES type (or a configured node set) is the type; the node list a
start pins says the type, so a job's type is read from its partition and nodes.

Each action's log line names every job with its partition, nodes and the reason (`_act`).
With `dry_run` nothing is changed in Slurm: every action is only logged.

This module is the facade: the state the concerns share, the poll, `observe`, `execute`
and the attributes the engine and daemon read; the concerns are its mixins.
"""
from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import Callable, Mapping

from ...core.backend import Departure, JobState, Observation
from ...core.errors import InputError
from ...core.interfaces import Backend
from ...core.plan import Assignment, RoundPlan, Server
from ..capacity import cpu_shortage, free_gpus, memory_consumable
from ..commands import Backoff, SlurmCLI, SlurmCommandError
from ..feasibility import accepts
from ..gputypes import TypeMap, discover
from ..records import JobReader, SlurmJob, SlurmNode, parse_nodes
from ..userfiles import UserFiles
from . import snapshot as snapshots
from .snapshot import id_order
from .credit import Crediting, Run
from .holds import LOST_SETTLE_SECONDS, START_TIMEOUT_SECONDS, Holding, RefusedShape, Stuck
from .looks import FULL_READ_SECONDS, Looking
from .pairs.multi import Requests
from .pairs.placing import Pairing
from .pairs.room import NodeRoom
from .pairs.sharing import OnceLog, PairLimit, joins, pair_problem, usage_rows
from .starts import RESTART_GUARD_SECONDS, Starting
from .stops import Preempted, Stopping
from .verdicts import Verdicts

log = logging.getLogger("slurm_gavel.slurm")

UNKNOWN_MODEL = "unknown"


class SlurmBackend(Looking, Crediting, Holding, Stopping, Starting, Pairing, PairLimit, Backend):
    """`observe` / `execute` on a Slurm cluster through `SlurmCLI`."""

    def __init__(self, cli: SlurmCLI, clock, partitions: Mapping[str, str] | TypeMap | None = None,
                 signal: str = "USR2", signal_all_steps: bool = False, grace_seconds: float = 60.0,
                 dry_run: bool = False, on_event: Callable[[str, str | None, str], None] | None = None,
                 credited_until: float | None = None, progress_dir: str | None = None,
                 start_timeout: float = START_TIMEOUT_SECONDS,
                 active_jobs=(), accounting: bool | None = None,
                 lost_settle_seconds: float = LOST_SETTLE_SECONDS,
                 min_run_seconds: float = 0.0, requests: Requests | None = None,
                 share_by: str = "entity", full_read_seconds: float = FULL_READ_SECONDS):
        self.cli, self.clock = cli, clock
        # "user": a job's entity is its user, whatever its entity= flag says (core/entities.py)
        self.share_by = share_by
        self.signal, self.signal_all_steps = signal, signal_all_steps
        self.grace_seconds = grace_seconds
        self.min_run_seconds = float(min_run_seconds)
        self.start_timeout = float(start_timeout)
        self.lost_settle_seconds = lost_settle_seconds
        self.dry_run = dry_run
        self.on_event = on_event or (lambda kind, job, detail: None)
        self.progress_dir = progress_dir
        self.round_seconds: float | None = None        # learned from execute()
        self._executed_round: int | None = None
        self._round: int | None = None                 # the last plan's round (for the log)
        self.backoff = Backoff()
        self.last_error: str | None = None
        self.refusal: str | None = None                 # Slurm's words when the last action failed
        self._bad_flags: dict[str, str] = {}
        self._partition_of: dict[str, str] = {}
        # the poll's reconcile, incremental: a job record is parsed again only when it changed
        # (records.JobReader), its flags and verdicts worked out again only then (verdicts.py)
        self._reader = JobReader()
        self.reconciled = 0                            # records the last poll parsed again
        self._verdicts = Verdicts()

        # credit.py: what ran, credited; departures
        self._running: dict[str, Run] = {}
        self._usage: dict[tuple, float] = {}    # (job, type, nodes, partner or None) -> seconds since observe
        self._departures: list[Departure] = []
        self._last_poll: float | None = None
        self._credited_until = credited_until    # a restarted daemon: credited up to here by the last run
        # Jobs a previous run recorded as active: reconciled with Slurm on the first poll.
        self._unreconciled: set[str] = {str(j) for j in active_jobs}
        self._accounting = accounting                  # None: ask slurmctld once
        self.final_backoff = Backoff()                 # sacct, separately from the poll
        self._gone_since: dict[str, float] = {}        # final state not read yet
        self._progress: dict[str, tuple] = {}          # path -> (file key, summary)
        self._user_files = UserFiles()                 # users' files: safe, bounded reads
        self._progress_refused: dict[str, str] = {}    # job -> why it has no progress report
        self._progress_runs: dict[str, tuple] = {}     # job -> (running, restarts) at its last read
        self._progress_paths: dict[str, tuple] = {}    # job -> (where, its candidate paths)

        # looks.py: whether a tick needs the full poll
        self._seen: dict[str, str] | None = None       # job -> state, as the last look read it
        self._rehold = False                            # the last poll held loose jobs again
        self.full_read_seconds = float(full_read_seconds)

        # stops.py: preemptions
        self._preempted: dict[str, Preempted] = {}
        self._signal_later: dict[str, float] = {}      # preempted job -> when it is signalled

        # starts.py
        self._deferred: dict[str, Assignment] = {}     # starts waiting for the job to stop
        self._planned: dict[str, Assignment] = {}
        self._starting: dict[str, tuple[Assignment, float]] = {}   # released, not yet running
        self._stopped: dict[str, tuple[float, tuple[str, ...]]] = {}   # job -> (seen at, nodes)
        self._released: dict[str, float] = {}          # job -> when this daemon released it
        self._release_restarts: dict[str, int] = {}    # job -> its restart count at that release

        # holds.py
        self._stuck: dict[str, Stuck] = {}
        self._holds: dict[str, str] = {}               # job -> why it is not planned now
        self._shown: dict[str, str] = {}               # job -> the hold status last written
        self._refused: dict[str, dict[str, str]] = {}   # job -> {worker type: Slurm's refusal}
        # job -> {(worker type, nodes): refusal}: shapes Slurm refused, avoided for a backoff
        self._bad_shapes: dict[str, dict[tuple[str, tuple[str, ...]], RefusedShape]] = {}
        self._notes: dict[str, str] = {}               # job -> why it is planned elsewhere (gqueue)
        # job -> (nodes, since): stopped running because its node failed; its old copy may
        # still run there (a dead slurmd leaves its slurmstepds running)
        self._lost: dict[str, tuple[tuple[str, ...], float]] = {}
        self._back: dict[str, float] = {}              # node -> when it was first seen usable again
        # partition -> Slurm's state of it when not UP (DOWN, DRAIN, INACT): its GPUs are no
        # server, as a drained node's are (Slurm starts nothing there)
        self._closed: dict[str, str] = {}
        self._types_of: dict[str, frozenset[str] | None] = {}   # job -> types it may run on (None: all)
        # job -> why its last start was taken back at once: a non-gavel job took the GPUs
        # planned for it between the plan and the start (shown by gqueue until it runs)
        self._taken: dict[str, str] = {}
        self.replan = False       # such a start was taken back: the daemon plans again now

        # pairs/: space sharing (docs/space-sharing.md): job -> its row, for pairs started
        # together on one GPU (half its shards each), until one of them stops
        self._pairs: dict[str, Assignment] = {}
        self._room: dict[str, NodeRoom] = {}           # shard node -> free shards per GPU (pairs/room.py)
        # survivor of a pair (alone on half a GPU) -> the new pair row whose other job takes
        # the free half: the survivor keeps running (pairs.sharing.joins)
        self._joining: dict[str, Assignment] = {}
        self.pair_log = OnceLog(lambda kind, job, detail: self.on_event(kind, job, detail))
        # job -> what it asked before a multi-GPU pair switched it to per-task shards
        # (pairs/multi.py; the daemon's are in its database), given back when it runs alone
        self.requests = requests if requests is not None else Requests()

        nodes = parse_nodes(self.cli.nodes())          # fail early: Slurm must answer once
        # GPU type -> partition (and, in a mixed partition, GRES type / node set): gputypes.py
        self.types = (partitions if isinstance(partitions, TypeMap) else
                      TypeMap.from_partitions(partitions) if partitions else discover(nodes))
        if not self.types.where:
            raise InputError("partitions", "no partition holds typed GPUs (Gres=gpu:TYPE:N); set "
                                           "[partitions] or [gpu_types] in the config")
        self.partitions = self.types.partitions     # partition -> type(s), for display
        self.worker_types = self.types.worker_types
        self._partition_of = {wt: w.partition for wt, w in self.types.where.items()}
        self.snapshot = snapshots.at_start(nodes, self.types)

    def count_memory(self, conf: Mapping[str, str]) -> str:
        """Plan memory as a node's resource too when Slurm counts it (`scontrol show config`:
        capacity.memory_consumable); says which, in words."""
        memory = memory_consumable(conf)
        self.snapshot = replace(self.snapshot, memory=memory)
        if memory:
            return (f"memory is consumable (SelectTypeParameters={conf.get('SelectTypeParameters')}): "
                    "jobs are planned only where a node has their memory free too")
        return ""

    # -- the last poll, as the daemon and the concerns read it ----------------------------
    @property
    def _jobs(self) -> Mapping[str, SlurmJob]:
        """Gavel jobs Slurm lists as active (as Slurm has them after our actions)."""
        return self.snapshot.gavel

    @property
    def _nodes(self) -> tuple[SlurmNode, ...]:
        return self.snapshot.nodes

    @property
    def _others_gpus(self) -> Mapping[str, int]:
        """node -> GPUs held by non-gavel jobs."""
        return self.snapshot.others_gpus

    def shards_per_gpu(self, node: str) -> int:
        """gres/shard per GPU of `node` (slurm.conf Gres=gpu:4,shard:16 -> 4); 0: none."""
        return self.snapshot.shards_per_gpu(node)

    def _pair_problem(self, a: Assignment) -> str:
        """Why Slurm cannot run this pair row as planned, in words; '' if it can."""
        return pair_problem(self.snapshot, a, self.pair_limit, self.requests)

    @property
    def bad_flags(self) -> dict[str, str]:
        return dict(self._bad_flags)

    # -- polling ---------------------------------------------------------------
    def poll(self) -> None:
        now = self.clock.now()
        snap = snapshots.build(self._reader.parse(self.cli.squeue()), parse_nodes(self.cli.nodes()),
                               self.types, self.snapshot.memory)
        self.reconciled = self._reader.reparsed
        gone = [job for job in dict.fromkeys([*self.snapshot.gavel, *sorted(self._unreconciled)])
                if job not in snap.gavel]
        self.snapshot = snap
        self._read_partition_states()
        finals = self._final_states(gone, snap.listed, now)
        reconciled = {job for job in gone if job in finals and job not in self._running
                      and job in self._unreconciled}
        self._credit_stopped(snap, gone, finals, now)      # credit running time since the last poll
        self._stopped = {job: v for job, v in self._stopped.items()
                         if now - v[0] < RESTART_GUARD_SECONDS}
        self._credit_started(snap, now)
        for job_id in reconciled:
            self._credit_runs(job_id, finals[job_id])
        self._unreconciled = self._depart(gone, finals, now)
        self._last_poll = now
        self._settle_lost(now, snap)
        self._refused = {job: r for job, r in self._refused.items() if job in snap.gavel}
        self._taken = {job: why for job, why in self._taken.items()
                       if job in snap.gavel and not snap.gavel[job].running}
        self._follow_pairs(snap)
        # a job Slurm runs again starts its refusals afresh
        self._bad_shapes = {job: r for job, r in self._bad_shapes.items()
                            if job in snap.gavel and not snap.gavel[job].running}
        self._notes = {job: n for job, n in self._notes.items() if job in self._bad_shapes}

    def _read_partition_states(self) -> None:
        """Which of the types' partitions Slurm will start nothing in; said once per change."""
        read = getattr(self.cli, "partition_states", None)    # a recorded CLI: all are UP
        if read is None:
            return
        try:
            states = read()
        except SlurmCommandError as e:      # the poll itself answered: keep what was known
            log.debug("cannot read the partitions' states: %s", e)
            return
        ours = set(self._partition_of.values())
        closed = {p: s.rstrip("*") for p, s in states.items() if p in ours and s.rstrip("*") != "UP"}
        for p, state in closed.items():
            if self._closed.get(p) != state:
                log.warning("partition %s is %s in Slurm: its GPUs are given to no job until it is UP",
                            p, state)
        for p in self._closed.keys() - closed.keys():
            log.info("partition %s is UP again: its GPUs are scheduled again", p)
        self._closed = closed

    # -- backend interface --------------------------------------------------------
    def observe(self) -> Observation:
        """Poll Slurm, follow up on earlier actions (late preemptions, starts that waited
        for a job to stop), and report.  The daemon calls this every round, and at the ticks
        between rounds that `why_poll` says need it."""
        self.poll()
        now = self.clock.now()
        self._signal_young(now)
        self._escalate(now)
        self._start_deferred()
        self._take_back_stuck(now)
        self._hold_again()
        states, sizes = self._job_states(now)
        steps_done, measurements, lost = self._read_progress(states)
        running = self._running_rows(sizes)
        usage = usage_rows(self.snapshot, self._usage, self._pairs)
        self._usage = {}
        departures, self._departures = tuple(self._departures), []
        return Observation(now, tuple(states), self._servers(), steps_done, tuple(running), usage,
                           departures, measurements, lost)

    def _job_states(self, now: float) -> tuple[list[JobState], dict[str, int]]:
        """Each gavel job as the engine sees it (with where it may run, or why not now), and
        the GPUs each holds; bad flags and hold reasons are kept (`bad_flags`, `job_status`)."""
        states, bad, holds, sizes = [], {}, {}, {}
        self._verdicts.begin(self.snapshot)
        for job_id, j in sorted(self._jobs.items(), key=lambda kv: (kv[1].submit_time or 0, id_order(kv[0]))):
            if j.partition and self._run_type(j.partition, j.nodes) is None and j.running:
                continue              # a gavel job someone placed outside the GPU partitions
            try:
                flags = self._verdicts.flags(j)
            except InputError as e:
                bad[job_id] = f"bad flags: {e.problem}"
                continue
            placement, hold = self._where(j, now)
            if not hold:        # the types it accepts (types=, the partitions it was submitted to)
                placement, hold = accepts(flags, placement, self._nodes, self.snapshot.type_of)
            if hold:
                holds[job_id] = hold
            self._types_of[job_id] = placement.worker_types if placement is not None else None
            sizes[job_id] = self._held_gpus(j, placement)
            states.append(JobState(
                id=job_id, job_type=flags.model or UNKNOWN_MODEL,
                scale_factor=sizes[job_id], arrival_time=j.submit_time or now,
                total_steps=float(flags.steps) if flags.steps else math.nan,
                weight=flags.weight,
                entity=j.user if self.share_by == "user" and j.user else flags.entity or j.account,
                slo=flags.slo_seconds, name=j.name, user=j.user, account=j.account,
                speeds=flags.speeds or (), placement=placement, hold_reason=hold))
        for job_id, why in holds.items():
            if self._holds.get(job_id, "").split(";")[0] != why.split(";")[0]:
                log.warning("job %s is not planned: %s", job_id, why)
        self._holds = holds
        self._bad_flags = bad
        self._types_of = {job: t for job, t in self._types_of.items() if job in self._jobs}
        self._verdicts.keep(self._jobs)
        return states, sizes

    @property
    def closed_partitions(self) -> Mapping[str, str]:
        """partition -> Slurm's state of it, for the types' partitions that are not UP."""
        return dict(self._closed)

    def _closed_words(self, job_id: str) -> str:
        """Why a waiting job cannot run anywhere now, when every partition of the types it
        may run on is closed in Slurm ("partition v100 is DOWN"); '' otherwise."""
        types = self._types_of.get(job_id) or frozenset(self._partition_of)
        parts = sorted({self._partition_of[wt] for wt in types if wt in self._partition_of})
        if not parts or any(p not in self._closed for p in parts):
            return ""
        return "; ".join(f"partition {p} is {self._closed[p]}" for p in parts)

    def _servers(self) -> tuple[Server, ...]:
        """Each usable node's GPUs that no non-gavel job holds, at most those the CPUs (and,
        where Slurm counts it, the memory) such jobs left free make up (capacity.free_gpus: a
        plain job on 1 GPU and every CPU leaves none); none in a partition Slurm has not UP."""
        servers = []
        for n in self._nodes:
            wt = self.snapshot.type_of.get(n.name)
            if wt is None or not n.usable or self._partition_of.get(wt) in self._closed:
                continue
            free = free_gpus(n, self._others_gpus.get(n.name, 0), self.snapshot.others_cpus.get(n.name, 0),
                             self.snapshot.others_memory.get(n.name, 0.0) if self.snapshot.memory else 0.0)
            if free > 0:
                servers.append(Server(n.name, wt, free))
        return tuple(servers)

    def _running_rows(self, sizes: Mapping[str, int]) -> list[Assignment]:
        """The rows that hold GPUs: running (not stopping) and released, a pair once."""
        running = []
        for job_id, r in sorted(self._running.items()):
            j = self._jobs.get(job_id)
            if j is None or job_id in self._preempted:
                continue                      # stopping: not something the plan may keep
            if job_id in self._pairs:         # a pair row: both jobs on one GPU
                if self._pairs[job_id] not in running:
                    running.append(self._pairs[job_id])
                continue
            # an --exclusive job holds its whole node, as it was planned, and a one-node job
            # the GPUs whose CPUs it takes (see holds.held_gpus)
            whole = j.exclusive or len(r.nodes) == 1 and sizes.get(job_id, 0) > j.gpus_on(r.nodes[0])
            running.append(Assignment((job_id,), r.worker_type, tuple(
                (n, sizes.get(job_id, j.gpus) if whole else j.gpus_on(n)) for n in r.nodes)))
        # Released but not started yet (Slurm starts a released job within seconds):
        # to the mechanism it already holds its GPUs, so it is kept, not started twice.
        # (One that does not start in time was taken back above.)
        for job_id, (a, at) in sorted(self._starting.items()):
            if a not in running:              # a pair is listed once
                running.append(a)
        return running

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
        self._stop(plan, now)
        self._defer_starts(plan)
        self._start_deferred()

    def _joins(self, plan: RoundPlan) -> dict[str, Assignment]:
        return joins(self.snapshot, plan, self._running, self._preempted, self._pairs, self._pair_problem)

    def job_status(self) -> dict[str, dict]:
        """Per gavel job what Slurm really does with it, for `gqueue`: state R (Slurm runs it:
        `gpus`, `worker_type`, `nodes`), S (released, not started yet), W (not planned: `detail`), PD;
        `progress`: why its progress reports are not read (refused files), when they are not."""
        now = self.clock.now()
        out: dict[str, dict] = {}
        used = self._gpus_used()        # once: a scan of the jobs per waiting job was quadratic
        for job_id, j in self._jobs.items():
            if j.running:
                r = self._running.get(job_id)
                out[job_id] = {"state": "R", "gpus": j.total_gpus,
                               "worker_type": r.worker_type if r else self._run_type(j.partition, j.nodes),
                               "nodes": ",".join(r.nodes if r else j.nodes)}
            elif job_id in self._starting:
                a, at = self._starting[job_id]
                short = self._cpu_words(j, used, frozenset(a.nodes))
                out[job_id] = {"state": "S", "gpus": 0,
                               "detail": f"released {now - at:.0f} s ago, not started yet; Slurm says: "
                                         f"{j.reason or 'nothing yet'}" + (f"; {short}" if short else "")}
            elif job_id in self._holds:
                short = self._cpu_words(j, used) if job_id in self._stuck else ""
                out[job_id] = {"state": "W", "gpus": 0,
                               "detail": self._holds[job_id] + (f"; {short}" if short else "")}
            elif job_id in self._taken:
                out[job_id] = {"state": "PD", "gpus": 0, "detail": self._taken[job_id]}
            else:
                out[job_id] = {"state": "PD", "gpus": 0}
                detail = self._notes.get(job_id) or self._closed_words(job_id) or self._cpu_words(j, used)
                if detail:
                    out[job_id]["detail"] = detail
            if job_id in self._progress_refused:
                out[job_id]["progress"] = self._progress_refused[job_id]
        return out

    def _gpus_used(self) -> dict[str, int]:
        """node -> GPUs running jobs hold there (gavel or not), as the last poll saw them."""
        used = dict(self._others_gpus)
        for other in self._jobs.values():
            if other.running:
                for n in other.nodes:
                    used[n] = used.get(n, 0) + other.gpus_on(n)
        return used

    def _cpu_words(self, j: SlurmJob, used: Mapping[str, int], nodes: frozenset[str] | None = None) -> str:
        """Nodes with GPUs free for `j` (`used`: `_gpus_used`) but not its CPUs (or memory), in
        words (capacity.cpu_shortage): of `nodes`, else of the nodes of its types it may run on."""
        if nodes is None:
            names = set(self.snapshot.type_of)
            if j.excluded_nodes:
                names -= set(j.excluded_nodes)
            nodes = frozenset(names)
        return cpu_shortage(j, self._nodes, used, nodes, self.snapshot.memory)

    # -- actions ---------------------------------------------------------------------
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

    def _act(self, what: str, jobs: list[str], action: Callable[[], None],
             why: str | Mapping[str, str] = "") -> bool:
        """Carry out (or, dry run, only log) an action; False if Slurm refused it.  Its log
        line names each job with its partition, nodes and the reason (`why`: one for all
        or one per job); the recorded events keep `what`.  A chunked call that failed in
        part (`SlurmCommandError.failed`) records the failure for those jobs only."""
        self._announce(what, jobs, why)
        if self.dry_run:
            return True
        self.refusal = None
        try:
            action()
            return True
        except SlurmCommandError as e:
            self.refusal = e.stderr or str(e)
            # A job can finish between the poll and the action (scancel then
            # says "Invalid job id"); the next poll shows what really happened.
            failed = [job for job in jobs if job in e.failed] if e.failed else jobs
            log.error("%s failed for %s: %s", what, ",".join(failed), e)
            for job in failed:
                self.on_event("action_failed", job, f"{what}: {e}")
            return False

    def _announce(self, what: str, jobs: list[str], why: str | Mapping[str, str] = "") -> None:
        """The action's log line (each job with its partition, nodes, reason) and events."""
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
        else:
            log.info("%s: %s%s", what, ",".join(jobs), said)

    def _update_each(self, whats: Mapping[str, str], fields: Mapping[str, Mapping[str, str]],
                     why: str = "") -> dict[str, str]:
        """One `scontrol update` per job (`fields`), a few at once (SlurmCLI.update_each),
        each logged as its own action (`whats`); Slurm's refusal of each that failed."""
        for job in fields:
            self._announce(whats[job], [job], why)
        if self.dry_run:
            return {}
        failures = self.cli.update_each(list(fields.items()))
        for job, e in failures.items():
            log.error("%s failed for %s: %s", whats[job], job, e)
            self.on_event("action_failed", job, f"{whats[job]}: {e}")
        return {job: e.stderr or str(e) for job, e in failures.items()}

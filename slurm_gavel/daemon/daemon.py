"""`slurm-gavel daemon`: the engine driving a real Slurm cluster, in the foreground.

The same engine as the simulator, with the real parts plugged in: a wall
clock that looks at Slurm every tick while it waits for the round to end (the full
poll only when something changed or is under way: slurm/backend/looks.py), the
Slurm backend, a solver thread (rounds go on while a solve runs), the
throughput estimator (`estimator.EstimatingThroughputs`: what the jobs'
progress reports measured, the configured table for models it knows, and for
other models a few rounds of exploration, then a fingerprint against the
table), and the SQLite store that `slurm-gavel queue` and
`slurm-gavel throughputs show` read.  SIGTERM or SIGINT ends it after the current step; SIGHUP re-reads the
configuration (a bad new one is logged and the old one kept).  The signal handlers only
set flags; nothing the daemon waits on can block for ever (Slurm commands have a timeout,
users' files are read by `userfiles` with a time bound), and should a step still hang, the
process exits anyway: at a second SIGTERM/SIGINT, or `stop_deadline` seconds after the
first (the database is committed round by round: a restart loses nothing).

One daemon per database (lock.py: a second one exits at once, naming the
first).  Nothing is done in Slurm that is not recorded first: while the
database cannot be written (disk full, read-only, I/O errors, the file
deleted) the daemon logs one line saying what to do, then polls nothing and
starts, holds or preempts nothing, and tries the database again every tick;
it resumes by itself.  A database that cannot be written at start is one line
and exit code 75 (systemd starts it again after RestartSec).  A database that is
damaged or lost state (integrity.py: SQLite's quick_check at start, and at start and
every round the last round it holds against the last one this daemon committed) is
never acted on: one line saying why, exit code 4; the old plan is never re-run.

Watching (slurm_conf/README.md): the Prometheus series of metrics.py, served when
`metrics_port` is set (a port in use: one line, exit 75); each start and preemption
logged and recorded as an event with its job, partition, nodes and reason
(decisions.py); logs on stderr, and optionally a file and syslog (`logs`).
"""
from __future__ import annotations

import logging
import logging.handlers
import os
import signal
import sqlite3
import threading
import time
from dataclasses import replace
from typing import Callable

from . import config as config_mod
from ..core.clock import WallClock
from ..core.engine import FILLING, Engine
from ..core.plan import Assignment
from ..core.errors import GavelError
from ..estimator.learning import EstimatingThroughputs
from ..policies import POLICIES, make_policy, resolve
from ..core.recompute import Background
from ..slurm.backend import SlurmBackend
from .decisions import decide
from ..slurm.fairshare import FairshareWeights
from ..slurm.records import requeue_exit_codes
from .lock import DatabaseLock, LockError, LockUnavailable
from .logs import log_to, log_to_stderr
from ..slurm.backend.pairs.multi import StoredRequests
from .metrics import CountingCLI, Metrics, MetricsError, TimedPolicy, gpu_states
from .store import SqliteStore, StoreDamaged, StoreError
from . import integrity
from ..estimator.table import ThroughputTable

log = logging.getLogger("slurm_gavel.daemon")

# Exit codes (slurm_conf/slurm-gavel.service): 2 a bad configuration, 3 the database
# is another daemon's, 4 it is damaged or lost state (none is fixed by starting again), 75 (EX_TEMPFAIL) the
# database cannot be written at start (it may be, a RestartSec later).
EXIT_IN_USE = 3
EXIT_STORAGE = 75
# How often retention runs (and the database's size and rows are published): a pruning
# deletes what aged past the horizon since the last, a few rounds' worth
PRUNE_EVERY_SECONDS = 3600.0
# the database is damaged or lost rounds: restarting does not mend it (an admin restores
# a backup or accepts the loss)
EXIT_DAMAGED = 4
# Made once at start (the endpoint, the log handlers): a SIGHUP that changes them says so
RESTART_KEYS = ("metrics_port", "metrics_address", "metrics_per_job", "log_file", "syslog",
                "syslog_facility", "syslog_address",
                "partitions", "gpu_types",         # the backend's GPU types (gputypes.TypeMap)
                "share_by")                        # the backend's entities of the jobs it knows


class TickingClock(WallClock):
    """Wall time; while sleeping to the end of a round, call `tick` every `every` seconds."""

    def __init__(self, tick: Callable[[], None], every: float):
        super().__init__()
        self.tick, self.every = tick, every
        self.stopping = threading.Event()
        self.cut = False              # end this sleep (the round) at the next tick

    def sleep_until(self, t: float) -> None:
        while not self.stopping.is_set():
            now = self.now()
            if now >= t or self.cut:
                self.cut = False
                return
            super().sleep_until(min(t, now + self.every))
            if not self.stopping.is_set():
                self.tick()

    def stop(self):
        self.stopping.set()
        self.wake()


class Daemon:
    def __init__(self, config: config_mod.Config, dry_run: bool = False, metrics: Metrics | None = None,
                 accept_lost_rounds: bool = False):
        self.config = config
        self.dry_run = dry_run
        self._pruned_at: float | None = None     # retention (`_retain`): when it last ran
        # the Prometheus series (metrics.py); main() serves them when metrics_port is set
        self.metrics = metrics or Metrics(per_job=config.metrics_per_job)
        self.metrics.dry_run.set(int(dry_run))
        self.cli = config_mod.slurm_cli(config, CountingCLI)
        self.cli.failed = lambda command: self.metrics.command_errors.labels(command=command).inc()
        # the lock first: nothing, not even a migration, is written to another daemon's database
        self.lock = DatabaseLock(config.database, dry_run=dry_run).acquire()
        self.storage_error: str | None = None     # why the database cannot be written, while so
        self._logged_storage: str | None = None    # the failure last logged (one line per cause)
        self.exit_code = 0
        new_database = not os.path.exists(config.database)
        try:
            self.store = SqliteStore(config.database)
            self.store.probe()       # read-only at start (chattr +i, ro mount): found now, not mid-round
            self._accepted_loss = self._check_database(accept_lost_rounds, new_database)
            starts = self.store.count_start()
            self.store.set_mode(dry_run)        # gqueue marks a shadow database
        except BaseException:
            self.lock.release()
            raise
        self.clock = TickingClock(self._tick, config.tick_seconds)
        self.backend = SlurmBackend(self.cli, self.clock, config.type_map(),
                                    signal=config.preemption_signal,
                                    signal_all_steps=config.signal_all_steps,
                                    grace_seconds=config.grace_seconds, dry_run=dry_run,
                                    min_run_seconds=config.min_run_seconds,
                                    start_timeout=config.start_timeout_seconds,
                                    on_event=self._event, credited_until=self.store.last_observed(),
                                    progress_dir=config.progress_dir,
                                    # reconciled with Slurm on the first poll (a restart)
                                    active_jobs=[j["id"] for j in self.store.jobs()],
                                    # multi-GPU pairs' replaced requests (slurm/backend/pairs/multi.py)
                                    requests=StoredRequests(self.store),
                                    # the entity gqueue shows: the one the policy shares by
                                    share_by=config.share_by,
                                    full_read_seconds=config.full_read_seconds)
        self.throughputs = EstimatingThroughputs(
            self._table(config), explore_rounds=config.explore_rounds,
            # progress arrives every tick; one sample (and one exploration round) per round
            sample_seconds=config.round_seconds, store=self.store, clock=self.clock.now,
            trust=config.estimator)
        self.fairshare = self._fairshare(config)
        self.engine = Engine(self.clock, self.backend, self._allocator(config),
                             self.throughputs, self.store,
                             config.round_seconds, prices=config.prices,
                             space_sharing=config.space_sharing,
                             solve_patience=min(config.solver_wait_seconds, config.round_seconds / 2),
                             weight_limits=config.weights, work_conserving=config.work_conserving,
                             hysteresis=config.hysteresis_rounds,
                             restart_seconds=config.restart_seconds,
                             move_hysteresis=config.move_hysteresis_rounds,
                             lease_load_exponent=config.lease_load_exponent,
                             max_lease_scale=config.max_lease_scale,
                             max_preemptions=config.max_preemptions_per_round,
                             max_starts=config.max_starts_per_round,
                             # read once now: a restart with the same shares is no reset event
                             entity_weights=self.fairshare.refresh() if self.fairshare else config.entities,
                             share_by=config.share_by)
        self._resume()
        if starts > 1:
            self.metrics.restarts.inc(starts - 1)
        self.metrics.seed(self.store.last_types())
        self._reload = False
        self._watchdog: threading.Timer | None = None     # armed by the first stop signal
        self._check_slurm_config(config)
        self._check_space_sharing(config)
        log.info("slurm-gavel daemon: policy %s%s%s, rounds of %.0f s, partitions %s, database %s%s",
                 config.policy, " (agnostic)" if config.agnostic else "",
                 (" between users first, then among each user's jobs" if config.share_by == "user"
                  else " between entities (entity= flag, else account)")
                 if resolve(config.policy).policy == "hierarchical" else " (per job, whatever its user)",
                 config.round_seconds,
                 ", ".join(f"{p}={t}" for p, t in self.backend.partitions.items()), config.database,
                 " [DRY RUN: nothing is changed in Slurm]" if dry_run else "")

    def _check_database(self, accept_lost_rounds: bool, new_database: bool) -> int | None:
        """At start: raise StoreDamaged when the database is damaged, or holds fewer rounds
        than were committed (unless the admin accepts that: then the mark, to number on from).
        A new database (the old one removed to start a new ledger) drops the old mark."""
        if new_database:
            integrity.mark_path(self.store.path).unlink(missing_ok=True)
            return None
        path, conn = self.store.path, self.store.db.conn
        mark = integrity.read_mark(path)
        damage = integrity.quick_check(path, conn)
        lost = None if damage else integrity.lost_rounds(path, conn)
        if damage or (lost and not accept_lost_rounds):
            self._mark(-1 if mark is None else mark, refused=str(damage or lost))   # for gqueue
            raise damage or lost
        if integrity.refusal(path) is not None:     # mended, or the loss accepted: readable again
            self._mark(-1 if mark is None else mark)
        if lost is None:
            return None
        log.warning("%s: accepted (--accept-lost-rounds): starting afresh from the jobs Slurm has",
                    lost.reason)
        return mark

    def _resume(self) -> None:
        """A restart: go on from the state the last run kept (rounds, ledger, allocation)."""
        if self._accepted_loss is not None:
            # its saved allocation and plan are older than what was done in Slurm: never resumed
            self.engine.round = max(self.store.next_round(), self._accepted_loss + 1)
            self._committed = self.store.next_round() - 1     # what the database holds
            return
        state = self.store.load_engine_state()
        self._committed = self.store.next_round() - 1      # the last round the database holds
        if state is None:
            self.engine.round = self.store.next_round()
            return
        self.engine.resume(state)
        self.engine.round = max(self.engine.round, self.store.next_round())
        log.info("resuming at round %d: %d jobs in the allocation in force, ledger of %d rows",
                 self.engine.round, len(state.allocation.job_ids) if state.allocation else 0,
                 len(state.since_reset))

    def _check_slurm_config(self, config) -> None:
        """Warn when slurm.conf would not requeue a checkpointed job held (`slurm-gavel doctor`
        checks the rest); tell the backend whether Slurm counts memory."""
        try:
            conf = self.cli.config()
        except GavelError as e:
            log.warning("cannot read Slurm's configuration: %s", e)
            return
        said = self.backend.count_memory(conf)
        if said:
            log.info("%s", said)
        hold = conf.get("RequeueExitHold", "")
        if config.requeue_exit_code not in requeue_exit_codes(hold):
            log.warning("slurm.conf has RequeueExitHold=%s, but preempted jobs exit with %d: they "
                        "will end instead of being requeued held. Add RequeueExitHold=%d.",
                        hold or "(unset)", config.requeue_exit_code, config.requeue_exit_code)

    def _check_space_sharing(self, config) -> None:
        """With space_sharing on, say once what keeps pairs from running safely here (no
        gres/shard; Slurm before 23.11): docs/space-sharing.md."""
        if not config.space_sharing:
            if config.max_pair_gpus > 1:
                log.warning("space sharing: off, so max_pair_gpus = %d has no effect (space_sharing "
                            "= true pairs jobs)", config.max_pair_gpus)
            return
        try:
            version = self.cli.version()
        except GavelError as e:
            log.warning("space sharing: cannot read Slurm's version: %s", e)
            version = (0, 0)
        problems = self.backend.space_sharing_problems(version)
        for problem in problems:
            log.warning("space sharing: %s", problem)
        if config.max_pair_gpus > 1:
            self._allow_pair_gpus(config.max_pair_gpus, version)
        elif not problems:
            log.info("space sharing: on (pairs of one-GPU jobs share a GPU's shards)")

    def _allow_pair_gpus(self, wanted: int, version) -> None:
        """max_pair_gpus > 1: the backend runs such pairs only on a Slurm that can (23.11+, both
        SelectTypeParameters flags); one line says which, and why."""
        try:
            conf = self.cli.config()
        except GavelError as e:
            conf = {}
            log.warning("space sharing: cannot read Slurm's configuration: %s", e)
        why = self.backend.allow_pair_gpus(wanted, version, conf)
        if self.backend.pair_limit > 1:
            log.info("space sharing: on, %s", why)
        else:
            log.warning("space sharing: %s", why)

    @staticmethod
    def _table(config):
        return ThroughputTable.from_gavel_json(config.throughputs) if config.throughputs else None

    def _allocator(self, config):
        if resolve(config.policy).policy == "hierarchical":
            # its LPs go through cvxpy, imported on first use (policies/lazy.py): a second or
            # more that the first solve, and the newcomers waiting on it, would otherwise pay
            import cvxpy  # noqa: F401
        policy = TimedPolicy(make_policy(config.policy, agnostic=config.agnostic,
                                         space_sharing=config.space_sharing), self.metrics.solve_duration)
        return Background(policy, on_error=lambda f: log.error("policy solve failed (the previous "
                                                                "allocation stays): %s", f.error),
                          budget=config.solver_budget_seconds,
                          on_slow=lambda s: log.warning("policy solve took %.1f s, over the budget of "
                                                        "%.0f s: new jobs ran on agnostic shares "
                                                        "meanwhile", s, config.solver_budget_seconds))

    def _fairshare(self, config) -> FairshareWeights | None:
        """Entity weights read from sacctmgr every round (entity_weights = "fairshare")."""
        if (config.entities or config.entity_weights == "fairshare") and \
                resolve(config.policy).policy != "hierarchical":
            log.warning("entity weights are used by the hierarchical policy only (policy %s "
                        "ignores them)", config.policy)
        if config.entity_weights != "fairshare":
            return None
        return FairshareWeights(self.cli, config.entities)

    def _event(self, kind, job, detail):
        try:
            self.store.event(self.clock.now(), kind, job, detail)
        except StoreError as e:
            self._storage_failed(e)
            if kind in ("action", "dry_run"):
                raise           # the action is not taken: it could not be recorded
        except GavelError as e:
            log.error("cannot record event: %s", e)

    # -- storage ---------------------------------------------------------------------
    def _storage_failed(self, e: GavelError) -> None:
        """Stop acting until the database can be written; one line per distinct cause.
        Damaged (or lost state): stop for good, exit code 4."""
        if isinstance(e, StoreDamaged):
            self._damaged(e)
            return
        message = str(e)
        if message != self._logged_storage:
            log.error("%s (until then no job is started, held or preempted)", message)
            self._logged_storage = message
        self.storage_error = message
        self.metrics.up.set(0)

    def _retain(self) -> None:
        """At most hourly: forget what is older than `retention_days` (store.prune), and
        publish the database's size and rows per table."""
        now = self.clock.now()
        if self._pruned_at is not None and now - self._pruned_at < PRUNE_EVERY_SECONDS:
            return
        self._pruned_at = now
        pruned = {}
        days = self.config.retention_days
        if days > 0:
            pruned = self.store.prune(now - days * 86400.0)
            if any(pruned.values()):
                log.info("database: forgot what is older than %g days (%s)", days,
                         ", ".join(f"{n} {table}" for table, n in pruned.items() if n))
        try:
            size, rows = self.store.size()
        except (sqlite3.Error, OSError) as e:     # only the metrics miss it
            log.warning("database size not read: %s", e)
            return
        self.metrics.database(size, rows, pruned)
    def _damaged(self, e: StoreDamaged) -> None:
        if self.exit_code != EXIT_DAMAGED:
            log.error("%s (the daemon stops: nothing more is done in Slurm)", e)
            self._mark(max(self._committed, 0), refused=str(e))
        self.storage_error = str(e)
        self.exit_code = EXIT_DAMAGED
        self.metrics.up.set(0)
        self.clock.stop()

    def _state_kept(self) -> bool:
        """Every round, before acting: the database still holds the last round this daemon
        committed (not replaced by an older copy, not lost with its -wal)."""
        try:
            lost = integrity.lost_rounds(self.store.path, self.store.db.conn, self._committed)
        except sqlite3.DatabaseError as e:
            self._storage_failed(self.store.unreadable(e))
            return False
        if lost is not None:
            self._damaged(lost)
            return False
        return True

    def _committed_round(self, number: int) -> None:
        """Round `number` is in the database: mark it (integrity.py), so that a restart from a
        database that lost it refuses to re-run an older plan."""
        self._committed = max(self._committed, number)
        self._mark(number)

    def _mark(self, number: int, refused: str | None = None) -> None:
        try:
            integrity.write_mark(self.store.path, number, refused)
        except OSError as e:
            log.warning("cannot write the round mark %s: %s", integrity.mark_path(self.store.path), e)

    def _storage_worked(self) -> None:
        """A whole step was recorded: say so once after a failure.  (Not at the first small
        write that succeeds: a nearly full disk can take a probe and refuse the round, and
        the log would flap between the two every tick.)"""
        if self._logged_storage is not None and self.storage_error is None:
            log.warning("database %s is writable again: resuming", self.store.path)
            self._logged_storage = None

    def _storage_ready(self) -> bool:
        """Can the daemon record (and so act)?  If not, try to make it so: retake a lock file
        that was removed, reattach a database file deleted or replaced, write what is queued."""
        if self.storage_error is None and self.lock.intact() and self.store.moved() is None:
            return True
        if not self.lock.intact():
            try:
                self.lock.retake()
                log.warning("lock file %s was removed: locked it again", self.lock.path)
            except LockUnavailable as e:       # its directory cannot be made again (yet)
                self._storage_failed(e)
                return False
            except LockError as e:
                # another daemon took the database while its lock file was gone: it wins
                log.error("%s; this daemon stops", e)
                self.exit_code = EXIT_IN_USE
                self.clock.stop()
                return False
        try:
            done = self.store.recover()
            if done:
                log.warning("database %s: %s", self.store.path, done)
            self.engine.record_pending()
            self.store.probe()
        except StoreError as e:
            self._storage_failed(e)
            return False
        self.storage_error = None
        return True

    def _tick(self):
        """Between rounds: observe (credit running time, record departures, follow up on
        preemptions and deferred starts).  A cheap look at the jobs' states first
        (`SlurmBackend.why_poll`): when nothing the tick acts on changed or is under way, no
        full read and nothing done.  So a start, stop or departure is in the database a tick
        after Slurm did it, credited time at most FULL_READ_SECONDS (60 s) after."""
        now = self.clock.now()
        if not self._storage_ready() or not self.backend.backoff.ready(now):
            return
        try:
            why = self.backend.why_poll(now, arrivals=self.config.mid_round_starts)
            if not why:
                return              # nothing it acts on changed: no full read, nothing said
            log.debug("tick: full read (%s)", why)
            if self.config.mid_round_starts:
                self.engine.start_arrivals()    # observes, and starts newcomers on idle GPUs
            else:
                self.engine.settle()
            self.backend.backoff.succeeded()
            if self.backend.replan:
                # a start was taken back (its GPUs went to a non-gavel job): plan now, not
                # at the end of the round
                self.backend.replan = False
                log.info("planning again now: a start was taken back")
                self.clock.cut = True
            if self.engine.last_plan is not None:     # gqueue follows what Slurm does between rounds
                self.store.status(self.engine.last_plan.round, now, self._publish())
            self._storage_worked()
        except StoreError as e:
            self._storage_failed(e)
        except GavelError as e:
            delay = self.backend.backoff.failed(now)
            log.error("Slurm poll failed (next try in %.0f s): %s", delay, e)

    # -- control ------------------------------------------------------------------
    def request_stop(self, *_):
        if self.clock.stopping.is_set():
            self._exit_now("a second stop signal")
        log.info("stopping after the current step")
        self.clock.stop()
        self._watchdog = threading.Timer(self.stop_deadline(), self._exit_now, args=(
            f"still running {self.stop_deadline():.0f} s after the stop signal",))
        self._watchdog.daemon = True
        self._watchdog.start()

    def stop_deadline(self) -> float:
        """How long a stop may take: the last observation runs a few Slurm commands."""
        return 2 * self.config.command_timeout_seconds + 10

    @staticmethod
    def _exit_now(why: str):
        log.error("%s: exiting now, without the final observation", why)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(1)

    def request_reload(self, *_):
        self._reload = True
        self.clock.wake()

    def reload(self):
        self._reload = False
        path = self.config.source or None
        try:
            new = config_mod.load(path)
            table = self._table(new)
        except GavelError as e:
            log.error("reload: keeping the old configuration: %s", e)
            return
        for key in RESTART_KEYS:        # the endpoint and the log handlers are made at start
            if getattr(new, key) != getattr(self.config, key):
                log.warning("reload: %s takes effect at the next restart (kept: %r)", key,
                            getattr(self.config, key))
                new = replace(new, **{key: getattr(self.config, key)})
        refused = self._policy_refused(new)
        if refused:
            log.error("reload: keeping policy %s: %s", self.config.policy, refused)
            new = replace(new, policy=self.config.policy, agnostic=self.config.agnostic)
        old = self.engine.allocator
        self.engine.allocator = self._allocator(new)
        old.close()
        self.throughputs.set_reference(table)      # what was measured stays
        self.throughputs.explore_rounds = new.explore_rounds
        self.throughputs.set_trust(new.estimator)
        self.engine.weight_limits = new.weights
        if self.fairshare is not None and new.entity_weights == "fairshare":
            self.fairshare.overrides = dict(new.entities)     # read with the shares next round
        else:
            self.fairshare = self._fairshare(new)
            self.engine.entity_weights = dict(new.entities)
        self.throughputs.sample_seconds = new.round_seconds
        self.engine.round_seconds = new.round_seconds
        self.engine.prices = dict(new.prices)
        self.engine.solve_patience = min(new.solver_wait_seconds, new.round_seconds / 2)
        # the caps of a round's Slurm work (grown leases are worked out again from these)
        self.engine.set_caps(new.max_preemptions_per_round, new.max_starts_per_round)
        self.clock.every = new.tick_seconds
        self.backend.full_read_seconds = new.full_read_seconds
        self.config = new
        log.info("reloaded %s: policy %s, rounds of %.0f s", path, new.policy, new.round_seconds)

    def _policy_refused(self, new) -> str | None:
        """Why the policy `new` names cannot solve for the jobs in the queue now (e.g.
        makespan and a job without steps=: every solve would fail and every job fall back to
        equal shares), or None."""
        if resolve(new.policy).policy == resolve(self.config.policy).policy or self.engine.input is None:
            return None
        name, inp = resolve(new.policy).policy, self.engine.input
        try:
            POLICIES[name]().check(inp)
        except GavelError as e:
            if "steps_remaining" not in str(e):
                return f"{name} cannot solve for the jobs in the queue ({e})"
            missing = [job for job, steps in zip(inp.job_ids, inp.steps_remaining) if steps != steps]
            return (f"{name} needs steps= in every job's gavel comment, and job(s) "
                    f"{', '.join(missing[:10])}{' ...' if len(missing) > 10 else ''} have none "
                    f"(every solve would fail)")
        return None

    def run(self, max_rounds: int | None = None) -> int:
        try:
            while not self.clock.stopping.is_set():
                if max_rounds is not None and self.engine.round >= max_rounds:
                    break
                if self._reload:
                    self.reload()
                if not self._storage_ready():
                    # nothing recorded, nothing done: try again in a tick
                    self.clock.sleep_until(self.clock.now() + self.clock.every)
                    continue
                if not self._state_kept():
                    continue
                started = time.perf_counter()
                previous = (self.engine.last_plan.assignments if self.engine.last_plan is not None
                            else self._placed_before())
                released = self._released()
                if self.fairshare is not None:      # one sacctmgr call a round; its failure keeps the last
                    self.engine.entity_weights = dict(self.fairshare.refresh())
                try:
                    plan = self.engine.plan()
                except StoreError as e:
                    self._storage_failed(e)
                    continue
                except sqlite3.DatabaseError as e:     # a read of a damaged page
                    self._storage_failed(self.store.unreadable(e))
                    continue
                except GavelError as e:
                    # Slurm not answering (slurmctld restarting, a timeout): no
                    # round this time; the jobs keep what they have.  Try again.
                    delay = self.backend.backoff.failed(self.clock.now())
                    log.error("round skipped, trying again in %.0f s: %s", delay, e)
                    self.clock.sleep_until(self.clock.now() + delay)
                    continue
                self._committed_round(plan.round)
                self.backend.backoff.succeeded()
                self.backend.replan = False     # this round saw whatever asked for a new plan
                # released before this round, not run at its poll: taken back, not preempted
                unstarted = released - self._running_now() if released else frozenset()
                self.metrics.round(plan, self.engine.allocation, self.engine.input, self.backend.types.pairs,
                                   time.perf_counter() - started, active=self.engine.active_ids,
                                   unstarted=unstarted)
                self._explain_round(plan, previous, unstarted)
                try:
                    rows = self._publish()
                    self.store.status(plan.round, self.clock.now(), rows)
                    self._retain()
                    self._storage_worked()
                    # held jobs say why in Slurm too (AdminComment), as gqueue does
                    self.backend.show_holds({job: r.get("reason") or "" for job, r in rows.items()})
                except StoreError as e:
                    self._storage_failed(e)
                log.info("round %d: %d kept, %d started, %d preempted, %d waiting", plan.round,
                         len(plan.keep), len(plan.start), len(plan.preempt),
                         len(self.engine.active_ids) - len(plan.running_jobs))
                self.engine.wait()
        finally:
            self.engine.allocator.close()
            try:
                if self.exit_code == 0 and self._storage_ready() and self._state_kept():
                    self.engine.settle()        # what ran since the last round is not lost
            except StoreError as e:
                self._storage_failed(e)
            except GavelError as e:
                log.error("final observation failed: %s", e)
            self.store.close()
            if self._watchdog is not None:
                self._watchdog.cancel()     # stopped in time (matters when run in-process)
            self.lock.release()
        if self.storage_error is not None and self.exit_code != EXIT_DAMAGED:
            log.error("stopped with the database not writable: %s", self.storage_error)
        log.info("stopped after round %d", self.engine.round - 1)
        return self.exit_code

    def _placed_before(self) -> tuple:
        """A restart: the last recorded round's assignments (where a preempted job ran)."""
        try:
            rows = self.store.last_placement()
        except (sqlite3.Error, GavelError):
            return ()
        return tuple(Assignment((job,), r["worker_type"], tuple((n, r["gpus"] or 0)
                                                               for n in (r["nodes"] or "").split(",") if n))
                     for job, r in rows.items() if r["worker_type"])

    def _released(self) -> frozenset:
        """The jobs released and not started yet at the last poll."""
        return frozenset(job for job, seen in self.backend.job_status().items()
                         if seen["state"] == "S")

    def _running_now(self) -> frozenset:
        """The jobs Slurm ran at the last poll."""
        return frozenset(job for job, seen in self.backend.job_status().items()
                         if seen["state"] == "R")

    def _explain_round(self, plan, previous, unstarted: frozenset = frozenset()) -> None:
        """Log and record each start and preemption of `plan` with its job, partition, nodes
        and reason (decisions.py; `slurm-gavel events` shows them).  `unstarted`: the jobs
        released before this round that Slurm has not run: taken back, not preempted or moved."""
        if not plan.start and not plan.preempt:
            return
        alloc = self.engine.allocation
        share = ({job: dict(zip(alloc.worker_types, (float(v) for v in alloc.x[i])))
                  for i, job in enumerate(alloc.job_ids)} if alloc is not None else {})
        priority = {job: row.get("priority") for job, row in self.engine.explain().items()}
        try:
            phase = {e["job"]: e["phase"] for e in self.store.throughput_estimates()}
        except (sqlite3.Error, GavelError):     # the reasons lose "exploring", nothing else
            phase = {}
        shadow = " [dry run: planned, not done]" if self.dry_run else ""
        for d in decide(plan, previous, self.backend.types.pairs, priority, share, phase, unstarted):
            log.info("%s%s", d.line(plan.round), shadow)
            self._event(d.kind, d.job, d.detail + shadow)

    def _publish(self) -> dict:
        """The status rows (for the store), with the GPU and job gauges updated from them.
        (The backend's view of Slurm's nodes and jobs, as its last poll saw them.)"""
        rows = self._status()
        b = self.backend
        self.metrics.cluster(gpu_states(b._nodes, b._jobs.values(), b._others_gpus, b.partitions, b.types,
                                        b.closed_partitions),
                             rows)
        self.metrics.up.set(1)
        return rows

    def _status(self) -> dict:
        """The engine's view of each job (type, priority, why it waits) with what Slurm really
        does with it: R only for what Slurm runs, S released and not started, W held back."""
        rows = self.engine.explain()
        for job, seen in self.backend.job_status().items():
            row = rows.setdefault(job, {"worker_type": None, "priority": None, "reason": ""})
            row["state"], row["gpus"] = seen["state"], seen["gpus"]
            if seen["state"] == "R":
                row["worker_type"] = seen.get("worker_type") or row.get("worker_type")
                row["nodes"] = seen.get("nodes")
                # running: no wait reason, but say when it only fills a GPU nobody's share claims
                row["reason"] = FILLING if row.get("reason") == FILLING else seen.get("progress", "")
            elif seen.get("detail"):
                row["reason"] = seen["detail"]
        for job, why in self.backend.bad_flags.items():
            rows[job] = {"worker_type": None, "priority": None, "reason": why, "state": "PD", "gpus": 0}
        return rows


def main(config_path: str | None, dry_run: bool = False, max_rounds: int | None = None,
         log_level: str = "INFO", accept_lost_rounds: bool = False) -> int:
    log_to_stderr(log_level)
    # Signals that arrive while the daemon starts (the endpoint may already answer) are
    # kept and handled once it runs: the default action of SIGHUP would end the process.
    early: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda signum, _frame: early.append(signum))
    config = config_mod.load(config_path)
    try:
        log_to(config)
    except OSError as e:
        log.error("cannot log where gavel.toml says (%s): %s", config.source or "config", e)
        return 2
    metrics = Metrics(per_job=config.metrics_per_job)
    if config.metrics_port is not None:
        try:        # first: a port in use is one line, before the database is touched
            metrics.serve(config.metrics_port, config.metrics_address)
        except MetricsError as e:
            log.error("%s", e)
            return EXIT_STORAGE
        log.info("metrics: http://%s:%d/metrics", config.metrics_address, metrics.port)
    try:
        daemon = Daemon(config, dry_run=dry_run, metrics=metrics, accept_lost_rounds=accept_lost_rounds)
    except LockError as e:
        log.error("%s", e)
        metrics.close()
        return EXIT_STORAGE if isinstance(e, LockUnavailable) else EXIT_IN_USE
    except StoreDamaged as e:   # damaged, or lost rounds: one line, not restarted by systemd
        log.error("%s", e)
        metrics.close()
        return EXIT_DAMAGED
    except StoreError as e:     # read-only, full, unreadable: one line, no traceback
        log.error("%s", e)
        metrics.close()
        return EXIT_STORAGE
    signal.signal(signal.SIGTERM, daemon.request_stop)
    signal.signal(signal.SIGINT, daemon.request_stop)
    signal.signal(signal.SIGHUP, daemon.request_reload)
    for signum in dict.fromkeys(early):
        (daemon.request_reload if signum == signal.SIGHUP else daemon.request_stop)(signum, None)
    try:
        return daemon.run(max_rounds)
    finally:
        metrics.close()


__all__ = ["EXIT_DAMAGED", "EXIT_IN_USE", "EXIT_STORAGE", "Daemon", "TickingClock", "main"]

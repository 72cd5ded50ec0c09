"""`slurm-gavel daemon`: the engine driving a real Slurm cluster, in the foreground.

The same engine as the simulator, with the real parts plugged in: a wall
clock that polls Slurm every tick while it waits for the round to end, the
Slurm backend, a solver thread (rounds go on while a solve runs), the
throughput estimator (`estimator.EstimatingThroughputs`: what the jobs'
progress reports measured, the configured table for models it knows, and for
other models a few rounds of exploration, then a fingerprint against the
table), and the SQLite store that `slurm-gavel queue` and
`slurm-gavel throughputs show` read.  SIGTERM or SIGINT ends it after the current step; SIGHUP re-reads the
configuration (a bad new one is logged and the old one kept).
"""
from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Callable, Sequence

from . import config as config_mod
from ..core.clock import WallClock
from ..core.engine import Engine
from ..core.errors import GavelError
from ..estimator.learning import EstimatingThroughputs
from ..policies import make_policy
from ..core.recompute import Background
from .backend import SlurmBackend
from .commands import SlurmCLI
from .store import SqliteStore
from ..estimator.table import ThroughputTable

log = logging.getLogger("slurm_gavel.daemon")


class TickingClock(WallClock):
    """Wall time; while sleeping to the end of a round, call `tick` every `every` seconds."""

    def __init__(self, tick: Callable[[], None], every: float):
        super().__init__()
        self.tick, self.every = tick, every
        self.stopping = threading.Event()

    def sleep_until(self, t: float) -> None:
        while not self.stopping.is_set():
            now = self.now()
            if now >= t:
                return
            super().sleep_until(min(t, now + self.every))
            if not self.stopping.is_set():
                self.tick()

    def stop(self):
        self.stopping.set()
        self.wake()


class Daemon:
    def __init__(self, config: config_mod.Config, dry_run: bool = False):
        self.config = config
        self.dry_run = dry_run
        env = {"SLURM_CONF": config.slurm_conf} if config.slurm_conf else None
        self.cli = SlurmCLI(env=env, bin_dir=config.slurm_bin_dir, timeout=config.command_timeout_seconds)
        self.store = SqliteStore(config.database)
        self.clock = TickingClock(self._tick, config.tick_seconds)
        self.backend = SlurmBackend(self.cli, self.clock, config.partitions or None,
                                    signal=config.preemption_signal,
                                    signal_all_steps=config.signal_all_steps,
                                    grace_seconds=config.grace_seconds, dry_run=dry_run,
                                    on_event=self._event, credited_until=self.store.last_observed(),
                                    progress_dir=config.progress_dir)
        self.throughputs = EstimatingThroughputs(
            self._table(config), explore_rounds=config.explore_rounds,
            # progress arrives every tick; one sample (and one exploration round) per round
            sample_seconds=config.round_seconds, store=self.store, clock=self.clock.now)
        self.engine = Engine(self.clock, self.backend, self._allocator(config),
                             self.throughputs, self.store,
                             config.round_seconds, prices=config.prices,
                             space_sharing=config.space_sharing,
                             solve_patience=min(config.solver_wait_seconds, config.round_seconds / 2))
        self._resume()
        self._reload = False
        self._check_slurm_config(config)
        log.info("slurm-gavel daemon: policy %s%s, rounds of %.0f s, partitions %s, database %s%s",
                 config.policy, " (agnostic)" if config.agnostic else "", config.round_seconds,
                 ", ".join(f"{p}={t}" for p, t in self.backend.partitions.items()), config.database,
                 " [DRY RUN: nothing is changed in Slurm]" if dry_run else "")

    def _resume(self) -> None:
        """A restart: go on from the state the last run kept (rounds, ledger, allocation)."""
        state = self.store.load_engine_state()
        if state is None:
            self.engine.round = self.store.next_round()
            return
        self.engine.resume(state)
        self.engine.round = max(self.engine.round, self.store.next_round())
        log.info("resuming at round %d: %d jobs in the allocation in force, ledger of %d rows",
                 self.engine.round, len(state.allocation.job_ids) if state.allocation else 0,
                 len(state.since_reset))

    def _check_slurm_config(self, config) -> None:
        """Warn when slurm.conf would not requeue a checkpointed job held."""
        try:
            hold = self.cli.config().get("RequeueExitHold", "")
        except GavelError as e:
            log.warning("cannot read Slurm's configuration: %s", e)
            return
        codes = set()
        for part in hold.replace("(null)", "").split(","):
            if "-" in part:
                lo, hi = part.split("-", 1)
                if lo.strip().isdigit() and hi.strip().isdigit():
                    codes.update(range(int(lo), int(hi) + 1))
            elif part.strip().isdigit():
                codes.add(int(part))
        if config.requeue_exit_code not in codes:
            log.warning("slurm.conf has RequeueExitHold=%s, but preempted jobs exit with %d: they "
                        "will end instead of being requeued held. Add RequeueExitHold=%d.",
                        hold or "(unset)", config.requeue_exit_code, config.requeue_exit_code)

    @staticmethod
    def _table(config):
        return ThroughputTable.from_gavel_json(config.throughputs) if config.throughputs else None

    def _allocator(self, config):
        policy = make_policy(config.policy, agnostic=config.agnostic, space_sharing=config.space_sharing)
        return Background(policy, on_error=lambda f: log.error("policy solve failed (the previous "
                                                                "allocation stays): %s", f.error),
                          budget=config.solver_budget_seconds,
                          on_slow=lambda s: log.warning("policy solve took %.1f s, over the budget of "
                                                        "%.0f s: new jobs ran on agnostic shares "
                                                        "meanwhile", s, config.solver_budget_seconds))

    def _event(self, kind, job, detail):
        try:
            self.store.event(self.clock.now(), kind, job, detail)
        except GavelError as e:
            log.error("cannot record event: %s", e)

    def _tick(self):
        """Between rounds: observe (credit running time, record departures, follow up on
        preemptions and deferred starts), so the database is never more than a tick behind."""
        now = self.clock.now()
        if not self.backend.backoff.ready(now):
            return
        try:
            self.engine.settle()
            self.backend.backoff.succeeded()
        except GavelError as e:
            delay = self.backend.backoff.failed(now)
            log.error("Slurm poll failed (next try in %.0f s): %s", delay, e)

    # -- control ------------------------------------------------------------------
    def request_stop(self, *_):
        log.info("stopping after the current step")
        self.clock.stop()

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
        old = self.engine.allocator
        self.engine.allocator = self._allocator(new)
        old.close()
        self.throughputs.set_reference(table)      # what was measured stays
        self.throughputs.explore_rounds = new.explore_rounds
        self.throughputs.sample_seconds = new.round_seconds
        self.engine.round_seconds = new.round_seconds
        self.engine.prices = dict(new.prices)
        self.engine.solve_patience = min(new.solver_wait_seconds, new.round_seconds / 2)
        self.clock.every = new.tick_seconds
        self.config = new
        log.info("reloaded %s: policy %s, rounds of %.0f s", path, new.policy, new.round_seconds)

    def run(self, max_rounds: int | None = None) -> int:
        try:
            while not self.clock.stopping.is_set():
                if max_rounds is not None and self.engine.round >= max_rounds:
                    break
                if self._reload:
                    self.reload()
                try:
                    plan = self.engine.plan()
                except GavelError as e:
                    # Slurm not answering (slurmctld restarting, a timeout): no
                    # round this time; the jobs keep what they have.  Try again.
                    delay = self.backend.backoff.failed(self.clock.now())
                    log.error("round skipped, trying again in %.0f s: %s", delay, e)
                    self.clock.sleep_until(self.clock.now() + delay)
                    continue
                self.backend.backoff.succeeded()
                self.store.status(plan.round, self.clock.now(), self._status())
                log.info("round %d: %d kept, %d started, %d preempted, %d waiting", plan.round,
                         len(plan.keep), len(plan.start), len(plan.preempt),
                         len(self.engine.active_ids) - len(plan.running_jobs))
                self.engine.wait()
        finally:
            self.engine.allocator.close()
            try:
                self.engine.settle()        # what ran since the last round is not lost
            except GavelError as e:
                log.error("final observation failed: %s", e)
            self.store.close()
        log.info("stopped after round %d", self.engine.round - 1)
        return 0

    def _status(self) -> dict:
        rows = self.engine.explain()
        for job, why in self.backend.bad_flags.items():
            rows[job] = {"worker_type": None, "priority": None, "reason": why}
        return rows


def main(config_path: str | None, dry_run: bool = False, max_rounds: int | None = None,
         log_level: str = "INFO") -> int:
    logging.basicConfig(level=getattr(logging, log_level.upper(), logging.INFO),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    config = config_mod.load(config_path)
    daemon = Daemon(config, dry_run=dry_run)
    signal.signal(signal.SIGTERM, daemon.request_stop)
    signal.signal(signal.SIGINT, daemon.request_stop)
    signal.signal(signal.SIGHUP, daemon.request_reload)
    return daemon.run(max_rounds)


__all__ = ["Daemon", "TickingClock", "main"]

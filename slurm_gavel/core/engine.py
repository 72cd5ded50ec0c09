"""The engine: one loop that drives policy, mechanism and backend, round after round.

Each round (`step`):

1. observe the backend; credit what really ran to the mechanism's ledger;
   forget jobs that left; a job the backend holds back (`JobState.hold_reason`)
   is not planned, and its reason is what `explain` says;
2. on a reset event (a job arrived or left, the usable servers changed, the
   optional recompute timer fired, or a learning throughput source says the
   estimates the policy saw have moved: `stale()`) build a `PolicyInput` and
   submit it to the allocator (which may take its time: see recompute.py);
3. compose the allocation in force: the newest solved X for the jobs it
   knows, the heterogeneity-agnostic (isolated) share for jobs that arrived
   since; when it changes, the ledger's since-reset time restarts (at most
   once per `min_reset_seconds`);
4. plan the round with the mechanism (work conserving: GPUs no share claims
   go to waiting jobs that can run there; leases preferred to moves by the
   `Churn` settings), record it in the store, and only then
   hand it to the backend (a store that cannot record raises, and the round
   is not carried out: nothing is done that is not written down);
   a job's `Placement` (allowed worker types, servers) makes its other types
   infeasible for the policy (NaN throughputs) and binds the mechanism;
5. sleep on the clock until the round ends.

What an observation brings (time run, departures) goes to the ledger at once
and to the store in order; writes the store refused stay queued and are
written first at the next observation (`record_pending`), so a store that
fails for a while loses nothing of what was observed before it failed.

The daemon and the simulator are two drivers of this loop: they differ in
the clock, the backend, the allocator and the store they pass in, never in
code paths here.
"""
from __future__ import annotations

import logging
from collections import deque
from dataclasses import replace
from typing import Mapping, Sequence

import numpy as np

from .backend import JobState, Observation, pair_gpu_limit
from .clock import Clock
from .entities import ENTITY, SHARE_BY, entity_of
from .entities import entity_weights as entity_weights_of
from .interfaces import Allocator, Backend, Store, ThroughputSource
from .ledger import Churn, Ledger
from .mechanism import only_types, plan_round, row_index, type_columns
from .model import Allocation, PolicyInput
from .plan import RoundPlan, Server
from .recompute import policy_with
from .state import EngineState
from .store import MemoryStore
from .throughputs import JobThroughputs
from .weights import WeightLimits

log = logging.getLogger("slurm_gavel.engine")

DEFAULT_ROUND_SECONDS = 360.0     # the 6-minute rounds of Gavel's paper and simulator
# The ledger's since-reset time restarts when the allocation in force changes,
# but not more often than this.  Priorities compare X with the time received
# since the reset; with a reset at every arrival and departure (every few
# rounds on a busy cluster) nearly every entry sits at the infinite priority
# of "nothing received yet" and the mechanism stops steering toward X.
# 1,920 s is the default minimum time between allocation resets of Gavel's
# own scheduler.  Measured on Gavel's workload (docs/simulation.md): the gap
# between realized and computed time fractions falls from 0.14 to 0.10
# (aware) and from 0.27 to 0.07 (agnostic).
DEFAULT_RESET_SECONDS = 1920.0
# What a start or resume costs a job (requeue, launch, imports, checkpoint
# load): the simulator charges it, the mechanism weighs it against the gain of
# a move.  The engine's own default is 0 (the paper's mechanism, exact times);
# what users get from `simulate`, `sweep` and the daemon's config is the cost
# measured on the local Slurm cluster: bench/restart_cost.py, a restart moved
# to another GPU type, preempt decision to first training step, pooled median
# 18.2 s over 20 restarts (docs/benchmarks.md).
DEFAULT_RESTART_SECONDS = 0.0
MEASURED_RESTART_SECONDS = 18.0
# In rounds: a running job competes for its GPUs as if it had received this much
# less time, so a job replacing it must be clearly more behind (ledger.Churn).
# A running job moves to another type of its own accord only when it is
# DEFAULT_MOVE_HYSTERESIS rounds more behind there.  Chosen with the Pareto stage
# of the policies in place, on the three cases of Gavel's continuous sweeps
# (bench/gavel_cases.py: Gavel's own jobs, 1-GPU at 2 jobs/h, multi-GPU at 1 and
# 2 jobs/h, 18 s restarts; docs/simulation.md): 2 / 5 gives 0.03 / 0.25 / 2.8
# restarts per job against Gavel's 5.5 / 13.7 / 74.3 and average JCT 15.40 /
# 16.06 / 17.39 h, no worse than 10 / 30 (15.41 / 16.06 / 17.45 h), while
# 10 / 30 made the static makespan trace 25.2 h instead of 18.9 h: a long lease
# keeps a job from the types X gives it.
DEFAULT_HYSTERESIS = 2.0
DEFAULT_MOVE_HYSTERESIS = 5.0
# Both leases grow with the load, (GPUs the jobs ask for / GPUs) ** the exponent, at most
# by the scale, when the load is over 1 and starts cost something (ledger.Churn.lease_scale:
# on an oversubscribed cluster a restart's lost GPU time delays every job, not only the
# one restarted).  Exponent 0: fixed leases.  Measured on Gavel's jobs at 5.6 jobs/h
# (docs/simulation.md, "High load"): fixed 2 / 5 rounds 29.89 h average JCT, 22.1
# restarts per job; exponent 1: 29.63 h; 3 with at most 3x: 29.30 h, 8.7 restarts
# (Gavel's simulator, no restart cost: 29.42 h); without the bound the static makespan
# trace took 18.46 h instead of 17.56 h, with it 17.69 h.
DEFAULT_LEASE_LOAD_EXPONENT = 3.0
DEFAULT_MAX_LEASE_SCALE = 3.0
# At most this many jobs preempted in one round (ledger.Churn.max_preemptions; 0: no
# cap, the paper's mechanism and the simulator's default): a reshuffle of a large queue
# is spread over rounds instead of one wave of hundreds of signals and requeues that
# slurmctld must carry out at once.  The daemon's default, 64 (three scancel chunks):
# on 384 simulated GPUs with 1,500 queued multi-GPU jobs (max-min fairness), no cap let
# one round preempt 383 jobs; a cap of 64 cost 0.7% of the mean JCT (45.47 h against
# 45.15 h) with the same p99 finish-time fairness (1.91 against 1.94); 16 cost 3.1% and
# stretched that p99 to 2.84 (docs/benchmarks.md).
DEFAULT_MAX_PREEMPTIONS = 0
MEASURED_MAX_PREEMPTIONS = 64
# At most this many jobs that are not running started in one round (Churn.max_starts; 0:
# no cap, the paper's mechanism and the simulator's default): filling a large cluster is
# spread over rounds.  The daemon's default, 1,000: a round's starts cost Slurm about four
# RPCs and 4-17 ms of enforce each (docs/benchmarks.md, issue 25), so 1,000 keep a round's
# enforce around 10 s, and a 1,600-GPU cluster still fills within two rounds.
DEFAULT_MAX_STARTS = 0
MEASURED_MAX_STARTS = 1000
# Time every entry counts as received after a reset, in rounds: Gavel seeds
# each job with half a round, so that a reset does not make every priority
# infinite at once.
SEED_ROUNDS = 0.5
INTERIM = "agnostic share"
FILLING = "filling an idle GPU (no share on this type; yields it to a job that has one)"


def build_policy_input(jobs: Sequence[JobState], steps_done: Mapping[str, float],
                       throughputs: JobThroughputs,
                       worker_types: Sequence[str], counts: np.ndarray, now: float,
                       prices: Mapping[str, float] | None = None,
                       gpus_per_node: np.ndarray | None = None,
                       weight_limits: WeightLimits | None = None,
                       entity_weights: Mapping[str, float] | None = None,
                       share_by: str = ENTITY) -> PolicyInput:
    """The policy's view of the active jobs at `now` (throughputs looked up for `jobs`).

    With `weight_limits` the jobs' weights are capped, clamped and normalized
    first (core/weights.py), so that no job's weight can zero out the others'.
    `entity_weights` (entity -> weight, 1 for an entity not named) are the
    hierarchical policy's; those of the jobs' entities are divided by their
    median (the allocation does not depend on their common scale; the solver's
    accuracy does).  `share_by` says what an entity is (core/entities.py):
    each job's `entity`, or its user (weights then name accounts).
    """
    t = throughputs
    weights = (np.array([j.weight for j in jobs], dtype=float) if weight_limits is None
               else weight_limits.apply(jobs))
    prices = prices or {}
    return PolicyInput(
        worker_types=tuple(worker_types), counts=np.asarray(counts, dtype=float),
        job_ids=tuple([j.id for j in jobs]), throughputs=t.solo,
        scale_factors=np.array([j.scale_factor for j in jobs], dtype=np.int64),
        weights=weights,
        prices=np.array([prices.get(wt, np.nan) for wt in worker_types], dtype=float),
        entities=(tuple([j.entity for j in jobs]) if share_by == ENTITY     # entity_of's ENTITY case
                  else tuple([entity_of(j, share_by) for j in jobs])),
        steps_remaining=np.array([j.total_steps - steps_done.get(j.id, 0.0) for j in jobs], dtype=float),
        time_since_arrival=np.maximum(now - np.array([j.arrival_time for j in jobs], dtype=float), 0.0),
        slo=np.array([np.nan if j.slo is None else j.slo for j in jobs], dtype=float),
        unconsolidated_throughputs=t.unconsolidated, gpus_per_node=gpus_per_node,
        pair_jobs=t.pair_jobs, pair_throughputs=t.pair_throughputs,
        entity_weights=entity_weights_of(jobs, entity_weights, share_by))


def runnable_pairs(jobs: Sequence[JobState], table: JobThroughputs,
                   max_pair_gpus: int | None) -> JobThroughputs:
    """`table` with only the pair rows whose jobs have at most `max_pair_gpus` GPUs each
    (the backend's `max_pair_gpus`; None: all): the policy is never offered a pair the
    backend cannot run (on Slurm a job's shards sit on one GPU), so it gives such a pair
    no share that would then go unused, and the simulator told the same limit decides
    as the daemon does."""
    if max_pair_gpus is None or not len(table.pair_jobs):
        return table
    sizes = np.array([j.scale_factor for j in jobs], dtype=np.int64)
    keep = (sizes[table.pair_jobs] <= max_pair_gpus).all(axis=1)
    if keep.all():
        return table
    return replace(table, pair_jobs=table.pair_jobs[keep], pair_throughputs=table.pair_throughputs[keep])


def _idle_servers(servers: Sequence[Server], running: Sequence) -> tuple[Server, ...]:
    """`servers` with only their GPUs that no running assignment holds (servers with none left out)."""
    held: dict[str, int] = {}
    for a in running:
        for name, count in a.servers:
            held[name] = held.get(name, 0) + count
    return tuple(s if not held.get(s.name) else Server(s.name, s.worker_type, s.gpus - held[s.name])
                 for s in servers if s.gpus - held.get(s.name, 0) > 0)


def compose(solved: Allocation | None, inp: PolicyInput) -> Allocation:
    """The allocation in force for `inp`'s jobs: solved rows where known, the isolated share otherwise.

    Newcomers get the isolated (heterogeneity-agnostic) share until a solve
    that includes them finishes; rows of jobs that left are dropped.
    """
    if solved is not None and solved.job_ids == inp.job_ids and solved.worker_types == inp.worker_types:
        return solved
    x = inp.isolated_allocation()
    newcomers = list(inp.job_ids)
    pair_jobs = np.zeros((0, 2), dtype=np.int64)
    x_pairs = np.zeros((0, inp.n_types))
    policy = INTERIM
    if solved is not None and solved.worker_types == inp.worker_types:
        policy = solved.policy
        old = {job: r for r, job in enumerate(solved.job_ids)}
        where = np.array([old.get(job, -1) for job in inp.job_ids], dtype=np.int64)
        known = where >= 0
        x[known] = solved.x[where[known]]
        newcomers = [job for job, k in zip(inp.job_ids, known) if not k]
        if len(solved.pair_jobs):
            new_index = {job: i for i, job in enumerate(inp.job_ids)}
            mapped = np.array([[new_index.get(solved.job_ids[a], -1), new_index.get(solved.job_ids[b], -1)]
                               for a, b in solved.pair_jobs.tolist()], dtype=np.int64).reshape(-1, 2)
            keep = (mapped >= 0).all(axis=1)
            pair_jobs, x_pairs = mapped[keep], solved.x_pairs[keep]
    return Allocation(inp.job_ids, inp.worker_types, x, policy=policy, pair_jobs=pair_jobs,
                      x_pairs=x_pairs, info={"interim_rows": newcomers},
                      type_blind=policy != INTERIM and solved.type_blind)


class Engine:
    """Runs rounds: observe, (re)solve on reset events, plan, execute, sleep."""

    def __init__(self, clock: Clock, backend: Backend, allocator: Allocator, throughputs: ThroughputSource,
                 store: Store | None = None, round_seconds: float = DEFAULT_ROUND_SECONDS,
                 prices: Mapping[str, float] | None = None, space_sharing: bool = False,
                 recompute_seconds: float | None = None,
                 min_reset_seconds: float = DEFAULT_RESET_SECONDS, solve_patience: float = 0.0,
                 weight_limits: WeightLimits | None = None, work_conserving: bool = True,
                 hysteresis: float = DEFAULT_HYSTERESIS,
                 restart_seconds: float = DEFAULT_RESTART_SECONDS,
                 move_hysteresis: float = DEFAULT_MOVE_HYSTERESIS, carry_owed: bool = True,
                 max_preemptions: int = DEFAULT_MAX_PREEMPTIONS,
                 max_starts: int = DEFAULT_MAX_STARTS,
                 lease_load_exponent: float = DEFAULT_LEASE_LOAD_EXPONENT,
                 max_lease_scale: float = DEFAULT_MAX_LEASE_SCALE,
                 entity_weights: Mapping[str, float] | None = None, share_by: str = ENTITY):
        if not round_seconds > 0:
            raise ValueError(f"round length must be > 0 seconds, got {round_seconds}")
        # how much the mechanism prefers a renewed lease to a move (raises ValueError when negative)
        churn = Churn(hysteresis=float(hysteresis) * float(round_seconds),
                      restart_seconds=float(restart_seconds),
                      seed_seconds=SEED_ROUNDS * float(round_seconds),
                      move_hysteresis=float(move_hysteresis) * float(round_seconds),
                      max_preemptions=max_preemptions, max_starts=max_starts,
                      load_exponent=float(lease_load_exponent),
                      max_lease_scale=float(max_lease_scale))
        self.churn = churn               # as configured; `churn` reads it under the current load
        self.work_conserving = work_conserving
        self.carry_owed = carry_owed        # what rows were owed survives a reset (Ledger.owed)
        self._usable: tuple[Allocation | None, np.ndarray | None] = (None, None)
        self.clock, self.backend, self.allocator = clock, backend, allocator
        self.throughputs = throughputs
        self.store = store if store is not None else MemoryStore()
        self.round_seconds = float(round_seconds)
        self.prices = dict(prices or {})
        self.space_sharing = space_sharing
        self.recompute_seconds = recompute_seconds
        self.min_reset_seconds = float(min_reset_seconds)
        # How long a round may wait for a solve it just submitted (allocators that
        # can be waited on): most solves take milliseconds, and waiting that long
        # beats placing the newcomers on agnostic shares for a whole round.
        self.solve_patience = float(solve_patience)
        # Users write their jobs' weights: bounded before any policy sees them (None: as given)
        self.weight_limits = weight_limits
        # The hierarchical policy's entity weights (entity -> weight); a change is a reset event
        self.entity_weights: dict[str, float] = dict(entity_weights or {})
        self._entity_weights_solved: dict[str, float] = dict(self.entity_weights)
        if share_by not in SHARE_BY:
            raise ValueError(f"share_by must be one of {', '.join(SHARE_BY)}, got {share_by!r}")
        self.share_by = share_by        # what an entity is: a job's entity, or its user
        self._weights_noted: set[str] = set()
        self._last_reset = -np.inf
        self.worker_types = tuple(backend.worker_types)
        self.ledger = Ledger(self.worker_types)
        # a store that keeps the engine's state, for a restart (the daemon's; not the simulator's)
        self._keep_state = self.store.engine_state if self.store.keeps_state else None
        self._restored: Allocation | None = None
        self.round = 0
        self.resets = 0
        self.input: PolicyInput | None = None
        self.allocation: Allocation | None = None     # the allocation in force
        self._solved: Allocation | None = None
        self._job_ids: tuple[str, ...] = ()
        self._servers: tuple = ()
        self._last_submit = -np.inf
        self._round_end = -np.inf
        self.unschedulable: dict[str, str] = {}     # job id -> why no policy can place it
        self.last_plan: RoundPlan | None = None
        self.active_ids: list[str] = []
        self._reported: set[str] = set()
        self._seen_jobs: tuple[JobState, ...] | None = None
        self._seen_ids: tuple[str, ...] = ()
        self._sizes: dict[str, int] | None = None
        # What the backend says of where jobs may run and which it holds back:
        # a change is a reset event like an arrival (the policy's jobs or types change).
        self._seen_rules: tuple = ()
        self._rules: tuple = ()
        self._placements: dict = {}
        self._unrecorded: deque[tuple] = deque()    # store writes not done yet, in order
        self._capacity_of: tuple = (None, None)
        self._steady: Allocation | None = None     # the allocation whose rows all run on their one type
        self._previous: tuple = (None, None, ())  # (running, sizes, those of running all planned)
        # A store may say it drops usage records (the simulator's): then none are queued.
        self._keep_usage = self.store.keeps_usage

    @property
    def churn(self) -> Churn:
        """The churn settings in force: as configured, with the leases grown under the load
        measured when the jobs or servers last changed (Churn.under_load).  A type-blind
        allocation (an agnostic baseline) keeps the leases as configured: it stands for
        Gavel's type-blind mechanism, which the aware mechanism's restart saving must not
        move (with grown leases the static makespan trace's baseline took 25.05 h, not 21.43)."""
        if self.allocation is not None and self.allocation.type_blind:
            return self._churn
        return self._churn_now

    def set_caps(self, max_preemptions: int, max_starts: int) -> None:
        """A round's caps on preemptions and starts (a reload), the leases kept as they are."""
        self._churn = replace(self._churn, max_preemptions=max_preemptions, max_starts=max_starts)
        self._churn_now = replace(self._churn_now, max_preemptions=max_preemptions, max_starts=max_starts)

    @churn.setter
    def churn(self, churn: Churn) -> None:
        """Configure the churn settings (grown under the load from the next change on)."""
        self._churn = self._churn_now = churn

    # -- one round ------------------------------------------------------------
    def step(self) -> RoundPlan:
        """One whole round: plan and act now, then sleep until the round ends."""
        plan = self.plan()
        self.wait()
        return plan

    def wait(self) -> None:
        """Sleep on the clock until the end of the round `plan` began."""
        self.clock.sleep_until(self._round_end)

    def plan(self) -> RoundPlan:
        """Observe, (re)solve on reset events, plan the round and hand it to the backend."""
        now = self.clock.now()
        obs = self._observe(now)
        job_ids = self._refresh(obs, now)
        round_end = now + self.round_seconds
        last = self.last_plan
        quiet = self.backend.quiet_until
        if (quiet is not None and last is not None and self._steady is self.allocation
                and obs.running is last.assignments and not obs.departures and quiet >= round_end):
            # Nothing changed and nothing will before the round ends, and every row runs
            # on its only positive entry: plan_round would renew every lease (its
            # `_renew_all`); the order it lists them in matters only in a round in which
            # a job finishes (the backend's `quiet_until` rules that out), so the same.
            plan = RoundPlan(self.round, last.assignments, last.assignments, (), (), frozenset())
        else:
            scale_factors = self._sizes
            previous = self._planned_running(obs.running, scale_factors)
            plan = plan_round(self.round, self.allocation, self.ledger, obs.servers, scale_factors,
                              previous, self._placements, self._usable_for(self.allocation), self.churn)
            self._steady = self.allocation if quiet is not None and self._renews_all(plan) else None
        self.store.round(now, plan)         # first the record; if it fails, nothing is done
        self.backend.execute(plan, round_end)
        self.last_plan = plan
        self.active_ids = list(job_ids)
        self.round += 1
        self._round_end = round_end
        self._save_state()
        return plan

    def _planned_running(self, running: tuple, sizes: Mapping[str, int]) -> tuple:
        """The `running` assignments all of whose jobs are planned (in `sizes`), kept while the
        backend hands over the same tuple and the jobs do not change (most rounds)."""
        kept_running, kept_sizes, previous = self._previous
        if kept_running is not running or kept_sizes is not sizes:
            previous = tuple(a for a in running
                             if a.jobs[0] in sizes and (len(a.jobs) == 1 or a.jobs[1] in sizes))
            if isinstance(running, tuple):
                self._previous = (running, sizes, previous)
        return previous

    def _renews_all(self, plan: RoundPlan) -> bool:
        """Whether `plan` runs every row of the allocation in force on its only positive
        entry, starting and stopping nothing (so that, until something changes, every
        round renews the same leases)."""
        alloc = self.allocation
        if (plan.start or plan.preempt or plan.filling or self._placements or len(alloc.pair_jobs)
                or len(plan.keep) != len(alloc.job_ids)):
            return False
        only = only_types(alloc.x_rows)       # kept per allocation (plan_round just read it)
        if only is None:
            return False
        row = row_index(alloc.rows)
        column = type_columns(alloc.worker_types)
        for a in plan.keep:
            i = row.get(a.jobs)
            if i is None or len(a.jobs) != 1 or only[i] != column[a.worker_type]:
                return False
        return True

    @property
    def round_end(self) -> float:
        """When the round planned last ends (-inf before the first)."""
        return self._round_end

    def start_arrivals(self) -> RoundPlan | None:
        """In the middle of a round: start jobs that arrived since it began on GPUs that are idle.

        Observes (like `settle`); when jobs arrived and GPUs are idle (no
        running assignment holds them: never planned, or freed by a job that
        finished), the newcomers fill them at once, as the work-conserving
        rule fills idle GPUs (each where it runs fastest relative to its best
        type, in arrival order among equals; `RoundPlan.filling`).  Nothing
        that runs is stopped or moved, the round ends when it would have, and
        the arrival stays a reset event of the next round (its solve, the new
        allocation), so a round's planning is the same as before but for the
        newcomers already running.  Returns the round's new plan (the running
        assignments kept, the newcomers started) or None when none started.
        Without this a newcomer waits up to a round while GPUs it could use
        stand idle.
        """
        now = self.clock.now()
        obs = self._observe(now)
        last = self.last_plan
        if last is None or now >= self._round_end:
            return None                     # no round under way: the next plan() does it all
        known = set(self._job_ids)
        running = {job for a in obs.running for job in a.jobs}      # newcomers started earlier in the round
        new = [j for j in obs.jobs if j.id not in known and j.id not in running and not j.hold_reason]
        if not new:
            return None
        idle = _idle_servers(obs.servers, obs.running)
        room: dict[str, int] = {}
        for s in idle:
            room[s.worker_type] = room.get(s.worker_type, 0) + s.gpus
        new = [j for j in new if j.scale_factor <= max(room.values(), default=0)]
        if not new:
            return None                     # no newcomer fits the idle GPUs: wait for the round
        table = self._masked(new, self.throughputs.lookup(new, self.worker_types))
        solo = table.solo               # read only here; unknown (NaN) throughputs are 0
        if not np.isfinite(solo).all():
            solo = np.nan_to_num(solo, nan=0.0)
        best = solo.max(axis=1, keepdims=True)
        usable = np.divide(solo, best, out=np.zeros_like(solo), where=best > 0)
        ids = tuple(j.id for j in new)
        waiting = Allocation(ids, self.worker_types, np.zeros((len(ids), len(self.worker_types))),
                             policy=INTERIM)
        placements = {j.id: j.placement for j in new if j.placement is not None and j.placement.restricts}
        plan = plan_round(last.round, waiting, self.ledger, idle, {j.id: j.scale_factor for j in new},
                          (), placements, usable, self.churn)
        if not plan.start:
            return None
        running = tuple(obs.running)
        plan = RoundPlan(last.round, running + plan.start, running, plan.start, (),
                         frozenset(job for job in last.filling if any(job in a.jobs for a in running))
                         | plan.filling)
        self.store.round(now, plan)
        self.backend.execute(plan, self._round_end)
        self.last_plan = plan
        self.active_ids = list(dict.fromkeys([*self.active_ids, *ids]))
        self._save_state()
        return plan

    def _refresh(self, obs: Observation, now: float) -> tuple[str, ...]:
        """On reset events (jobs, servers or rules changed, the timer, stale estimates): a new
        policy input and solve; the allocation in force composed again when it changed.
        Returns the active job ids."""
        if obs.jobs is not self._seen_jobs:     # a backend may hand over the same tuple every round
            self._seen_jobs, self._seen_ids, self._sizes = obs.jobs, tuple(j.id for j in obs.jobs), None
            self._seen_rules = tuple((j.id, j.placement, bool(j.hold_reason)) for j in obs.jobs
                                     if j.hold_reason or (j.placement is not None and j.placement.restricts))
        job_ids = self._seen_ids
        jobs_changed = (job_ids != self._job_ids or obs.servers != self._servers
                        or self._seen_rules != self._rules
                        or self.entity_weights != self._entity_weights_solved)
        timer = (self.recompute_seconds is not None and job_ids
                 and now - self._last_submit >= self.recompute_seconds)
        # a learning source whose estimates moved since the policy saw them (estimator)
        timer = timer or bool(job_ids and self.throughputs.stale())
        if jobs_changed or timer:
            self._job_ids, self._servers, self._rules = job_ids, obs.servers, self._seen_rules
            self._entity_weights_solved = dict(self.entity_weights)
            self.unschedulable = {}
            self._sizes = None
            self.input = self._policy_input(obs, now) if job_ids else None
            if self.input is not None:
                self.allocator.submit(self.input, now)
                self._last_submit = now
                if self.solve_patience > 0:
                    self.allocator.wait(self.solve_patience)
            self.resets += 1
        solved = self.allocator.latest(now)
        if solved is None:
            solved = self._restored         # a restarted daemon: the allocation it had, until a solve
        if jobs_changed or solved is not self._solved or self.allocation is None:
            self._solved = solved
            before = self.allocation
            self.allocation = (compose(solved, self.input) if self.input is not None
                               else Allocation((), self.worker_types, np.zeros((0, len(self.worker_types))),
                                               policy=INTERIM))
            if now - self._last_reset >= self.min_reset_seconds:
                self.ledger.reset(*self._owed(before, now, job_ids))
                self._last_reset = now
            self._record(self.store.allocation, self.round, now, self.allocation, solved is not None)
            self.record_pending()

        if self._rules:             # a held job's reason may change every round (its backoff)
            for j in obs.jobs:
                if j.hold_reason and j.id in self.unschedulable:
                    self.unschedulable[j.id] = j.hold_reason
        if self._sizes is None:     # the jobs' scale factors, kept until the jobs or `unschedulable` change
            self._sizes = {j.id: j.scale_factor for j in obs.jobs if j.id not in self.unschedulable}
            gpus = sum(s.gpus for s in obs.servers)
            self._churn_now = self._churn.under_load(sum(self._sizes.values()) / gpus if gpus else 1.0)
            self._placements = {j.id: j.placement for j in obs.jobs if j.id in self._sizes
                                and j.placement is not None and j.placement.restricts}
        return job_ids

    def _owed(self, allocation: Allocation | None, now: float, live: Sequence[str]) -> tuple[list, float]:
        """What each row of the allocation in force until now was still owed since the last
        reset (X times the interval, minus what it received), and the bound on it.
        Rows with a job no longer among the `live` ones are left out: it departed, and the
        ledger has forgotten it.

        Carried over the reset (Gavel's deficits), so that the hysteresis that
        keeps jobs where they are costs fidelity only for a while: a job kept on
        one type is owed ever more of the others until it moves.
        """
        cap = 2.0 * (self.churn.hysteresis + self.churn.move_hysteresis) + self.round_seconds
        if (not self.carry_owed or allocation is None or not allocation.job_ids
                or not np.isfinite(self._last_reset)):
            return [], cap
        rows = allocation.rows
        owed = allocation.x_rows * (now - self._last_reset) - self.ledger.since_reset(rows)
        live = set(live)
        return [(row, o) for row, o in zip(rows, owed.tolist()) if live.issuperset(row)], cap

    def _usable_for(self, allocation: Allocation) -> np.ndarray | None:
        """(n, k) where each job of `allocation` can run: its throughput there over its best, 0 if not.

        What work conservation fills idle GPUs with (None: off).  Kept per
        allocation (it changes only on reset events).
        """
        if not self.work_conserving:
            return None
        cached, usable = self._usable
        if cached is allocation:
            return usable
        inp = self.input
        usable = None
        if inp is not None and inp.job_ids == allocation.job_ids and inp.worker_types == allocation.worker_types:
            solo = inp.solo_throughputs
            best = solo.max(axis=1, keepdims=True)
            usable = np.divide(solo, best, out=np.zeros_like(solo), where=best > 0)
        self._usable = (allocation, usable)
        return usable

    def _observe(self, now: float) -> Observation:
        self.record_pending()                   # what an earlier observation left unwritten
        obs = self.backend.observe()
        self.ledger.record_each((u.assignment, u.seconds) for u in obs.usage)
        for d in obs.departures:
            self.ledger.forget(d.id)
        self._record(self.store.observe, now, obs)
        if self._keep_usage:
            for u in obs.usage:
                self._record(self.store.usage, now, u)
        for d in obs.departures:
            self._record(self.store.departure, d)
        if obs.usage or obs.departures:
            self._save_state()
        self.record_pending()
        if obs.measurements:
            self.throughputs.record(obs.measurements)      # a source that learns (estimator)
        return obs

    def _record(self, write, *args) -> None:
        self._unrecorded.append((write, args))

    def record_pending(self) -> None:
        """Do the queued store writes in order; the first that fails raises and stays queued."""
        pending = self._unrecorded
        while pending:
            write, args = pending[0]
            write(*args)
            pending.popleft()

    # -- restart ----------------------------------------------------------------
    def snapshot(self) -> EngineState:
        """The working state a restarted engine needs to go on as if it had not stopped."""
        since, total = self.ledger.snapshot()
        holder = policy_with(self.allocator, "memory")
        return EngineState(self.round, self.worker_types, self._last_reset, self._last_submit,
                           self._job_ids, self._servers, since, total, self.allocation,
                           dict(self.unschedulable), self.ledger.owed_snapshot(),
                           holder.memory() if holder is not None else {})

    def resume(self, state: EngineState) -> None:
        """Take over the state of an earlier run (before the first round).

        The rounds go on numbering, the ledger keeps what each row received
        since the last reset, and the allocation in force stays in force
        until a reset event (a job arriving or leaving, servers changing)
        brings a new solve: a restart alone moves no job.
        """
        if state.worker_types != self.worker_types:
            log.warning("not resuming: the saved state has worker types %s, the cluster %s",
                        ",".join(state.worker_types), ",".join(self.worker_types))
            return
        self.round = max(self.round, state.round)
        self.ledger.restore(state.since_reset, state.total, state.owed)
        self._last_reset, self._last_submit = state.last_reset, state.last_submit
        self._job_ids, self._servers = state.job_ids, state.servers
        self.unschedulable = dict(state.unschedulable)
        self._reported = set(state.unschedulable)
        if state.allocation is not None and state.allocation.worker_types == self.worker_types:
            self.allocation = self._solved = self._restored = state.allocation
        holder = policy_with(self.allocator, "remember")
        if holder is not None and state.policy_memory:
            try:
                holder.remember(state.policy_memory)
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                # the rounds go on; the policy starts from what it sees, as on a new database
                log.warning("not resuming the policy's memory (%s: %s): it starts afresh",
                            type(e).__name__, e)

    def _save_state(self) -> None:
        """Queue the working state for the store (written with the next observation's records)."""
        if self._keep_state is not None:
            self._record(self._keep_state, self.snapshot())

    def settle(self) -> None:
        """Observe once more without planning: record the time run and the jobs gone since the
        last round (a daemon stopping, a simulation ending)."""
        self._observe(self.clock.now())

    def explain(self) -> dict[str, dict]:
        """For each active job of the last round: where it runs, its priority, why it waits.

        The priority is the one the next round picks by (`round_priorities`: the
        time owed from before the last reset, the running jobs' lease, the
        others' restart cost): a running job's on the type it runs on (what a
        waiting job must beat to take its GPUs), a waiting job's best.
        For people (`slurm-gavel queue`); the simulator never asks.
        """
        from .mechanism import allocation_rows, round_priorities

        out: dict[str, dict] = {}
        if self.last_plan is None:
            return out
        placed = {job: a.worker_type for a in self.last_plan.assignments for job in a.jobs}
        filling = self.last_plan.filling
        best: dict[str, float] = {}
        share: dict[str, float] = {}
        alloc = self.allocation
        if alloc is not None and alloc.job_ids:
            rows, x = allocation_rows(alloc)
            prio = round_priorities(alloc, self.ledger, self.last_plan.assignments, self.churn)
            column = type_columns(alloc.worker_types)
            on = {a.jobs: column.get(a.worker_type) for a in self.last_plan.assignments}
            for row, p, total in zip(rows, prio, x.sum(axis=1)):
                t = on.get(row)
                value = float(p.max()) if t is None else float(p[t])
                for job in row:
                    if t is not None or job not in placed:
                        best[job] = max(best.get(job, 0.0), value)
                    share[job] = share.get(job, 0.0) + float(total)
        interim = set(alloc.info.get("interim_rows", ())) if alloc is not None and alloc.info else set()
        pending = bool(self.allocator.pending)
        for job in self.active_ids:
            if job in filling:
                reason = FILLING
            elif job in placed:
                reason = ""
            elif job in self.unschedulable:
                reason = self.unschedulable[job]
            elif job in interim and pending:
                reason = "solver pending: agnostic share until the new allocation is ready"
            elif share.get(job, 0.0) <= 0:
                reason = "no allocation on any type (the policy gives it no GPU time now)"
            else:
                reason = "waiting for its round (others have higher priority)"
            out[job] = {"worker_type": placed.get(job), "priority": best.get(job), "reason": reason}
        return out

    def _capacity(self, servers: Sequence) -> tuple[np.ndarray, np.ndarray]:
        """(GPUs of each type, GPUs of its largest server): kept while the backend hands
        over the same tuple of servers (read-only: the policy input shares them)."""
        if servers is self._capacity_of[0]:
            return self._capacity_of[1]
        gpus: dict[str, int] = {}        # per worker type: GPUs, GPUs of its largest server
        largest: dict[str, int] = {}
        for s in servers:
            gpus[s.worker_type] = gpus.get(s.worker_type, 0) + s.gpus
            largest[s.worker_type] = max(largest.get(s.worker_type, s.gpus), s.gpus)
        counts = np.array([gpus.get(wt, 0) for wt in self.worker_types], dtype=float)
        per_node = np.array([largest.get(wt, np.nan) for wt in self.worker_types], dtype=float)
        counts.flags.writeable = per_node.flags.writeable = False
        if isinstance(servers, tuple):
            self._capacity_of = (servers, (counts, per_node))
        return counts, per_node

    def _policy_input(self, obs: Observation, now: float) -> PolicyInput | None:
        counts, per_node = self._capacity(obs.servers)
        candidates = obs.jobs
        if self._rules:
            candidates = []
            for j in obs.jobs:
                if j.hold_reason:           # the backend logs why it holds a job back
                    self.unschedulable[j.id] = j.hold_reason
                else:
                    candidates.append(j)
            if not candidates:
                return None
        table = self._masked(candidates, self.throughputs.lookup(candidates, self.worker_types))
        fits = self._schedulable(candidates, table.solo, counts)
        if not fits.any():
            return None
        jobs = [j for j, f in zip(candidates, fits) if f]
        if self.space_sharing:
            table = self._masked(jobs, self.throughputs.lookup(jobs, self.worker_types, include_pairs=True))
            table = runnable_pairs(jobs, table, pair_gpu_limit(self.backend))
        elif not fits.all():
            table = replace(table, solo=table.solo[fits], unconsolidated=table.unconsolidated[fits])
        if self.weight_limits is not None:
            self._note_weights(jobs)
        return build_policy_input(jobs, obs.steps_done, table, self.worker_types, counts, now,
                                  self.prices, per_node, self.weight_limits, self.entity_weights,
                                  self.share_by)

    def _note_weights(self, jobs: Sequence[JobState]) -> None:
        """Log once per job whose weight the limits changed (the admin may wonder)."""
        for j in jobs:
            if j.id in self._weights_noted:
                continue
            bounded = self.weight_limits.bounded(j.weight, j.user, j.account)
            if bounded != j.weight:
                self._weights_noted.add(j.id)
                log.info("job %s: weight %.6g bounded to %.6g by the configured limits",
                         j.id, j.weight, bounded)
        if len(self._weights_noted) > 100000:
            self._weights_noted.clear()

    def _masked(self, jobs: Sequence[JobState], table: JobThroughputs) -> JobThroughputs:
        """`table` with NaN (infeasible) on every worker type a job's `placement` rules out."""
        if not self._rules:
            return table
        allowed = np.ones((len(jobs), len(self.worker_types)), dtype=bool)
        for i, j in enumerate(jobs):
            if j.placement is not None and j.placement.worker_types is not None:
                allowed[i] = [wt in j.placement.worker_types for wt in self.worker_types]
        if allowed.all():
            return table
        pairs = table.pair_throughputs
        if len(table.pair_jobs):
            both = allowed[table.pair_jobs[:, 0]] & allowed[table.pair_jobs[:, 1]]     # (P, k)
            pairs = np.where(both[:, :, None], pairs, np.nan)
        return replace(table, solo=np.where(allowed, table.solo, np.nan),
                       unconsolidated=np.where(allowed, table.unconsolidated, np.nan),
                       pair_throughputs=pairs)

    def _report(self, job: str, why: str) -> None:
        if job not in self._reported:
            log.warning("job %s cannot be scheduled: %s", job, why)
            self._reported.add(job)

    def _schedulable(self, jobs: Sequence[JobState], solo: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Which jobs some worker type can run; the others go to `unschedulable` with the reason."""
        sfs = np.array([j.scale_factor for j in jobs], dtype=np.int64)
        fits = ((solo > 0) & (sfs[:, None] <= counts[None, :])).any(axis=1)
        if fits.all():
            return fits
        known = np.isfinite(solo).any(axis=1)
        for i in np.flatnonzero(~fits):
            job = jobs[i]
            if job.placement is not None and job.placement.worker_types is not None and not any(
                    wt in job.placement.worker_types for wt in self.worker_types):
                why = "may run on no worker type of this cluster"
            elif not known[i]:
                why = f"no throughput known for {job.job_type!r} at scale factor {job.scale_factor}"
            else:
                why = f"fits no worker type: needs {job.scale_factor} GPUs of a type it can run on"
            self.unschedulable[job.id] = why
            self._report(job.id, why)
        return fits


__all__ = ["DEFAULT_HYSTERESIS", "DEFAULT_MOVE_HYSTERESIS", "DEFAULT_RESET_SECONDS", "DEFAULT_RESTART_SECONDS",
           "MEASURED_RESTART_SECONDS", "DEFAULT_ROUND_SECONDS",
           "FILLING", "Engine", "build_policy_input", "compose"]

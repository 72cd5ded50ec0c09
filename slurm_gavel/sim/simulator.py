"""The simulated cluster: a backend that runs jobs on a clock instead of on GPUs.

`SimulatedCluster` implements the backend interface (observe / execute) for
a trace and a throughput table: jobs arrive at their trace times, make
progress at the table's throughput for the type (and placement, and
partner) they were given, and finish at the exact moment their last step
is done.  The scheduler plans at round boundaries; in between, a job that
arrives while GPUs are idle (never planned, or freed by a job that finished)
starts on them at once (`mid_round_starts`, Engine.start_arrivals, as the
daemon's ticks do), else it waits for the next round.  Each start or resume of a job
costs it `restart_seconds` of its round (requeue, launch, imports,
checkpoint load: GPUs held, no progress); the mechanism is told the same
cost and weighs it against the gain of a move.

`simulate()` wires it to the very engine the daemon runs (simulated clock,
immediate or delayed allocator, in-memory store) and returns per-job
results; `summarize()` turns them into the numbers the paper reports.
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Mapping

import numpy as np

from ..core.backend import Departure, JobState, Measurement, Observation, Usage
from ..core.clock import SimulatedClock
from ..core.engine import (DEFAULT_HYSTERESIS, DEFAULT_LEASE_LOAD_EXPONENT, DEFAULT_MAX_LEASE_SCALE,
                           DEFAULT_MAX_PREEMPTIONS, DEFAULT_MOVE_HYSTERESIS, DEFAULT_RESET_SECONDS, DEFAULT_RESTART_SECONDS,
                           DEFAULT_ROUND_SECONDS, Engine)
from ..core.errors import InputError
from ..core.interfaces import Backend
from ..core.plan import Assignment, RoundPlan, Server
from ..core.recompute import Delayed, Immediate
from ..core.store import MemoryStore
from ..estimator.table import TableThroughputs
from ..estimator.table import ThroughputTable
from .workloads import TraceJob

DEFAULT_GPUS_PER_NODE = 4


def parse_cluster(text: str) -> dict[str, int]:
    """'v100=36,p100=36,k80=36' -> {'v100': 36, 'p100': 36, 'k80': 36}."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, count = part.partition("=")
        name = name.strip()
        if not sep or not name:
            raise InputError("--cluster", f"expected TYPE=COUNT, got {part!r}")
        try:
            n = int(count)
        except ValueError:
            raise InputError("--cluster", f"{name}: count must be an integer, got {count!r}") from None
        if n < 0:
            raise InputError("--cluster", f"{name}: count must be >= 0, got {n}")
        if name in out:
            raise InputError("--cluster", f"{name} is given twice")
        out[name] = n
    if not out:
        raise InputError("--cluster", "no worker types given")
    if not any(out.values()):
        raise InputError("--cluster", "the cluster has no GPUs")
    return out


def make_servers(cluster: Mapping[str, int], gpus_per_node: int | Mapping[str, int]) -> tuple[Server, ...]:
    """Servers named TYPE-N, `gpus_per_node` GPUs each (the last one takes the rest)."""
    servers = []
    for wt, count in cluster.items():
        per = gpus_per_node if isinstance(gpus_per_node, int) else gpus_per_node.get(wt, DEFAULT_GPUS_PER_NODE)
        if per < 1:
            raise InputError("--gpus-per-node", f"must be >= 1, got {per}")
        left, i = count, 0
        while left > 0:
            servers.append(Server(f"{wt}-{i}", wt, min(per, left)))
            left -= per
            i += 1
    return tuple(servers)


@dataclass
class JobResult:
    """What happened to one job."""

    id: str
    job_type: str
    scale_factor: int
    total_steps: float
    arrival: float
    finish: float = math.nan
    steps_done: float = 0.0
    seconds: dict[str, float] = field(default_factory=dict)   # GPU time per worker type
    starts: int = 0                  # times it was started (first start + restarts)
    first_start: float = math.nan
    mean_active_jobs: float = math.nan   # jobs in the system, time-averaged over its life
    weight: float = 1.0
    slo: float | None = None

    @property
    def jct(self) -> float:
        return self.finish - self.arrival


class SimulatedCluster(Backend):
    """A backend whose jobs advance on the clock at table throughputs."""

    def __init__(self, jobs: Iterable[TraceJob], table: ThroughputTable, cluster: Mapping[str, int],
                 clock, gpus_per_node: int | Mapping[str, int] = DEFAULT_GPUS_PER_NODE,
                 restart_seconds: float = DEFAULT_RESTART_SECONDS, measure: bool = False,
                 max_pair_gpus: int | None = None):
        unknown = [wt for wt in cluster if wt not in table.worker_types]
        if unknown:
            raise InputError("--cluster", f"worker type {unknown[0]!r} is not in the throughput table "
                                          f"(it has: {', '.join(table.worker_types)})")
        if not (restart_seconds >= 0 and math.isfinite(restart_seconds)):
            raise InputError("--restart-seconds", f"must be >= 0, got {restart_seconds}")
        if max_pair_gpus is not None and (isinstance(max_pair_gpus, bool) or not isinstance(max_pair_gpus, int)
                                          or max_pair_gpus < 1):
            raise InputError("--max-pair-gpus", f"must be an integer >= 1, got {max_pair_gpus!r}")
        self.worker_types = tuple(cluster)
        # The most GPUs per job of a pair row it runs (core/backend.py): None, any (Gavel's
        # simulator pairs jobs of any equal size); 1 mimics the Slurm backend.
        self.max_pair_gpus = max_pair_gpus
        self.table = table
        self.clock = clock
        self.servers = make_servers(cluster, gpus_per_node)
        self.restart_seconds = float(restart_seconds)
        self.measure = measure                 # report what each running job made (estimator)
        self._measurements: list = []
        self.preempted: list[int] = []             # jobs stopped by each round that stopped any
        self._column = {wt: j for j, wt in enumerate(self.worker_types)}
        self._arrivals: Iterator[tuple[int, TraceJob]] = iter(enumerate(jobs))
        self._next: tuple[int, TraceJob] | None = next(self._arrivals, None)
        self._last_arrival = -math.inf
        self.results: dict[str, JobResult] = {}
        self._seconds_of: dict[str, dict[str, float]] = {}   # job -> its result's seconds per type
        self._active: dict[str, JobState] = {}
        self._jobs_view: tuple[JobState, ...] = ()
        self._done: dict[str, float] = {}                 # steps done, active jobs
        self._rate: dict[str, float] = {}                 # steps/s of running jobs this round
        self._type: dict[str, int] = {}
        self._running: tuple[Assignment, ...] = ()
        self._round: tuple[float, float] | None = None    # (advanced up to, end) of the executed round
        self._ckpt_left: dict[str, float] = {}            # restart seconds a start still has to pay
        self._finish_at: dict[str, float] = {}            # running jobs: when they finish at their rate
        self._usage: list[Usage] = []
        # Last round's Usage of each running assignment (by id; the Usage keeps it
        # alive): a lease renewed for a whole round reports the very same one.
        self._usage_of: dict[int, Usage] = {}
        self._departures: list[Departure] = []
        self._rate_cache: dict = {}
        # for the isolated-share baseline of finish-time fairness: integral of jobs-in-system
        self._area = 0.0
        self._area_time = 0.0
        self._area_start: dict[str, float] = {}
        self.busy_gpu_seconds = np.zeros(len(self.worker_types))

    # -- backend interface ------------------------------------------------------
    def observe(self) -> Observation:
        now = self.clock.now()
        self._finish_round(now)
        changed = False
        while self._next is not None and self._next[1].arrival_time <= now:
            index, job = self._next
            if job.arrival_time < self._last_arrival:
                raise InputError(f"trace job {index}", "arrival times must not decrease")
            self._last_arrival = job.arrival_time
            self._admit(str(index), job)
            changed = True
            self._next = next(self._arrivals, None)
        if changed or len(self._jobs_view) != len(self._active):
            self._jobs_view = tuple(self._active.values())
        usage, self._usage = tuple(self._usage), []
        departures, self._departures = tuple(self._departures), []
        measurements, self._measurements = tuple(self._measurements), []
        return Observation(now, self._jobs_view, self.servers, dict(self._done),
                           self._running, usage, departures, measurements)

    def execute(self, plan: RoundPlan, round_end: float) -> None:
        now = self.clock.now()
        self._finish_round(now)       # what ran since the last observation ran on the old plan
        if plan.preempt:
            self.preempted.append(len(plan.preempt))
        for job in plan.preempt:
            self._rate.pop(job, None)
            self._type.pop(job, None)
            self._finish_at.pop(job, None)
        if not (self._round is not None and self._round[1] == round_end):
            self._ckpt_left = {}      # a new round (not starts in the middle of this one)
        for a in plan.start:
            t = self._column[a.worker_type]
            rates = self._rates(a)
            for job, rate in zip(a.jobs, rates):
                self._rate[job] = rate
                self._type[job] = t
                self._ckpt_left[job] = self.restart_seconds
                left = self._active[job].total_steps - self._done[job]
                # the restart cost is charged within this round only (_ckpt_left is per round)
                cost = min(self.restart_seconds, max(round_end - now, 0.0))
                self._finish_at[job] = now + cost + left / rate if rate > 0 else math.inf
                r = self.results[job]
                r.starts += 1
                if r.starts == 1:
                    r.first_start = now
        self._running = plan.assignments
        self._round = (now, round_end)

    # -- simulation ---------------------------------------------------------------
    @property
    def finished(self) -> bool:
        """No job left to arrive and none active."""
        return self._next is None and not self._active

    @property
    def active_jobs(self) -> int:
        return len(self._active)

    @property
    def next_arrival(self) -> float | None:
        return None if self._next is None else self._next[1].arrival_time

    @property
    def quiet_until(self) -> float:
        """A time before which no job arrives or finishes (the engine may then renew a round's
        leases without planning it; a second's margin for rounding); -inf while measuring
        (the order of measurements follows the plan's)."""
        if self.measure:
            return -math.inf
        arrival = self._next[1].arrival_time if self._next is not None else math.inf
        return min(arrival, min(self._finish_at.values(), default=math.inf) - 1.0)

    def active_ids(self) -> list[str]:
        return list(self._active)

    def _admit(self, job_id: str, job: TraceJob):
        self._advance_area(job.arrival_time)
        state = JobState(job_id, job.job_type, job.scale_factor, job.arrival_time,
                         float(job.total_steps), job.priority_weight, job.entity, job.slo)
        self._active[job_id] = state
        self._done[job_id] = 0.0
        self._area_start[job_id] = self._area
        self.results[job_id] = JobResult(job_id, job.job_type, job.scale_factor, float(job.total_steps),
                                         job.arrival_time, weight=job.priority_weight, slo=job.slo,
                                         seconds={wt: 0.0 for wt in self.worker_types})
        self._seconds_of[job_id] = self.results[job_id].seconds
        if job.total_steps <= 0:      # nothing to run: done on arrival
            self._depart(job_id, job.arrival_time)

    def _advance_area(self, t: float):
        if t > self._area_time:
            self._area += len(self._active) * (t - self._area_time)
            self._area_time = t

    def _depart(self, job_id: str, t: float):
        self._advance_area(t)
        r = self.results[job_id]
        r.finish = t
        r.steps_done = self._done.pop(job_id)
        life = t - r.arrival
        r.mean_active_jobs = ((self._area - self._area_start.pop(job_id)) / life) if life > 0 else 1.0
        del self._active[job_id]
        self._rate.pop(job_id, None)
        self._type.pop(job_id, None)
        self._finish_at.pop(job_id, None)
        self._seconds_of.pop(job_id, None)
        self._departures.append(Departure(job_id, t))

    def _rates(self, a: Assignment) -> tuple[float, ...]:
        """Steps/s of each job of an assignment: alone or as a pair, consolidated or spread."""
        spread = len(a.servers) > 1
        key = (tuple([self._active[j].job_type for j in a.jobs]), a.worker_type, a.gpus, spread)
        if key not in self._rate_cache:
            sf = self._active[a.jobs[0]].scale_factor
            wt = a.worker_type
            if len(a.jobs) == 1:
                model = key[0][0]
                rate = self.table.solo(model, sf).get(wt, 0.0)
                if spread:
                    rate = self.table.unconsolidated(model, sf).get(wt, rate)
                rates = (float(rate),)
            else:
                pair = self.table.pair(key[0][0], key[0][1], sf).get(wt, (0.0, 0.0))
                rates = (float(pair[0]), float(pair[1]))
            self._rate_cache[key] = rates
        return self._rate_cache[key]

    def _finish_round(self, now: float):
        """Advance every running job up to `now`, or to the end of its round if that came first.

        Observed in the middle of a round (as a daemon does, every tick), the
        jobs advance up to `now` and the round goes on from there, so that each
        observation reports what ran since the previous one.
        """
        if self._round is None:
            return
        start, end = self._round
        if now < end:
            if now <= start:
                return                # nothing ran since the last observation
            self._round = (now, end)
        else:
            self._round = None
        end = min(end, now)
        length = end - start
        active, done, rates, seconds_of = self._active, self._done, self._rate, self._seconds_of
        ckpt_left, column = self._ckpt_left, self._column
        busy = [0.0] * len(self.worker_types)
        usage = self._usage
        usage_of, renewed = self._usage_of, {}
        measure = self.measure
        departed = False
        gone: set[int] = set()           # ids of assignments a job of which is no longer active
        made: dict[str, float] = {}
        for a in self._running:
            held = 0.0
            wt = a.worker_type
            key = id(a)
            if measure:
                made = {}
            for job in a.jobs:
                state = active.get(job)
                if state is None:
                    gone.add(key)
                    continue
                cost = ckpt_left.get(job, 0.0) if ckpt_left else 0.0
                if cost:
                    if cost > length:
                        ckpt_left[job] = cost - length
                    else:             # paid: dropped, so that the dict empties within the round
                        del ckpt_left[job]
                rate = rates.get(job, 0.0)
                if measure:
                    made[job] = rate
                useful = length - cost if length > cost else 0.0
                left = state.total_steps - done[job]
                if rate > 0 and left <= rate * useful:
                    ran = cost + left / rate
                    done[job] = state.total_steps
                    seconds_of[job][wt] += ran
                    self._depart(job, start + ran)
                    departed = True
                    gone.add(key)
                else:
                    done[job] += rate * useful
                    ran = length
                    seconds_of[job][wt] += ran
                if ran > held:
                    held = ran
            busy[column[wt]] += held * a.gpus
            u = usage_of.get(key)
            if u is None or u.assignment is not a or u.seconds != held:
                u = Usage(a, held)
            renewed[key] = u
            usage.append(u)
            if measure and held > 0:
                spread = len(a.servers) > 1
                for i, job in enumerate(a.jobs):
                    if job not in made:
                        continue
                    partner = a.jobs[1 - i] if len(a.jobs) == 2 else None
                    # the rate it ran at (read before a completion drops it from `rates`)
                    self._measurements.append(Measurement(job, wt, made[job], partner, spread))
        self._usage_of = renewed
        self.busy_gpu_seconds += busy
        if departed:
            self._running = tuple([a for a in self._running if id(a) not in gone])


# -- driving a simulation --------------------------------------------------------
@dataclass
class Simulation:
    """A finished run: per-job results, the engine that ran it, and bookkeeping."""

    results: dict[str, JobResult]
    rounds: int
    end_time: float
    solves: int
    solve_seconds: float
    solver_errors: list
    busy_gpu_seconds: dict[str, float]
    gpus: dict[str, int]
    allocation_gap: float
    wall_seconds: float
    complete: bool
    preempted_per_round: tuple[int, ...] = ()   # jobs each round stopped (the waves a cluster carries out)


def simulate(jobs: Iterable[TraceJob], table: ThroughputTable, cluster: Mapping[str, int], policy,
             round_seconds: float = DEFAULT_ROUND_SECONDS, window: tuple[int, int] | None = None,
             gpus_per_node: int | Mapping[str, int] = DEFAULT_GPUS_PER_NODE,
             restart_seconds: float = DEFAULT_RESTART_SECONDS, solver_delay: float = 0.0,
             space_sharing: bool = False, prices: Mapping[str, float] | None = None,
             max_rounds: int | None = None, reset_seconds: float = DEFAULT_RESET_SECONDS,
             throughputs=None, progress: Callable[[int, float, int, int], None] | None = None,
             hysteresis: float = DEFAULT_HYSTERESIS, work_conserving: bool = True,
             checkpoint_seconds: float | None = None,
             move_hysteresis: float = DEFAULT_MOVE_HYSTERESIS, carry_owed: bool = True,
             mid_round_starts: bool = False, max_pair_gpus: int | None = None,
             max_preemptions: int = DEFAULT_MAX_PREEMPTIONS,
             lease_load_exponent: float = DEFAULT_LEASE_LOAD_EXPONENT,
             max_lease_scale: float = DEFAULT_MAX_LEASE_SCALE) -> Simulation:
    """Run `policy` over `jobs` (in arrival order) on a simulated `cluster`.

    Stops when every job in `window` (ids start <= id < end; default: all
    jobs) has finished, or after `max_rounds`.  `solver_delay` > 0 makes each
    solve take that many simulated seconds (the engine keeps going meanwhile).
    `restart_seconds` is charged at each start and resume and told to the
    mechanism (`checkpoint_seconds` is its old name); `hysteresis` and
    `move_hysteresis` (in rounds) and `work_conserving` set the mechanism's
    churn and idle-GPU rules (core/engine.py, core/ledger.py Churn).
    `mid_round_starts`: a job that arrives during a round starts at once on
    GPUs that are idle (Engine.start_arrivals) instead of at the next round.
    `max_pair_gpus`: with space sharing, pair only jobs of at most that many GPUs each
    (1: as the Slurm backend does; None: any, as Gavel's simulator).
    `max_preemptions`: at most that many jobs preempted a round (0: no cap), as the daemon's
    max_preemptions_per_round.  `lease_load_exponent`, `max_lease_scale`: how the two leases grow
    with the load, and how much at most (core/ledger.py Churn.lease_scale; exponent 0: fixed).
    """
    if checkpoint_seconds is not None:
        restart_seconds = checkpoint_seconds
    started = time.perf_counter()
    clock = SimulatedClock(0.0)
    # `throughputs`: what the policy is told (default: the table itself, an
    # oracle); the jobs always run at the table's rates.  A source that learns
    # (`learns`: it implements `record`) is fed what each running job made, every round.
    source = throughputs if throughputs is not None else TableThroughputs(table)
    backend = SimulatedCluster(jobs, table, cluster, clock, gpus_per_node, restart_seconds,
                               measure=source.learns, max_pair_gpus=max_pair_gpus)
    allocator = Delayed(policy, solver_delay) if solver_delay > 0 else Immediate(policy)
    store = MemoryStore(keep_rounds=False)
    try:
        engine = Engine(clock, backend, allocator, source, store, round_seconds,
                        prices=prices, space_sharing=space_sharing, min_reset_seconds=reset_seconds,
                        work_conserving=work_conserving, hysteresis=hysteresis,
                        restart_seconds=restart_seconds, move_hysteresis=move_hysteresis,
                        carry_owed=carry_owed, max_preemptions=max_preemptions,
                        lease_load_exponent=lease_load_exponent, max_lease_scale=max_lease_scale)
    except ValueError as e:
        raise InputError("--hysteresis", str(e)) from None
    wanted = None if window is None else {str(i) for i in range(window[0], window[1])}
    remaining = len(wanted) if wanted is not None else None

    def done() -> bool:
        if wanted is None:
            return backend.finished
        return remaining == 0

    complete = True
    seen = 0
    while not done():
        if max_rounds is not None and engine.round >= max_rounds:
            complete = False
            break
        if backend.next_arrival is None and (
                not backend.active_jobs or
                all(job in engine.unschedulable for job in backend.active_ids())):
            complete = False      # nothing left that could ever run
            break
        if not backend.active_jobs and backend.next_arrival is not None:
            # an idle cluster: jump to the round boundary at or after the next arrival
            # (with mid-round starts: the last one before it, and start it on arrival)
            now = clock.now()
            if backend.next_arrival > now:
                rounds = (backend.next_arrival - now) / round_seconds
                clock.sleep_until(now + (math.floor(rounds) if mid_round_starts else math.ceil(rounds))
                                  * round_seconds)
        if mid_round_starts:
            engine.plan()
            # jobs that arrive during the round start on idle GPUs at once (Engine.start_arrivals)
            while backend.next_arrival is not None and backend.next_arrival < engine.round_end:
                clock.sleep_until(backend.next_arrival)
                engine.start_arrivals()
            engine.wait()
        else:
            engine.step()
        new = store.departures[seen:]
        seen = len(store.departures)
        if wanted is not None:
            remaining -= sum(1 for d in new if d.id in wanted)
        if progress is not None:
            progress(engine.round, clock.now(), len(store.departures), backend.active_jobs)
    # let the last round's completions land
    backend.observe()
    results = backend.results
    return Simulation(results=results, rounds=engine.round, end_time=clock.now(),
                      solves=allocator.solves, solve_seconds=allocator.solve_seconds,
                      solver_errors=list(allocator.errors),
                      busy_gpu_seconds=dict(zip(backend.worker_types, map(float, backend.busy_gpu_seconds))),
                      gpus={wt: int(c) for wt, c in cluster.items()},
                      allocation_gap=allocation_gap(store.allocations, results, clock.now()),
                      wall_seconds=time.perf_counter() - started, complete=complete,
                      preempted_per_round=tuple(backend.preempted))


def allocation_gap(allocations, results: Mapping[str, JobResult], end: float) -> float:
    """Mean over finished jobs of the L1 gap between realized and computed time fractions.

    Computed: the job's row of the allocation in force, time-averaged over
    its life (a pair row counts for both its jobs).  Realized: its GPU time
    per type over its life.  0 = the mechanism met X exactly.
    """
    index: dict[str, int] = {}             # job -> its row of `target`
    parts = []
    last_ids, last_rows = None, None       # consecutive allocations mostly name the same jobs
    for i, (_, t0, alloc, _) in enumerate(allocations):
        t1 = allocations[i + 1][1] if i + 1 < len(allocations) else end
        span = t1 - t0
        if span <= 0 or not alloc.job_ids:
            continue
        x = alloc.x.copy()
        if len(alloc.pair_jobs):
            np.add.at(x, alloc.pair_jobs[:, 0], alloc.x_pairs)
            np.add.at(x, alloc.pair_jobs[:, 1], alloc.x_pairs)
        x *= span
        if alloc.job_ids != last_ids:
            last_ids = alloc.job_ids
            # which row a job gets does not matter (each row sums its own job's parts)
            index.update(zip(set(last_ids).difference(index), itertools.count(len(index))))
            last_rows = list(map(index.__getitem__, last_ids))
        parts.append((last_rows, x))
    target = np.zeros((len(index), parts[0][1].shape[1] if parts else 0))
    for rows, x in parts:            # an allocation names each job once
        target[rows] += x
    gaps = []
    for job, r in results.items():
        if math.isnan(r.finish) or r.jct <= 0 or job not in index:
            continue
        realized = np.array(list(r.seconds.values())) / r.jct
        computed = np.minimum(target[index[job]] / r.jct, 1.0)
        gaps.append(float(np.abs(realized - computed).sum()))
    return float(np.mean(gaps)) if gaps else 0.0


# -- what the paper reports ------------------------------------------------------------
def isolated_seconds(r: JobResult, table: ThroughputTable, cluster: Mapping[str, int]) -> float:
    """The job's duration under the isolated allocation: 1/n of every type, n = mean jobs in the system."""
    n = max(1.0, r.mean_active_jobs if math.isfinite(r.mean_active_jobs) else 1.0)
    solo = table.solo(r.job_type, r.scale_factor)
    shares = {wt: cluster[wt] / (n * r.scale_factor) for wt in cluster
              if solo.get(wt, 0) > 0 and cluster[wt] >= r.scale_factor}
    total = sum(shares.values())
    scale = 1.0 / total if total > 1.0 else 1.0
    throughput = sum(share * scale * solo[wt] for wt, share in shares.items())
    return r.total_steps / throughput if throughput > 0 else math.inf


def summarize(sim: Simulation, table: ThroughputTable, window: tuple[int, int] | None = None,
              prices: Mapping[str, float] | None = None) -> dict:
    """Average JCT, makespan, finish-time fairness, cost, SLO violations, utilization, gap."""
    results = sim.results
    if window is not None:
        chosen = [results[str(i)] for i in range(window[0], window[1]) if str(i) in results]
    else:
        chosen = list(results.values())
    finished = [r for r in chosen if math.isfinite(r.finish)]
    jcts = np.array([r.jct for r in finished])
    rho = np.array([r.jct / isolated_seconds(r, table, sim.gpus) for r in finished])
    all_finished = [r for r in results.values() if math.isfinite(r.finish)]
    makespan = (max(r.finish for r in all_finished) - min(r.arrival for r in results.values())
                if all_finished else math.nan)
    gpu_hours = {wt: sum(r.seconds.get(wt, 0.0) * r.scale_factor for r in finished) / 3600.0
                 for wt in sim.gpus}
    cost = None
    if prices:
        cost = sum(gpu_hours[wt] * prices.get(wt, 0.0) for wt in gpu_hours)
    with_slo = [r for r in finished if r.slo is not None]
    capacity = {wt: sim.gpus[wt] * sim.end_time for wt in sim.gpus}
    utilization = {wt: (sim.busy_gpu_seconds[wt] / capacity[wt]) if capacity[wt] > 0 else 0.0
                   for wt in sim.gpus}
    total_capacity = sum(capacity.values())

    def stat(values: np.ndarray, scale: float = 1.0) -> dict:
        if len(values) == 0:
            return {"mean": None, "p50": None, "p90": None, "p99": None, "max": None}
        return {"mean": float(values.mean()) / scale,
                "p50": float(np.percentile(values, 50)) / scale,
                "p90": float(np.percentile(values, 90)) / scale,
                "p99": float(np.percentile(values, 99)) / scale,
                "max": float(values.max()) / scale}

    return {
        "jobs": len(chosen),
        "finished": len(finished),
        "complete": sim.complete and len(finished) == len(chosen),
        "window": list(window) if window is not None else None,
        "average_jct_hours": stat(jcts, 3600.0)["mean"],
        "jct_hours": stat(jcts, 3600.0),
        "makespan_hours": makespan / 3600.0 if math.isfinite(makespan) else None,
        "finish_time_fairness": stat(rho),
        "gpu_hours": gpu_hours,
        "cost": cost,
        "slo_violations": sum(1 for r in with_slo if r.jct > r.slo),
        "jobs_with_slo": len(with_slo),
        "utilization": utilization,
        "utilization_total": (sum(sim.busy_gpu_seconds.values()) / total_capacity) if total_capacity else 0.0,
        "allocation_gap": sim.allocation_gap,
        "restarts_per_job": (float(np.mean([max(0, r.starts - 1) for r in finished])) if finished else None),
        "max_preempted_per_round": max(sim.preempted_per_round, default=0),
        "rounds": sim.rounds,
        "simulated_hours": sim.end_time / 3600.0,
        "solves": sim.solves,
        "solve_seconds": sim.solve_seconds,
        "solver_errors": len(sim.solver_errors),
        "wall_seconds": sim.wall_seconds,
    }


__all__ = ["JobResult", "SimulatedCluster", "Simulation", "allocation_gap", "isolated_seconds",
           "make_servers", "parse_cluster", "simulate", "summarize"]

"""One contract for every cluster backend (slurm_gavel/backend.py), run on each implementation.

The same test cases run against the simulated cluster (`SimulatedCluster`,
simulated clock) and the Slurm backend (`SlurmBackend` on the session's local
Slurm cluster, wall clock).  A `harness` adapts each implementation: it submits
jobs, moves time forward, and reads what really happened (ground truth outside
the backend: the simulator's per-job results; for Slurm, the log each job writes
and Slurm's start times).  The harnesses differ; the cases never do.

Both clusters have the same shape: v100, p100 and k80, two servers of 4 GPUs
each.  Rounds are long (`ROUND`): within a case no round ends, the backend is
observed many times per round (as the daemon does every tick), and every
change comes from a plan.
"""
from __future__ import annotations

import time
from collections import Counter

import pytest

from slurm_gavel.core.backend import Observation
from slurm_gavel.core.clock import SimulatedClock
from slurm_gavel.core.mechanism import Assignment
from slurm_gavel.sim.simulator import SimulatedCluster
from slurm_gavel.estimator.table import ThroughputTable
from slurm_gavel.sim.workloads import TraceJob
from tests.support.contract import (Harness, MODEL, ROUND, SHORT_SECONDS, SlurmHarness, free, ids,
                                    is_running, on, plan, server_of, submitted, used)

# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24

TYPES = ("v100", "p100", "k80")
SERVERS_PER_TYPE, GPUS_PER_SERVER = 2, 4
LONG_STEPS = 10 ** 12   # a long job: runs until it is preempted


def _table() -> ThroughputTable:
    # one step per second per job on every type: a job's steps are its running seconds
    return ThroughputTable.from_gavel_dict(
        {wt: {f"('{MODEL}', {sf})": {"null": 1.0} for sf in (1, 2, 4, 8)} for wt in TYPES})


class SimulatedHarness(Harness):
    """SimulatedCluster on a SimulatedClock.

    It takes its jobs as a trace, read when observed: every job is submitted
    (arriving now) before the cluster is built on first use.  Jobs progress at
    one step per second, so a short job is one of SHORT_SECONDS steps.
    """

    kind = "simulated"
    tick = 1.0
    timeout = 120.0
    tolerance = 1e-6
    stop_seconds = 0.0

    def __init__(self, cluster: dict[str, int] | None = None, max_pair_gpus: int | None = None):
        super().__init__()
        self.clock = SimulatedClock(1000.0)
        self._trace: list[TraceJob] = []
        self._backend = None
        self._cluster = cluster or {wt: SERVERS_PER_TYPE * GPUS_PER_SERVER for wt in TYPES}
        self._max_pair_gpus = max_pair_gpus

    @property
    def backend(self):
        if self._backend is None:
            self._backend = SimulatedCluster(self._trace, _table(), self._cluster, self.clock,
                                             gpus_per_node=GPUS_PER_SERVER,
                                             max_pair_gpus=self._max_pair_gpus)
        return self._backend

    def submit(self, gpus: int, long: bool = True, distributed: bool = False) -> str:
        assert self._backend is None, "the simulated harness takes its jobs before the first observation"
        steps = LONG_STEPS if long else SHORT_SECONDS
        self._trace.append(TraceJob(MODEL, "", "", "", False, steps, gpus, arrival_time=self.clock.now()))
        return str(len(self._trace) - 1)

    def advance(self, seconds: float) -> None:
        self.clock.sleep_until(self.clock.now() + seconds)

    def starts(self, job: str) -> int:
        return self.backend.results[job].starts

    def start_time(self, job: str) -> float:
        r = self.backend.results[job]
        assert r.starts == 1
        return r.first_start

    def devices(self, job: str) -> tuple[str, str]:
        # the simulator's own running rows: a row's jobs share its GPUs
        (a,) = [a for a in self.backend._running if job in a.jobs]
        return a.servers[0][0], f"row {'+'.join(a.jobs)}"


@pytest.fixture(params=["simulated", "slurm"])
def harness(request, tmp_path):
    if request.param == "simulated":
        h = SimulatedHarness()
    else:
        h = SlurmHarness(request.getfixturevalue("slurm_cluster"), tmp_path)
    try:
        yield h
    finally:
        h.close()


def slurm_max_pair_gpus() -> int | None:
    """What pair rows the Slurm backend runs (core/backend.py): the simulator mimics it here
    (its `pair_limit` by default; `max_pair_gpus` is 0 only on nodes bound to sockets)."""
    from slurm_gavel.slurm.backend import SlurmBackend
    return SlurmBackend.pair_limit


@pytest.fixture(params=["simulated", "slurm"])
def pair_harness(request, tmp_path):
    """A harness for space sharing: on Slurm, the cluster with gres/shard (conftest.py); the
    simulated cluster pairs what the Slurm backend can (`max_pair_gpus`)."""
    if request.param == "simulated":
        h = SimulatedHarness(max_pair_gpus=slurm_max_pair_gpus())
    else:
        h = SlurmHarness(request.getfixturevalue("slurm_shard_cluster"), tmp_path)
    try:
        yield h
    finally:
        h.close()


def state(obs: Observation, job: str):
    return next(j for j in obs.jobs if j.id == job)


def running_on(obs: Observation, job: str) -> list[Assignment]:
    return [a for a in obs.running if job in a.jobs]


def usage_since(h: Harness, index: int, job: str, worker_type: str | None = None) -> float:
    """Usage of `job` reported by the observations from `h.history[index]` on."""
    return sum(used(obs, job, worker_type) for obs in h.history[index:])


# -- the contract ------------------------------------------------------------------------
def test_a_submitted_job_is_observed_and_every_server_is_free(harness):
    h = harness
    job = h.submit(2)
    obs = submitted(h, job)
    assert ids(obs) == [job]
    s = state(obs, job)
    assert (s.scale_factor, s.job_type) == (2, MODEL)
    assert s.arrival_time <= obs.time
    assert running_on(obs, job) == [] and obs.departures == ()
    assert set(h.backend.worker_types) == set(TYPES)
    # every server of every type, with all its GPUs, and all of them free
    assert sorted(Counter(s.worker_type for s in obs.servers).items()) == sorted(
        (wt, SERVERS_PER_TYPE) for wt in TYPES)
    assert all(s.gpus == GPUS_PER_SERVER for s in obs.servers)
    assert len({s.name for s in obs.servers}) == len(obs.servers)
    assert free(obs) == {s.name: GPUS_PER_SERVER for s in obs.servers}


def test_a_started_job_runs_on_its_server_and_holds_its_gpus(harness):
    h = harness
    job = h.submit(2)
    before = submitted(h, job)
    a = on(before, job, "p100", 2, index=1)
    h.execute(plan(0, start=[a]))
    obs = h.observe_until(is_running(job, "p100"), f"job {job} running on p100")
    assert running_on(obs, job) == [a]
    assert job in ids(obs)
    assert obs.servers == before.servers                        # all GPUs, busy or not
    after = free(obs)
    assert after[a.servers[0][0]] == GPUS_PER_SERVER - 2
    assert {n: g for n, g in after.items() if n != a.servers[0][0]} == {
        s.name: GPUS_PER_SERVER for s in obs.servers if s.name != a.servers[0][0]}
    assert h.starts(job) == 1


def test_usage_adds_up_to_the_time_it_ran(harness):
    h = harness
    job = h.submit(1)
    submitted(h, job)
    first = len(h.history)
    h.execute(plan(0, start=[on(h.history[-1], job, "v100", 1)]))
    obs = h.observe_until(is_running(job, "v100"), f"job {job} running on v100")
    t0, mark = obs.time, len(h.history)
    h.observe_for(6.0)
    t1 = h.history[-1].time
    # over successive observations: what ran since each previous one, on its type only
    assert usage_since(h, mark, job, "v100") == pytest.approx(t1 - t0, abs=h.tolerance)
    assert usage_since(h, first, job) == usage_since(h, first, job, "v100")
    assert all(u.assignment.jobs == (job,) and u.assignment.gpus == 1 and u.seconds >= 0
               for obs in h.history[first:] for u in obs.usage)
    assert sum(1 for obs in h.history[mark:] if used(obs, job) > 0) >= 2   # every observation reports its part
    # and in all, the time since it really started
    assert usage_since(h, first, job) == pytest.approx(t1 - h.start_time(job), abs=h.tolerance)


def test_a_preempted_job_stays_and_can_start_again_on_another_type(harness):
    h = harness
    job = h.submit(2)
    obs = submitted(h, job)
    a = on(obs, job, "v100", 2)
    h.execute(plan(0, start=[a]))
    h.observe_until(is_running(job, "v100"), f"job {job} running on v100")
    # Slurm: RUNNING comes before the script has set its trap (a signal then is lost,
    # and the backend requeues it only grace_seconds later): wait until it has started
    assert h.starts(job) == 1
    h.execute(plan(1, preempt=[job]))
    obs = h.observe()
    assert running_on(obs, job) == [] and job in ids(obs)
    # it stops: an observation comes when it no longer holds GPUs
    mark = len(h.history)
    h.observe_until(lambda o: used(o, job) == 0, f"job {job} stopped")
    for obs in h.history[mark - 1:]:
        assert running_on(obs, job) == [] and job in ids(obs)
        assert job not in [d.id for d in obs.departures]
    assert free(h.history[-1]) == {s.name: GPUS_PER_SERVER for s in h.history[-1].servers}
    # still waiting (not gone, not restarted by itself) a while later
    for obs in h.observe_for(2.0):
        assert job in ids(obs) and running_on(obs, job) == [] and used(obs, job) == 0
        assert obs.departures == ()
    assert h.starts(job) == 1
    # started again, elsewhere: a move
    mark = len(h.history)
    b = on(h.history[-1], job, "k80", 2, index=1)
    h.execute(plan(2, start=[b]))
    obs = h.observe_until(is_running(job, "k80"), f"job {job} running again on k80")
    assert running_on(obs, job) == [b]
    assert usage_since(h, mark, job, "v100") == 0
    assert h.starts(job) == 2
    assert state(obs, job).scale_factor == 2


def test_a_distributed_job_runs_spread_holds_its_gpus_on_each_server_and_moves_consolidated(harness):
    """Issue 13: a 4-GPU job on two servers (2+2), then, preempted, on one (1x4)."""
    h = harness
    job = h.submit(4, distributed=True)
    obs = submitted(h, job)
    s0, s1 = server_of(obs, "k80", 0).name, server_of(obs, "k80", 1).name
    a = Assignment((job,), "k80", ((s0, 2), (s1, 2)))
    h.execute(plan(0, start=[a]))
    obs = h.observe_until(is_running(job, "k80"), f"job {job} running on k80")
    assert running_on(obs, job) == [a] and state(obs, job).scale_factor == 4
    assert free(obs)[s0] == GPUS_PER_SERVER - 2 and free(obs)[s1] == GPUS_PER_SERVER - 2
    mark = len(h.history)
    h.observe_for(3.0)
    assert all(sorted(u.assignment.servers) == sorted(a.servers)
               for o in h.history[mark:] for u in o.usage if u.assignment.jobs == (job,))
    assert usage_since(h, mark, job, "k80") > 0
    assert h.starts(job) == 1                      # its trap is set
    h.execute(plan(1, preempt=[job]))
    h.observe_until(lambda o: used(o, job) == 0 and running_on(o, job) == [], f"job {job} stopped")
    b = on(h.history[-1], job, "v100", 4, index=1)
    h.execute(plan(2, start=[b]))
    obs = h.observe_until(is_running(job, "v100"), f"job {job} running again on v100")
    assert running_on(obs, job) == [b]
    assert free(obs)[b.servers[0][0]] == 0 and free(obs)[s0] == GPUS_PER_SERVER
    assert h.starts(job) == 2


def _on_servers(a: Assignment):
    """Really running as `a`: usage since the previous observation on exactly its servers."""
    def holds(obs):
        return running_on(obs, a.jobs[0]) == [a] and any(
            u.seconds > 0 and sorted(u.assignment.servers) == sorted(a.servers)
            for u in obs.usage if u.assignment.jobs == a.jobs)
    return holds


def test_a_two_node_job_is_reshaped_in_one_plan_onto_a_node_it_just_left(harness):
    """Issue 13: an 8-GPU job 2x4 on v100, then in one plan (preempt and start, as the
    mechanism plans a move) 2x4 on p100; a 4-GPU job 1x4 on a k80 node, then in one plan 2x2
    on that node and the other (Slurm: the start waits for the stop, and for slurmd to let
    go of the job's credential on the node it is restarted on)."""
    h = harness
    wide, four = h.submit(8, distributed=True), h.submit(4, distributed=True)
    obs = submitted(h, four)
    v = [server_of(obs, "v100", i).name for i in (0, 1)]
    p = [server_of(obs, "p100", i).name for i in (0, 1)]
    k = [server_of(obs, "k80", i).name for i in (0, 1)]
    a8 = Assignment((wide,), "v100", ((v[0], 4), (v[1], 4)))
    a4 = Assignment((four,), "k80", ((k[0], 4),))
    h.execute(plan(0, start=[a8, a4]))
    obs = h.observe_until(lambda o: _on_servers(a8)(o) and _on_servers(a4)(o), "both jobs running")
    assert free(obs)[v[0]] == free(obs)[v[1]] == free(obs)[k[0]] == 0
    assert state(obs, wide).scale_factor == 8 and h.starts(wide) == 1 and h.starts(four) == 1
    mark = len(h.history)
    b8 = Assignment((wide,), "p100", ((p[0], 4), (p[1], 4)))
    b4 = Assignment((four,), "k80", ((k[0], 2), (k[1], 2)))
    h.execute(plan(1, start=[b8, b4], preempt=[wide, four]))
    h.observe_until(lambda o: _on_servers(b8)(o) and _on_servers(b4)(o), "both jobs reshaped")
    obs = h.observe_until(lambda o: running_on(o, wide) == [b8] and used(o, wide, "v100") == 0
                          and used(o, four) > 0, "the old runs' usage credited")
    f = free(obs)
    assert (f[v[0]], f[v[1]], f[p[0]], f[p[1]]) == (4, 4, 0, 0)
    assert (f[k[0]], f[k[1]]) == (2, 2)
    for o in h.history[mark:]:
        assert {wide, four} <= set(ids(o)) and o.departures == ()
        for u in o.usage:       # never any other shape than the two planned for each
            if u.assignment.jobs == (four,) and u.seconds > 0:
                assert sorted(u.assignment.servers) in (sorted(a4.servers), sorted(b4.servers)), u
    assert usage_since(h, mark, wide, "v100") <= h.stop_seconds + h.tolerance
    assert h.starts(wide) == 2 and h.starts(four) == 2


def test_a_move_in_one_plan_stops_the_job_then_starts_it_on_the_new_type(harness):
    """What the mechanism plans for a move: the job in `preempt` and in `start` of one plan."""
    h = harness
    job = h.submit(1)
    obs = submitted(h, job)
    h.execute(plan(0, start=[on(obs, job, "v100", 1)]))
    h.observe_until(is_running(job, "v100"), f"job {job} running on v100")
    assert h.starts(job) == 1                      # its trap is set (see the case above)
    mark = len(h.history)
    b = on(h.history[-1], job, "p100", 1)
    h.execute(plan(1, start=[b], preempt=[job]))
    obs = h.observe_until(is_running(job, "p100"), f"job {job} running on p100")
    assert running_on(obs, job) == [b]
    for obs in h.history[mark:]:
        assert job in ids(obs) and obs.departures == ()
        assert all(a.worker_type == "p100" for a in running_on(obs, job))
    # on v100 only while it checkpointed and exited
    assert usage_since(h, mark, job, "v100") <= h.stop_seconds
    for obs in h.observe_for(2.0):
        assert used(obs, job, "v100") == 0 and used(obs, job, "p100") > 0
    assert h.starts(job) == 2


def test_a_finished_job_departs_once_as_completed(harness):
    h = harness
    job = h.submit(1, long=False)
    other = h.submit(1)                      # stays: the cluster is not empty after the departure
    obs = submitted(h, job)
    assert other in ids(obs)
    first = len(h.history)
    a = on(obs, job, "p100", 1)
    h.execute(plan(0, start=[a, on(obs, other, "k80", 1)]))
    h.observe_until(lambda o: job in [d.id for d in o.departures], f"job {job} departing",
                    timeout=SHORT_SECONDS + h.timeout)
    last = h.history[-1]
    (departure,) = [d for d in last.departures if d.id == job]
    assert departure.state == "completed"
    assert job not in ids(last) and running_on(last, job) == []
    assert other in ids(last) and running_on(last, other)
    start = h.start_time(job)
    assert start + SHORT_SECONDS - h.tolerance <= departure.time <= last.time + h.tolerance
    h.observe_for(2.0)
    seen = [d for obs in h.history[first:] for d in obs.departures]
    assert [d.id for d in seen] == [job]                 # once, and only the job that finished
    assert all(job not in ids(obs) and running_on(obs, job) == [] and used(obs, job) == 0
               for obs in h.history[-2:])
    # it held its GPUs from its start to its end: credited up to its end, not to the next observation
    ran = usage_since(h, first, job)
    assert ran == pytest.approx(departure.time - start, abs=h.tolerance)
    assert ran >= SHORT_SECONDS - h.tolerance
    assert h.starts(job) == 1


def test_keeping_a_running_job_changes_nothing(harness):
    h = harness
    job = h.submit(4)
    obs = submitted(h, job)
    a = on(obs, job, "k80", 4)
    h.execute(plan(0, start=[a]))
    obs = h.observe_until(is_running(job, "k80"), f"job {job} running on k80")
    t0, mark = obs.time, len(h.history)
    started = h.start_time(job)
    for r in (1, 2, 3):
        h.execute(plan(r, keep=[a]))
        for obs in h.observe_for(1.5):
            assert running_on(obs, job) == [a] and job in ids(obs)
    t1 = h.history[-1].time
    assert h.starts(job) == 1 and h.start_time(job) == started       # not restarted
    # no gap: it ran all along
    assert usage_since(h, mark, job, "k80") == pytest.approx(t1 - t0, abs=h.tolerance)
    assert usage_since(h, mark, job) == usage_since(h, mark, job, "k80")


def test_a_pair_runs_together_on_one_gpu_is_credited_as_a_pair_and_stops_together(pair_harness):
    """Issue 13, space sharing: a pair row starts both jobs on one GPU of one server, its
    usage is the pair's, and preempting one of them stops both."""
    h = pair_harness
    first, second = h.submit(1), h.submit(1)
    obs = h.observe_until(lambda o: {first, second} <= set(ids(o)), "both jobs observed")
    server = server_of(obs, "v100").name
    row = Assignment((first, second), "v100", ((server, 1),))
    h.execute(plan(0, start=[row]))
    obs = h.observe_until(lambda o: sum(u.seconds for u in o.usage if u.assignment == row) > 0,
                          "the pair running")
    assert running_on(obs, first) == [row] and running_on(obs, second) == [row]
    assert free(obs)[server] == GPUS_PER_SERVER - 1              # one GPU for both
    assert h.starts(first) == 1 and h.starts(second) == 1
    assert h.devices(first) == h.devices(second)                # the same GPU
    assert "none" not in h.devices(first)                       # (Slurm named one)
    mark = len(h.history)
    t0 = h.history[-1].time
    h.observe_for(4.0)
    t1 = h.history[-1].time
    # every second they ran is the pair's, none alone
    assert all(u.assignment == row for o in h.history[mark:] for u in o.usage)
    assert sum(u.seconds for o in h.history[mark:] for u in o.usage) == pytest.approx(
        t1 - t0, abs=h.tolerance)
    # preempting one job of the pair (its row not kept) stops both
    h.execute(plan(1, preempt=[first]))
    h.observe_until(lambda o: used(o, first) == 0 and used(o, second) == 0
                    and not running_on(o, first) and not running_on(o, second), "the pair stopped")
    for o in h.observe_for(2.0):
        assert {first, second} <= set(ids(o)) and o.departures == ()
        assert used(o, first) == 0 and used(o, second) == 0
    assert h.starts(first) == 1 and h.starts(second) == 1
    # one of them alone again: a whole GPU (on Slurm: all its shards again)
    alone = on(h.history[-1], second, "v100", 1)
    h.execute(plan(2, start=[alone]))
    obs = h.observe_until(is_running(second, "v100"), f"job {second} running alone")
    assert running_on(obs, second) == [alone] and running_on(obs, first) == []
    assert h.starts(second) == 2


# -- which pairs the policy is offered (issue 13 §2: the daemon and the simulator decide alike) --
PAIR_SIZES = (1, 1, 2, 2, 2, 2)     # two one-GPU jobs, four two-GPU jobs: more GPUs than 8


def _pair_table() -> ThroughputTable:
    # one step per second alone; 0.9 each while paired (a pair makes 1.8): sharing pays
    return ThroughputTable.from_gavel_dict(
        {wt: {f"('{MODEL}', {sf})": {"null": 1.0, f"('{MODEL}', {sf})": [0.9, 0.9]} for sf in (1, 2, 4, 8)}
         for wt in TYPES})


def _pair_engine(h: Harness):
    from slurm_gavel.core.engine import Engine
    from slurm_gavel.core.recompute import Immediate
    from slurm_gavel.core.store import MemoryStore
    from slurm_gavel.estimator.table import TableThroughputs
    from slurm_gavel.policies import make_policy
    return Engine(h.clock, h.backend, Immediate(make_policy("max_min_fairness_packed")),
                  TableThroughputs(_pair_table()), MemoryStore(), ROUND, space_sharing=True)


def _by_submission(engine, plan, jobs: list[str]) -> dict:
    """The engine's policy input, allocation and round plan with every job named by its
    submission index (the backends name jobs differently) and worker types by name."""
    index = {job: i for i, job in enumerate(jobs)}
    inp, alloc = engine.input, engine.allocation
    order = [index[j] for j in inp.job_ids]
    col = {wt: c for c, wt in enumerate(inp.worker_types)}

    def per_type(row) -> dict:
        return {wt: round(float(row[c]), 6) for wt, c in col.items()}

    def row(a: Assignment):
        return (tuple(sorted(index[j] for j in a.jobs)), a.worker_type, a.servers)

    return {
        "counts": per_type(inp.counts),
        "jobs": sorted((order[i], int(inp.scale_factors[i]), tuple(per_type(inp.throughputs[i]).items()))
                       for i in range(inp.n_jobs)),
        "pair_rows": sorted((tuple(sorted((order[a], order[b]))),
                             tuple(sorted((wt, tuple(inp.pair_throughputs[r, c])) for wt, c in col.items())))
                            for r, (a, b) in enumerate(inp.pair_jobs.tolist())),
        "x": sorted((index[alloc.job_ids[i]], tuple(per_type(alloc.x[i]).items()))
                    for i in range(len(alloc.job_ids))),
        "x_pairs": sorted((tuple(sorted((index[alloc.job_ids[a]], index[alloc.job_ids[b]]))),
                           tuple(per_type(alloc.x_pairs[r]).items()))
                          for r, (a, b) in enumerate(alloc.pair_jobs.tolist())),
        "start": sorted(map(row, plan.start)),
    }


def test_a_multi_gpu_pair_is_never_offered_to_the_policy_nor_started(pair_harness):
    """The pair rows the policy sees are the pairs the backend runs: on Slurm (and the
    simulator mimicking it) one-GPU jobs only, so the two-GPU jobs get no pair share and
    each runs alone on its GPUs; the one-GPU pair row is offered as before."""
    h = pair_harness
    jobs = [h.submit(g) for g in PAIR_SIZES]
    h.observe_until(lambda o: set(jobs) <= set(ids(o)), "all jobs observed")
    engine = _pair_engine(h)
    plan = engine.plan()
    seen = _by_submission(engine, plan, jobs)
    assert [rows for rows, _ in seen["pair_rows"]] == [(0, 1)]
    assert [rows for rows, _ in seen["x_pairs"]] in ([], [(0, 1)])
    multi = [a for a in plan.start if len(a.jobs) > 1 and a.gpus > 1]
    assert multi == [] and plan.start
    # what the backend runs: every started row as planned, no two-GPU job beside a partner
    obs = h.observe_until(lambda o: all(a in o.running for a in plan.start), "the plan running")
    assert all(len(a.jobs) == 1 or a.gpus == 1 for a in obs.running)


def test_both_backends_offer_the_same_pairs_and_decide_alike(slurm_shard_cluster, tmp_path):
    """Issue 13 §2: the same jobs on the Slurm shard cluster and on a simulated cluster of
    its shape (told the Slurm backend's `max_pair_gpus`) give the policy the same input and
    the round the same allocation and plan; without the limit (Gavel's simulator) the
    two-GPU jobs would be offered pair rows, and the policy gives one of them a share."""
    slurm = SlurmHarness(slurm_shard_cluster, tmp_path)
    # conftest.SHARD_TYPES: one node of 4 GPUs per type, the types in the Slurm backend's order
    # (the same input: the policy's LP may break ties by column order)
    shape = {wt: GPUS_PER_SERVER for wt in slurm.backend.worker_types}
    assert sorted(shape) == ["k80", "v100"]
    seen = {}
    try:
        for name, h in (("gavel", SimulatedHarness(shape)),
                        ("simulated", SimulatedHarness(shape, slurm_max_pair_gpus())),
                        ("slurm", slurm)):
            jobs = [h.submit(g) for g in PAIR_SIZES]
            h.observe_until(lambda o: set(jobs) <= set(ids(o)), "all jobs observed")
            engine = _pair_engine(h)
            seen[name] = _by_submission(engine, engine.plan(), jobs)
    finally:
        slurm.close()
    assert seen["slurm"] == seen["simulated"]
    assert [rows for rows, _ in seen["slurm"]["pair_rows"]] == [(0, 1)]
    # the limit is what makes them alike: unlimited, the four two-GPU jobs are offered their
    # six pairs too, and one of them gets a share, which Slurm could never run
    gavel_rows = [rows for rows, _ in seen["gavel"]["pair_rows"]]
    assert len(gavel_rows) == 7 and (2, 3) in gavel_rows
    assert any(rows != (0, 1) and any(v > 0 for _, v in x) for rows, x in seen["gavel"]["x_pairs"])

"""The engine driving policy, mechanism and the simulated backend, round after round."""
from __future__ import annotations

import math
from dataclasses import replace
import time

import numpy as np
import pytest

from slurm_gavel.core.clock import SimulatedClock, WallClock
from slurm_gavel.core.engine import INTERIM, Engine, compose
from slurm_gavel.core.errors import SolverError
from slurm_gavel.core.interfaces import Backend
from slurm_gavel.policies import make_policy
from slurm_gavel.core.recompute import Background, Delayed, Immediate
from slurm_gavel.sim.simulator import SimulatedCluster, simulate
from slurm_gavel.core.store import MemoryStore
from slurm_gavel.estimator.table import TableThroughputs
from slurm_gavel.sim.workloads import generate_trace

from tests.support.inputs import make_input
from tests.support.engine import job, run_engine, small_table


def test_every_job_finishes_with_its_steps_and_time_adds_up():
    jobs = generate_trace(small_table(), n_jobs=30, rate_per_hour=6, seed=3)
    engine, backend, store = run_engine(jobs, {"v100": 2, "p100": 2, "k80": 2}, rounds=5000)
    assert backend.finished
    for r in backend.results.values():
        assert r.steps_done == r.total_steps
        assert r.finish >= r.arrival
        # a job holds at most one GPU type at a time: its GPU time fits in its life
        assert sum(r.seconds.values()) <= r.jct + 1e-6
    # the ledger was fed from what ran: the GPU time it saw is the backend's
    used = sum(u.seconds * u.assignment.gpus for _, u in store.usages)
    assert used == pytest.approx(float(backend.busy_gpu_seconds.sum()))


def test_no_job_twice_and_no_type_oversubscribed_in_any_round():
    table = small_table(pairs=True)
    jobs = [job(m, 20000 + 1000 * i, sf, 360.0 * (i // 3))
            for i, (m, sf) in enumerate([("fast", 1), ("flat", 1), ("mid", 1), ("fast", 2), ("mid", 2),
                                         ("fast", 4), ("flat", 1), ("mid", 1), ("fast", 1)] * 2)]
    cluster = {"v100": 4, "p100": 4, "k80": 4}
    engine, backend, store = run_engine(jobs, cluster, rounds=300, table=table, space_sharing=True)
    assert store.rounds
    for _, plan in store.rounds:
        seen = [j for a in plan.assignments for j in a.jobs]
        assert len(seen) == len(set(seen))
        for wt, count in cluster.items():
            assert sum(a.gpus for a in plan.assignments if a.worker_type == wt) <= count
        per_server = {}
        for a in plan.assignments:
            for name, gpus in a.servers:
                per_server[name] = per_server.get(name, 0) + gpus
        assert all(v <= 4 for v in per_server.values())


def test_space_sharing_packs_pairs_the_policy_chose():
    # Four jobs on one V100: sharing it beats taking turns for both models (fast 6/10, flat
    # 2/3 of their solo speed against 1/2 each), so max-min's optimum is made of pairs.  (With
    # more types the Pareto stage may reach the same level with a sliver of pair time, which
    # the mechanism's leases rightly do not rotate in within a few rounds.)
    jobs = [job(m, 200000) for m in ["fast", "flat"] * 2]
    engine, backend, store = run_engine(jobs, {"v100": 1}, rounds=20,
                                        table=small_table(pairs=True), space_sharing=True)
    assert store.allocations[0][2].x_pairs.sum() > 0.5
    packed = [a for _, plan in store.rounds for a in plan.assignments if len(a.jobs) == 2]
    assert packed and all({backend.results[j].job_type for j in a.jobs} == {"fast", "flat"}
                          for a in packed)


def test_lease_renewal_means_a_lone_job_is_started_once():
    engine, backend, store = run_engine([job("fast", 10.0 * 3600 * 5)], {"v100": 1, "p100": 1, "k80": 1})
    r = backend.results["0"]
    assert r.starts == 1 and r.seconds["v100"] == pytest.approx(r.jct)
    assert r.jct == pytest.approx(5 * 3600)


def test_newcomers_get_an_agnostic_share_while_a_slow_solve_runs():
    jobs = [job("fast", 10 ** 6), job("flat", 10 ** 6, at=400.0), job("mid", 10 ** 6, at=400.0)]
    delay = 3 * 360.0
    allocator = Delayed(make_policy("max_min_fairness"), delay)
    engine, backend, store = run_engine(jobs, {"v100": 1, "p100": 1, "k80": 1}, rounds=12,
                                        allocator=allocator)
    # round 0: no solve has finished, the lone job runs on its isolated share
    first = store.allocations[0]
    assert first[2].policy == INTERIM
    # the newcomers (arrived at 400 s) ran in round 2, before the solve of
    # their arrival (submitted at 720 s) could land at 720 + 1080 s
    plan2 = store.rounds[2][1]
    assert {"1", "2"} <= plan2.running_jobs
    landed = [t for _, t, a, fresh in store.allocations if a.policy == "max_min_fairness"
              and set(a.job_ids) == {"0", "1", "2"} and not a.info.get("interim_rows")]
    assert landed and landed[0] >= 720.0 + delay
    assert allocator.solves >= 2


class Failing:
    name = summary = "failing"
    supports_space_sharing = False

    def allocate(self, inp):
        raise SolverError("solver said no")


def test_a_failing_solver_degrades_to_the_agnostic_share_and_jobs_still_finish():
    jobs = [job("fast", 36000), job("flat", 36000), job("mid", 36000, at=1000.0)]
    allocator = Immediate(Failing())
    engine, backend, store = run_engine(jobs, {"v100": 1, "p100": 1, "k80": 1}, rounds=500,
                                        allocator=allocator)
    assert backend.finished
    assert allocator.errors and "solver said no" in allocator.errors[0].error
    assert all(a.policy == INTERIM for _, _, a, _ in store.allocations)


def test_a_job_that_fits_no_type_waits_with_a_reason_and_others_finish():
    jobs = [job("fast", 3600), job("fast", 3600, sf=4), job("unknown-model", 3600)]
    engine, backend, store = run_engine(jobs, {"v100": 2, "p100": 2, "k80": 2}, rounds=50)
    assert math.isfinite(backend.results["0"].finish)
    assert "fits no worker type" in engine.unschedulable["1"]
    assert "no throughput known" in engine.unschedulable["2"]
    assert backend.results["1"].starts == 0 and backend.results["2"].starts == 0


def test_simulate_stops_when_only_unschedulable_jobs_are_left():
    sim = simulate([job("fast", 3600), job("fast", 3600, sf=4)], small_table(),
                   {"v100": 2, "p100": 2, "k80": 2}, make_policy("max_min_fairness"))
    assert not sim.complete and math.isfinite(sim.results["0"].finish)


def test_same_seed_same_result():
    table = small_table()
    runs = []
    for _ in range(2):
        jobs = generate_trace(table, n_jobs=40, rate_per_hour=8, seed=11)
        jobs = [replace(j, scale_factor=(1, 2, 4)[i % 3],
                        job_type=(j.job_type, "mid", "fast")[i % 3]) for i, j in enumerate(jobs)]
        sim = simulate(jobs, table, {"v100": 4, "p100": 4, "k80": 4}, make_policy("max_min_fairness"))
        assert sim.complete
        runs.append([(r.id, r.finish, tuple(r.seconds.values()), r.starts) for r in sim.results.values()])
    assert runs[0] == runs[1]


def test_compose_keeps_solved_rows_and_gives_newcomers_the_isolated_share():
    inp = make_input([[4, 2], [3, 3], [1, 2]], [1, 1], types=("a", "b"))
    old = make_policy("max_min_fairness").allocate(make_input([[4, 2], [3, 3]], [1, 1], types=("a", "b")))
    x = compose(old, inp)
    assert np.allclose(x.x[:2], old.x)
    assert np.allclose(x.x[2], inp.isolated_allocation()[2])
    assert x.info["interim_rows"] == ["2"]
    assert compose(None, inp).policy == INTERIM


def test_background_allocator_solves_off_the_loop_and_keeps_the_newest():
    policy = make_policy("max_min_fairness")
    allocator = Background(policy)
    try:
        inp1 = make_input([[4, 2], [3, 3]], [1, 1])
        inp2 = make_input([[4, 2], [3, 3], [1, 1]], [1, 1])
        allocator.submit(inp1, 0.0)
        allocator.submit(inp2, 0.0)
        assert allocator.wait(timeout=30)
        latest = allocator.latest(0.0)
        assert latest is not None and len(latest.job_ids) == 3
        assert not allocator.pending
    finally:
        allocator.close()


def test_engine_runs_on_the_wall_clock_with_a_background_solver():
    table = small_table()
    clock = WallClock()
    backend = SimulatedCluster([job("fast", 10 ** 6), job("flat", 10 ** 6)], table,
                               {"v100": 1, "p100": 1, "k80": 1}, clock)
    allocator = Background(make_policy("max_min_fairness"))
    try:
        engine = Engine(clock, backend, allocator, TableThroughputs(table), MemoryStore(), 0.05)
        started = time.monotonic()
        plans = [engine.step() for _ in range(6)]
        assert time.monotonic() - started >= 0.25          # it slept between rounds
        assert plans[-1].running_jobs == {"0", "1"}
    finally:
        allocator.close()


def test_round_length_must_be_positive():
    table = small_table()
    clock = SimulatedClock()
    backend = SimulatedCluster([], table, {"v100": 1}, clock)
    with pytest.raises(ValueError):
        Engine(clock, backend, Immediate(make_policy("fifo")), TableThroughputs(table), round_seconds=0)


class SlowPolicy:
    """A policy that takes `seconds` per solve (a big cluster's LP)."""

    def __init__(self, seconds: float):
        self.inner, self.seconds = make_policy("max_min_fairness"), seconds
        self.name = self.inner.name

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def allocate(self, inp):
        time.sleep(self.seconds)
        return self.inner.allocate(inp)


@pytest.mark.parametrize("patience, fresh", [(0.0, False), (5.0, True)])
def test_a_round_waits_for_its_solve_up_to_the_patience(patience, fresh):
    """With patience, the first round already uses the solved allocation; without,
    it goes on at once with the interim (agnostic) shares."""
    table = small_table()
    clock = WallClock()
    backend = SimulatedCluster([job("fast", 10 ** 6), job("flat", 10 ** 6)], table,
                               {"v100": 1, "p100": 1, "k80": 1}, clock)
    allocator = Background(SlowPolicy(0.3))
    try:
        engine = Engine(clock, backend, allocator, TableThroughputs(table), MemoryStore(), 60.0,
                        solve_patience=patience)
        engine.plan()
        assert (engine.allocation.policy != INTERIM) == fresh, engine.allocation.policy
    finally:
        allocator.close()


class FlakyStore(MemoryStore):
    """A MemoryStore whose writes fail while `failing` (a full disk, say)."""

    def __init__(self):
        super().__init__()
        self.failing = False
        self.failing_rounds = False      # only the round plan cannot be written

    def _check(self):
        if self.failing:
            raise OSError(28, "No space left on device")

    def observe(self, time, observation):
        self._check()

    def allocation(self, *args, **kw):
        self._check()
        super().allocation(*args, **kw)

    def round(self, time, plan):
        self._check()
        if self.failing_rounds:
            raise OSError(28, "No space left on device")
        super().round(time, plan)

    def usage(self, time, usage):
        self._check()
        super().usage(time, usage)

    def departure(self, departure):
        self._check()
        super().departure(departure)


class CountingBackend(Backend):
    """A simulated cluster that counts the plans it was given to carry out."""

    def __init__(self, inner):
        self.inner, self.executed = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    quiet_until = property(lambda self: self.inner.quiet_until)
    max_pair_gpus = property(lambda self: self.inner.max_pair_gpus)

    def observe(self):
        return self.inner.observe()

    def execute(self, plan, round_end):
        self.executed.append(plan.round)
        self.inner.execute(plan, round_end)


def test_a_round_the_store_cannot_record_is_not_carried_out_and_nothing_observed_is_lost():
    table = small_table()
    clock = SimulatedClock()
    jobs = [job("fast", 36000), job("mid", 36000), job("flat", 36000)]
    backend = CountingBackend(SimulatedCluster(jobs, table, {"v100": 1, "p100": 1, "k80": 1}, clock))
    store = FlakyStore()
    engine = Engine(clock, backend, Immediate(make_policy("max_min_fairness")), TableThroughputs(table),
                    store, 60.0)
    for _ in range(3):
        engine.step()
    assert backend.executed == [0, 1, 2]
    store.failing = True
    for _ in range(3):
        with pytest.raises(OSError):
            engine.plan()               # observes, cannot record: no round is carried out
        clock.sleep_until(clock.now() + 60)
    assert backend.executed == [0, 1, 2] and engine.round == 3
    store.failing, store.failing_rounds = False, True
    with pytest.raises(OSError):
        engine.plan()                   # the plan is made, cannot be recorded: not carried out
    assert backend.executed == [0, 1, 2] and engine.round == 3
    store.failing_rounds = False
    engine.step()                       # the queued writes first, then the round
    assert backend.executed == [0, 1, 2, 3]
    assert [p.round for _, p in store.rounds] == [0, 1, 2, 3]
    # every second the jobs ran was recorded, failure or not (3 GPUs, all busy)
    recorded = sum(u.seconds * u.assignment.gpus for _, u in store.usages)
    assert recorded == pytest.approx(float(backend.inner.busy_gpu_seconds.sum()))
    assert [r for r, *_ in store.allocations] == sorted(r for r, *_ in store.allocations)

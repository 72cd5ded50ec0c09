"""A restart is invisible: an engine resumed from the daemon's SQLite store plans exactly
the rounds the same engine would have planned had it not stopped.

The cluster (a SimulatedCluster: it goes on running while the "daemon" is
away, like Slurm) and the policy are the same in both runs; only the engine
is thrown away and a new one resumed from a real SQLite file.
"""
from __future__ import annotations

import json

import pytest

from slurm_gavel.core.clock import SimulatedClock
from slurm_gavel.core.engine import Engine
from slurm_gavel.core.errors import InputError
from slurm_gavel.core.recompute import Immediate
from slurm_gavel.core.state import VERSION, EngineState
from slurm_gavel.estimator.table import TableThroughputs
from slurm_gavel.policies import make_policy
from slurm_gavel.sim.simulator import SimulatedCluster
from slurm_gavel.sim.workloads import generate_trace
from slurm_gavel.daemon.store import SqliteStore, StoreError

from tests.support.engine import small_table


CLUSTER = {"v100": 2, "p100": 2, "k80": 2}
ROUND = 360.0


def _engine(clock, backend, table, store, policy="max_min_fairness"):
    return Engine(clock, backend, Immediate(make_policy(policy)), TableThroughputs(table), store,
                  ROUND, min_reset_seconds=1920.0)


def _plan_key(plan):
    return (plan.round, tuple(sorted((a.jobs, a.worker_type, a.servers) for a in plan.keep)),
            tuple(sorted((a.jobs, a.worker_type, a.servers) for a in plan.start)),
            tuple(sorted(plan.preempt)))


def _run(tmp_path, restart_at: int | None, rounds: int, seed: int = 5, policy="max_min_fairness"):
    table = small_table()
    jobs = generate_trace(table, n_jobs=24, rate_per_hour=8, seed=seed)
    clock = SimulatedClock()
    backend = SimulatedCluster(jobs, table, CLUSTER, clock, gpus_per_node=2)
    path = tmp_path / f"gavel-{restart_at}.db"
    store = SqliteStore(path, clock=clock.now)
    engine = _engine(clock, backend, table, store, policy)
    plans = []
    for r in range(rounds):
        if r == restart_at:
            engine.record_pending()  # a stopping daemon writes what it has queued
            store.close()            # the daemon stops; Slurm (the cluster) goes on
            store = SqliteStore(path, clock=clock.now)
            engine = _engine(clock, backend, table, store, policy)
            engine.resume(store.load_engine_state())
        plans.append(engine.step())
    store.close()
    return plans


@pytest.mark.parametrize("policy", ["max_min_fairness", "fifo", "finish_time_fairness"])
@pytest.mark.parametrize("restart_at", [7, 15, 30])
def test_a_resumed_engine_plans_the_rounds_the_same_engine_would_have(tmp_path, restart_at, policy):
    straight = _run(tmp_path, None, 45, policy=policy)
    restarted = _run(tmp_path, restart_at, 45, policy=policy)
    assert [_plan_key(p) for p in restarted] == [_plan_key(p) for p in straight]
    # rounds go on numbering across the restart
    assert [p.round for p in restarted] == list(range(45))
    # and something was at stake: jobs ran and were moved around that point
    assert any(p.preempt or p.start for p in straight[restart_at:restart_at + 10])


def test_a_fresh_engine_without_the_state_would_have_moved_jobs(tmp_path):
    """The test above can fail: without `resume` the first round after a restart differs."""
    table = small_table()
    jobs = generate_trace(table, n_jobs=24, rate_per_hour=8, seed=5)
    straight = _run(tmp_path, None, 45)
    clock = SimulatedClock()
    backend = SimulatedCluster(jobs, table, CLUSTER, clock, gpus_per_node=2)
    engine = _engine(clock, backend, table, SqliteStore(tmp_path / "x.db", clock=clock.now))
    for _ in range(15):
        engine.step()
    engine = _engine(clock, backend, table, SqliteStore(tmp_path / "y.db", clock=clock.now))
    engine.round = 15
    differ = [engine.step() for _ in range(10)]
    assert [_plan_key(p) for p in differ] != [_plan_key(p) for p in straight[15:25]]


def test_state_round_trips_through_json(tmp_path):
    table = small_table()
    jobs = generate_trace(table, n_jobs=12, rate_per_hour=8, seed=2)
    clock = SimulatedClock()
    backend = SimulatedCluster(jobs, table, CLUSTER, clock, gpus_per_node=2)
    store = SqliteStore(tmp_path / "s.db", clock=clock.now)
    engine = _engine(clock, backend, table, store)
    for _ in range(6):
        engine.step()
    state = engine.snapshot()
    engine.record_pending()
    back = EngineState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert back.round == 6 and back.job_ids == state.job_ids and back.servers == state.servers
    assert back.since_reset == state.since_reset and back.total == state.total
    assert (back.allocation.x == state.allocation.x).all()
    assert back.allocation.job_ids == state.allocation.job_ids
    assert store.load_engine_state().to_dict() == state.to_dict()


@pytest.mark.parametrize("damage", ['{"version": 99}', '{"version": 1, "round": "x"}', "not json"])
def test_an_unreadable_saved_state_is_a_clear_error(tmp_path, damage):
    store = SqliteStore(tmp_path / "d.db")
    store.db.execute("insert into engine_state (id, time, state) values (1, 0, ?)", [damage])
    with pytest.raises(StoreError, match="delete from engine_state"):
        store.load_engine_state()
    with pytest.raises(InputError):
        if damage.startswith("{"):
            EngineState.from_dict(json.loads(damage))
        else:
            raise InputError("engine state", "not json")


def _ftf_engine_after(tmp_path, rounds: int):
    table = small_table()
    jobs = generate_trace(table, n_jobs=12, rate_per_hour=8, seed=2)
    clock = SimulatedClock()
    backend = SimulatedCluster(jobs, table, CLUSTER, clock, gpus_per_node=2)
    store = SqliteStore(tmp_path / "f.db", clock=clock.now)
    engine = _engine(clock, backend, table, store, "finish_time_fairness")
    for _ in range(rounds):
        engine.step()
    return clock, backend, table, store, engine


def test_finish_time_fairness_memory_goes_with_the_state(tmp_path):
    """Each job's isolated-equivalent time (FTF's e_m) is saved and taken back by a new policy."""
    clock, backend, table, store, engine = _ftf_engine_after(tmp_path, 12)
    state = engine.snapshot()
    kept = state.policy_memory["isolated_seconds"]
    assert any(v > 0 for v in kept.values()), "jobs made progress: e_m > 0"
    back = EngineState.from_dict(json.loads(json.dumps(state.to_dict())))
    fresh = _engine(clock, backend, table, store, "finish_time_fairness")
    fresh.resume(back)
    assert fresh.snapshot().policy_memory == state.policy_memory


@pytest.mark.parametrize("memory", [{"policy": "finish_time_fairness", "isolated_seconds": {"1": "x"},
                                     "last": {}},
                                    {"policy": "finish_time_fairness", "isolated_seconds": {"1": -5.0},
                                     "last": {}},
                                    {"policy": "finish_time_fairness"}])
def test_a_damaged_policy_memory_is_said_and_the_policy_starts_afresh(tmp_path, caplog, memory):
    clock, backend, table, store, engine = _ftf_engine_after(tmp_path, 3)
    state = engine.snapshot()
    damaged = EngineState.from_dict({**state.to_dict(), "policy_memory": memory})
    fresh = _engine(clock, backend, table, store, "finish_time_fairness")
    with caplog.at_level("WARNING"):
        fresh.resume(damaged)
    assert "not resuming the policy's memory" in caplog.text
    assert fresh.round == state.round            # the rest of the state is resumed
    fresh.step()


def test_a_policy_memory_that_is_not_an_object_is_an_unreadable_state():
    with pytest.raises(InputError, match="policy_memory"):
        EngineState.from_dict({**_minimal_state(), "policy_memory": [1, 2]})


def _minimal_state() -> dict:
    return {"version": VERSION,
            "round": 0, "worker_types": ["a"], "last_reset": 0.0, "last_submit": 0.0, "job_ids": [],
            "servers": [], "since_reset": [], "total": {}, "allocation": None}


def test_the_daemons_wrapped_policy_keeps_its_memory_too():
    """The daemon's allocator: a Background thread around a timed, agnostic, pair-less policy."""
    from prometheus_client import CollectorRegistry, Histogram

    from slurm_gavel.core.recompute import Background, policy_with
    from slurm_gavel.daemon.metrics import TimedPolicy

    histogram = Histogram("solve_seconds", "test", registry=CollectorRegistry())
    for agnostic in (False, True):
        allocator = Background(TimedPolicy(make_policy("ftf", agnostic=agnostic), histogram))
        try:
            holder = policy_with(allocator, "memory")
            assert holder is not None and holder.name == "finish_time_fairness"
            assert policy_with(allocator, "remember") is holder
        finally:
            allocator.close()
    assert policy_with(Immediate(make_policy("max_min_fairness")), "memory") is None

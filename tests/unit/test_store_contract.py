"""One contract for every store the engine writes to (core/interfaces.py Store), run on each.

The stores: `MemoryStore` (the simulator's; also with `keep_rounds=False`,
which drops rounds and usage records) and `SqliteStore` (the daemon's, on a
real file under the test's temporary directory).  The engine never reads a
store back, so a harness reads what each one kept through the store's own
queries and compares it with the ground truth of the run: the simulated
cluster's per-job results and the engine's own state.  What a store declares
(`keeps_usage`, `keeps_state`) decides which of its records are checked, and
is itself checked against what each implementation is known to do.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from slurm_gavel.core.clock import SimulatedClock
from slurm_gavel.core.engine import Engine
from slurm_gavel.core.interfaces import Backend, MeasurementStore, Store
from slurm_gavel.core.model import Allocation
from slurm_gavel.core.recompute import Immediate
from slurm_gavel.core.store import MemoryStore
from slurm_gavel.estimator.table import TableThroughputs, ThroughputTable
from slurm_gavel.policies import make_policy
from slurm_gavel.sim.simulator import SimulatedCluster
from slurm_gavel.sim.workloads import TraceJob
from slurm_gavel.daemon.store import SqliteStore

TABLE = ThroughputTable.from_gavel_json(Path(__file__).resolve().parents[2] / "examples" / "toy_throughputs.json")
CLUSTER = {"v100": 2, "p100": 1, "k80": 1}
ROUND = 360.0
MODELS = ("convnet", "rl-agent", "translation", "language-model", "convnet", "rl-agent", "translation")


def trace() -> list[TraceJob]:
    """Seven one-GPU jobs of models that pair up, arriving over the first hour."""
    return [TraceJob(model, "", "", "", False, 20000.0 * (1 + i % 3), 1, arrival_time=600.0 * i)
            for i, model in enumerate(MODELS)]


# -- harnesses ---------------------------------------------------------------------
class Harness:
    """How to make a store and read back what it kept (None: it does not keep that)."""

    kind: str
    keeps_usage: bool
    keeps_state: bool

    def make(self, tmp_path: Path) -> Store:
        raise NotImplementedError

    def departed(self, store) -> dict[str, tuple[str, float]]:
        """job -> (its final state, when it left)."""
        raise NotImplementedError

    def seconds(self, store) -> dict[str, dict[str, float]] | None:
        """job -> worker type -> seconds it held GPUs there."""
        raise NotImplementedError

    def shares(self, store) -> dict[str, dict[str, float]]:
        """job -> worker type -> its share (pairs included) in the last allocation recorded."""
        raise NotImplementedError

    def rounds(self, store) -> int | None:
        """How many rounds were recorded."""
        raise NotImplementedError

    def state(self, store) -> dict | None:
        """The engine's working state as last kept."""
        raise NotImplementedError


def shares_of(allocation: Allocation) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for job, row in zip(allocation.job_ids, allocation.x):
        out[job] = {wt: float(v) for wt, v in zip(allocation.worker_types, row) if v > 0}
    for (a, b), row in zip(allocation.pair_jobs.tolist(), allocation.x_pairs):
        for job in (allocation.job_ids[a], allocation.job_ids[b]):
            for wt, v in zip(allocation.worker_types, row):
                if v > 0:
                    out[job][wt] = out[job].get(wt, 0.0) + float(v)
    return {job: s for job, s in out.items() if s}


class MemoryHarness(Harness):
    kind, keeps_usage, keeps_state = "memory", True, False
    keep_rounds = True

    def make(self, tmp_path):
        return MemoryStore(keep_rounds=self.keep_rounds)

    def departed(self, store):
        return {d.id: (d.state, d.time) for d in store.departures}

    def seconds(self, store):
        if not self.keep_rounds:
            return None
        out: dict[str, dict[str, float]] = {}
        for _, u in store.usages:
            for job in u.assignment.jobs:
                out.setdefault(job, {})
                out[job][u.assignment.worker_type] = out[job].get(u.assignment.worker_type, 0.0) + u.seconds
        return out

    def shares(self, store):
        return shares_of(store.allocations[-1][2])

    def rounds(self, store):
        return len({plan.round for _, plan in store.rounds}) if self.keep_rounds else None

    def state(self, store):
        return None


class LeanMemoryHarness(MemoryHarness):
    kind, keeps_usage, keeps_state = "memory-lean", False, False
    keep_rounds = False


class SqliteHarness(Harness):
    kind, keeps_usage, keeps_state = "sqlite", True, True

    def make(self, tmp_path):
        return SqliteStore(tmp_path / "gavel.db")

    def departed(self, store):
        return {r["id"]: (r["state"], r["finished"])
                for r in store.jobs(states=("completed", "failed", "cancelled", "lost"))}

    def seconds(self, store):
        return store.job_time()

    def shares(self, store):
        return store.latest_allocation()[1]

    def rounds(self, store):
        return store.next_round()

    def state(self, store):
        kept = store.load_engine_state()
        return None if kept is None else kept.to_dict()


def test_every_store_declares_the_interfaces():
    assert issubclass(SqliteStore, Store)
    assert issubclass(SqliteStore, MeasurementStore)


@pytest.fixture(params=[MemoryHarness, LeanMemoryHarness, SqliteHarness], ids=lambda h: h.kind)
def harness(request):
    return request.param()


class Watched(Backend):
    """The simulated cluster, adding up the usage it reports: the time each job held GPUs of
    each type (a pair's time counts for both of its jobs), as the store is handed it."""

    def __init__(self, inner: SimulatedCluster):
        self.inner, self.worker_types = inner, inner.worker_types
        self.seconds: dict[str, dict[str, float]] = {}

    quiet_until = property(lambda self: self.inner.quiet_until)
    max_pair_gpus = property(lambda self: self.inner.max_pair_gpus)

    def observe(self):
        obs = self.inner.observe()
        for u in obs.usage:
            for job in u.assignment.jobs:
                per_type = self.seconds.setdefault(job, {})
                per_type[u.assignment.worker_type] = per_type.get(u.assignment.worker_type, 0.0) + u.seconds
        return obs

    def execute(self, plan, round_end):
        self.inner.execute(plan, round_end)


def run(store: Store, rounds: int | None = None) -> tuple[Watched, Engine, list[tuple]]:
    """The trace with space sharing (pair rows in the allocations), to its end or for `rounds`
    rounds; each round's plan."""
    clock = SimulatedClock()
    backend = Watched(SimulatedCluster(trace(), TABLE, CLUSTER, clock, gpus_per_node=2, restart_seconds=18.0))
    engine = Engine(clock, backend, Immediate(make_policy("max_min_fairness", space_sharing=True)),
                    TableThroughputs(TABLE), store, ROUND, space_sharing=True, min_reset_seconds=0.0)
    plans = []
    for _ in range(rounds or 400):
        if backend.inner.finished:
            break
        plan = engine.step()
        plans.append((plan.round, plan.assignments, plan.preempt))
    engine.settle()
    assert backend.inner.finished or rounds is not None
    return backend, engine, plans


# -- cases -------------------------------------------------------------------------
def test_it_is_a_store_and_says_what_it_keeps(harness, tmp_path):
    store = harness.make(tmp_path)
    assert isinstance(store, Store)
    assert store.keeps_usage is harness.keeps_usage
    assert store.keeps_state is harness.keeps_state


def test_every_departure_is_kept_with_its_state_and_time(harness, tmp_path):
    store = harness.make(tmp_path)
    backend, _, _ = run(store)
    assert harness.departed(store) == {job: ("completed", pytest.approx(r.finish))
                                       for job, r in backend.inner.results.items()}


def test_the_time_kept_per_job_and_type_is_the_time_that_ran(harness, tmp_path):
    store = harness.make(tmp_path)
    backend, _, plans = run(store)
    kept = harness.seconds(store)
    if not store.keeps_usage:
        assert kept is None
        return
    assert set(kept) == set(backend.seconds) == set(backend.inner.results)
    for job, per_type in backend.seconds.items():
        assert kept[job] == pytest.approx(per_type, abs=1e-6)
    # a job that never shared its GPUs held them exactly as long as the simulated job ran
    paired = {job for _, assignments, _ in plans for a in assignments if len(a.jobs) == 2 for job in a.jobs}
    alone = set(kept) - paired
    assert alone and paired
    for job in alone:
        ran = {wt: s for wt, s in backend.inner.results[job].seconds.items() if s > 0}
        assert kept[job] == pytest.approx(ran, abs=1e-6)


def test_the_last_allocation_kept_is_the_one_in_force_pairs_included(harness, tmp_path):
    store = harness.make(tmp_path)
    _, engine, _ = run(store, rounds=10)    # stopped while jobs are active, some of them paired
    assert engine.allocation.x_pairs.sum() > 0
    engine_shares = shares_of(engine.allocation)
    kept = harness.shares(store)
    assert set(kept) == set(engine_shares)
    for job, per_type in engine_shares.items():
        assert kept[job] == pytest.approx(per_type)


def test_rounds_and_state_are_kept_when_the_store_says_so(harness, tmp_path):
    store = harness.make(tmp_path)
    _, engine, plans = run(store)
    rounds = harness.rounds(store)
    assert rounds is None or rounds == len(plans) == engine.round
    state = harness.state(store)
    if store.keeps_state:
        # what a restarted daemon resumes from: the engine's own state after its last write
        assert state == json.loads(json.dumps(engine.snapshot().to_dict()))
    else:
        assert state is None


def test_the_store_does_not_change_what_the_engine_decides(harness, tmp_path):
    _, _, reference = run(MemoryStore())
    _, _, plans = run(harness.make(tmp_path))
    assert plans == reference
    assert len(plans) > 10 and any(preempt for _, _, preempt in plans)
    assert any(len(a.jobs) == 2 for _, assignments, _ in plans for a in assignments)


def test_the_slurm_backend_declares_the_interface():
    from slurm_gavel.slurm.backend import SlurmBackend
    assert issubclass(SlurmBackend, Backend)
    # the pair limit is the backend's own property, not the interface's default of None
    assert isinstance(SlurmBackend.__dict__.get("max_pair_gpus")
                      or next(c.__dict__["max_pair_gpus"] for c in SlurmBackend.__mro__
                              if "max_pair_gpus" in c.__dict__), property)

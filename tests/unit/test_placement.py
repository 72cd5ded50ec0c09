"""Per-job placement rules (issue 11): allowed worker types and servers, one server, held jobs.

The backend says where a job can run (`JobState.placement`) or that it must
not be planned now (`JobState.hold_reason`); the policy sees the other types
as infeasible, the mechanism never places the job elsewhere, and the GPUs a
job cannot use go to the others in the same round.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from slurm_gavel.core.clock import SimulatedClock
from slurm_gavel.core.engine import Engine
from slurm_gavel.core.interfaces import Backend
from slurm_gavel.core.ledger import Ledger
from slurm_gavel.core.mechanism import plan_round
from slurm_gavel.core.model import Allocation
from slurm_gavel.core.plan import Placement, Server
from slurm_gavel.core.recompute import Immediate
from slurm_gavel.core.store import MemoryStore
from slurm_gavel.estimator.table import TableThroughputs
from slurm_gavel.policies import make_policy
from slurm_gavel.sim.simulator import SimulatedCluster

from tests.support.engine import job, small_table

TYPES = ("v100", "p100", "k80")


def test_a_disallowed_type_is_never_picked_and_its_gpus_go_to_others():
    # "a" has all the priority on v100, but may only run on k80 (none is free)
    x = np.array([[1.0, 0.0, 0.0], [0.5, 0.0, 0.0]])
    alloc = Allocation(("a", "b"), TYPES, x, "x")
    servers = (Server("v100-0", "v100", 1),)
    free_for_all = plan_round(0, alloc, Ledger(TYPES), servers, {"a": 1, "b": 1})
    assert free_for_all.running_jobs == {"a"}                  # without the rule: "a" first
    rules = {"a": Placement(worker_types=frozenset({"k80"}))}
    plan = plan_round(0, alloc, Ledger(TYPES), servers, {"a": 1, "b": 1}, (), rules)
    assert plan.running_jobs == {"b"}


def test_a_job_restricted_to_some_servers_goes_there_and_others_fill_the_rest():
    x = np.array([[0.5], [0.5], [0.5]])
    alloc = Allocation(("big-mem", "any", "other"), ("v100",), x, "x")
    servers = (Server("v100-0", "v100", 2), Server("v100-1", "v100", 2))
    rules = {"big-mem": Placement(servers=frozenset({"v100-1"}))}
    plan = plan_round(0, alloc, Ledger(("v100",)), servers, {"big-mem": 2, "any": 1, "other": 1}, (), rules)
    where = {a.jobs[0]: a.servers for a in plan.assignments}
    assert where["big-mem"] == (("v100-1", 2),)
    assert where["any"] == (("v100-0", 1),) and where["other"] == (("v100-0", 1),)


def test_a_pick_its_servers_cannot_hold_is_dropped_and_the_gpus_go_to_the_next_rows():
    # "wide" (4 GPUs, one server only) has the highest priority, but no server has 4 free
    x = np.array([[1.0], [0.3], [0.3], [0.3], [0.3]])
    alloc = Allocation(("wide", "a", "b", "c", "d"), ("v100",), x, "x")
    servers = (Server("v100-0", "v100", 2), Server("v100-1", "v100", 2))
    sizes = {"wide": 4, "a": 1, "b": 1, "c": 1, "d": 1}
    spread = plan_round(0, alloc, Ledger(("v100",)), servers, sizes)
    assert spread.running_jobs == {"wide"} and len(spread.assignments[0].servers) == 2
    rules = {"wide": Placement(one_server=True)}
    plan = plan_round(0, alloc, Ledger(("v100",)), servers, sizes, (), rules)
    assert plan.running_jobs == {"a", "b", "c", "d"}
    # a job whose only servers are taken: the others run, nothing raises
    only = {"wide": Placement(servers=frozenset({"nowhere"}))}
    assert plan_round(0, alloc, Ledger(("v100",)), servers, sizes, (), only).running_jobs == {"a", "b", "c", "d"}


class Ruled(Backend):
    """The simulated cluster, with the placement rules and holds a Slurm backend would report."""

    def __init__(self, inner: SimulatedCluster, rules: dict[str, dict]):
        self.inner, self.rules = inner, rules
        self.worker_types = inner.worker_types
        self.plans = []

    def observe(self):
        obs = self.inner.observe()
        jobs = tuple(replace(j, **self.rules.get(j.id, {})) for j in obs.jobs)
        return replace(obs, jobs=jobs)

    def execute(self, plan, round_end):
        self.plans.append(plan)
        self.inner.execute(plan, round_end)


def run_ruled(jobs, rules, cluster, rounds=30):
    table = small_table()
    clock = SimulatedClock()
    backend = Ruled(SimulatedCluster(jobs, table, cluster, clock, gpus_per_node=4), rules)
    engine = Engine(clock, backend, Immediate(make_policy("max_min_fairness")), TableThroughputs(table),
                    MemoryStore(), 360.0)
    for _ in range(rounds):
        if backend.inner.finished:
            break
        engine.step()
    return engine, backend


def test_the_engine_gives_the_policy_only_allowed_types_and_never_plans_a_held_job():
    jobs = [job("fast", 36000), job("fast", 36000), job("fast", 36000), job("flat", 36000)]
    rules = {"0": {"placement": Placement(worker_types=frozenset({"k80"}))},
             "3": {"hold_reason": "needs 2 nodes: distributed jobs not supported yet"}}
    engine, backend = run_ruled(jobs, rules, {"v100": 1, "p100": 1, "k80": 1}, rounds=8)
    alloc = engine.allocation
    row = alloc.job_ids.index("0")
    assert alloc.x[row, TYPES.index("k80")] > 0
    assert alloc.x[row, TYPES.index("v100")] == 0 and alloc.x[row, TYPES.index("p100")] == 0
    assert "3" not in alloc.job_ids
    for plan in backend.plans:
        for a in plan.assignments:
            assert "3" not in a.jobs
            if a.jobs == ("0",):
                assert a.worker_type == "k80"
        assert len(plan.assignments) == 3          # every GPU busy: the held job's share went to others
    assert engine.explain()["3"]["reason"] == "needs 2 nodes: distributed jobs not supported yet"


def test_a_hold_that_ends_is_a_reset_event_and_the_job_is_planned_again():
    jobs = [job("fast", 36000), job("fast", 36000)]
    rules = {"1": {"hold_reason": "held again, retry in 1 round"}}
    engine, backend = run_ruled(jobs, rules, {"v100": 2}, rounds=2)
    assert all("1" not in p.running_jobs for p in backend.plans)
    resets = engine.resets
    rules.clear()
    engine.step()
    assert engine.resets == resets + 1
    assert backend.plans[-1].running_jobs == {"0", "1"}


def test_a_job_no_allowed_type_can_hold_says_so():
    jobs = [job("fast", 3600), job("fast", 3600)]
    rules = {"1": {"placement": Placement(worker_types=frozenset())}}
    engine, backend = run_ruled(jobs, rules, {"v100": 2}, rounds=2)
    assert "no worker type" in engine.unschedulable["1"]
    assert all("1" not in p.running_jobs for p in backend.plans)

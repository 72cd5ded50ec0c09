"""The priority people are shown is the one the mechanism picks by: a waiting job whose
shown priority is above the lowest running job's on its type either starts in the next
round or that job stops (explain never states a comparison the mechanism does not act
on); and gqueue/explain say which level a share came from."""
from __future__ import annotations

import math

import numpy as np

from slurm_gavel.cli.explain import text
from slurm_gavel.core.backend import JobState, Observation, Server
from slurm_gavel.core.clock import SimulatedClock
from slurm_gavel.core.engine import Engine
from slurm_gavel.core.model import Allocation
from slurm_gavel.core.recompute import Immediate
from slurm_gavel.core.store import MemoryStore
from slurm_gavel.daemon.store import SqliteStore
from slurm_gavel.daemon.views import explain, rows
from slurm_gavel.estimator.table import TableThroughputs
from slurm_gavel.policies import make_policy
from slurm_gavel.sim.simulator import SimulatedCluster

from tests.support.engine import job, small_table
from tests.support.users import Users, owners


def test_no_waiting_job_is_shown_above_a_job_the_mechanism_keeps_running():
    """Per-job LAS, the daemon's churn (2-round lease, 5-round move hysteresis, 18 s
    restarts), 20 s rounds: a 30-task array beside two users' 3 jobs on 8 one-GPU slots.
    After each round's plan the priorities shown are the next round's: a waiting job shown
    above a running one would be picked before it, so right after a plan none is (before,
    the priorities shown left out the lease and the time owed: a waiting job showed a
    priority above a running job's for rounds on end while the running job kept its GPUs)."""
    users = owners(n_array=30)
    table = small_table()
    clock = SimulatedClock()
    backend = Users(SimulatedCluster([job("fast", 10 ** 7) for _ in users], table, {"v100": 8}, clock),
                    users)
    engine = Engine(clock, backend, Immediate(make_policy("max_min_fairness")), TableThroughputs(table),
                    MemoryStore(), 20.0, restart_seconds=18.0)
    claims, swaps = [], 0
    for r in range(60):
        plan = engine.step()
        swaps += len(plan.preempt)
        ex = engine.explain()
        low = min(e["priority"] for e in ex.values() if e["worker_type"])
        claims += [(r, j, e["priority"], low) for j, e in ex.items()
                   if not e["worker_type"] and e["priority"] is not None and e["priority"] > low]
    assert swaps > 0            # jobs do take each other's GPUs: the priorities move
    assert claims == [], claims[:5]


def test_a_running_job_in_its_lease_shows_an_infinite_priority():
    table = small_table()
    clock = SimulatedClock()
    backend = SimulatedCluster([job("fast", 10 ** 7) for _ in range(3)], table, {"v100": 1}, clock)
    engine = Engine(clock, backend, Immediate(make_policy("max_min_fairness")), TableThroughputs(table),
                    MemoryStore(), 60.0, restart_seconds=18.0)
    engine.step()
    ex = engine.explain()
    running = [e for e in ex.values() if e["worker_type"]]
    waiting = [e for e in ex.values() if not e["worker_type"]]
    assert len(running) == 1 and math.isinf(running[0]["priority"])     # its 2-round lease
    assert all(0 < e["priority"] < math.inf for e in waiting)


def _store(tmp_path, policy, entity_of):
    """Six jobs on 5 GPUs: alice's 4 (1, 2, 3, 4), bob's 5, carol's 6; job 5 waits."""
    store = SqliteStore(tmp_path / "gavel.db")
    owner = {"1": "alice", "2": "alice", "3": "alice", "4": "alice", "5": "bob", "6": "carol"}
    jobs = tuple(JobState(j, "convnet", 1, 0.0, name=f"j{j}", user=u, account="lab", entity=entity_of(u))
                 for j, u in owner.items())
    servers = (Server("n1", "v100", 3), Server("n2", "v100", 2))
    store.observe(10.0, Observation(10.0, jobs, servers))
    x = np.array([[5 / 12], [5 / 12], [5 / 12], [5 / 12], [5 / 6], [5 / 6]])
    store.allocation(0, 10.0, Allocation(tuple(owner), ("v100",), x, policy=policy), True)
    status = {j: {"worker_type": "v100", "priority": p, "reason": "", "state": "R", "gpus": 1}
              for j, p in (("1", 0.2), ("2", math.inf), ("3", 0.4), ("4", 0.3), ("6", 0.5))}
    status["5"] = {"worker_type": None, "priority": 0.25, "reason": "waiting", "state": "PD", "gpus": 0}
    store.status(1, 10.0, status)
    return store


def test_explain_says_a_users_share_split_over_their_jobs(tmp_path):
    store = _store(tmp_path, "hierarchical", lambda u: u)
    e = explain(store, "1")
    assert e["share_level"] == "user"
    assert e["share_from"] == ("user alice's share 1/3 (1.67 of 5 GPUs, 3 users sharing first), "
                               "split over 4 jobs")
    assert "  share: user alice's share 1/3" in text(e)
    data, _ = rows(store)
    assert {r["jobid"]: r["level"] for r in data}["5"] == "user:bob=1/6,1job"


def test_explain_says_a_per_job_share_is_the_jobs_own(tmp_path):
    store = _store(tmp_path, "max_min_fairness", lambda u: "lab")
    e = explain(store, "5")
    assert e["share_level"] == "job"
    assert e["share_from"] == ("its own share 1/6 (policy max_min_fairness: every job its own "
                               "share, whatever its user)")


def test_explain_compares_with_the_running_job_it_would_displace(tmp_path):
    store = _store(tmp_path, "hierarchical", lambda u: u)
    e = explain(store, "5")          # 0.25 is above job 1's 0.2, the lowest running
    assert e["needs"].startswith("v100: nothing more; its priority 0.25 is above 0.2 (the lowest "
                                 "of the jobs running there)")


def test_gqueue_level_column(tmp_path, capsys):
    from slurm_gavel.cli.queue import main as gqueue
    _store(tmp_path, "hierarchical", lambda u: u).close()
    assert gqueue(["--db", str(tmp_path / "gavel.db"), "-o", "jobid,user,level"]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert lines[0] == ["JOBID", "USER", "LEVEL"]
    assert ["1", "alice", "user:alice=1/3,4jobs"] in lines and ["6", "carol", "user:carol=1/6,1job"] in lines

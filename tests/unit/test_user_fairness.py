"""Fairness between users whatever the number of jobs each submits (core/entities.py, the
daemon's default policy): one user with 300 jobs beside two users with 3 jobs each gets a
third of the GPUs, in the LP and in the rounds a simulation runs; per-job LAS stays a
choice and is what the simulator does by default."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from slurm_gavel.core.backend import JobState
from slurm_gavel.core.clock import SimulatedClock
from slurm_gavel.core.engine import Engine, build_policy_input
from slurm_gavel.core.entities import entity_weights
from slurm_gavel.core.recompute import Immediate
from slurm_gavel.core.store import MemoryStore
from slurm_gavel.daemon import config as config_mod
from slurm_gavel.estimator.table import TableThroughputs
from slurm_gavel.policies import make_policy
from slurm_gavel.sim.simulator import SimulatedCluster

from tests.support.engine import job, small_table
from tests.support.users import Users, owners

GPUS = 6                    # a third each: 2 GPUs


def per_user(allocation, users, counts=None):
    out: dict[str, float] = {}
    for i, j in enumerate(allocation.job_ids):
        out[users[int(j)]] = out.get(users[int(j)], 0.0) + float(allocation.x[i].sum())
    return out


def engine_for(users, share_by, policy, gpus=GPUS, accounts=None, weights=None):
    table = small_table()
    clock = SimulatedClock()
    jobs = [job("fast", 10 ** 7) for _ in users]
    backend = Users(SimulatedCluster(jobs, table, {"v100": gpus}, clock), users, accounts)
    return Engine(clock, backend, Immediate(make_policy(policy)), TableThroughputs(table),
                  MemoryStore(), 60.0, share_by=share_by, entity_weights=weights), backend


def test_the_lp_gives_each_user_a_third_however_many_jobs_they_have():
    users = owners()
    engine, _ = engine_for(users, "user", "hierarchical")
    engine.step()
    assert set(engine.input.entities) == {"alice", "bob", "carol"}
    shares = per_user(engine.allocation, users)
    assert shares == {u: pytest.approx(GPUS / 3, rel=1e-3) for u in ("alice", "bob", "carol")}
    # among a user's jobs: equal parts (bob: 2 GPUs over 3 jobs; alice's over 300)
    x = engine.allocation.x.sum(axis=1)
    assert x[300:303] == pytest.approx([2 / 3] * 3, rel=1e-3)
    assert x[:300] == pytest.approx([2 / 300] * 300, rel=1e-2)


def test_per_job_las_lets_the_array_take_the_cluster():
    """What the daemon did before: every job its own share, so alice's 300 tasks get 300/306."""
    users = owners()
    engine, _ = engine_for(users, "user", "max_min_fairness")
    engine.step()
    shares = per_user(engine.allocation, users)
    assert shares["bob"] == pytest.approx(GPUS * 3 / 306, rel=1e-3)
    assert shares["alice"] == pytest.approx(GPUS * 300 / 306, rel=1e-3)


def test_the_rounds_give_each_user_a_third_of_the_gpu_time():
    users = owners(n_array=30)          # the rounds: a smaller array keeps the test quick
    engine, backend = engine_for(users, "user", "hierarchical")
    engine.churn = replace(engine.churn, hysteresis=0.0, move_hysteresis=0.0)
    for _ in range(30):
        engine.step()
    engine.settle()
    received = {}
    for j in range(len(users)):
        received[users[j]] = received.get(users[j], 0.0) + sum(engine.ledger.total(str(j)).values())
    total = sum(received.values())
    assert total == pytest.approx(GPUS * 30 * 60.0, rel=0.02)       # no GPU idle
    for user in ("alice", "bob", "carol"):
        assert received[user] / total == pytest.approx(1 / 3, abs=0.03), received


def test_a_job_entity_flag_does_not_split_a_user_and_entity_mode_keeps_it():
    users = owners(n_array=4, n_small=1)
    jobs = [JobState(str(i), "fast", 1, 0.0, user=u, account="lab", entity=f"flag{i}")
            for i, u in enumerate(users)]
    t = TableThroughputs(small_table()).lookup(jobs, ("v100",))
    mine = build_policy_input(jobs, {}, t, ("v100",), np.array([2.0]), 0.0, share_by="user")
    assert mine.entities == ("alice",) * 4 + ("bob", "carol")
    gavel = build_policy_input(jobs, {}, t, ("v100",), np.array([2.0]), 0.0)
    assert gavel.entities == tuple(f"flag{i}" for i in range(6))


def test_account_weights_are_split_among_the_accounts_users_with_jobs():
    jobs = [JobState("1", "fast", 1, 0.0, user="alice", account="physics"),
            JobState("2", "fast", 1, 0.0, user="bob", account="physics"),
            JobState("3", "fast", 1, 0.0, user="carol", account="chem"),
            JobState("4", "fast", 1, 0.0, user="dave", account="bio")]
    # physics 4 over alice and bob, chem 2, bio unlisted: 1; divided by the median (2)
    assert entity_weights(jobs, {"physics": 4.0, "chem": 2.0}, "user") == {
        "alice": 1.0, "bob": 1.0, "carol": 1.0, "dave": 0.5}
    # no account weight set: every user weighs 1, whatever their account
    assert entity_weights(jobs, {}, "user") == {}
    # a user with jobs in two accounts gets a part of each
    both = jobs + [JobState("5", "fast", 1, 0.0, user="carol", account="physics")]
    w = entity_weights(both, {"physics": 6.0, "chem": 2.0}, "user")
    assert w["carol"] / w["alice"] == pytest.approx((2.0 + 2.0) / 2.0)


def test_account_weights_reach_the_allocation():
    users = ["alice"] * 10 + ["bob"] * 3
    accounts = {"alice": "physics", "bob": "chem"}
    engine, _ = engine_for(users, "user", "hierarchical", gpus=4, accounts=accounts,
                           weights={"physics": 3.0, "chem": 1.0})
    engine.step()
    shares = per_user(engine.allocation, users)
    assert shares["alice"] == pytest.approx(3.0, rel=1e-3) and shares["bob"] == pytest.approx(1.0, rel=1e-3)


def test_the_daemons_default_is_users_first_and_per_job_las_a_choice():
    default = config_mod.Config().check()
    assert (make_policy(default.policy).name, default.share_by) == ("hierarchical", "user")
    las = config_mod.from_dict({"policy": "max_min_fairness"})
    assert make_policy(las.policy).name == "max_min_fairness"
    assert config_mod.from_dict({"share_by": "entity"}).share_by == "entity"
    with pytest.raises(Exception, match="share_by"):
        config_mod.from_dict({"share_by": "team"})


def test_the_simulator_keeps_gavels_defaults():
    """The simulator builds its engine without share_by: a job's own entity, as in Gavel."""
    import inspect
    assert inspect.signature(Engine).parameters["share_by"].default == "entity"

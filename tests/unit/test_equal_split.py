"""Placement.same_gpus_per_server: a spread job gets the same number of GPUs on every server.

Slurm gives a job one GPU count per node (`--gres=gpu:m` on each of its nodes), so a
distributed job spread 3+1 cannot be started; the mechanism must choose an equal split
(2+2) or not place the job this round, and give the GPUs to others.
"""
from __future__ import annotations

import numpy as np

from slurm_gavel.core.ledger import Ledger
from slurm_gavel.core.mechanism import plan_round
from slurm_gavel.core.model import Allocation
from slurm_gavel.core.plan import Placement, Server

EQUAL = Placement(same_gpus_per_server=True)


def _plan(servers, sizes, rules, x=None):
    jobs = tuple(sizes)
    x = np.array(x if x is not None else [[1.0 - 0.1 * i] for i in range(len(jobs))])
    alloc = Allocation(jobs, ("v100",), x, "x")
    return plan_round(0, alloc, Ledger(("v100",)), servers, sizes, (), rules)


def test_unequal_free_gpus_give_an_equal_split_or_none():
    servers = (Server("v100-0", "v100", 3), Server("v100-1", "v100", 1), Server("v100-2", "v100", 2))
    # without the rule the mechanism spreads 4 GPUs 3+1
    free = _plan(servers, {"d": 4}, {})
    assert sorted(c for _, c in free.assignments[0].servers) == [1, 3]
    plan = _plan(servers, {"d": 4}, {"d": EQUAL})
    (a,) = plan.assignments
    assert sorted(a.servers) == [("v100-0", 2), ("v100-2", 2)]


def test_as_few_servers_as_possible_and_whole_when_it_fits():
    servers = (Server("v100-0", "v100", 4), Server("v100-1", "v100", 4))
    plan = _plan(servers, {"d": 4}, {"d": EQUAL})
    assert [c for _, c in plan.assignments[0].servers] == [4]
    plan = _plan(servers, {"d": 8}, {"d": EQUAL})
    assert sorted(plan.assignments[0].servers) == [("v100-0", 4), ("v100-1", 4)]


def test_no_equal_split_leaves_the_gpus_to_the_next_rows():
    # 3 GPUs over free 2+1: no equal split exists (3 = 3x1 needs three servers)
    servers = (Server("v100-0", "v100", 2), Server("v100-1", "v100", 1))
    plan = _plan(servers, {"d": 3, "a": 1, "b": 1}, {"d": EQUAL})
    assert plan.running_jobs == {"a", "b"}

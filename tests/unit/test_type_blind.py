"""A type-blind allocation (a heterogeneity-agnostic policy's) is walked type by type, in an order
drawn each round, as Gavel's mechanism walks its per-type queues for its agnostic policies; an
aware allocation is still picked highest priority first over all types."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from slurm_gavel.core.engine import compose
from slurm_gavel.core.mechanism import Churn, Ledger, plan_round, select, type_order
from slurm_gavel.core.model import Allocation
from slurm_gavel.core.plan import Assignment, Server
from slurm_gavel.core.state import allocation_from_dict, allocation_to_dict
from slurm_gavel.policies import make_policy
from tests.support.inputs import make_input

TYPES = ("v100", "k80")
# One V100 and two K80s; a and b have one GPU each.  X splits each row over the types in
# proportion to their GPUs, as the agnostic baseline does: a third on the V100, two on the K80s.
SPREAD = np.array([[1 / 3, 2 / 3], [1 / 3, 2 / 3]])
SIZES = {"a": 1, "b": 1}


def servers():
    return (Server("v100-0", "v100", 1), Server("k80-0", "k80", 1), Server("k80-1", "k80", 1))


def first_round_walking(worker_type: str) -> int:
    """The first round number whose walk starts with `worker_type`."""
    column = TYPES.index(worker_type)
    return next(n for n in range(100) if type_order(n, len(TYPES))[column] == 0)


def one_round_each() -> Ledger:
    """a and b each had 360 s on each type: priorities X / 360, the K80's twice the V100's."""
    ledger = Ledger(TYPES)
    for job in "ab":
        for wt in TYPES:
            ledger.record([Assignment((job,), wt, ((f"{wt}-0", 1),))], 360.0)
    return ledger


def where(plan) -> dict[str, str]:
    return {a.jobs[0]: a.worker_type for a in plan.assignments}


def test_type_order_is_a_permutation_drawn_per_round():
    orders = [type_order(n, 3) for n in range(30)]
    for rank in orders:
        assert sorted(rank.tolist()) == [0, 1, 2]
    assert {int(np.argmin(rank)) for rank in orders} == {0, 1, 2}     # each type walked first
    assert [r.tolist() for r in orders] == [type_order(n, 3).tolist() for n in range(30)]


def test_select_walks_the_types_in_rank_order():
    """Rows 0, 1 with priorities 1 on the V100 (column 0) and 2 on the K80 (1 GPU, 2 GPUs).
    By priority both go to the K80s and the V100 stands idle; walking the V100 first puts
    row 0 there (the first of the tie) and row 1 on a K80."""
    prio = np.array([[1.0, 2.0], [1.0, 2.0]])
    rows = [("a",), ("b",)]
    sizes, free = np.array([1, 1]), np.array([1, 2])
    assert select(rows, prio, sizes, free) == [(0, 1), (1, 1)]
    assert select(rows, prio, sizes, free, type_rank=np.array([0, 1])) == [(0, 0), (1, 1)]
    assert select(rows, prio, sizes, free, type_rank=np.array([1, 0])) == [(0, 1), (1, 1)]


def test_a_type_blind_round_fills_the_type_walked_first():
    blind = Allocation(("a", "b"), TYPES, SPREAD, "max_min_fairness_agnostic", type_blind=True)
    v100_first, k80_first = first_round_walking("v100"), first_round_walking("k80")
    assert where(plan_round(v100_first, blind, one_round_each(), servers(), SIZES)) == {"a": "v100", "b": "k80"}
    assert where(plan_round(k80_first, blind, one_round_each(), servers(), SIZES)) == {"a": "k80", "b": "k80"}


def test_an_aware_allocation_is_still_picked_by_priority_alone():
    """The same X, not type-blind: both rows to the K80s (their larger share) in every round."""
    aware = Allocation(("a", "b"), TYPES, SPREAD, "max_min_fairness")
    for number in (first_round_walking("v100"), first_round_walking("k80")):
        assert where(plan_round(number, aware, one_round_each(), servers(), SIZES)) == {"a": "k80", "b": "k80"}


def test_a_row_keeps_its_lease_whatever_type_is_walked_first():
    """a runs on a K80 within its lease; a round walking the free V100 first does not move it
    there (to a type-blind policy the two are alike: the move would only cost a restart)."""
    blind = Allocation(("a",), TYPES, SPREAD[:1], "max_min_fairness_agnostic", type_blind=True)
    churn = Churn(hysteresis=720.0, restart_seconds=18.0, seed_seconds=180.0)
    ledger = Ledger(TYPES)
    running = Assignment(("a",), "k80", (("k80-0", 1),))
    ledger.record([running], 360.0)
    plan = plan_round(first_round_walking("v100"), blind, ledger, servers(), {"a": 1}, (running,),
                      churn=churn)
    assert plan.keep == (running,) and not plan.start and not plan.preempt


def test_the_agnostic_baseline_marks_its_allocation_type_blind_and_it_is_kept():
    inp = make_input([[3.0, 1.0], [2.0, 1.0]], [1, 2], TYPES)
    agnostic = make_policy("max_min_fairness", agnostic=True).allocate(inp)
    assert agnostic.type_blind
    assert not make_policy("max_min_fairness").allocate(inp).type_blind
    # a newcomer's interim row does not change what the solved rows are
    more = make_input([[3.0, 1.0], [2.0, 1.0], [1.0, 1.0]], [1, 2], TYPES)
    assert compose(agnostic, more).type_blind
    assert not compose(None, more).type_blind
    # and a restarted daemon reads it back
    assert allocation_from_dict(allocation_to_dict(agnostic)).type_blind
    assert not allocation_from_dict(allocation_to_dict(replace(agnostic, type_blind=False))).type_blind

"""The round-based mechanism (seed 4.2-4.4): priorities, Algorithm 1, placement, leases."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.inputs import make_input, random_input
from slurm_gavel.core.mechanism import (Assignment, Ledger, Server, allocation_rows, place,
                                        plan_round, priorities)
from slurm_gavel.core.model import Allocation
from slurm_gavel.core.plan import Assignment, Server
from slurm_gavel.policies import make_policy

TYPES = ("v100", "p100", "k80")
X_EXAMPLE = np.array([[0.6, 0.4, 0.0], [0.2, 0.6, 0.2], [0.2, 0.0, 0.8]])   # seed 1.2


def one_gpu_each():
    return [Server(f"{wt}-node", wt, 1) for wt in TYPES]


def example_allocation():
    return Allocation(("0", "1", "2"), TYPES, X_EXAMPLE, "example")


def test_figure_5_priorities_and_next_round():
    """Seed Fig 9 (the paper's Figure 5), step for step."""
    received = np.array([[3, 1, 0], [1, 3, 0], [0, 0, 4]], dtype=float)
    prio = priorities(X_EXAMPLE, received)
    expected = np.array([[0.2, 0.4, 0.0], [0.2, 0.2, np.inf], [np.inf, 0.0, 0.2]])
    assert np.array_equal(np.isinf(prio), np.isinf(expected))
    assert np.allclose(prio[np.isfinite(prio)], expected[np.isfinite(expected)])

    ledger = Ledger(TYPES)
    for job, row in zip("012", received):
        for wt, rounds in zip(TYPES, row):
            for _ in range(int(rounds)):
                ledger.record([Assignment((job,), wt, ((f"{wt}-node", 1),))], 1.0)
    plan = plan_round(9, example_allocation(), ledger, one_gpu_each(), {"0": 1, "1": 1, "2": 1})
    where = {a.jobs[0]: a.worker_type for a in plan.assignments}
    assert where == {"0": "p100", "1": "k80", "2": "v100"}
    ledger.record(plan.assignments, 1.0)
    after = ledger.since_reset([("0",), ("1",), ("2",)])
    assert after.tolist() == [[3, 2, 0], [1, 3, 1], [1, 0, 4]]


def run_rounds(allocation, servers, scale_factors, rounds, seconds=360.0):
    ledger, previous, plans = Ledger(allocation.worker_types), (), []
    for number in range(rounds):
        plan = plan_round(number, allocation, ledger, servers, scale_factors, previous)
        ledger.record(plan.assignments, seconds)
        previous = plan.assignments
        plans.append(plan)
    return ledger, plans


def test_realized_fractions_match_the_allocation_and_nobody_starves():
    rng = np.random.default_rng(4)
    inp = random_input(rng, 9, 3)
    inp = make_input(inp.throughputs, [2, 2, 2], types=TYPES)
    alloc = make_policy("max_min_fairness").allocate(inp)
    servers = [Server(f"{wt}-{i}", wt, 1) for wt in TYPES for i in range(2)]
    rounds = 600
    ledger, plans = run_rounds(alloc, servers, {j: 1 for j in inp.job_ids}, rounds)
    realized = np.array([[ledger.total(j)[wt] for wt in TYPES] for j in inp.job_ids]) / (rounds * 360)
    assert np.abs(realized - alloc.x).max() <= 0.05, (realized.round(3), alloc.x.round(3))
    # No starvation: a job with an allocation never waits long between rounds.
    for i, job in enumerate(inp.job_ids):
        if alloc.x[i].sum() == 0:
            continue
        ran = [n for n, p in enumerate(plans) if job in p.running_jobs]
        gaps = np.diff([-1] + ran + [rounds])
        assert gaps.max() <= int(np.ceil(2 / alloc.x[i].sum())) + 2, (job, gaps.max())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), n=st.integers(1, 10), pairs=st.integers(0, 6))
def test_no_job_twice_and_no_type_oversubscribed(seed, n, pairs):
    rng = np.random.default_rng(seed)
    inp = random_input(rng, n, 3, pairs=min(pairs, n * (n - 1) // 2), multi_gpu=True)
    inp = make_input(inp.throughputs, [4, 4, 8], types=TYPES, scale_factors=inp.scale_factors,
                     pair_jobs=inp.pair_jobs, pair_throughputs=inp.pair_throughputs)
    alloc = make_policy("max_min_fairness", space_sharing=True).allocate(inp)
    servers = [Server("v100-a", "v100", 4), Server("p100-a", "p100", 2), Server("p100-b", "p100", 2),
               Server("k80-a", "k80", 4), Server("k80-b", "k80", 4)]
    sf = dict(zip(inp.job_ids, inp.scale_factors.tolist()))
    _, plans = run_rounds(alloc, servers, sf, 12)
    capacity = {s.name: s.gpus for s in servers}
    for plan in plans:
        jobs = [job for a in plan.assignments for job in a.jobs]
        assert len(jobs) == len(set(jobs))
        used: dict[str, int] = {}
        for a in plan.assignments:
            assert a.gpus == sf[a.jobs[0]]
            for name, count in a.servers:
                assert name.startswith(a.worker_type)
                used[name] = used.get(name, 0) + count
        assert all(used[name] <= capacity[name] for name in used)


def test_lease_renewed_when_the_job_stays():
    alloc = Allocation(("a", "b"), ("v100",), np.array([[1.0], [1.0]]), "x")
    servers = [Server("n1", "v100", 1), Server("n2", "v100", 1)]
    ledger = Ledger(("v100",))
    first = plan_round(0, alloc, ledger, servers, {"a": 1, "b": 1})
    assert len(first.start) == 2 and not first.keep and not first.preempt
    ledger.record(first.assignments, 360)
    second = plan_round(1, alloc, ledger, servers, {"a": 1, "b": 1}, first.assignments)
    assert set(second.keep) == set(first.assignments)
    assert not second.start and not second.preempt


def test_time_slicing_preempts_and_starts():
    alloc = Allocation(("a", "b"), ("v100",), np.array([[0.5], [0.5]]), "x")
    servers = [Server("n1", "v100", 1)]
    ledger, plans = run_rounds(alloc, servers, {"a": 1, "b": 1}, 4)
    runs = [next(iter(p.running_jobs)) for p in plans]
    assert runs.count("a") == runs.count("b") == 2
    # On a tie the running job stays: a b b a, not a b a b (half the preemptions).
    assert runs[1] == runs[2] and runs[0] != runs[1]
    for before, plan, job, prev in zip(plans, plans[1:], runs[1:], runs):
        if job != prev:
            assert plan.preempt == (prev,) and [a.jobs for a in plan.start] == [(job,)]
        else:
            assert not plan.preempt and [a.jobs for a in plan.keep] == [(job,)]


def test_placement_consolidates_largest_first():
    servers = [Server("a", "v100", 4), Server("b", "v100", 4), Server("c", "v100", 2)]
    picks = [(("small",), "v100", 2), (("big",), "v100", 4), (("wide",), "v100", 4)]
    placed = {a.jobs[0]: a.servers for a in place(picks, servers, {})}
    assert placed["big"] == (("a", 4),)
    assert placed["wide"] == (("b", 4),)
    assert placed["small"] == (("c", 2),)
    spread = place([(("huge",), "v100", 8)], [Server("a", "v100", 4), Server("b", "v100", 4)], {})
    assert spread[0].servers == (("a", 4), ("b", 4))
    with pytest.raises(ValueError, match="needs 9 GPUs"):
        place([(("too big",), "v100", 9)], [Server("a", "v100", 8)], {})


def test_pairs_run_as_one_row():
    alloc = Allocation(("a", "b"), ("v100",), np.zeros((2, 1)), "x",
                       pair_jobs=np.array([[0, 1]]), x_pairs=np.array([[1.0]]))
    rows, x = allocation_rows(alloc)
    assert rows == [("a",), ("b",), ("a", "b")]
    plan = plan_round(0, alloc, Ledger(("v100",)), [Server("n", "v100", 1)], {"a": 1, "b": 1})
    assert [a.jobs for a in plan.assignments] == [("a", "b")]

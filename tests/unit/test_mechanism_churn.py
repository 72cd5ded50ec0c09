"""The mechanism's work conservation (idle GPUs go to jobs without a share there) and low churn
(hysteresis, restart cost, seeded ledger): issue 12 sections 2 and 3."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.inputs import make_input, random_input, relative_speeds
from slurm_gavel.core.mechanism import Churn, Ledger, Placement, Server, plan_round
from slurm_gavel.core.model import Allocation
from slurm_gavel.core.plan import Placement, Server
from slurm_gavel.policies import make_policy

TYPES = ("v100", "k80")


def servers(v100=1, k80=1):
    return ([Server(f"v100-{i}", "v100", 1) for i in range(v100)]
            + [Server(f"k80-{i}", "k80", 1) for i in range(k80)])


def v100_only():
    """a and b have shares on the V100 only; the K80 is nobody's share (both can run there)."""
    return Allocation(("a", "b"), TYPES, np.array([[0.5, 0.0], [0.5, 0.0]]), "x")


EVERYWHERE = np.array([[1.0, 0.5], [1.0, 0.25]])     # both run on both (normalized throughputs)


def test_an_idle_gpu_goes_to_a_waiting_job_with_no_share_there():
    alloc = v100_only()
    plain = plan_round(0, alloc, Ledger(TYPES), servers(), {"a": 1, "b": 1})
    assert plain.running_jobs == {"a"} and not plain.filling          # the K80 stayed idle
    plan = plan_round(0, alloc, Ledger(TYPES), servers(), {"a": 1, "b": 1}, usable=EVERYWHERE)
    where = {a.jobs[0]: a.worker_type for a in plan.assignments}
    assert where == {"a": "v100", "b": "k80"}
    assert plan.filling == frozenset({"b"})


def test_a_job_with_a_share_takes_the_gpu_back_from_a_filler():
    # c has a share on the K80; b fills it while c is not there, and yields it when c comes
    alloc = Allocation(("a", "b", "c"), TYPES, np.array([[0.5, 0.0], [0.5, 0.0], [0.0, 1.0]]), "x")
    usable = np.array([[1.0, 0.5], [1.0, 0.25], [1.0, 1.0]])
    ledger = Ledger(TYPES)
    plan = plan_round(0, alloc, ledger, servers(), {"a": 1, "b": 1, "c": 1}, usable=usable)
    assert {a.jobs[0]: a.worker_type for a in plan.assignments} == {"a": "v100", "c": "k80"}
    assert not plan.filling
    # with b filling the K80 last round, c still comes first: b is preempted
    fill_alloc = v100_only()
    first = plan_round(0, fill_alloc, ledger, servers(), {"a": 1, "b": 1}, usable=EVERYWHERE)
    assert first.filling == {"b"}
    ledger.record(first.assignments, 360)
    second = plan_round(1, alloc, ledger, servers(), {"a": 1, "b": 1, "c": 1}, first.assignments,
                        usable=usable, churn=Churn(hysteresis=100.0))
    assert {a.jobs[0]: a.worker_type for a in second.assignments if a.worker_type == "k80"} == {"c": "k80"}


def test_filling_respects_placement_scale_factors_and_once_per_job():
    alloc = v100_only()
    no_k80 = {"b": Placement(worker_types=frozenset({"v100"}))}
    plan = plan_round(0, alloc, Ledger(TYPES), servers(), {"a": 1, "b": 1}, (), no_k80, usable=EVERYWHERE)
    assert plan.running_jobs == {"a"} and not plan.filling
    # b needs 2 GPUs; one K80 is free: it cannot fill it
    plan = plan_round(0, alloc, Ledger(TYPES), servers(v100=2, k80=1), {"a": 1, "b": 2}, usable=EVERYWHERE)
    assert plan.running_jobs == {"a"} and not plan.filling
    # with 2 V100s both run there, and neither runs a second time on the K80
    plan = plan_round(0, alloc, Ledger(TYPES), servers(v100=2), {"a": 1, "b": 1}, usable=EVERYWHERE)
    assert sorted(a.jobs[0] for a in plan.assignments) == ["a", "b"]
    assert all(a.worker_type == "v100" for a in plan.assignments) and not plan.filling


def test_the_filler_is_the_job_most_behind_on_its_fastest_free_type():
    # three jobs with shares on the V100; the K80 and the P100 are idle
    types = ("v100", "p100", "k80")
    alloc = Allocation(("a", "b", "c"), types, np.array([[0.4, 0, 0], [0.3, 0, 0], [0.3, 0, 0]]), "x")
    usable = np.array([[1.0, 0.2, 0.1], [1.0, 0.3, 0.6], [1.0, 0.9, 0.5]])
    ledger = Ledger(types)
    from slurm_gavel.core.plan import Assignment
    ledger.record([Assignment(("b",), "v100", (("v100-0", 1),))], 3600)   # b is the least behind
    ledger.record([Assignment(("c",), "v100", (("v100-0", 1),))], 360)
    srv = [Server("v100-0", "v100", 1), Server("p100-0", "p100", 1), Server("k80-0", "k80", 1)]
    plan = plan_round(0, alloc, ledger, srv, {"a": 1, "b": 1, "c": 1}, usable=usable)
    where = {a.jobs[0]: a.worker_type for a in plan.assignments}
    # a (never ran: infinite priority) runs on its share; c is more behind than b and
    # takes its faster idle type (p100), b the one left
    assert where == {"a": "v100", "c": "p100", "b": "k80"}
    assert plan.filling == {"b", "c"}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), n=st.integers(1, 14))
def test_no_gpu_idle_while_a_waiting_job_could_run_on_it(seed, n):
    rng = np.random.default_rng(seed)
    inp = random_input(rng, n, 3, multi_gpu=True)
    types = ("v100", "p100", "k80")
    inp = make_input(inp.throughputs, [4, 4, 8], types=types, scale_factors=inp.scale_factors)
    alloc = make_policy("max_min_fairness").allocate(inp)
    srv = [Server("v100-a", "v100", 4), Server("p100-a", "p100", 4), Server("k80-a", "k80", 4),
           Server("k80-b", "k80", 4)]
    usable = relative_speeds(inp)
    sf = dict(zip(inp.job_ids, inp.scale_factors.tolist()))
    ledger, previous = Ledger(types), ()
    for number in range(6):
        plan = plan_round(number, alloc, ledger, srv, sf, previous, usable=usable,
                          churn=Churn(hysteresis=1.0, seed_seconds=180))
        used = {wt: 0 for wt in types}
        for a in plan.assignments:
            used[a.worker_type] += a.gpus
        free = {wt: c - used[wt] for wt, c in zip(types, (4, 4, 8))}
        running = plan.running_jobs
        for i, job in enumerate(inp.job_ids):
            if job in running:
                continue
            for t, wt in enumerate(types):
                assert not (usable[i, t] > 0 and sf[job] <= free[wt]), (job, wt, free)
        ledger.record(plan.assignments, 360)
        previous = plan.assignments


def test_hysteresis_keeps_a_running_job_until_the_other_is_clearly_behind():
    # one GPU; a runs and has received 720 s of its 0.5 share, b 480 s
    alloc = Allocation(("a", "b"), ("v100",), np.array([[0.5], [0.5]]), "x")
    srv = [Server("n", "v100", 1)]
    ledger = Ledger(("v100",))
    from slurm_gavel.core.plan import Assignment
    ran = Assignment(("a",), "v100", (("n", 1),))
    ledger.record([ran], 720)
    ledger.record([Assignment(("b",), "v100", (("n", 1),))], 480)
    sizes = {"a": 1, "b": 1}
    assert plan_round(1, alloc, ledger, srv, sizes, [ran]).running_jobs == {"b"}
    kept = plan_round(1, alloc, ledger, srv, sizes, [ran], churn=Churn(hysteresis=300))
    assert kept.running_jobs == {"a"} and kept.keep == (ran,)
    # b more behind than the lease credit: it takes the GPU
    assert plan_round(1, alloc, ledger, srv, sizes, [ran], churn=Churn(hysteresis=200)).running_jobs == {"b"}
    # a restart costs the mover its time: with 250 s per restart, b's 240 s behind are not worth it
    assert plan_round(1, alloc, ledger, srv, sizes, [ran], churn=Churn(restart_seconds=250)).running_jobs == {"a"}
    assert plan_round(1, alloc, ledger, srv, sizes, [ran], churn=Churn(restart_seconds=200)).running_jobs == {"b"}
    with pytest.raises(ValueError, match="hysteresis"):
        Churn(hysteresis=-1)


def test_hysteresis_trades_restarts_for_a_bounded_lease_and_nobody_starves():
    alloc = Allocation(("a", "b", "c"), ("v100",), np.array([[1 / 3], [1 / 3], [1 / 3]]), "x")
    srv = [Server("n", "v100", 1)]
    rounds = 90

    def run(churn):
        ledger, previous, restarts, ran = Ledger(("v100",)), (), 0, []
        for number in range(rounds):
            plan = plan_round(number, alloc, ledger, srv, {"a": 1, "b": 1, "c": 1}, previous, churn=churn)
            restarts += len(plan.start)
            ledger.record(plan.assignments, 360)
            previous = plan.assignments
            ran.append(next(iter(plan.running_jobs)))
        return restarts, ran, ledger

    plain, _, _ = run(Churn())
    sticky, ran, ledger = run(Churn(hysteresis=1080, seed_seconds=180))
    assert sticky < plain / 2, (plain, sticky)
    for job in "abc":
        assert abs(ledger.total(job)["v100"] / (rounds * 360) - 1 / 3) < 0.05
        runs = [i for i, j in enumerate(ran) if j == job]
        # the lease is bounded: a running job stays until it is 1080 s (3 rounds) ahead of
        # the next, so slices last at most 2 x 3 + 2 rounds and waits (two slices) do not grow
        waits = np.diff([-1] + runs + [rounds])
        assert waits.max() <= 2 * 8 + 1, ran


def test_seeded_ledger_orders_fresh_entries_by_their_share():
    # nothing received yet: plain priorities are all infinite (a tie: input order),
    # seeded ones are X / seed (b's larger share first)
    alloc = Allocation(("a", "b"), ("v100",), np.array([[0.2], [0.8]]), "x")
    srv = [Server("n", "v100", 1)]
    assert plan_round(0, alloc, Ledger(("v100",)), srv, {"a": 1, "b": 1}).running_jobs == {"a"}
    seeded = plan_round(0, alloc, Ledger(("v100",)), srv, {"a": 1, "b": 1}, churn=Churn(seed_seconds=180))
    assert seeded.running_jobs == {"b"}


def test_usable_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match="usable has shape"):
        plan_round(0, v100_only(), Ledger(TYPES), servers(), {"a": 1, "b": 1}, usable=np.ones((3, 2)))


def test_move_hysteresis_stops_running_jobs_swapping_types_but_not_waiting_jobs():
    # a and b each have half of each type; a ran on the V100, b on the K80 (one GPU each),
    # so each is behind on the other type: plain priorities swap them every round
    from slurm_gavel.core.plan import Assignment
    alloc = Allocation(("a", "b"), TYPES, np.array([[0.5, 0.5], [0.5, 0.5]]), "x")
    on_v100 = Assignment(("a",), "v100", (("v100-0", 1),))
    on_k80 = Assignment(("b",), "k80", (("k80-0", 1),))
    ledger = Ledger(TYPES)
    ledger.record([on_v100, on_k80], 720)
    sizes = {"a": 1, "b": 1}
    swapped = plan_round(2, alloc, ledger, servers(), sizes, [on_v100, on_k80])
    assert {a.jobs[0]: a.worker_type for a in swapped.assignments} == {"a": "k80", "b": "v100"}
    stay = plan_round(2, alloc, ledger, servers(), sizes, [on_v100, on_k80],
                      churn=Churn(move_hysteresis=1000))
    assert set(stay.keep) == {on_v100, on_k80} and not stay.start and not stay.preempt
    # a job that is waiting is not held back by it: c (never ran) takes a's V100
    alloc3 = Allocation(("a", "b", "c"), TYPES, np.array([[0.5, 0.0], [0.0, 0.5], [0.5, 0.5]]), "x")
    plan = plan_round(2, alloc3, ledger, servers(), {"a": 1, "b": 1, "c": 1}, [on_v100, on_k80],
                      churn=Churn(move_hysteresis=1000, seed_seconds=180))
    assert "c" in plan.running_jobs and plan.preempt


def test_what_a_row_was_owed_is_carried_over_a_reset_within_bounds():
    from slurm_gavel.core.plan import Assignment
    alloc = Allocation(("a", "b"), ("v100",), np.array([[0.5], [0.5]]), "x")
    srv = [Server("n", "v100", 1)]
    ledger = Ledger(("v100",))
    ledger.record([Assignment(("a",), "v100", (("n", 1),))], 720)
    # a reset forgets that a got 720 s and b nothing: plain order, a first
    ledger.reset()
    assert ledger.owed([("a",), ("b",)]) is None
    assert plan_round(0, alloc, ledger, srv, {"a": 1, "b": 1}).running_jobs == {"a"}
    # carried over: b was owed 360 s, a had 360 s too many
    ledger.reset([(("a",), [-360.0]), (("b",), [360.0])], cap=300)
    assert ledger.owed([("a",), ("b",)]).tolist() == [[-300.0], [300.0]]      # bounded
    assert plan_round(0, alloc, ledger, srv, {"a": 1, "b": 1}).running_jobs == {"b"}
    ledger.forget("b")
    assert ledger.owed([("b",)]).tolist() == [[0.0]]

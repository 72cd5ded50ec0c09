"""A cap on the preemptions of one round (Churn.max_preemptions): a full reshuffle is spread
over rounds, the jobs most ahead of their share stop first, and everyone waiting gets its
turn (no starvation); without the cap the mechanism is unchanged."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_gavel.core.ledger import Churn, Ledger
from slurm_gavel.core.mechanism import plan_round
from slurm_gavel.core.model import Allocation
from slurm_gavel.core.plan import Server
from slurm_gavel.policies import make_policy

from tests.support.inputs import make_input, random_input, relative_speeds

ROUND = 60.0


def setup(n_gpus=10, n_jobs=20):
    jobs = tuple(f"j{i}" for i in range(n_jobs))
    alloc = Allocation(jobs, ("v100",), np.full((n_jobs, 1), n_gpus / n_jobs), "x")
    servers = [Server(f"n{i}", "v100", 1) for i in range(n_gpus)]
    return jobs, alloc, servers


def run(rounds, cap, n_gpus=10, n_jobs=20):
    """The plans of `rounds` rounds, each round's running jobs credited a round."""
    jobs, alloc, servers = setup(n_gpus, n_jobs)
    ledger = Ledger(("v100",))
    sizes = {j: 1 for j in jobs}
    previous, plans = (), []
    for number in range(rounds):
        plan = plan_round(number, alloc, ledger, servers, sizes, previous, churn=Churn(max_preemptions=cap))
        ledger.record(plan.assignments, ROUND)
        previous, plans = plan.assignments, plans + [plan]
    return plans


def test_without_a_cap_a_whole_wave_is_preempted_at_once():
    plans = run(3, cap=0)
    assert len(plans[1].preempt) == 10         # 10 GPUs, 20 equal shares: all ten swap


@pytest.mark.parametrize("cap", [1, 3, 4])
def test_a_capped_round_preempts_at_most_the_cap_and_the_gpus_stay_busy(cap):
    plans = run(12, cap=cap)
    assert all(len(p.preempt) <= cap for p in plans)
    assert max(len(p.preempt) for p in plans[1:]) == cap       # the cap binds
    assert all(len(p.running_jobs) == 10 for p in plans)       # no GPU left idle by the cap
    # nobody starves: every job ran within the rounds a cap-sized turnover needs
    ran = set().union(*(p.running_jobs for p in plans))
    assert ran == {f"j{i}" for i in range(20)}


def test_the_jobs_stopped_first_are_the_most_ahead_of_their_share():
    jobs, alloc, servers = setup()
    ledger = Ledger(("v100",))
    first = plan_round(0, alloc, ledger, servers, {j: 1 for j in jobs})
    # the running jobs have received different times: the two longest-served stop first
    for k, a in enumerate(sorted(first.assignments, key=lambda a: a.jobs)):
        ledger.record([a], ROUND + 10 * k)
    plan = plan_round(1, alloc, ledger, servers, {j: 1 for j in jobs}, first.assignments,
                      churn=Churn(max_preemptions=2))
    served = sorted(first.assignments, key=lambda a: a.jobs)
    assert set(plan.preempt) == {served[-1].jobs[0], served[-2].jobs[0]}
    assert len(plan.start) == 2 and len(plan.keep) == 8


def test_a_bad_cap_is_refused():
    with pytest.raises(ValueError):
        Churn(max_preemptions=-1)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), n=st.integers(4, 24), cap=st.integers(1, 4))
def test_the_cap_holds_with_multi_gpu_jobs_on_shared_servers(seed, n, cap):
    """Jobs of 1-8 GPUs on 4-GPU servers of three types, work conserving: a round never
    preempts (or moves) more than `cap` jobs, whatever the allocation."""
    rng = np.random.default_rng(seed)
    inp = random_input(rng, n, 3, multi_gpu=True)
    types = ("v100", "p100", "k80")
    inp = make_input(inp.throughputs, [8, 8, 8], types=types, scale_factors=inp.scale_factors)
    alloc = make_policy("max_min_fairness").allocate(inp)
    srv = [Server(f"{wt}-{k}", wt, 4) for wt in types for k in range(2)]
    usable = relative_speeds(inp)
    sf = dict(zip(inp.job_ids, inp.scale_factors.tolist()))
    ledger, previous = Ledger(types), ()
    for number in range(8):
        plan = plan_round(number, alloc, ledger, srv, sf, previous, usable=usable,
                          churn=Churn(seed_seconds=180, max_preemptions=cap))
        assert len(plan.preempt) <= cap, (number, plan.preempt)
        ledger.record(plan.assignments, 360)
        previous = plan.assignments

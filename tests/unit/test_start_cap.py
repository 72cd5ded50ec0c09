"""A cap on the starts of one round (Churn.max_starts): a round starts at most that many jobs
that are not running (a move of a running job is a preemption: Churn.max_preemptions bounds
those), the highest-priority ones first; the ones kept waiting come first next round (no
starvation), the jobs running are not disturbed by the cap, and without it (0) the
mechanism is unchanged."""
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


def run(rounds, starts, n_gpus=10, n_jobs=6, preemptions=0):
    """The plans of `rounds` rounds on `n_gpus` 1-GPU servers, each running job credited a round."""
    jobs = tuple(f"j{i}" for i in range(n_jobs))
    alloc = Allocation(jobs, ("v100",), np.full((n_jobs, 1), min(1.0, n_gpus / n_jobs)), "x")
    servers = [Server(f"n{i}", "v100", 1) for i in range(n_gpus)]
    ledger, sizes, previous, plans = Ledger(("v100",)), {j: 1 for j in jobs}, (), []
    for number in range(rounds):
        plan = plan_round(number, alloc, ledger, servers, sizes, previous,
                          churn=Churn(max_starts=starts, max_preemptions=preemptions))
        ledger.record(plan.assignments, ROUND)
        previous, plans = plan.assignments, plans + [plan]
    return plans


def test_without_a_cap_every_startable_job_starts_at_once():
    assert len(run(1, starts=0)[0].start) == 6


def test_a_cap_of_two_starts_two_a_round_and_all_six_run_within_three_rounds():
    plans = run(4, starts=2)
    assert [len(p.start) for p in plans] == [2, 2, 2, 0]
    assert [len(p.running_jobs) for p in plans] == [2, 4, 6, 6]
    assert all(not p.preempt for p in plans)              # the running ones keep running
    started = [set(a.jobs[0] for a in p.start) for p in plans[:3]]
    assert len(set().union(*started)) == 6                # each round others: nobody starved


def test_the_ones_kept_waiting_start_first_next_round():
    """10 jobs on 4 GPUs (a queue), cap 1: each round's start is a job that has waited the
    longest of those not running; every job ran within the rounds a 1-a-round turnover needs."""
    plans = run(16, starts=1, n_gpus=4, n_jobs=10, preemptions=1)
    assert all(len([j for a in p.start for j in a.jobs if j not in prev.running_jobs]) <= 1
               for prev, p in zip(plans, plans[1:]))
    assert len(plans[0].start) == 1
    ran = set().union(*(p.running_jobs for p in plans))
    assert ran == {f"j{i}" for i in range(10)}


def test_a_bad_cap_is_refused():
    with pytest.raises(ValueError):
        Churn(max_starts=-1)
    with pytest.raises(ValueError):
        Churn(max_starts=1.5)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), n=st.integers(4, 24), cap=st.integers(1, 4))
def test_the_cap_holds_with_multi_gpu_jobs_on_shared_servers(seed, n, cap):
    """Jobs of 1-8 GPUs on 4-GPU servers of three types, work conserving, the preemption cap
    too: a round never starts more than `cap` jobs that were not running, nor preempts more
    than its preemption cap, and the queue is served (no round leaves every GPU idle)."""
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
        running = set().union(*(a.jobs for a in previous)) if previous else set()
        plan = plan_round(number, alloc, ledger, srv, sf, previous, usable=usable,
                          churn=Churn(seed_seconds=180, max_preemptions=2, max_starts=cap))
        new = [j for a in plan.start for j in a.jobs if j not in running]
        assert len(new) <= cap, (number, new)
        assert len(plan.preempt) <= 2, (number, plan.preempt)
        assert plan.assignments, number
        ledger.record(plan.assignments, 360)
        previous = plan.assignments


# -- gavel.toml's max_starts_per_round: the daemon's engine, checked, re-read on SIGHUP --------
def test_gavel_toml_sets_the_cap_checks_it_and_a_reload_changes_both_caps(tmp_path, monkeypatch):
    from slurm_gavel.core.errors import InputError
    from slurm_gavel.daemon import config as config_mod
    from slurm_gavel.daemon.daemon import Daemon
    from tests.support.daemon import TOY_TABLE
    from tests.support.replay import QueueCLI

    assert config_mod.from_dict({}).max_starts_per_round == 1000      # the measured default
    for bad in (-1, 2.5, True, "10"):
        with pytest.raises(InputError, match="max_starts_per_round"):
            config_mod.from_dict({"max_starts_per_round": bad})
    toml = tmp_path / "gavel.toml"
    settings = (f'database = "{tmp_path / "gavel.db"}"\nthroughputs = "{TOY_TABLE}"\n'
                f'policy = "max_min_fairness"\nround_seconds = 120\n')
    toml.write_text(settings + "max_starts_per_round = 3\nmax_preemptions_per_round = 5\n")
    monkeypatch.setattr(config_mod, "slurm_cli", lambda config, cls=None: QueueCLI())
    d = Daemon(config_mod.load(str(toml)))
    try:
        assert (d.engine.churn.max_starts, d.engine.churn.max_preemptions) == (3, 5)
        toml.write_text(settings + "max_starts_per_round = 7\nmax_preemptions_per_round = 0\n")
        d.reload()                                  # what SIGHUP does
        assert (d.engine.churn.max_starts, d.engine.churn.max_preemptions) == (7, 0)
        toml.write_text(settings + "max_starts_per_round = -2\n")
        d.reload()                                  # refused: the old configuration is kept
        assert d.engine.churn.max_starts == 7
    finally:
        d.engine.allocator.close()
        d.store.close()
        d.lock.release()

"""finish_time_fairness with jobs whose total work is unknown (no steps=): every solve
succeeds, such a job gets the share max-min fairness would give it (rho = w (1 + 1/speedup) / 2),
and the policy says so once per job (docs/policies.md, "Unknown work")."""
from __future__ import annotations

import logging

import numpy as np
import pytest

from slurm_gavel.policies import POLICIES, make_policy
from tests.support.inputs import assert_feasible, make_input

SEED_T = [[40.0, 10.0], [12.0, 4.0], [100.0, 50.0]]
NAN = float("nan")


def seed_input(**fields):
    fields.setdefault("time_since_arrival", np.array([600.0, 3600.0, 60.0]))
    return make_input(SEED_T, [1, 1], types=("v100", "k80"), **fields)


def test_every_job_without_steps_is_shared_as_max_min_fairness_shares():
    inp = seed_input(steps_remaining=np.full(3, NAN))
    ftf = make_policy("ftf").allocate(inp)
    mmf = make_policy("las").allocate(inp)
    assert_feasible(ftf, inp)
    ratio = ftf.effective_throughputs(inp) / inp.isolated_throughputs()
    assert np.allclose(ratio, 12 / 11, atol=1e-3), ratio           # as max-min fairness: 12/11 each
    assert ftf.objective == pytest.approx((1 + 1 / mmf.objective) / 2, rel=1e-4)


def test_a_job_without_steps_beside_jobs_with_steps_solves_and_is_served():
    # job 1 waited an hour without progress (its rho is large: FTF pushes it); job 0 has no steps=
    inp = seed_input(steps_remaining=np.array([NAN, 2e4, 3e4]))
    alloc = make_policy("ftf").allocate(inp)
    assert_feasible(alloc, inp)
    ratio = alloc.effective_throughputs(inp) / inp.isolated_throughputs()
    assert np.all(np.isfinite(ratio)) and ratio[0] > 0.5, ratio
    assert ratio[1] >= 1.0 - 1e-6, ratio                       # the job that waited is pushed
    # its age does not matter: a job without steps= is never pushed for having waited
    older = make_policy("ftf").allocate(seed_input(steps_remaining=np.array([NAN, 2e4, 3e4]),
                                                   time_since_arrival=np.array([1e6, 3600.0, 60.0])))
    assert np.allclose(older.x, alloc.x, atol=1e-4)


def test_it_is_said_once_per_job_not_every_solve(caplog):
    policy = make_policy("ftf")
    caplog.set_level(logging.INFO, logger="slurm_gavel.policies")
    inp = seed_input(steps_remaining=np.array([NAN, 2e4, 3e4]))
    for _ in range(3):
        policy.allocate(inp)
    said = [r.getMessage() for r in caplog.records if "no steps=" in r.getMessage()]
    assert len(said) == 1 and "job(s) 0 have no steps=" in said[0], said
    policy.allocate(seed_input(steps_remaining=np.array([NAN, NAN, 3e4])))
    said = [r.getMessage() for r in caplog.records if "no steps=" in r.getMessage()]
    assert len(said) == 2 and "job(s) 1 have no steps=" in said[1], said


def test_the_check_a_policy_switch_asks_passes():
    # the daemon refuses a SIGHUP switch whose policy's check fails (daemon._policy_refused)
    POLICIES["finish_time_fairness"]().check(seed_input(steps_remaining=np.full(3, NAN)))

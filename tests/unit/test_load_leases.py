"""Leases that grow with the load (ledger.Churn.lease_scale): only on an oversubscribed
cluster, only when starts cost something, bounded; the engine measures the load."""
from __future__ import annotations

import numpy as np
import pytest

from slurm_gavel.core.clock import SimulatedClock
from slurm_gavel.core.engine import Engine
from slurm_gavel.core.ledger import Churn, Ledger
from slurm_gavel.core.mechanism import plan_round
from slurm_gavel.core.model import Allocation
from slurm_gavel.core.plan import Assignment, Server
from slurm_gavel.core.recompute import Immediate
from slurm_gavel.estimator.table import TableThroughputs
from slurm_gavel.policies import make_policy
from slurm_gavel.sim.simulator import SimulatedCluster, simulate

from tests.support.engine import job, small_table


def test_the_scale_is_the_load_to_the_exponent_over_one_and_bounded():
    churn = Churn(hysteresis=720, move_hysteresis=1800, restart_seconds=18, load_exponent=3,
                  max_lease_scale=3)
    assert churn.lease_scale(0.5) == 1.0 and churn.lease_scale(1.0) == 1.0   # every job fits
    assert churn.lease_scale(1.2) == pytest.approx(1.728)                    # 1.2 ** 3
    assert churn.lease_scale(2.0) == 3.0                                     # 8, bounded at 3
    linear = Churn(hysteresis=720, restart_seconds=18, load_exponent=1, max_lease_scale=10)
    assert linear.lease_scale(1.5) == 1.5
    # no restart cost, or exponent 0: nothing to save, the leases stay as given
    assert Churn(hysteresis=720, load_exponent=3, max_lease_scale=3).lease_scale(2.0) == 1.0
    assert Churn(hysteresis=720, restart_seconds=18, max_lease_scale=3).lease_scale(2.0) == 1.0
    grown = churn.under_load(1.2)
    assert grown.hysteresis == pytest.approx(720 * 1.728)
    assert grown.move_hysteresis == pytest.approx(1800 * 1.728)
    assert grown.restart_seconds == 18 and grown.under_load(1.2) is grown     # not grown twice
    assert churn.under_load(0.9) is churn
    with pytest.raises(ValueError, match="max_lease_scale"):
        Churn(max_lease_scale=0.5)
    with pytest.raises(ValueError, match="load_exponent"):
        Churn(load_exponent=-1)


def test_on_an_oversubscribed_gpu_the_running_job_keeps_it_longer():
    # One V100, three jobs with a third each (load 3).  a runs and has received 900 s, b 300 s.
    # Plain lease of 360 s: a competes with 900 + 180 (seed) - 360 = 720 s, b with
    # 300 + 180 + 18 (its restart) = 498 s: b, more behind, takes the GPU.
    # Under load 3 the lease is 3 x 360 = 1080 s: a competes with 0 s, an infinite
    # priority: it keeps the GPU.
    alloc = Allocation(("a", "b", "c"), ("v100",), np.full((3, 1), 1 / 3), "x")
    srv = [Server("n", "v100", 1)]
    ledger = Ledger(("v100",))
    ran = Assignment(("a",), "v100", (("n", 1),))
    ledger.record([ran], 900)
    ledger.record([Assignment(("b",), "v100", (("n", 1),))], 300)
    ledger.record([Assignment(("c",), "v100", (("n", 1),))], 900)
    sizes = {"a": 1, "b": 1, "c": 1}
    churn = Churn(hysteresis=360, restart_seconds=18, seed_seconds=180, load_exponent=3, max_lease_scale=3)
    assert plan_round(1, alloc, ledger, srv, sizes, [ran], churn=churn).running_jobs == {"b"}
    kept = plan_round(1, alloc, ledger, srv, sizes, [ran], churn=churn.under_load(3.0))
    assert kept.running_jobs == {"a"} and kept.keep == (ran,)


def _engine(n_jobs, gpus, **kw):
    table = small_table()
    clock = SimulatedClock()
    backend = SimulatedCluster([job("fast", 36000) for _ in range(n_jobs)], table, {"v100": gpus}, clock)
    return Engine(clock, backend, Immediate(make_policy("max_min_fairness")), TableThroughputs(table),
                  round_seconds=360.0, restart_seconds=18, hysteresis=2, move_hysteresis=5, **kw)


def test_the_engine_grows_the_leases_by_the_gpus_asked_for_over_the_gpus():
    for n_jobs, gpus, scale in [(2, 4, 1.0), (4, 4, 1.0), (5, 4, 1.25 ** 3), (8, 4, 3.0)]:
        engine = _engine(n_jobs, gpus, lease_load_exponent=3, max_lease_scale=3)
        engine.step()
        assert engine.churn.hysteresis == pytest.approx(2 * 360 * scale), (n_jobs, gpus)
        assert engine.churn.move_hysteresis == pytest.approx(5 * 360 * scale), (n_jobs, gpus)
    fixed = _engine(8, 4, lease_load_exponent=0)
    fixed.step()
    assert fixed.churn.hysteresis == 2 * 360


def _run(jobs, gpus, exponent):
    return simulate(jobs, small_table(), {"v100": gpus}, make_policy("max_min_fairness"),
                    restart_seconds=18, lease_load_exponent=exponent, max_lease_scale=3)


def test_restarts_fall_only_where_the_cluster_is_oversubscribed():
    # 6 equal jobs of 10 h on 2 V100s (load 3): time sharing; fewer, longer turns with the rule
    crowded = [job("fast", 360000) for _ in range(6)]
    fixed, grown = _run(crowded, 2, 0), _run(crowded, 2, 3)
    starts = lambda sim: sum(r.starts for r in sim.results.values())     # noqa: E731
    assert starts(grown) < 0.6 * starts(fixed), (starts(fixed), starts(grown))
    mean_jct = lambda sim: np.mean([r.jct for r in sim.results.values()])  # noqa: E731
    assert mean_jct(grown) < mean_jct(fixed)         # less GPU time lost to restarts
    # 2 jobs on 2 V100s: the rule never engages, the run is the same to the second
    roomy = [job("fast", 360000), job("mid", 100000, at=1000.0)]
    a, b = _run(roomy, 2, 0), _run(roomy, 2, 3)
    assert {j: r.finish for j, r in a.results.items()} == {j: r.finish for j, r in b.results.items()}


def test_a_type_blind_baseline_keeps_the_configured_leases():
    # The agnostic baselines stand for Gavel's type-blind mechanism, which the lease rule
    # (an aware mechanism's restart saving) must not move: under load 2 an aware engine's
    # leases grow, a type-blind one's stay at 2 / 5 rounds.
    table = small_table()

    def engine(agnostic):
        clock = SimulatedClock()
        backend = SimulatedCluster([job("fast", 36000) for _ in range(8)], table, {"v100": 4}, clock)
        return Engine(clock, backend, Immediate(make_policy("max_min_fairness", agnostic=agnostic)),
                      TableThroughputs(table), round_seconds=360.0, restart_seconds=18,
                      hysteresis=2, move_hysteresis=5, lease_load_exponent=3, max_lease_scale=3)
    aware, blind = engine(False), engine(True)
    aware.step()
    blind.step()
    assert blind.allocation.type_blind and not aware.allocation.type_blind
    assert aware.churn.hysteresis == pytest.approx(2 * 360 * 3.0)
    assert blind.churn.hysteresis == 2 * 360 and blind.churn.move_hysteresis == 5 * 360

"""Mid-round starts: a job that arrives while GPUs are idle starts on them at once (issue 12).

Through the engine and the simulated cluster (`simulate(..., mid_round_starts=True)`,
`Engine.start_arrivals`): the newcomer starts at its arrival, nothing that runs is
stopped or moved, restart costs still paid, and without idle GPUs it waits for the
round as before.
"""
from __future__ import annotations

import math

from tests.support.engine import job, small_table

from slurm_gavel.core.clock import SimulatedClock
from slurm_gavel.core.engine import FILLING, Engine
from slurm_gavel.core.recompute import Immediate
from slurm_gavel.core.store import MemoryStore
from slurm_gavel.estimator.table import TableThroughputs
from slurm_gavel.policies import make_policy
from slurm_gavel.sim.simulator import SimulatedCluster, simulate


def sim(jobs, cluster, mid=True, **kw):
    return simulate(jobs, small_table(), cluster, make_policy("max_min_fairness"), mid_round_starts=mid, **kw)


def test_a_newcomer_starts_on_an_idle_gpu_at_its_arrival():
    jobs = [job("fast", 36000), job("fast", 3600, at=100.0)]      # fast: 10 steps/s on a V100
    now = sim(jobs, {"v100": 2})
    assert now.results["1"].first_start == 100.0
    assert now.results["1"].finish == 100.0 + 360.0
    assert now.results["0"].starts == 1                            # the running job was not touched
    later = sim(jobs, {"v100": 2}, mid=False)
    assert later.results["1"].first_start == 360.0                 # before: the next round
    assert later.results["1"].finish == 720.0


def test_without_an_idle_gpu_the_newcomer_waits_for_the_round():
    jobs = [job("fast", 36000), job("fast", 36000, at=100.0)]
    run = sim(jobs, {"v100": 1})
    assert run.results["1"].first_start % 360.0 == 0.0
    assert run.results["0"].first_start == 0.0
    # one idle V100 but the newcomer needs two: it waits too
    jobs = [job("fast", 36000), job("fast", 36000, sf=2, at=100.0)]
    run = sim(jobs, {"v100": 2})
    assert run.results["1"].first_start % 360.0 == 0.0


def test_a_gpu_freed_by_a_finished_job_is_idle_for_a_newcomer():
    # job 0 finishes at 100 s (1000 steps at 10/s); job 1 arrives at 200 s, mid-round
    jobs = [job("fast", 1000), job("fast", 1000, at=200.0)]
    run = sim(jobs, {"v100": 1})
    assert run.results["0"].finish == 100.0
    assert run.results["1"].first_start == 200.0 and run.results["1"].finish == 300.0


def test_the_running_jobs_still_pay_their_restart_cost():
    # job 0 starts at 0 and pays 60 s; job 1 arrives at 50 s, while job 0 still pays
    jobs = [job("fast", 1000), job("fast", 1000, at=50.0)]
    run = sim(jobs, {"v100": 2}, restart_seconds=60.0)
    assert run.results["0"].finish == 160.0
    assert run.results["1"].finish == 50.0 + 160.0


def test_an_idle_cluster_starts_the_first_arrival_at_once():
    jobs = [job("fast", 1000, at=1000.0)]
    run = sim(jobs, {"v100": 1})
    assert run.results["0"].first_start == 1000.0 and run.results["0"].finish == 1100.0
    assert sim(jobs, {"v100": 1}, mid=False).results["0"].first_start == 1080.0


def test_start_arrivals_keeps_the_round_and_says_what_runs():
    table = small_table()
    clock = SimulatedClock()
    backend = SimulatedCluster([job("fast", 36000), job("mid", 36000, at=100.0)], table, {"v100": 2}, clock)
    engine = Engine(clock, backend, Immediate(make_policy("max_min_fairness")), TableThroughputs(table),
                    MemoryStore(), 360.0)
    first = engine.plan()
    assert engine.start_arrivals() is None                 # nothing arrived yet
    clock.sleep_until(100.0)
    plan = engine.start_arrivals()
    assert plan is not None and plan.round == first.round and not plan.preempt
    assert plan.keep == first.assignments
    assert [a.jobs for a in plan.start] == [("1",)]
    assert engine.round_end == 360.0 and engine.round == 1
    assert engine.explain()["1"] == {"worker_type": "v100", "priority": None, "reason": FILLING}
    assert engine.start_arrivals() is None                 # already started: nothing new
    engine.wait()
    assert clock.now() == 360.0
    nxt = engine.plan()
    assert not nxt.start and not nxt.preempt               # both leases renewed


def test_the_same_seed_gives_the_same_run():
    from slurm_gavel.sim.workloads import generate_trace
    jobs = generate_trace(small_table(), n_jobs=60, rate_per_hour=12, seed=5)
    a = sim(jobs, {"v100": 4, "p100": 4, "k80": 4}, gpus_per_node=2, restart_seconds=18.0)
    b = sim(jobs, {"v100": 4, "p100": 4, "k80": 4}, gpus_per_node=2, restart_seconds=18.0)
    assert all(math.isfinite(r.finish) for r in a.results.values())
    assert {k: (r.finish, r.starts, r.seconds) for k, r in a.results.items()} == \
        {k: (r.finish, r.starts, r.seconds) for k, r in b.results.items()}
    assert any(r.first_start % 360.0 for r in a.results.values())    # some started mid-round


def test_two_arrivals_in_one_round_each_start_once():
    jobs = [job("fast", 36000), job("fast", 3600, at=100.0), job("mid", 3600, at=200.0)]
    run = sim(jobs, {"v100": 3})
    assert run.results["1"].first_start == 100.0 and run.results["2"].first_start == 200.0
    assert [run.results[j].starts for j in "012"] == [1, 1, 1]
    assert run.results["1"].finish == 460.0


def test_a_newcomer_takes_the_idle_type_it_runs_fastest_on():
    # "fast" runs 10x faster on a V100 than on a K80; both idle: the V100
    run = sim([job("fast", 3600, at=100.0), job("flat", 36000, at=100.0)], {"v100": 1, "k80": 1})
    assert run.results["0"].first_start == 100.0 and run.results["0"].seconds["v100"] > 0
    # the V100 busy: the K80 at once, rather than waiting
    run = sim([job("fast", 36000), job("flat", 3600, at=100.0)], {"v100": 1, "k80": 1})
    assert run.results["1"].first_start == 100.0 and run.results["1"].seconds["k80"] > 0


def test_simulate_starts_mid_round_unless_told_not_to(capsys, table_path, tmp_path):  # noqa: F811
    import csv
    import json

    from tests.support.simulate import generated, run

    starts = {}
    for extra in ((), ("--no-mid-round-starts",)):
        path = tmp_path / f"jobs{len(extra)}.csv"
        code, out, _ = run(capsys, *generated(table_path, "--json", "--csv", path, *extra))
        assert code == 0 and json.loads(out)["complete"]
        with open(path) as f:
            starts[extra] = [float(row["first_start"]) for row in csv.DictReader(f)]
    assert all(s % 360.0 == 0.0 for s in starts[("--no-mid-round-starts",)])
    assert any(s % 360.0 for s in starts[()])

"""bench/gavel_policies.py's two pieces of its own: the SLO trace it gives our simulator
(Gavel's generated jobs with the SLOs Gavel's generator draws) and the window cost it reads
from Gavel's log.  The simulators themselves are not run here."""
from __future__ import annotations

import importlib.util
import random
import sys
from itertools import islice
from pathlib import Path

import pytest

from slurm_gavel.estimator.gavel_data import gavel_data
from slurm_gavel.estimator.table import ThroughputTable
from slurm_gavel.sim.workloads import iter_gavel_trace, read_trace

BENCH = Path(__file__).resolve().parents[2] / "bench" / "gavel_policies.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("gavel_policies", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gavel_policies"] = module      # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["gavel_policies"]


def test_slo_trace_is_gavels_jobs_with_its_slo_draws(bench, tmp_path):
    throughputs = gavel_data("simulation_throughputs.json").resolve()
    setup = bench.Setup(tmp_path, "python", throughputs, 2.5, (10, 30), 10, 3, 60.0)
    path = tmp_path / "slo.trace"
    bench.slo_trace(setup, path)
    jobs = read_trace(path)
    table = ThroughputTable.from_gavel_json(throughputs)
    ref = table.solo_by_type["v100"]
    expected = list(islice(iter_gavel_trace(table, 2.5, seed=3), len(jobs)))
    assert len(jobs) == 60                      # twice the window's end
    draws = random.Random(3 + 6)
    for job, gavel in zip(jobs, expected):
        assert (job.job_type, job.scale_factor) == (gavel.job_type, gavel.scale_factor)
        assert job.arrival_time == pytest.approx(gavel.arrival_time, rel=1e-12)
        assert job.total_steps == int(gavel.total_steps)
        r = draws.uniform(0, 1)
        factor = 1.2 if r < 0.33 else 2.0 if r < 0.67 else 10.0
        duration = gavel.total_steps / ref[(gavel.job_type, gavel.scale_factor)]
        assert job.slo == pytest.approx(factor * duration, rel=1e-9)


def test_window_cost_takes_each_window_jobs_last_cost(bench):
    log = "\n".join([
        "scheduler:INFO [1.0] Job 4 cost so far: $1.00",
        "scheduler:INFO [1.0] Job 5 cost so far: $0.50",
        "scheduler:INFO [2.0] Job 5 cost so far: $0.75",
        "scheduler:INFO [2.0] Job 6 cost so far: $2.25",
        "scheduler:INFO [3.0] Job 7 cost so far: $9.00",
        "Total cost: $13.00",
    ])
    assert bench.window_cost(log, (5, 7)) == pytest.approx(3.0)
    assert bench.window_cost(log, (10, 12)) != bench.window_cost(log, (10, 12))   # nan: no job seen

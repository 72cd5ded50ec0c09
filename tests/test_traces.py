"""Every Gavel physical-cluster trace runs to completion on the paper's physical cluster.

Max-min fairness (heterogeneity-aware), Gavel's physical-cluster throughput
table, 8 V100 + 16 P100 + 24 K80 GPUs, 360 s rounds.  The data are Gavel's
and are read from ../shared/data/gavel (not part of the project); the
tests skip when it is missing.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from slurm_gavel.policies import make_policy
from slurm_gavel.sim.simulator import simulate
from slurm_gavel.estimator.table import ThroughputTable
from slurm_gavel.sim.workloads import read_trace

# Gavel's data beside the repository (../shared), or beside a worktree's parent (../../shared)
GAVEL_DATA = next((p / "shared" / "data" / "gavel" for p in Path(__file__).resolve().parents[2:4]
                   if (p / "shared" / "data" / "gavel").is_dir()),
                  Path(__file__).resolve().parents[2] / "shared" / "data" / "gavel")
THROUGHPUTS = GAVEL_DATA / "physical_cluster_throughputs.json"
TRACE_DIR = GAVEL_DATA / "traces" / "physical_cluster"
PHYSICAL_CLUSTER = {"v100": 8, "p100": 16, "k80": 24}
ROUND_SECONDS = 360.0
TOL_SECONDS = 1e-6


def _trace_files():
    return sorted(TRACE_DIR.glob("*.trace")) if TRACE_DIR.is_dir() else []


@pytest.fixture(scope="module")
def table():
    if not THROUGHPUTS.is_file():
        pytest.skip(f"Gavel data not present at {THROUGHPUTS}")
    return ThroughputTable.from_gavel_json(THROUGHPUTS)


@pytest.mark.parametrize("trace", _trace_files() or [None], ids=lambda p: p.name if p else "missing")
def test_trace_completes_within_cluster_capacity(trace, table):
    if trace is None:
        pytest.skip(f"Gavel traces not present at {TRACE_DIR}")
    jobs = sorted(read_trace(trace), key=lambda j: j.arrival_time)     # stable: ids follow file order
    assert jobs, f"{trace.name} has no jobs"
    sim = simulate(jobs, table, PHYSICAL_CLUSTER, make_policy("max_min_fairness"),
                   round_seconds=ROUND_SECONDS)

    assert sim.complete, f"{trace.name}: the simulation stopped early"
    assert not sim.solver_errors, sim.solver_errors
    assert len(sim.results) == len(jobs)
    for job_id, r in sim.results.items():
        assert math.isfinite(r.finish), f"job {job_id} ({r.job_type}) never finished"
        assert r.finish >= r.arrival
        assert r.steps_done == pytest.approx(r.total_steps, rel=1e-9, abs=1e-9), job_id
        # A job runs on one type at a time, so its GPU time over all types fits in its life.
        assert sum(r.seconds.values()) <= r.jct + TOL_SECONDS, (job_id, r.seconds, r.jct)

    assert sim.gpus == PHYSICAL_CLUSTER
    for wt, count in PHYSICAL_CLUSTER.items():
        capacity = count * sim.end_time
        used = sum(r.seconds[wt] * r.scale_factor for r in sim.results.values())
        assert used <= capacity + TOL_SECONDS, (wt, used, capacity)
        assert sim.busy_gpu_seconds[wt] <= capacity + TOL_SECONDS, (wt, sim.busy_gpu_seconds[wt], capacity)
        # No space sharing here: the held GPU time covers every job's GPU time on that type.
        assert used <= sim.busy_gpu_seconds[wt] + TOL_SECONDS, (wt, used, sim.busy_gpu_seconds[wt])

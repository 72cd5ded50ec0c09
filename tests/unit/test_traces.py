"""Every Gavel physical-cluster trace runs to completion on the paper's physical cluster.

Max-min fairness (heterogeneity-aware), Gavel's physical-cluster throughput
table, 8 V100 + 16 P100 + 24 K80 GPUs, 360 s rounds.  The data are Gavel's,
shipped in the package (slurm_gavel.estimator.gavel_data).
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from slurm_gavel.policies import make_policy
from slurm_gavel.sim.simulator import simulate
from slurm_gavel.estimator.table import ThroughputTable
from slurm_gavel.sim.workloads import read_trace
from slurm_gavel.core.errors import InputError
from slurm_gavel.estimator.gavel_data import gavel_data

GAVEL_DATA = gavel_data()
THROUGHPUTS = GAVEL_DATA / "physical_cluster_throughputs.json"
TRACE_DIR = GAVEL_DATA / "traces" / "physical_cluster"
SIM_TABLE = GAVEL_DATA / "simulation_throughputs.json"
PHYSICAL_CLUSTER = {"v100": 8, "p100": 16, "k80": 24}
ROUND_SECONDS = 360.0
TOL_SECONDS = 1e-6


def _trace_files():
    return sorted(TRACE_DIR.glob("*.trace"))


@pytest.fixture(scope="module")
def table():
    return ThroughputTable.from_gavel_json(THROUGHPUTS)


@pytest.mark.parametrize("trace", _trace_files(), ids=lambda p: p.name)
def test_trace_completes_within_cluster_capacity(trace, table):
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


# -- Gavel's older 7-field layout (its Philly-derived traces) ----------------------
# job_type, command, num_steps_arg, needs_data_dir, total_steps, arrival_time, scale_factor:
# the layout of Gavel's scheduler/traces/msr/seed=*/*.trace (2019) and of parse_trace then.
SEVEN = (
    "Transformer (batch size 128)\tcd %s/translation && python3 train.py -batch_size 128\t-step\t1"
    "\t79561\t0.000000\t1\n"
    "Recommendation (batch size 8192)\tcd %s/recommendation && python3 train.py\t-n\t1"
    "\t1066\t1511.000000\t1\n"
    "A3C\tcd %s/rl && python3 main.py\t--max-steps\t0\t3000\t1600.000000\t0\n"        # 0 GPUs: skipped
    "ResNet-50 (batch size 64)\tcd %s/imagenet && python3 main.py -b 64\t--num_minibatches\t1"
    "\t4726\t3362.5\t4\n"
)


def test_seven_field_trace_is_read(tmp_path):
    from slurm_gavel.sim.workloads import TraceJob
    p = tmp_path / "philly.trace"
    p.write_text(SEVEN)
    jobs = read_trace(p)
    assert jobs == [
        TraceJob("Transformer (batch size 128)", "cd %s/translation && python3 train.py -batch_size 128",
                 "", "-step", True, 79561, 1, 1.0, None, 0.0),
        TraceJob("Recommendation (batch size 8192)", "cd %s/recommendation && python3 train.py",
                 "", "-n", True, 1066, 1, 1.0, None, 1511.0),
        TraceJob("ResNet-50 (batch size 64)", "cd %s/imagenet && python3 main.py -b 64",
                 "", "--num_minibatches", True, 4726, 4, 1.0, None, 3362.5),
    ]
    # written back in today's 10-field layout, and read again the same
    from slurm_gavel.sim.workloads import write_trace
    out = tmp_path / "ten.trace"
    write_trace(out, jobs)
    assert all(line.count("\t") == 9 for line in out.read_text().splitlines())
    assert read_trace(out) == jobs


@pytest.mark.parametrize("bad_line, words", [
    ("A\tcmd\t--steps\t1\t100\t0", ["10 tab-separated fields", "7", "got 6"]),
    ("A\tcmd\t--steps\t1\t100\t0\t1\t1", ["10 tab-separated fields", "7", "got 8"]),
    ("A\tcmd\t--steps\t1\t100\tsoon\t1", ["arrival_time", "'soon'"]),
    ("A\tcmd\t--steps\t1\t100\t0\t-1", ["scale_factor", ">= 0", "-1"]),
    ("A\tcmd\t--steps\t2\t100\t0\t1", ["needs_data_dir"]),
    ("\tcmd\t--steps\t1\t100\t0\t1", ["job_type"]),
])
def test_bad_seven_field_lines_name_file_and_line(tmp_path, bad_line, words):
    p = tmp_path / "bad.trace"
    good = SEVEN.splitlines()[0]
    p.write_text(f"{good}\n{bad_line}\n{good}\n")
    with pytest.raises(InputError) as e:
        read_trace(p)
    assert e.value.field == f"{p}:2"
    for w in words:
        assert w in e.value.problem, (w, e.value.problem)
    assert "\n" not in e.value.problem


def test_simulate_cli_runs_a_seven_field_trace(tmp_path, capsys):
    import json
    from slurm_gavel.cli import main
    p = tmp_path / "philly.trace"
    p.write_text(SEVEN)
    code = main(["simulate", "--policy", "max_min_fairness", "--throughputs", str(SIM_TABLE),
                 "--trace", str(p), "--gpus-per-node", "36", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)
    assert summary["jobs"] == summary["finished"] == 3 and summary["complete"]

"""Throughput tables, traces, the trace generator and trace -> PolicyInput."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from slurm_gavel.core.errors import InputError
from slurm_gavel.sim.workloads import (TraceJob, generate_trace, policy_input, read_trace,
                                       write_trace)
from slurm_gavel.estimator.table import ThroughputTable
from slurm_gavel.estimator.gavel_data import gavel_data

GAVEL_DATA = gavel_data()
SIM_JSON = GAVEL_DATA / "simulation_throughputs.json"
TRACE_DIR = GAVEL_DATA / "traces" / "physical_cluster"
RESNET50 = "ResNet-50 (batch size 64)"


def _trace_files():
    return sorted(TRACE_DIR.glob("*.trace"))


@pytest.fixture(scope="module")
def sim_table():
    return ThroughputTable.from_gavel_json(SIM_JSON)


def _tiny_gavel_dict():
    a, b = "('A', 1)", "('B', 1)"
    return {
        "v100": {a: {"null": 10.0, a: [6.0, 6.0], b: [7.0, 2.0]},
                 b: {"null": 4.0, a: [2.0, 7.0], b: [0, 0]},
                 "('A', 2)": {"null": 18.0}},
        "k80": {a: {"null": 2.0}, b: {"null": 1.0}, "('A', 2)": {"null": 3.5}},
        "v100_unconsolidated": {"('A', 2)": {"null": 15.0}},
    }


@pytest.fixture
def tiny_table(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(_tiny_gavel_dict()))
    return ThroughputTable.from_gavel_json(p)


# -- throughput table --------------------------------------------------------
def test_reads_gavel_simulation_throughputs(sim_table):
    assert sim_table.worker_types == ("k80", "p100", "v100")
    assert len(sim_table.models(1)) == 26
    assert len(sim_table.models(8)) == 19
    solo = sim_table.solo(RESNET50, 1)
    assert set(solo) == {"k80", "p100", "v100"}
    assert solo["v100"] > solo["p100"] > solo["k80"] > 0
    raw = json.loads(SIM_JSON.read_text())
    assert solo["v100"] == raw["v100"][f"('{RESNET50}', 1)"]["null"]
    key = f"('{RESNET50}', 4)"
    assert sim_table.unconsolidated(RESNET50, 4)["v100"] == raw["v100_unconsolidated"][key]["null"]
    pair = sim_table.pair(RESNET50, "ResNet-18 (batch size 64)", 1)
    assert pair["v100"] == tuple(raw["v100"][f"('{RESNET50}', 1)"]["('ResNet-18 (batch size 64)', 1)"])
    assert set(pair) == {"k80", "p100", "v100"}


def test_gavel_json_round_trips(sim_table, tmp_path):
    out = tmp_path / "copy.json"
    sim_table.to_gavel_json(out)
    assert json.loads(out.read_text()) == json.loads(SIM_JSON.read_text())
    again = ThroughputTable.from_gavel_json(out)
    assert again == sim_table


def test_tiny_table_queries(tiny_table, tmp_path):
    assert tiny_table.worker_types == ("v100", "k80")
    assert tiny_table.models(1) == ["A", "B"]
    assert tiny_table.models(2) == ["A"]
    assert tiny_table.solo("A", 2) == {"v100": 18.0, "k80": 3.5}
    assert tiny_table.unconsolidated("A", 2) == {"v100": 15.0}
    assert tiny_table.pair("A", "B") == {"v100": (7.0, 2.0)}
    assert tiny_table.pair("B", "B") == {"v100": (0.0, 0.0)}
    out = tmp_path / "again.json"
    tiny_table.to_gavel_json(out)
    assert json.loads(out.read_text()) == _tiny_gavel_dict()


@pytest.mark.parametrize("mutate, key_part, problem", [
    (lambda d: d["v100"].update({"(A, 1)": {"null": 1.0}}), "(A, 1)", "tuple literal"),
    (lambda d: d["v100"].update({"('A', 0)": {"null": 1.0}}), "('A', 0)", "scale factor"),
    (lambda d: d["v100"]["('A', 1)"].update({"null": -1.0}), "null", ">= 0"),
    (lambda d: d["v100"]["('A', 1)"].update({"null": "fast"}), "null", "number"),
    (lambda d: d["v100"]["('A', 1)"].update({"('B', 1)": [1.0]}), "('B', 1)", "pair"),
    (lambda d: d["v100"]["('A', 1)"].update({"('B', 1)": [1.0, -2.0]}), "('B', 1)", ">= 0"),
    (lambda d: d.update({"k80": [1, 2]}), "k80", "object"),
])
def test_bad_table_entries_name_path_and_key(tmp_path, mutate, key_part, problem):
    d = _tiny_gavel_dict()
    mutate(d)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(d))
    with pytest.raises(InputError) as e:
        ThroughputTable.from_gavel_json(p)
    assert e.value.field.startswith(f"{p}: ")
    assert key_part in e.value.field
    assert problem in e.value.problem
    assert "\n" not in e.value.problem


def test_missing_and_malformed_table_files(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(InputError) as e:
        ThroughputTable.from_gavel_json(missing)
    assert e.value.field == f"{missing}" and "not found" in e.value.problem
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError) as e:
        ThroughputTable.from_gavel_json(bad)
    assert e.value.field == f"{bad}" and "JSON" in e.value.problem
    bad.write_text("[1, 2]")
    with pytest.raises(InputError) as e:
        ThroughputTable.from_gavel_json(bad)
    assert e.value.field == f"{bad}"


# -- traces ------------------------------------------------------------------
@pytest.mark.parametrize("trace", _trace_files(), ids=lambda p: p.name)
def test_example_traces_round_trip_byte_for_byte(trace, tmp_path):
    jobs = read_trace(trace)
    assert len(jobs) == len(trace.read_bytes().splitlines())
    assert all(isinstance(j, TraceJob) and j.scale_factor >= 1 and j.slo is None for j in jobs)
    out = tmp_path / trace.name
    write_trace(out, jobs)
    assert out.read_bytes() == trace.read_bytes()


def test_trace_fields_parsed(tmp_path):
    line = "ResNet-18 (batch size 64)\tpython3 main.py --data_dir=%s/cifar10\tcifar10\t--num_steps\t1\t1000\t4\t2.5\t3600.000000\t12.5\n"
    p = tmp_path / "one.trace"
    p.write_text(line)
    (job,) = read_trace(p)
    assert job == TraceJob("ResNet-18 (batch size 64)", "python3 main.py --data_dir=%s/cifar10",
                           "cifar10", "--num_steps", True, 1000, 4, 2.5, 3600.0, 12.5)
    out = tmp_path / "out.trace"
    write_trace(out, [job])
    assert out.read_text() == line
    assert [f.name for f in tmp_path.iterdir() if f.name.startswith(".")] == []   # no temp leftovers


GOOD = "A\tcmd\twd\t--steps\t1\t100\t1\t1\t-1.000000\t0"


@pytest.mark.parametrize("bad_line, words", [
    ("A\tcmd\twd\t--steps\t1\t100\t1\t1\t-1.000000", ["10", "fields", "got 9"]),
    ("A\tcmd\twd\t--steps\t1\t10.5\t1\t1\t-1.000000\t0", ["total_steps", "integer", "10.5"]),
    ("A\tcmd\twd\t--steps\t1\tmany\t1\t1\t-1.000000\t0", ["total_steps", "integer"]),
    ("A\tcmd\twd\t--steps\t1\t100\t-2\t1\t-1.000000\t0", ["scale_factor", ">= 1", "-2"]),
    ("A\tcmd\twd\t--steps\tyes\t100\t1\t1\t-1.000000\t0", ["needs_data_dir"]),
    ("A\tcmd\twd\t--steps\t1\t100\t1\t0\t-1.000000\t0", ["priority_weight"]),
    ("A\tcmd\twd\t--steps\t1\t100\t1\t1\t-5\t0", ["slo"]),
    ("A\tcmd\twd\t--steps\t1\t100\t1\t1\t-1\t-3", ["arrival_time"]),
])
def test_malformed_trace_lines_name_file_line_and_problem(tmp_path, bad_line, words):
    p = tmp_path / "bad.trace"
    p.write_text(f"{GOOD}\n{GOOD}\n{bad_line}\n{GOOD}\n")
    with pytest.raises(InputError) as e:
        read_trace(p)
    assert e.value.field == f"{p}:3"
    for w in words:
        assert w in e.value.problem
    assert "\n" not in e.value.problem


def test_missing_trace_and_unwritable_fields(tmp_path):
    with pytest.raises(InputError) as e:
        read_trace(tmp_path / "nope.trace")
    assert "not found" in e.value.problem
    job = TraceJob("A", "bad\tcommand", "wd", "-n", False, 1, 1)
    with pytest.raises(InputError) as e:
        write_trace(tmp_path / "x.trace", [job])
    assert e.value.field == "jobs[0].command"
    assert not (tmp_path / "x.trace").exists()


# -- generator ---------------------------------------------------------------
def _trace_bytes(jobs, path):
    write_trace(path, jobs)
    return path.read_bytes()


def test_generator_is_deterministic(sim_table, tmp_path):
    a = generate_trace(sim_table, n_jobs=200, rate_per_hour=30, multi_gpu=True, seed=7)
    b = generate_trace(sim_table, n_jobs=200, rate_per_hour=30, multi_gpu=True, seed=7)
    c = generate_trace(sim_table, n_jobs=200, rate_per_hour=30, multi_gpu=True, seed=8)
    assert _trace_bytes(a, tmp_path / "a") == _trace_bytes(b, tmp_path / "b")
    assert _trace_bytes(a, tmp_path / "a") != _trace_bytes(c, tmp_path / "c")
    assert read_trace(tmp_path / "a") == a


def test_generator_statistics(sim_table):
    n, rate = 5000, 12.0
    jobs = generate_trace(sim_table, n_jobs=n, rate_per_hour=rate, multi_gpu=True, seed=1)
    assert len(jobs) == n
    minutes = np.array([j.total_steps / sim_table.solo(j.job_type, j.scale_factor)["v100"] / 60
                        for j in jobs])
    assert minutes.min() >= 10 ** 1.5 * 0.99 and minutes.max() <= 10 ** 4
    assert abs((minutes >= 1000).mean() - 0.2) < 0.03
    sfs = np.array([j.scale_factor for j in jobs])
    for sf, p in zip((1, 2, 4, 8), (0.7, 0.1, 0.15, 0.05)):
        assert abs((sfs == sf).mean() - p) < 0.03, sf
    for j in jobs:
        assert j.job_type in sim_table.models(j.scale_factor)
    arrivals = np.array([j.arrival_time for j in jobs])
    assert arrivals[0] == 0 and (np.diff(arrivals) >= 0).all()
    assert abs(np.diff(arrivals).mean() / (3600 / rate) - 1) < 0.05
    single = generate_trace(sim_table, n_jobs=n, seed=2)
    assert {j.job_type for j in single} == set(sim_table.models(1))
    assert all(j.scale_factor == 1 and j.arrival_time == 0 for j in single)


def test_generator_duration_limit_and_errors(sim_table):
    jobs = generate_trace(sim_table, rate_per_hour=10, duration_hours=5, seed=3)
    assert 0 < len(jobs) < 200 and all(j.arrival_time < 5 * 3600 for j in jobs)
    with pytest.raises(InputError):
        generate_trace(sim_table)
    with pytest.raises(InputError) as e:
        generate_trace(sim_table, n_jobs=3, reference_type="h100")
    assert e.value.field == "reference_type"


# -- policy input ------------------------------------------------------------
def test_policy_input_from_trace(tiny_table):
    jobs = [TraceJob("A", "", "", "", False, 100, 1, 1.0, None, 0.0),
            TraceJob("B", "", "", "", False, 50, 1, 2.0, 600.0, 10.0),
            TraceJob("A", "", "", "", False, 80, 2, 1.0, None, 20.0),
            TraceJob("B", "", "", "", False, 10, 1, 1.0, None, 500.0)]   # not arrived yet
    inp = policy_input(jobs, tiny_table, {"v100": 2, "k80": 4}, now=100.0,
                       steps_done={"0": 100, 1: 20}, include_pairs=True)
    assert inp.job_ids == ("1", "2")                      # job 0 finished, job 3 not arrived
    assert inp.worker_types == ("v100", "k80")
    np.testing.assert_array_equal(inp.throughputs, [[4.0, 1.0], [18.0, 3.5]])
    np.testing.assert_array_equal(inp.steps_remaining, [30, 80])
    np.testing.assert_array_equal(inp.time_since_arrival, [90.0, 80.0])
    np.testing.assert_array_equal(inp.weights, [2.0, 1.0])
    assert inp.slo[0] == 600.0 and math.isnan(inp.slo[1])
    assert inp.unconsolidated_throughputs[1, 0] == 15.0
    assert inp.n_pairs == 0                                # different scale factors
    both = policy_input(jobs[:2], tiny_table, {"v100": 1, "k80": 1}, now=10.0, include_pairs=True)
    np.testing.assert_array_equal(both.pair_jobs, [[0, 1]])
    assert tuple(both.pair_throughputs[0, 0]) == (7.0, 2.0)
    assert np.isnan(both.pair_throughputs[0, 1]).all()


# -- Gavel's own generator (--generator gavel) -----------------------------------
# Literal jobs printed by Gavel's own code, not by ours: scheduler/utils.py
# generate_job (with job.py, job_table.py, job_template.py) and the Scheduler's
# _initialize_seeds / _sample_arrival_time_delta methods, extracted from the Gavel
# mirror at HEAD c4fa400, run with simulation_throughputs.json the way
# Scheduler.simulate() draws them (the first job at 0, then last + delta,
# lam = 3600 / rate).  Each: (job_type, total_steps, scale_factor, arrival_time).
GAVEL_SEED0_SINGLE_RATE2 = {
    0: ("ResNet-18 (batch size 64)", 1646636.2758419, 1, 0.0),
    1: ("Transformer (batch size 16)", 343170.46864225325, 1, 489.172145820603),
    2: ("Recommendation (batch size 2048)", 16034.37819420177, 1, 1903.5496550581915),
    4000: ("Recommendation (batch size 2048)", 59693.041976117274, 1, 7152401.0089853695),
}
GAVEL_SEED1_MULTI_RATE1 = {
    0: ("Recommendation (batch size 512)", 158770.0198661339, 1, 0.0),
    1: ("LM (batch size 10)", 1254629.3145978907, 1, 969.3015713251997),
    2: ("LM (batch size 10)", 4825956.341822683, 1, 1361.285892044693),
    4000: ("LM (batch size 40)", 8780392.34327923, 4, 14309564.725151468),
}
GAVEL_SEED0_MULTI_RATE1_FIRST = ("ResNet-18 (batch size 64)", 17484476.26110642, 8, 0.0)


def _key(job):
    return (job.job_type, job.total_steps, job.scale_factor, job.arrival_time)


@pytest.mark.parametrize("seed, multi, rate, expected", [
    (0, False, 2.0, GAVEL_SEED0_SINGLE_RATE2), (1, True, 1.0, GAVEL_SEED1_MULTI_RATE1)])
def test_gavel_generator_draws_gavels_jobs(sim_table, seed, multi, rate, expected):
    jobs = generate_trace(sim_table, n_jobs=4001, rate_per_hour=rate, multi_gpu=multi, seed=seed,
                          generator="gavel")
    for i, want in expected.items():
        assert _key(jobs[i]) == want, i          # exact: the same floats, not approximately


def test_gavel_generator_stream_structure(sim_table):
    n = 3000
    single = generate_trace(sim_table, n_jobs=n, rate_per_hour=2.0, seed=0, generator="gavel")
    multi = generate_trace(sim_table, n_jobs=n, rate_per_hour=2.0, seed=0, multi_gpu=True,
                           generator="gavel")
    slow = generate_trace(sim_table, n_jobs=n, rate_per_hour=1.0, seed=0, generator="gavel")
    # arrivals have their own generator (seed + 3): job shapes do not move them, the rate scales them
    assert [j.arrival_time for j in single] == [j.arrival_time for j in multi]
    assert single[0].arrival_time == 0.0
    assert np.allclose([2 * j.arrival_time for j in single], [j.arrival_time for j in slow], rtol=1e-12)
    # and the rate does not change the jobs
    assert [(j.job_type, j.total_steps) for j in single] == [(j.job_type, j.total_steps) for j in slow]
    # one job generator (seed + 2) draws the scale factor even for 1-GPU workloads, so the
    # first job (ResNet-18 can be distributed) has the same type and duration in both
    assert _key(multi[0]) == GAVEL_SEED0_MULTI_RATE1_FIRST
    assert multi[0].job_type == single[0].job_type
    ref = sim_table.solo_by_type["v100"]
    d_single = single[0].total_steps / ref[(single[0].job_type, 1)]
    d_multi = multi[0].total_steps / ref[(multi[0].job_type, 8)]
    assert d_single == pytest.approx(d_multi, rel=1e-12)
    assert all(j.scale_factor == 1 for j in single)
    # Gavel's job table: 26 types at one GPU; only the 19 distributed ones get more
    assert {j.job_type for j in single} == set(sim_table.models(1))
    big = {j.job_type for j in multi if j.scale_factor > 1}
    assert big and not any(t.startswith(("Recommendation", "A3C", "CycleGAN")) for t in big)
    sfs = np.array([j.scale_factor for j in multi])
    for sf, p in zip((1, 2, 4, 8), (0.7, 0.1, 0.15, 0.05)):
        assert abs((sfs == sf).mean() - p) < 0.03, sf
    # a different seed is a different workload; ours is another one again
    assert _key(generate_trace(sim_table, n_jobs=1, rate_per_hour=2.0, seed=1, generator="gavel")[0]) \
        != _key(single[0])
    assert [_key(j) for j in generate_trace(sim_table, n_jobs=5, rate_per_hour=2.0, seed=0)] \
        != [_key(j) for j in single[:5]]


def test_gavel_generator_errors(sim_table, tiny_table):
    with pytest.raises(InputError) as e:
        generate_trace(sim_table, n_jobs=3, generator="philly")
    assert e.value.field == "generator"
    with pytest.raises(InputError) as e:        # Gavel's job types are not in this table
        generate_trace(tiny_table, n_jobs=3, generator="gavel")
    assert e.value.field == "table" and "ResNet-18 (batch size 16)" in e.value.problem
    static = generate_trace(sim_table, n_jobs=4, generator="gavel")    # no rate: all at 0 (lam = 0)
    assert [j.arrival_time for j in static] == [0.0] * 4


def _cli(capsys, *argv):
    from slurm_gavel.cli import main
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_simulate_and_sweep_run_gavels_jobs(sim_table, capsys, tmp_path):
    per_job = tmp_path / "jobs.csv"
    code, out, err = _cli(capsys, "simulate", "--policy", "max_min_fairness", "--throughputs", SIM_JSON,
                          "--generator", "gavel", "--rate", 2, "--jobs", 3, "--seed", 0,
                          "--csv", per_job, "--json")
    assert code == 0, err
    import csv
    rows = {int(r["id"]): r for r in csv.DictReader(per_job.open())}
    for i in range(3):
        job_type, steps, sf, arrival = GAVEL_SEED0_SINGLE_RATE2[i]
        assert (rows[i]["job_type"], float(rows[i]["total_steps"]), int(rows[i]["scale_factor"]),
                float(rows[i]["arrival"])) == (job_type, steps, sf, arrival)
    assert json.loads(out)["finished"] == 3
    # the default stays our generator: other jobs
    code, out, err = _cli(capsys, "simulate", "--policy", "max_min_fairness", "--throughputs", SIM_JSON,
                          "--rate", 2, "--jobs", 3, "--csv", per_job)
    assert code == 0, err
    assert [r["job_type"] for r in csv.DictReader(per_job.open())] != \
        [GAVEL_SEED0_SINGLE_RATE2[i][0] for i in range(3)]
    # a sweep row is the simulate summary of the same Gavel jobs
    code, out, err = _cli(capsys, "sweep", "--policies", "max_min_fairness", "--rates", 2, "--seeds", 0,
                          "--throughputs", SIM_JSON, "--generator", "gavel", "--jobs", 3,
                          "--processes", 1, "--json")
    assert code == 0, err
    row = json.loads(out)[0]
    code, out, err = _cli(capsys, "simulate", "--policy", "max_min_fairness", "--throughputs", SIM_JSON,
                          "--generator", "gavel", "--rate", 2, "--jobs", 3, "--json")
    assert row["average_jct_hours"] == json.loads(out)["average_jct_hours"]


def test_generator_option_errors(sim_table, capsys, tmp_path):
    trace = tmp_path / "one.trace"
    trace.write_text("ResNet-50 (batch size 64)\t\t\t\t0\t100\t1\t1\t-1.000000\t0\n")
    code, out, err = _cli(capsys, "simulate", "--policy", "fifo", "--throughputs", SIM_JSON,
                          "--trace", trace, "--generator", "gavel")
    assert code == 2 and "--generator" in err and "Traceback" not in err
    code, out, err = _cli(capsys, "simulate", "--policy", "fifo", "--throughputs", SIM_JSON,
                          "--jobs", 2, "--generator", "philly")
    assert code == 2 and "--generator" in err and "philly" in err and "Traceback" not in err

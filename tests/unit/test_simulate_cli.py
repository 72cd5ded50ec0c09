"""`slurm-gavel simulate` and `slurm-gavel sweep`: in-process for the bulk, a few real subprocesses.

The runs use a tiny three-model table (the one of test_engine.py) on a six-GPU
cluster, so each simulation takes a fraction of a second.  Gavel's own tables
and physical-cluster traces are read from ../shared/data/gavel (beside the repository) when present.
"""
from __future__ import annotations

import csv
import io
import json
import pathlib
import subprocess
import sys

import pytest

from tests.support.engine import SOLO, small_table

from slurm_gavel.cli import main
from slurm_gavel.estimator.table import ThroughputTable
from slurm_gavel.estimator.gavel_data import gavel_data
from tests.support.simulate import CLUSTER, generated, run

ROOT = pathlib.Path(__file__).resolve().parents[2]
GAVEL = gavel_data()
PHYSICAL_TABLE = GAVEL / "physical_cluster_throughputs.json"
SMALL_TRACE = GAVEL / "traces" / "physical_cluster" / "small_test.trace"

# Three models whose speedups differ by type.
TYPES = tuple(SOLO)
GOOD_LINE = "fast\t\t\t\t0\t3600\t1\t1\t-1.000000\t0"     # a valid 10-field trace line


def run_subprocess(*argv):
    return subprocess.run([sys.executable, "-m", "slurm_gavel", *map(str, argv)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def assert_one_line_error(code, out, err, *needles):
    assert code == 2, (code, out, err)
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("slurm-gavel: error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, err)
    assert out == ""


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# -- simulate: the summary ---------------------------------------------------------
def test_simulate_json_summary_of_a_generated_workload(capsys, table_path):
    code, out, err = run(capsys, *generated(table_path, "--window", "2:10", "--json"))
    assert code == 0, err
    row = json.loads(out)
    assert row["policy"] == "max_min_fairness"
    assert row["rate"] == 6.0 and row["seed"] == 0
    assert row["window"] == [2, 10]
    assert row["jobs"] == 8                      # the window's jobs, not all 12
    assert row["finished"] == row["jobs"]
    assert row["complete"] is True
    assert row["average_jct_hours"] > 0
    jct = row["jct_hours"]
    assert jct["p50"] <= jct["p90"] <= jct["max"]
    assert jct["mean"] == pytest.approx(row["average_jct_hours"])
    assert set(row["utilization"]) == set(TYPES)
    for value in [*row["utilization"].values(), row["utilization_total"]]:
        assert 0.0 <= value <= 1.0
    assert row["utilization_total"] > 0
    assert row["allocation_gap"] >= 0
    assert row["rounds"] > 0 and row["solves"] > 0 and row["solver_errors"] == 0


def test_simulate_human_summary(capsys, table_path):
    code, out, err = run(capsys, *generated(table_path, "--jobs", 6, "--prices", "v100=2.48,p100=1.46,k80=0.7"))
    assert code == 0, err
    assert out.startswith("policy max_min_fairness: 6/6 jobs finished")
    assert "INCOMPLETE" not in out
    assert "average JCT" in out
    assert "allocation gap" in out
    assert "utilization" in out and "cost               $" in out
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)


def test_agnostic_policy_is_labelled(capsys, table_path):
    code, out, err = run(capsys, *generated(table_path, "--jobs", 5, "--agnostic", "--json"))
    assert code == 0, err
    assert json.loads(out)["policy"] == "max_min_fairness_agnostic"


def test_max_rounds_stops_early_and_says_so(capsys, table_path):
    code, out, err = run(capsys, *generated(table_path, "--max-rounds", 2, "--json"))
    assert code == 0, err
    row = json.loads(out)
    assert row["complete"] is False
    assert row["rounds"] == 2
    assert row["finished"] < row["jobs"]


# -- simulate: CSV and plot ---------------------------------------------------------
def test_simulate_csv_is_reproducible_and_depends_on_the_seed(capsys, table_path, tmp_path):
    paths = {name: tmp_path / f"{name}.csv" for name in ("a", "b", "other_seed")}
    for name, seed in (("a", 3), ("b", 3), ("other_seed", 4)):
        code, _, err = run(capsys, *generated(table_path, "--seed", seed, "--csv", paths[name], "--quiet"))
        assert code == 0, err
    a, b, other = (paths[n].read_bytes() for n in ("a", "b", "other_seed"))
    assert a == b
    assert a != other

    rows = read_csv(paths["a"])
    assert len(rows) == 12                               # one row per job
    assert [r["id"] for r in rows] == [str(i) for i in range(12)]
    header = a.decode().splitlines()[0].split(",")
    assert header[:2] == ["id", "job_type"]
    assert [h for h in header if h.startswith("seconds_")] == [f"seconds_{wt}" for wt in TYPES]
    for r in rows:
        assert r["job_type"] in {"fast", "flat", "mid"}
        assert float(r["steps_done"]) == float(r["total_steps"])
        jct = float(r["jct"])
        assert jct == pytest.approx(float(r["finish"]) - float(r["arrival"]))
        # a 1-GPU job holds one GPU at a time: its GPU time fits in its life
        assert sum(float(r[f"seconds_{wt}"]) for wt in TYPES) <= jct + 1e-6
    # Poisson arrivals: non-decreasing, the first at 0
    arrivals = [float(r["arrival"]) for r in rows]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)


def test_simulate_plot_writes_a_png(capsys, table_path, tmp_path):
    png = tmp_path / "jct.png"
    code, out, err = run(capsys, *generated(table_path, "--jobs", 6, "--plot", png))
    assert code == 0, err
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 1000
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # no temp files left


# -- simulate: Gavel trace files -----------------------------------------------------
def test_simulate_a_trace_file_written_here(capsys, table_path, tmp_path):
    trace = tmp_path / "three.trace"
    trace.write_text("".join(f"{model}\t\t\t\t0\t{steps}\t1\t1\t-1.000000\t{at}\n"
                             for model, steps, at in (("fast", 36000, 0), ("flat", 9000, 100),
                                                      ("mid", 7200, 4000))))
    code, out, err = run(capsys, "simulate", "--policy", "fifo", "--throughputs", table_path,
                         "--trace", trace, "--cluster", CLUSTER, "--json")
    assert code == 0, err
    row = json.loads(out)
    assert row["rate"] is None
    assert row["jobs"] == row["finished"] == 3 and row["complete"] is True
    # three jobs on six GPUs never wait: each runs on its own GPU the whole time
    assert row["jct_hours"]["max"] <= 1.0 + 0.1


def test_simulate_gavel_physical_cluster_trace_in_a_subprocess():
    proc = run_subprocess("simulate", "--policy", "max_min_fairness", "--throughputs", PHYSICAL_TABLE,
                          "--trace", SMALL_TRACE, "--cluster", "v100=8,p100=16,k80=24", "--json")
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout)
    n_jobs = sum(1 for line in SMALL_TRACE.read_text().splitlines() if line.strip())
    assert row["jobs"] == row["finished"] == n_jobs
    assert row["complete"] is True
    assert row["average_jct_hours"] > 0
    assert "Traceback" not in proc.stderr


# -- simulate: bad input -> exit 2, one line on stderr ----------------------------------
def test_trace_line_with_nine_fields(capsys, table_path, tmp_path):
    trace = tmp_path / "nine_fields.trace"
    nine = "\t".join(GOOD_LINE.split("\t")[:9])
    trace.write_text(f"{GOOD_LINE}\n{nine}\n{GOOD_LINE}\n")
    res = run(capsys, "simulate", "--policy", "fifo", "--throughputs", table_path,
              "--trace", trace, "--cluster", CLUSTER)
    assert_one_line_error(*res, "nine_fields.trace", ":2", "10 tab-separated fields", "got 9")


def test_trace_with_non_numeric_total_steps(capsys, table_path, tmp_path):
    trace = tmp_path / "steps.trace"
    fields = GOOD_LINE.split("\t")
    fields[5] = "lots"
    trace.write_text(GOOD_LINE + "\n" + "\t".join(fields) + "\n")
    res = run(capsys, "simulate", "--policy", "fifo", "--throughputs", table_path,
              "--trace", trace, "--cluster", CLUSTER)
    assert_one_line_error(*res, "steps.trace:2", "total_steps", "'lots'")


def test_throughput_file_that_is_not_json(capsys, tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text("{not json\n")
    res = run(capsys, *generated(str(bad)))
    assert_one_line_error(*res, "broken.json", "not valid JSON")


def test_missing_throughput_file(capsys, tmp_path):
    res = run(capsys, *generated(str(tmp_path / "nowhere.json")))
    assert_one_line_error(*res, "nowhere.json", "not found")


@pytest.mark.parametrize("argv_tail, needles", [
    (["--window", "5:3"], ["--window", "5:3"]),
    (["--window", "2:40"], ["--window", "40"]),                 # past the 12 generated jobs
    (["--cluster", "v100=x"], ["--cluster", "v100", "'x'"]),
    (["--cluster", "v100=2,a100=2"], ["--cluster", "a100", "not in the throughput table"]),
    (["--round", "0"], ["--round", "> 0"]),
    (["--rate", "0"], ["--rate", "> 0"]),
    (["--jobs", "0"], ["--jobs", ">= 1"]),
    (["--gpus-per-node", "0"], ["--gpus-per-node"]),
    (["--prices", "v100"], ["--prices", "NAME=VALUE"]),
], ids=["window-reversed", "window-past-jobs", "cluster-count", "cluster-type", "round-zero",
        "rate-zero", "jobs-zero", "gpus-per-node-zero", "prices-format"])
def test_bad_simulate_options(capsys, table_path, argv_tail, needles):
    res = run(capsys, *generated(table_path), *argv_tail)
    assert_one_line_error(*res, *needles)


def test_unknown_policy(capsys, table_path):
    argv = generated(table_path)
    argv[argv.index("max_min_fairness")] = "max_min_fairnes"
    res = run(capsys, *argv)
    assert_one_line_error(*res, "--policy", "'max_min_fairnes'", "max_min_fairness")


def test_trace_with_rate_is_refused(capsys, table_path, tmp_path):
    trace = tmp_path / "ok.trace"
    trace.write_text(GOOD_LINE + "\n")
    res = run(capsys, "simulate", "--policy", "fifo", "--throughputs", table_path,
              "--trace", trace, "--rate", "4", "--cluster", CLUSTER)
    assert_one_line_error(*res, "--trace", "--rate")


def test_generated_workload_needs_a_size(capsys, table_path):
    res = run(capsys, "simulate", "--policy", "fifo", "--throughputs", table_path, "--cluster", CLUSTER)
    assert_one_line_error(*res, "--jobs")


def test_bad_input_in_a_subprocess_has_no_traceback(tmp_path):
    proc = run_subprocess("simulate", "--policy", "fifo", "--throughputs", tmp_path / "nowhere.json",
                          "--jobs", "3", "--cluster", CLUSTER)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and "nowhere.json" in proc.stderr
    assert "Traceback" not in proc.stderr


# -- sweep ---------------------------------------------------------------------------
def sweep_args(table_path, *extra, policies="max_min_fairness,max_min_fairness:agnostic"):
    return ["sweep", "--policies", policies, "--rates", "4,8", "--seeds", "0",
            "--throughputs", table_path, "--cluster", CLUSTER, "--jobs", "10", *extra]


def test_sweep_two_policies_two_rates_in_two_processes(capsys, table_path, tmp_path):
    table_csv, png = tmp_path / "sweep.csv", tmp_path / "sweep.png"
    code, out, err = run(capsys, *sweep_args(table_path, "--processes", 2, "--csv", table_csv, "--plot", png))
    assert code == 0, err
    rows = read_csv(table_csv)
    assert len(rows) == 4
    # rows in input order: policy-major, then rate
    assert [(r["policy"], float(r["rate"])) for r in rows] == [
        ("max_min_fairness", 4.0), ("max_min_fairness", 8.0),
        ("max_min_fairness_agnostic", 4.0), ("max_min_fairness_agnostic", 8.0)]
    for r in rows:
        assert r["seed"] == "0"
        assert r["complete"] == "True" and r["finished"] == r["jobs"] == "10"
        assert float(r["average_jct_hours"]) > 0
    assert png.read_bytes().startswith(b"\x89PNG")
    # one progress line per run on stdout
    assert len(out.splitlines()) == 4
    assert sum("max_min_fairness_agnostic" in line for line in out.splitlines()) == 2


def test_sweep_json_matches_simulate(capsys, table_path):
    """A sweep row is the summary `simulate` prints for the same settings."""
    code, out, err = run(capsys, *sweep_args(table_path, "--processes", 1, "--json",
                                             policies="max_min_fairness"))
    assert code == 0, err
    rows = json.loads(out)
    assert [r["rate"] for r in rows] == [4.0, 8.0]
    code, out, err = run(capsys, *generated(table_path, jobs=10, rate=8), "--json")
    assert code == 0, err
    single = json.loads(out)
    for key in ("average_jct_hours", "makespan_hours", "finished", "rounds", "gpu_hours"):
        assert rows[1][key] == single[key], key


@pytest.mark.parametrize("argv_change, needles", [
    ({"--policies": "fifo:fast"}, ["--policies", "fifo:fast", ":agnostic"]),
    ({"--policies": "nosuch"}, ["--policy", "nosuch"]),
    ({"--rates": "4,x"}, ["--rates"]),
    ({"--rates": "4,-1"}, ["--rates", "> 0"]),
    ({"--seeds": ""}, ["at least one"]),
], ids=["bad-modifier", "unknown-policy", "rate-not-number", "rate-negative", "no-seeds"])
def test_bad_sweep_options(capsys, table_path, argv_change, needles):
    argv = sweep_args(table_path, "--processes", 1)
    for option, value in argv_change.items():
        argv[argv.index(option) + 1] = value
    res = run(capsys, *argv)
    assert_one_line_error(*res, *needles)


def test_sweep_processes_zero(capsys, table_path):
    res = run(capsys, *sweep_args(table_path, "--processes", 0))
    assert_one_line_error(*res, "--processes")


# -- once bugs: errors from worker processes, negative seeds, unwritable outputs --
def test_errors_survive_the_trip_from_a_worker_process():
    import pickle
    from slurm_gavel.core.errors import InputError, UnknownPolicyError
    err = pickle.loads(pickle.dumps(InputError("--cluster", "no such type")))
    assert (err.field, err.problem, str(err)) == ("--cluster", "no such type", "--cluster: no such type")
    err = pickle.loads(pickle.dumps(UnknownPolicyError("nope", ["fifo"])))
    assert "nope" in str(err) and err.known == ["fifo"]


def test_sweep_error_before_the_workers_start_is_one_line(capsys, tmp_path):
    res = run(capsys, *sweep_args(str(tmp_path / "nowhere.json"), "--processes", 2))
    assert_one_line_error(*res, "nowhere.json")


def test_negative_seed_is_one_line(capsys, table_path):
    try:
        res = run(capsys, *generated(table_path, "--seed", "-1"))
    except ValueError:
        pytest.fail("ValueError escaped main()")
    assert_one_line_error(*res, "--seed")


def test_csv_into_a_missing_directory_is_one_line(capsys, table_path, tmp_path):
    try:
        res = run(capsys, *generated(table_path, "--csv", tmp_path / "no" / "such" / "dir.csv"))
    except OSError:
        pytest.fail("OSError escaped main()")
    assert_one_line_error(*res, "dir.csv")

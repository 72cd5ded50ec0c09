"""The `slurm-gavel` command line: in-process for the bulk, a few real subprocesses."""
from __future__ import annotations

import copy
import io
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from slurm_gavel.cli import main
from slurm_gavel.policies import ALIASES, POLICIES

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "three_jobs.json"

SEED = {
    "worker_types": {"v100": {"count": 1, "price_per_hour": 2.48}, "k80": {"count": 1}},
    "jobs": [
        {"id": "0", "throughputs": {"v100": 40.0, "k80": 10.0}, "scale_factor": 1, "weight": 1.0},
        {"id": "1", "throughputs": {"v100": 12.0, "k80": 4.0}},
        {"id": "2", "throughputs": {"v100": 100.0, "k80": 50.0}},
    ],
}
# Seed 5.9: heterogeneity-aware max-min fairness on the three-job example.
SEED_X = np.array([[0.45, 0.00], [0.45, 0.09], [0.09, 0.91]])


def write(tmp_path, doc, name="in.json") -> str:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_subprocess(*argv, stdin=None):
    return subprocess.run([sys.executable, "-m", "slurm_gavel", *argv], input=stdin,
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def check_seed_json(doc):
    assert set(doc) >= {"policy", "allocation", "effective_throughput", "objective", "solve_seconds"}
    assert doc["policy"] == "max_min_fairness"
    x = np.array([[doc["allocation"][j][t] for t in ("v100", "k80")] for j in ("0", "1", "2")])
    assert np.abs(x - SEED_X).max() < 0.02, x
    # Every job gets 12/11 of its isolated throughput (isolated: 1/3 of each GPU).
    isolated = np.array([50.0, 16.0, 150.0]) / 3
    got = np.array([doc["effective_throughput"][j] for j in ("0", "1", "2")])
    np.testing.assert_allclose(got / isolated, 12 / 11, rtol=1e-4)
    assert doc["objective"] == pytest.approx(12 / 11, rel=1e-4)
    assert doc["solve_seconds"] >= 0


# -- policies -----------------------------------------------------------------
def test_policies_one_line_each(capsys):
    code, out, err = run(capsys, "policies")
    assert code == 0 and err == ""
    lines = out.strip().splitlines()
    assert [line.split()[0] for line in lines] == list(POLICIES)
    for line, (name, cls) in zip(lines, POLICIES.items()):
        assert cls.summary in line
        for alias, target in ALIASES.items():
            if target.policy == name:
                assert alias in line


def test_policies_json(capsys):
    code, out, _ = run(capsys, "policies", "--json")
    rows = json.loads(out)
    assert code == 0 and [r["name"] for r in rows] == list(POLICIES)
    las = next(r for r in rows if r["name"] == "max_min_fairness")
    assert {"name": "las", "agnostic": False, "space_sharing": False} in las["aliases"]


# -- solve ----------------------------------------------------------------------
def test_solve_json_seed_example(tmp_path, capsys):
    code, out, err = run(capsys, "solve", "--policy", "max_min_fairness",
                         "--input", write(tmp_path, SEED), "--json")
    assert code == 0 and err == ""
    check_seed_json(json.loads(out))


def test_solve_table(tmp_path, capsys):
    code, out, err = run(capsys, "solve", "--policy", "las", "--input", write(tmp_path, SEED))
    assert code == 0 and err == ""
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("job"))
    assert header.split() == ["job", "v100", "k80", "throughput", "normalized"]
    rows = {line.split()[0]: line.split() for line in lines if line.split()[:1] in (["0"], ["1"], ["2"])}
    assert rows["0"][1:3] == ["0.455", "0.000"]
    assert rows["2"][1:3] == ["0.091", "0.909"]
    assert all(row[4] == "1.09" for row in rows.values())      # 12/11 of isolated
    assert float(rows["1"][3]) == pytest.approx(64 / 11, rel=1e-3)
    assert any(line.startswith("objective: 1.09091") for line in lines)
    assert "solve time:" in out


def test_solve_agnostic(capsys):
    code, out, _ = run(capsys, "solve", "--policy", "max_min_fairness", "--agnostic",
                       "--input", str(EXAMPLE), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["policy"] == "max_min_fairness_agnostic"
    # The agnostic X, judged with the true throughputs, is worse for the worst-off job.
    aware = json.loads(run(capsys, "solve", "--policy", "max_min_fairness",
                           "--input", str(EXAMPLE), "--json")[1])
    iso = {"0": 50 / 3, "1": 16 / 3, "2": 150 / 3}
    worst = lambda d: min(d["effective_throughput"][j] / iso[j] for j in iso)  # noqa: E731
    assert worst(doc) < worst(aware) - 1e-3


def test_solve_space_sharing_table_shows_pair_rows(tmp_path, capsys):
    doc = copy.deepcopy(SEED)
    doc["pairs"] = [{"jobs": ["0", "1"], "throughputs": {"v100": [30.0, 10.0], "k80": [8.0, 3.0]}}]
    path = write(tmp_path, doc)
    code, out, err = run(capsys, "solve", "--policy", "max_min_fairness", "--space-sharing",
                         "--input", path)
    assert code == 0 and err == ""
    assert any(line.startswith("0+1 ") for line in out.splitlines())
    code, out, _ = run(capsys, "solve", "--policy", "max_min_fairness_packed", "--input", path, "--json")
    shared = json.loads(out)
    assert shared["pair_allocation"][0]["jobs"] == ["0", "1"]
    # Sharing does better for everyone's floor than the seed's 12/11.
    assert shared["objective"] > 12 / 11 + 1e-3
    # Without --space-sharing the pairs are ignored, with a note on stderr.
    code, out, err = run(capsys, "solve", "--policy", "max_min_fairness", "--input", path, "--json")
    assert code == 0 and "pair_allocation" not in json.loads(out)
    assert "ignored" in err


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_solves_the_example(policy, capsys):
    code, out, err = run(capsys, "solve", "--policy", policy, "--input", str(EXAMPLE), "--json")
    assert code in (0, 2), err
    if code == 2:      # a policy that needs fields the example lacks says which
        assert err.startswith("slurm-gavel: error: ") and len(err.splitlines()) == 1
        return
    doc = json.loads(out)
    for job, row in doc["allocation"].items():
        assert sum(row.values()) <= 1 + 1e-6


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_solves_the_space_sharing_example(policy, capsys):
    """examples/space_sharing.json has every optional field: no policy lacks anything."""
    example = str(ROOT / "examples" / "space_sharing.json")
    flags = ["--space-sharing"] if POLICIES[policy].supports_space_sharing else []
    code, out, err = run(capsys, "solve", "--policy", policy, "--input", example, "--json", *flags)
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc["allocation"]) == {"0", "1"}
    assert all(v >= 0 for v in doc["effective_throughput"].values())


def test_stdin_in_process(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(SEED)))
    code, out, _ = run(capsys, "solve", "--policy", "las", "--input", "-", "--json")
    assert code == 0
    check_seed_json(json.loads(out))


# -- bad input: exit 2, one line naming the field ----------------------------
def mutated(change):
    doc = copy.deepcopy(SEED)
    change(doc)
    return doc


BAD = {
    "malformed JSON": ('{"worker_types": {"v100": {"count": 1}},\n "jobs": [,]}', "las",
                       "malformed JSON at line 2 column"),
    "unknown policy": (SEED, "lottery", "--policy: unknown policy 'lottery'"),
    "missing field": (mutated(lambda d: d["jobs"][1].pop("throughputs")), "las",
                      "jobs[1].throughputs: is required"),
    "missing count": (mutated(lambda d: d["worker_types"]["k80"].pop("count")), "las",
                      "worker_types.k80.count: is required"),
    "negative": (mutated(lambda d: d["jobs"][2]["throughputs"].update(k80=-1)), "las",
                 "jobs[2].throughputs.k80: must be a number >= 0, got -1"),
    "bool": (mutated(lambda d: d["jobs"][0].update(weight=True)), "las",
             "jobs[0].weight: must be a number > 0, got true"),
    "unknown key": (mutated(lambda d: d["jobs"][0].update(foo=1)), "las",
                    "jobs[0]: unknown key 'foo'"),
    "fits no type": (mutated(lambda d: d["jobs"][1].update(scale_factor=2)), "las",
                     "jobs[1]: fits no worker type"),
    "unknown worker type": (mutated(lambda d: d["jobs"][0]["throughputs"].update(a100=1)), "las",
                            "jobs[0].throughputs: unknown worker type 'a100'"),
    "pair with unknown job": (mutated(lambda d: d.update(
        pairs=[{"jobs": ["0", "42"], "throughputs": {"v100": [1, 1]}}])), "las",
        "pairs[0].jobs[1]: unknown job '42'"),
    "needs steps": (SEED, "makespan", "jobs[0].steps_remaining: is required"),
    "needs prices": (SEED, "min_cost", "worker_types.k80.price_per_hour"),
    "no space sharing": (SEED, "isolated --space-sharing", "--space-sharing: policy isolated"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_exits_2_with_one_line(case, tmp_path, capsys):
    doc, policy, expected = BAD[case]
    argv = ["solve", "--policy", *policy.split(), "--input", write(tmp_path, doc)]
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert err.startswith("slurm-gavel: error: ")
    assert expected in err


def test_missing_input_file(tmp_path, capsys):
    code, out, err = run(capsys, "solve", "--policy", "las", "--input", str(tmp_path / "none.json"))
    assert code == 2 and len(err.splitlines()) == 1 and "--input: cannot read" in err


@pytest.mark.parametrize("argv", [[], ["frobnicate"], ["solve", "--input", "x.json"],
                                  ["solve", "--policy", "las"], ["solve", "--policy", "las",
                                                                 "--input", "-", "--bogus"]])
def test_usage_errors_exit_2_with_one_line(argv, capsys):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and "error:" in err


def test_help_exits_0(capsys):
    code, out, _ = run(capsys, "solve", "--help")
    assert code == 0 and "--space-sharing" in out


def test_solver_error_exits_1(tmp_path, capsys, monkeypatch):
    from slurm_gavel.core.errors import SolverError
    from slurm_gavel.policies.fairness import MaxMinFairness

    def fail(self, inp):
        raise SolverError("max_min_fairness: no optimal solution (HIGHS: status infeasible)")

    monkeypatch.setattr(MaxMinFairness, "allocate", fail)
    code, out, err = run(capsys, "solve", "--policy", "las", "--input", write(tmp_path, SEED))
    assert code == 1 and out == "" and "no optimal solution" in err
    assert len(err.splitlines()) == 1


# -- real processes ---------------------------------------------------------------
def test_subprocess_table():
    proc = run_subprocess("solve", "--policy", "max_min_fairness", "--input", str(EXAMPLE))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert "normalized" in proc.stdout and "objective: 1.09091" in proc.stdout


def test_subprocess_json_from_stdin():
    proc = run_subprocess("solve", "--policy", "las", "--input", "-", "--json",
                          stdin=json.dumps(SEED))
    assert proc.returncode == 0, proc.stderr
    check_seed_json(json.loads(proc.stdout))      # nothing but the JSON on stdout


def test_subprocess_bad_input():
    proc = run_subprocess("solve", "--policy", "las", "--input", "-", stdin='{"jobs": [}')
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "slurm-gavel: error: <stdin>: malformed JSON at line 1 column 11: Expecting value"]
    assert "Traceback" not in proc.stderr


def test_subprocess_unknown_policy():
    proc = run_subprocess("solve", "--policy", "nope", "--input", str(EXAMPLE))
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and "--policy: unknown policy 'nope'" in proc.stderr

"""bench/gavel_policies.py's two pieces of its own: the SLO trace it gives our simulator
(Gavel's generated jobs with the SLOs Gavel's generator draws) and the window cost it reads
from Gavel's log.  The simulators themselves are not run here."""
from __future__ import annotations

import importlib.util
import json
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


def _setup(bench, tmp_path, rate=5.6):
    return bench.Setup(tmp_path, "python", tmp_path / "simulation_throughputs.json", rate,
                       (4000, 5000), 100, 0, 3600.0)


def test_a_finished_case_is_one_json_line_and_is_skipped_after(bench, tmp_path):
    case = next(c for c in bench.CASES if c.name == "min_cost_slo aware")
    s = _setup(bench, tmp_path)
    gavel = bench.Result(1234.5, 600.25, "", {"jct": 30.5, "slo_violations": 12.0})
    ours = bench.Result(1200.0, 40.0, "ours: exit 1: boom", {"jct": float("nan"), "slo_violations": 9})
    path = tmp_path / "results.jsonl"
    with open(path, "a") as f:
        f.write(json.dumps(bench.record(case, s, gavel, ours, "abc1234")) + "\n")
    text = path.read_text()
    assert len(text.splitlines()) == 1 and "NaN" not in text     # strict JSON: a missing figure is null
    [r] = bench.read_results(path)
    assert (r["case"], r["commit"], r["metric"]) == ("min_cost_slo aware", "abc1234", "cost")
    assert r["gavel"]["value"] == 1234.5 and r["ours"]["wall"] == 40.0
    assert r["ours"]["extra"]["jct"] is None and r["ours"]["note"] == "ours: exit 1: boom"
    assert bench.done([r], case, s)
    other = next(c for c in bench.CASES if c.name == "min_cost aware")
    assert not bench.done([r], other, s)                       # another case
    assert not bench.done([r], case, _setup(bench, tmp_path, rate=2.0))   # another load
    assert bench.read_results(tmp_path / "absent.jsonl") == []


def test_render_is_the_rows_of_the_latest_records_in_case_order(bench, tmp_path):
    s = _setup(bench, tmp_path)
    by_name = {c.name: c for c in bench.CASES}
    las, fifo = by_name["las aware"], by_name["fifo aware"]
    records = [
        bench.record(las, s, bench.Result(29.0, 500.0), bench.Result(30.0, 20.0), "old"),
        bench.record(las, s, bench.Result(29.42, 524.0), bench.Result(29.3, 25.0), "new"),
        bench.record(fifo, s, bench.Result(109.13, 594.0), bench.Result(float("nan"), 1.0,
                                                                         "ours over 3600 s"), "new"),
    ]
    records = [json.loads(json.dumps(r)) for r in records]     # as read back from the file
    table = bench.render(records).splitlines()
    assert table[:2] == bench.HEADER.splitlines()
    assert len(table) == 4                                     # one row per case: the latest las
    assert table[2].startswith("| fifo aware |")               # CASES' order, not the file's
    assert "| 109.13 | nan |" in table[2] and "ours over 3600 s" in table[2]
    assert table[3] == bench.row(las, bench.Result(29.42, 524.0), bench.Result(29.3, 25.0))


def test_render_flag_writes_the_table_without_gavel(bench, tmp_path, monkeypatch):
    s = _setup(bench, tmp_path)
    case = bench.CASES[0]
    results, markdown = tmp_path / "r.jsonl", tmp_path / "r.md"
    results.write_text(json.dumps(bench.record(case, s, bench.Result(1.0, 2.0),
                                               bench.Result(0.5, 1.0), "x")) + "\n")
    monkeypatch.setattr(sys, "argv", ["gavel_policies.py", "--render", "--results", str(results),
                                      "--markdown", str(markdown)])
    assert bench.main() == 0
    assert markdown.read_text() == bench.render(bench.read_results(results))

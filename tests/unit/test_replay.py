"""`slurm-gavel replay`: sacct history -> trace -> each policy and what Slurm did.

The parsers read recorded sacct output of Slurm 22.05 and 24.11 (tests/fixtures/history-
VERSION.*, the same job mix recorded by record-history.sh on each) in both formats, and the
22.05 JSON with its numbers rewritten as number objects (synthesized, not a recording: no
recording has them in `time` or `job_id`, a parser must still take them).  The end-to-end
test runs a mix of jobs on the real local cluster with accounting and replays that cluster's
own sacct.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from slurm_gavel.cli import main
from slurm_gavel.core.errors import InputError
from slurm_gavel.sim.replay import compare, with_job_rows
from slurm_gavel.slurm.commands import SlurmCLI
from slurm_gavel.slurm.history import (HISTORY_FIELDS, cluster_shape, parse_history_json,
                                       parse_history_parsable)
from slurm_gavel.slurm.records import parse_nodes

from tests.support.estimator import GAVEL_TABLE as TABLE, gavel_table as table
from tests.support.history import build


# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def synthesized_number_objects(job: dict) -> dict:
    """A 22.05 sacct job with 23.02+'s shapes everywhere: state lists, every number as a
    {"set", "number"} object (synthesized, not a recording)."""
    out = dict(job)
    out["state"] = {**job["state"], "current": [job["state"]["current"]]}
    out["time"] = {k: ({"set": True, "infinite": False, "number": v} if isinstance(v, int) else v)
                   for k, v in job["time"].items()}
    out["job_id"] = {"set": True, "infinite": False, "number": job["job_id"]}
    return out


VERSIONS = ("22.05", "24.11")


# ElapsedRaw of the requeued job's two runs, as each recording has them (the jobs are sleeps:
# a second more or less at random)
REQUEUE_ELAPSED = {"22.05": (3, 1), "24.11": (2, 1)}


def recorded(kind: str, version: str = "22.05"):
    if kind == "parsable":
        return parse_history_parsable((FIXTURES / f"history-{version}.txt").read_text(),
                                      HISTORY_FIELDS)
    data = json.loads((FIXTURES / f"history-{version}.json").read_text())
    if kind == "synthesized-number-objects":
        assert version == "22.05"
        data = {"jobs": [synthesized_number_objects(j) for j in data["jobs"]]}
    return parse_history_json(data)


@pytest.mark.parametrize("version, kind", [("22.05", "json"), ("22.05", "parsable"),
                                           ("24.11", "json"), ("24.11", "parsable"),
                                           ("22.05", "synthesized-number-objects")])
def test_recorded_history(version, kind):
    jobs = recorded(kind, version)
    assert [j.job_id for j in jobs] == ["1", "2", "3", "4", "5", "6"]     # submission order
    by = {j.job_id: j for j in jobs}
    assert [(by[i].gpus, by[i].gpu_type, by[i].partition) for i in "123456"] == [
        (2, "v100", "v100"), (1, "k80", "k80"), (1, "v100", "v100"), (1, "v100", "v100"),
        (4, "k80", "k80"), (0, None, "k80")]
    assert by["2"].name == "esc\x1b[31m|x"            # raw here; printable when shown
    assert by["3"].admin_comment.startswith("gavel:v1 model=resnet18")
    requeued = by["4"]
    # 24.11's JSON says ["PENDING", "REQUEUED"]: the name sacct's State column shows
    assert [r.state for r in requeued.runs] == ["REQUEUED", "COMPLETED"]
    assert requeued.restarts == 1 and requeued.submit == requeued.runs[0].submit
    assert [r.elapsed for r in requeued.runs] == list(REQUEUE_ELAPSED[version])
    assert requeued.gpu_seconds() == {"v100": sum(REQUEUE_ELAPSED[version])}   # one GPU
    assert by["1"].gpu_seconds() == {"v100": 2 * 2}
    assert all(j.state == "COMPLETED" for j in jobs)


@pytest.mark.parametrize("version", VERSIONS)
def test_both_formats_read_the_same_history(version):
    def key(j):
        return (j.job_id, j.name, j.user, j.account, j.admin_comment,
                [(r.state, r.submit, r.start, r.end, r.elapsed, r.partition, r.nodes, r.gpus,
                  r.gpu_type) for r in j.runs])
    assert [key(j) for j in recorded("json", version)] == [key(j) for j in recorded("parsable", version)]
    if version == "22.05":
        assert [key(j) for j in recorded("json")] == [
            key(j) for j in recorded("synthesized-number-objects")]


def test_broken_or_strange_records_are_skipped_not_raised():
    assert parse_history_json({"jobs": [None, 3, {"job_id": "x"}, {"job_id": 5, "time": []}]})[0].job_id == "5"
    assert parse_history_json([]) == [] and parse_history_json({"jobs": {}}) == []
    text = "1.batch|COMPLETED\nJobIDRaw|State\n\n7|RUNNING|Unknown|Unknown|Unknown|x|p|None assigned||a|u||n\n"
    [job] = parse_history_parsable(text)
    assert (job.job_id, job.start, job.gpus, job.runs[0].nodes) == ("7", None, 0, ())


def test_a_state_list_is_named_as_sacct_names_it():
    """24.11's state lists (base first, then flags) read as sacct's State column would show them."""
    def state(current):
        job = {"job_id": 1, "state": {"current": current}, "time": {"submission": 1000}}
        return parse_history_json({"jobs": [job]})[0].runs[0].state
    assert state(["PENDING", "REQUEUED"]) == "REQUEUED" == state("REQUEUED")
    assert state(["PENDING", "REQUEUE_HOLD"]) == "REQUEUE_HOLD"
    assert state(["COMPLETED", "REQUEUED", "SPECIAL_EXIT"]) == "REQUEUED"     # Slurm's order
    assert state(["COMPLETED", "SOME_NEW_FLAG"]) == "COMPLETED"               # unknown: the base
    assert state([]) == state(None) == "UNKNOWN"


def test_untyped_gpus_take_their_node_type():
    text = "9|COMPLETED|1000|1001|1011|10|gpu|n1|gres/gpu=2|acct|u||job\n"
    [job] = parse_history_parsable(text, node_types={"n1": "a100"})
    assert job.gpu_seconds() == {"a100": 20.0}


@pytest.mark.parametrize("name", ["sinfo-22.05.json", "nodes-24.11.json"])
def test_cluster_shape_from_the_recorded_nodes(name):
    """The node listings SlurmCLI.nodes() returns on each version (recorded, 3 types x 2 x 4)."""
    gpus, per_node, node_types = cluster_shape(parse_nodes(json.loads((FIXTURES / name).read_text())))
    assert gpus == {"v100": 8, "p100": 8, "k80": 8} and per_node == {"v100": 4, "p100": 4, "k80": 4}
    assert node_types["p100-1"] == "p100" and len(node_types) == 6


@pytest.mark.parametrize("version", VERSIONS)
def test_trace_from_history_says_where_each_speed_came_from(version):
    t = table()
    replay = build(recorded("json", version), t, ["v100", "k80"])
    assert [j["job"] for j in replay.jobs] == ["1", "2", "3", "4", "5"]
    assert replay.skipped == [{"job": "6", "name": "nogpu",
                               "reason": "no GPUs (or AccountingStorageTRES lacks gres/gpu)"}]
    sources = {j["job"]: j["speed_from"] for j in replay.jobs}
    assert sources["3"] == "nearest ResNet-18 (batch size 16)"      # model=resnet18
    assert sources["1"] == "table median"
    # arrival order kept, clock starts at the first arrival, work = seconds it ran
    assert [tj.arrival_time for tj in replay.trace] == sorted(tj.arrival_time for tj in replay.trace)
    assert replay.trace[0].arrival_time == 0.0
    requeue_steps = sum(REQUEUE_ELAPSED[version])
    assert [(tj.scale_factor, tj.total_steps) for tj in replay.trace] == [
        (2, 2), (1, 1), (1, 1), (1, requeue_steps), (4, 1)]
    assert {tj.entity for tj in replay.trace} == {"root"}
    # a job on its own type runs at 1 step/s there; other types by the ratio
    rows = replay.rows[("slurm job 1", 2)]
    assert rows["v100"] == 1.0 and 0 < rows["k80"] < 1.0
    # admin's ratios instead, and a pattern that names a model in the table
    replay = build(recorded("json", version), t, ["v100", "k80"], pattern=re.compile(r"^(two)$"),
                   speeds={"v100": 4, "k80": 1})
    assert {j["job"]: j["speed_from"] for j in replay.jobs}["2"] == "speeds"
    assert replay.rows[("slurm job 2", 1)] == {"k80": 1.0, "v100": 4.0}


def test_a_known_model_replays_with_the_table():
    t = table()
    text = ("1|COMPLETED|1000|1000|1100|100|v100|v100-0|gres/gpu:v100=1,gres/gpu=1|a|u|"
            "gavel:v1 model=A3C weight=1|x\n")
    replay = build(parse_history_parsable(text), t, ["v100", "k80"])
    [job] = replay.jobs
    assert job["speed_from"] == "table model" and job["job_type"] == "A3C"
    assert replay.trace[0].total_steps == round(100 * t.solo("A3C", 1)["v100"])


def test_a_type_without_any_speed_is_a_clear_error():
    text = "1|COMPLETED|1000|1000|1100|100|a100|n|gres/gpu:a100=1,gres/gpu=1|a|u||x\n"
    with pytest.raises(InputError, match="a100"):
        build(parse_history_parsable(text), table(), ["a100", "v100"])


@pytest.mark.parametrize("version", VERSIONS)
def test_compare_has_slurm_first_then_each_policy(version):
    t = table()
    replay = build(recorded("json", version), t, ["v100", "k80"])
    rows = compare(replay.trace, with_job_rows(t, replay.rows, ["v100", "k80"]), {"v100": 4, "k80": 4},
                   {"v100": 4, "k80": 4}, [("fifo", False), ("max_min_fairness", False)],
                   replay.observed, round_seconds=2.0, restart_seconds=0.0)
    assert [r["policy"] for r in rows] == ["slurm (what it did)", "fifo", "max_min_fairness"]
    slurm = rows[0]
    assert slurm["jobs"] == slurm["finished"] == 5
    v100 = 4 + 1 + sum(REQUEUE_ELAPSED[version])
    assert slurm["gpu_hours"] == {"v100": v100 / 3600, "k80": (1 + 4) / 3600}
    assert slurm["restarts_per_job"] == pytest.approx(1 / 5)
    for r in rows[1:]:
        assert r["finished"] == 5 and r["complete"]


@pytest.mark.parametrize("version", VERSIONS)
def test_cli_on_a_saved_history(version, tmp_path, capsys):
    table()
    args = ["replay", "--throughputs", str(TABLE), "--cluster", "v100=4,k80=4", "--round", "2",
            "--restart-seconds", "0", "--policies", "fifo"]
    assert main(args + ["--sacct-file", str(FIXTURES / f"history-{version}.txt"), "--jobs"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "esc\\x1b[31m|x" in out
    assert re.search(r"^slurm \(what it did\)\s+5/5", out, re.M) and re.search(r"^fifo\s+5/5", out, re.M)
    assert "1 skipped" in out
    plot = tmp_path / "cdf.png"
    assert main(args + ["--sacct-file", str(FIXTURES / f"history-{version}.json"), "--json",
                        "--plot", str(plot)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in data["rows"]] == ["slurm (what it did)", "fifo"]
    assert data["jobs"][1]["name"] == "esc\\x1b[31m|x"
    assert plot.stat().st_size > 0 or pytest.skip("matplotlib missing")
    # the trace and its table, saved, replay the same under `simulate`
    prefix = tmp_path / "site"
    assert main(args + ["--sacct-file", str(FIXTURES / f"history-{version}.txt"), "--json",
                        "--save-trace", str(prefix)]) == 0
    fifo = json.loads(capsys.readouterr().out)["rows"][1]
    assert main(["simulate", "--policy", "fifo", "--trace", f"{prefix}.trace", "--throughputs",
                 f"{prefix}.json", "--cluster", "v100=4,k80=4", "--round", "2",
                 "--restart-seconds", "0", "--json", "--quiet"]) == 0
    simulated = json.loads(capsys.readouterr().out)
    assert simulated["finished"] == fifo["finished"] == 5
    assert simulated["average_jct_hours"] == pytest.approx(fifo["average_jct_hours"])


def test_cli_nothing_to_replay_says_why(tmp_path, capsys):
    table()
    saved = tmp_path / "nogpu.txt"
    saved.write_text("6|COMPLETED|1000|1000|1010|10|k80|k80-0|billing=1,cpu=1,node=1|a|u||x\n")
    assert main(["replay", "--throughputs", str(TABLE), "--cluster", "k80=4",
                 "--sacct-file", str(saved)]) == 2
    err = capsys.readouterr().err
    assert "no job to replay among the 1 jobs found; 1 no GPUs" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("bad, field", [(["--speeds", "v100=x"], "--speeds"),
                                        (["--policies", "nosuch"], "--policies"),
                                        (["--model-pattern", "("], "--model-pattern"),
                                        (["--start", "now;rm"], "--start")])
def test_cli_bad_input_is_one_line(bad, field, capsys):
    table()
    code = main(["replay", "--throughputs", str(TABLE), "--cluster", "v100=4",
                 "--sacct-file", str(FIXTURES / "history-22.05.txt"), *bad])
    err = capsys.readouterr().err
    if field == "--start":        # checked only when sacct runs: give no file
        code = main(["replay", "--throughputs", str(TABLE), "--cluster", "v100=4", *bad])
        err = capsys.readouterr().err
    assert code == 2 and field in err and len(err.strip().splitlines()) == 1

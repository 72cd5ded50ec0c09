"""`slurm-gavel replay` end to end: a mix of jobs on the real local cluster with accounting,
that cluster's own sacct replayed. The cases of tests/unit/test_replay.py that need a real
Slurm cluster (the parsers and the recorded sacct output they read are described there).
"""
from __future__ import annotations

import json
import re
import time

import pytest

from slurm_gavel.cli import main
from slurm_gavel.sim.replay import compare, with_job_rows
from slurm_gavel.slurm.commands import SlurmCLI
from slurm_gavel.slurm.history import HISTORY_FIELDS, cluster_shape, read_history
from slurm_gavel.slurm.records import parse_nodes

from tests.support.estimator import GAVEL_TABLE as TABLE, gavel_table as table
from tests.support.history import build


# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24


REQUEUE_SCRIPT = """#!/bin/bash
if [ "${SLURM_RESTART_COUNT:-0}" -ge 1 ]; then sleep 1; exit 0; fi
trap 'exit 85' USR2
touch "$1"
for i in $(seq 600); do sleep 0.1; done
"""


def _state(cluster, job):
    return cluster.run(["squeue", "-h", "--states=all", "-j", job, "-o", "%T"], check=False).stdout.strip()


def _wait(cluster, job, states, timeout=60):
    deadline = time.monotonic() + timeout
    while _state(cluster, job) not in states:
        assert time.monotonic() < deadline, f"job {job} is {_state(cluster, job)}, not {states}"
        time.sleep(0.2)


def test_replay_reads_the_clusters_own_sacct(slurm_accounting_cluster, tmp_path, monkeypatch, capsys):
    """A recorded mix (GPU counts 1/2/4, both partitions, two accounts, a requeued job, a
    no-GPU job) runs for real; replay reads sacct and gets every job, its GPU-seconds per
    type and the arrival order exactly as Slurm accounted them."""
    c = slurm_accounting_cluster
    t = table()
    for account in ("replaya", "replayb"):
        c.add_user("root", account)
    try:
        _replay_the_mix(c, t, tmp_path, monkeypatch, capsys)
    finally:                  # the session's cluster is shared: leave its associations as found
        for account in ("replaya", "replayb"):
            c.run(["sacctmgr", "-i", "delete", "user", "root", f"account={account}"], check=False)
            c.run(["sacctmgr", "-i", "delete", "account", account], check=False)


def _replay_the_mix(c, t, tmp_path, monkeypatch, capsys):
    (tmp_path / "requeue.sh").write_text(REQUEUE_SCRIPT)
    mix = [("v100", 2, "replaya", ["--wrap", "sleep 2"]),
           ("k80", 1, "replayb", ["--wrap", "sleep 1"]),
           ("v100", 1, "replaya", [str(tmp_path / "requeue.sh"), str(tmp_path / "trap-set")]),
           ("k80", 4, "replayb", ["--wrap", "sleep 1"]),
           ("v100", 1, "replayb", ["--wrap", "sleep 1"]),
           ("k80", 0, "replaya", ["--wrap", "sleep 1"])]
    ids = []
    for partition, gpus, account, cmd in mix:
        ids.append(c.run(["sbatch", "--parsable", "-p", partition, "-A", account, "-J", f"mix{len(ids)}",
                          "-o", str(tmp_path / "%j.out"), *([f"--gres=gpu:{gpus}"] if gpus else []),
                          *cmd]).stdout.strip().split(";")[0])
    requeued = ids[2]
    deadline = time.monotonic() + 60
    while not (tmp_path / "trap-set").exists():    # the trap is set: USR2 makes it exit 85
        assert time.monotonic() < deadline, f"job {requeued} is {_state(c, requeued)}"
        time.sleep(0.2)
    c.run(["scancel", "--batch", "--signal=USR2", requeued])
    _wait(c, requeued, {"PENDING", "SPECIAL_EXIT"})
    # released at once, its second run has been seen to fail at launch (exit 1, no run time)
    # while the first one's step was still being cleaned up on the node
    time.sleep(2)
    c.run(["scontrol", "update", f"jobid={requeued}", "StartTime=now"])
    c.run(["scontrol", "release", requeued])
    for job in ids:
        if job == requeued and _state(c, job) == "FAILED":     # say why, when it happens
            raw = c.run(["sacct", "-n", "-P", "-X", "-D", f"--jobs={job}", "--starttime=1970-01-02",
                         "--format=JobIDRaw,State,ExitCode,Start,End"]).stdout
            pytest.fail(f"requeued job {job} FAILED: {raw!r}; "
                        f"{c.run(['scontrol', 'show', 'job', job], check=False).stdout!r}")
        _wait(c, job, {"COMPLETED"})
    cli = SlurmCLI(env=c.env)
    cluster, per_node, node_types = cluster_shape(parse_nodes(cli.nodes()))
    assert cluster == {"v100": 4, "k80": 4} and per_node == {"v100": 4, "k80": 4}
    # the truth, read by hand from sacct's own parsable lines: GPU-seconds per type
    deadline = time.monotonic() + 30
    while True:
        raw = c.run(["sacct", "-n", "-P", "-X", "-D", "--starttime=1970-01-02", "--endtime=now",
                     f"--jobs={','.join(ids)}", "--format=JobIDRaw,State,ElapsedRaw,AllocTRES"]).stdout
        lines = [line.split("|") for line in raw.splitlines()]
        if len(lines) == len(ids) + 1 and all(s in ("COMPLETED", "REQUEUED") for _, s, _, _ in lines):
            break
        assert time.monotonic() < deadline, raw
        time.sleep(0.5)
    truth: dict[str, float] = {}
    for job, state, elapsed, tres in lines:
        m = re.search(r"gres/gpu:(\w+)=(\d+)", tres)
        if m:
            truth[m.group(1)] = truth.get(m.group(1), 0) + int(m.group(2)) * int(elapsed)
    for as_json in (True, False):
        # a windowed query (no --jobs) has been seen to miss the newest records for a moment
        # after they were listed by id: wait until it lists every run too
        deadline = time.monotonic() + 30
        while True:
            text = cli.history("now-1hour", accounts=["replaya", "replayb"], as_json=as_json,
                               fields=HISTORY_FIELDS)
            history = [j for j in read_history(text, node_types) if j.job_id in ids]
            if sum(len(j.runs) for j in history) == len(ids) + 1 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        seen = [(j.job_id, j.submit, [(r.state, r.submit, r.start, r.end, r.elapsed) for r in j.runs])
                for j in history if j.job_id == requeued]
        assert [j.job_id for j in history] == ids, seen           # arrival order
        replay = build(history, t, list(cluster))
        assert [j["job"] for j in replay.jobs] == ids[:5], (replay.skipped, seen)   # every GPU job
        assert [s["job"] for s in replay.skipped] == [ids[5]], (replay.skipped, seen)
        assert [j["gpus"] for j in replay.jobs] == [2, 1, 1, 4, 1]
        assert [j["runs"] for j in replay.jobs] == [1, 1, 2, 1, 1]
        assert {tj.entity for tj in replay.trace} == {"replaya", "replayb"}
        rows = compare(replay.trace, with_job_rows(t, replay.rows, list(cluster)), cluster, per_node,
                       [("fifo", False)], replay.observed, round_seconds=2.0, restart_seconds=0.0)
        assert {wt: round(h * 3600) for wt, h in rows[0]["gpu_hours"].items()} == truth
        assert rows[0]["finished"] == 5 and rows[1]["finished"] == 5
        # each replayed job's work is what it ran, on the type it had
        assert [tj.total_steps for tj in replay.trace] == [j["run_seconds"] for j in replay.jobs]
    # the command itself: nodes and sacct read live, one row per policy after Slurm's
    monkeypatch.setenv("SLURM_CONF", str(c.slurm_conf))
    assert main(["replay", "--throughputs", str(TABLE), "--start", "now-1hour",
                 "--account", "replaya,replayb", "--policies", "fifo", "--round", "2",
                 "--restart-seconds", "0", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["cluster"] == {"v100": 4, "k80": 4}
    assert [j["job"] for j in data["jobs"]] == ids[:5]
    assert {wt: round(h * 3600) for wt, h in data["rows"][0]["gpu_hours"].items()} == truth

"""Job shapes a Slurm user submits, under the daemon on the real local cluster (issue 11 §6)."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from test_daemon import MODELS, queue, start_daemon, stop_daemon, submit, write_config


@pytest.fixture
def clean(slurm_cluster):
    slurm_cluster.run(["scancel", "--user", "root"], check=False)
    yield slurm_cluster
    slurm_cluster.run(["scancel", "--user", "root"], check=False)


def _tasks_left(cluster, array: str) -> list[str]:
    out = cluster.run(["squeue", "-h", "-r", "-o", "%i %T"]).stdout
    return [line.split()[0] for line in out.splitlines()
            if line.startswith(f"{array}_") and line.split()[1] != "COMPLETED"]


def test_array_tasks_are_scheduled_as_separate_jobs(clean, tmp_path):
    cluster = clean
    config = write_config(tmp_path, cluster, round_seconds=8, tick_seconds=1)
    steps = 20
    array = submit(cluster, tmp_path, "convnet", 2, steps, extra=["--array=0-7"])
    plain = [submit(cluster, tmp_path, MODELS[i % 4], 2, steps) for i in range(6)]
    tasks = [f"{array}_{k}" for k in range(8)]
    shown: set[str] = set()
    daemon = start_daemon(config)
    try:
        deadline = time.time() + 360
        while time.time() < deadline:
            if (tmp_path / "gavel.db").exists():
                out = subprocess.run([sys.executable, "-m", "slurm_gavel", "queue", "--db",
                                      str(tmp_path / "gavel.db"), "--json"],
                                     capture_output=True, text=True)
                if out.returncode == 0:
                    shown |= {row["jobid"] for row in json.loads(out.stdout)["jobs"]}
            left = _tasks_left(cluster, array) + [j for j, s in queue(cluster).items()
                                                  if j in plain and s != "COMPLETED"]
            if not left:
                break
            assert daemon.poll() is None, daemon.communicate()[0][-3000:]
            time.sleep(2)
        else:
            pytest.fail(f"still queued after 360 s: {left}")
    finally:
        code, log = stop_daemon(daemon)
    assert code == 0, log[-3000:]
    assert "resizing not supported" not in log and "Invalid job id" not in log, log[-3000:]
    # gqueue named every task on its own
    assert set(tasks) <= shown, shown
    outs = {p.name: p.read_text() for p in tmp_path.glob("out-*.txt")}
    done = [name for name, text in outs.items() if f"done at {steps}" in text]
    assert len(done) == len(tasks) + len(plain), outs
    # tasks were preempted and resumed like any job (one holds the array's own id)
    restarted = [text for text in outs.values() if "restart=1" in text]
    assert restarted, "no job was preempted and resumed"


def test_an_owners_requeue_becomes_a_held_requeue(clean, tmp_path):
    cluster = clean
    config = write_config(tmp_path, cluster, round_seconds=30, tick_seconds=1)
    job = submit(cluster, tmp_path, "convnet", 1, 40)
    daemon = start_daemon(config)
    try:
        deadline = time.time() + 60
        while queue(cluster).get(job) != "RUNNING":
            assert time.time() < deadline, "the daemon never started the job"
            time.sleep(0.5)
        # the owner requeues it: pending, not held; Slurm would start it by itself
        cluster.run(["scontrol", "requeue", job])
        deadline = time.time() + 15
        while True:
            out = cluster.run(["squeue", "-h", "-j", job, "-o", "%T|%r|%Q"]).stdout.strip()
            state, reason, priority = out.split("|")
            if state == "PENDING" and priority == "0":
                break
            assert time.time() < deadline, out
            time.sleep(0.5)
    finally:
        code, log = stop_daemon(daemon)
    assert code == 0, log[-3000:]
    assert "requeued by their owner" in log

"""Job shapes a Slurm user submits, under the daemon on the real local cluster (issue 11 §6)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from tests.support.daemon import MODELS, queue, start_daemon, stop_daemon, submit, write_config

# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24


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
    assert "resizing not supported" not in log, log[-3000:]
    # Slurm's "Invalid job id" only for a task that finished as the daemon acted on it (a
    # signal racing its last step), never for an id the daemon spelled wrong
    finished = set(re.findall(r"job (\S+) completed", log))
    refused = [line for line in log.splitlines() if "Invalid job id" in line]
    assert all(any(f"{job}:" in line or f"{job} " in line for job in finished) for line in refused), log[-3000:]
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
            if time.time() > deadline:
                break
            time.sleep(0.5)
    finally:
        code, log = stop_daemon(daemon)
    assert code == 0, log[-3000:]
    assert state == "PENDING" and priority == "0", (out, log[-3000:])
    assert "requeued by their owner" in log


def test_a_partition_the_jobs_account_may_not_use_is_left_out_of_its_row(slurm_accounting_cluster,
                                                                         tmp_path):
    """Association limits: an account allowed on k80 only. The policy prefers v100 for the
    model; Slurm refuses the move ("Invalid account or account/partition combination"),
    and from then on the job is planned on k80, where it runs."""
    from slurm_gavel.devcluster import CLUSTER_NAME

    cluster = slurm_accounting_cluster
    cluster.run(["sacctmgr", "-i", "add", "account", "gavel-k80only", f"cluster={CLUSTER_NAME}"])
    cluster.run(["sacctmgr", "-i", "add", "user", "root", "account=gavel-k80only", "partition=k80",
                 f"cluster={CLUSTER_NAME}"])
    config = write_config(tmp_path, cluster, round_seconds=5, tick_seconds=1)
    job = submit(cluster, tmp_path, "convnet", 1, 8, extra=["--account=gavel-k80only", "--partition=k80"])
    # The -p list restricts a gavel job to it (job_submit.lua keeps it as partitions=k80):
    # an administrator drops it here, so that the daemon learns the refusal from Slurm.
    shown = cluster.run(["scontrol", "show", "job", job]).stdout
    admin = re.search(r"AdminComment=(gavel:v1 [^\n]*?) partitions=k80(?=\s)", shown).group(1)
    cluster.run(["scontrol", "update", f"jobid={job}", f"admincomment={admin}"])
    daemon = start_daemon(config)
    try:
        deadline = time.time() + 90
        while queue(cluster).get(job) not in ("RUNNING", "COMPLETED"):
            assert daemon.poll() is None, daemon.communicate()[0][-3000:]
            assert time.time() < deadline, "the job never ran"
            time.sleep(0.5)
        shown = cluster.run(["squeue", "-h", "-j", job, "-o", "%P"]).stdout.strip()
        assert shown in ("k80", ""), shown
        # RUNNING in squeue comes before slurmstepd has created the output file and the
        # script has printed its partition: wait for that line before cancelling.
        out_file = tmp_path / f"out-{job}.txt"
        while "partition=" not in (out_file.read_text() if out_file.exists() else ""):
            assert time.time() < deadline, "the job never printed its partition"
            time.sleep(0.2)
    finally:
        code, log = stop_daemon(daemon)
        cluster.run(["scancel", job], check=False)
        cluster.run(["sacctmgr", "-i", "delete", "user", "root", "account=gavel-k80only"], check=False)
        cluster.run(["sacctmgr", "-i", "delete", "account", "gavel-k80only"], check=False)
    assert code == 0, log[-3000:]
    assert "may not use partition v100" in log
    out = (tmp_path / f"out-{job}.txt").read_text()
    assert "partition=k80" in out and "partition=v100" not in out, out

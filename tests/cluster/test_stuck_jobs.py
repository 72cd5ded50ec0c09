"""Jobs Slurm will never start as placed must not hold GPUs (issue 11), on the real cluster.

Gavel jobs of shapes Slurm cannot run where the daemon would put them (two or
three nodes, more GPUs than a node has, more memory or CPUs than any node,
--exclusive, an unmet dependency) sit in the queue next to ordinary 1-GPU
jobs.  The ordinary jobs must keep the GPUs busy: measured from Slurm itself
(squeue's running jobs sampled every second), not from the daemon.  gqueue
shows R only for what Slurm runs and says why the others wait.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from slurm_gavel.daemon.store import SqliteStore

from tests.support.daemon import start_daemon, stop_daemon, submit, write_config

# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24

STUCK = {
    # distributed jobs run (issue 13: tests/cluster/test_distributed.py), but not these: 12 GPUs
    # (job_submit.lua gives -N 3 --gres=gpu:4 --gpus=12) and 5 GPUs cannot be split in
    # equal parts over the two 4-GPU nodes of a type
    "twelve GPUs": ["-N", "3", "--gres=gpu:4"],
    "five GPUs": ["-N", "5", "--gres=gpu:1"],
    "memory": ["--mem=20G", "--gres=gpu:1"],            # nodes have 16 GB
    "cpus": ["-c", "12", "--gres=gpu:1"],               # nodes have 8 CPUs
}



def running(cluster) -> set[str]:
    return set(cluster.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i"]).stdout.split())


def running_gpus(cluster, ordinary) -> int:
    out = cluster.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i %b"]).stdout
    busy = 0
    for line in out.splitlines():
        job, _, gres = line.partition(" ")
        if job in ordinary:
            busy += int(gres.rsplit(":", 1)[-1]) if ":" in gres else 1
    return busy


def gqueue(tmp_path, *args):
    done = subprocess.run([sys.executable, "-m", "slurm_gavel", "queue", "--db", str(tmp_path / "gavel.db"),
                           "--json", *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def others(cluster, gpu_type) -> str:
    """Every node but those of `gpu_type` (for -x: the job may only run on that type)."""
    return ",".join(f"{t}-{i}" for t in cluster.types for i in range(cluster.types[t][0]) if t != gpu_type)


def test_ordinary_jobs_keep_the_gpus_busy_next_to_jobs_slurm_cannot_start(clean, tmp_path):
    cluster = clean
    config = write_config(tmp_path, cluster, round_seconds=6, tick_seconds=1)
    config.write_text(config.read_text() + "start_timeout_seconds = 8\n")
    stuck = {}
    for shape, args in STUCK.items():
        gpus = int(args[-1].rsplit(":", 1)[1])
        # submit() adds --gres=gpu:N; the shape's own flags come after it
        stuck[submit(cluster, tmp_path, "convnet", gpus, 300, extra=args[:-1])] = shape
    # a plain job held for good: the gavel job that depends on it can never start
    blocker = cluster.run(["sbatch", "--parsable", "--hold", "-o", "/dev/null", "--wrap", "true"]).stdout.strip()
    dep = submit(cluster, tmp_path, "convnet", 1, 300, extra=[f"--dependency=afterok:{blocker}"])
    stuck[dep] = "dependency"
    # Ordinary 1-GPU jobs, each excluded from the nodes of all types but one (so that
    # the policy has no reason to move them: what is measured is the stuck jobs' cost,
    # not Gavel's time sharing): 6 on v100, 6 on p100, 4 on k80, and an --exclusive job
    # on k80 that needs a node of its own.  20 of the 24 GPUs; with the stuck jobs'
    # 14 more than there are.
    ordinary = set()
    for gpu_type, n in (("v100", 6), ("p100", 6), ("k80", 4)):
        ordinary |= {submit(cluster, tmp_path, "convnet", 1, 300, extra=["-x", others(cluster, gpu_type)])
                     for _ in range(n)}
    exclusive = submit(cluster, tmp_path, "convnet", 1, 300, extra=["--exclusive", "-x", others(cluster, "k80")])
    daemon = start_daemon(config)
    samples, views = [], []
    try:
        deadline = time.time() + 60
        while time.time() < deadline and running_gpus(cluster, ordinary) < len(ordinary):
            assert daemon.poll() is None, daemon.communicate()[0][-3000:]
            time.sleep(1)
        # then five rounds (6 s each): the ordinary jobs must hold their GPUs all along
        end = time.time() + 30
        while time.time() < end:
            samples.append(running_gpus(cluster, ordinary))
            if len(samples) % 5 == 0:       # gqueue against Slurm, before and after reading it
                before = running(cluster)
                views.append((before, gqueue(tmp_path), gqueue(tmp_path, "--cluster"), running(cluster)))
            time.sleep(1)
    finally:
        code, log = stop_daemon(daemon)
    assert code == 0, log[-3000:]
    # busy GPU-seconds, from Slurm: at least 90% of what the ordinary jobs could use
    assert samples and sum(samples) >= 0.9 * len(ordinary) * len(samples), (samples, log[-4000:])
    assert views
    for before, shown, per_type, after in views:
        rows = {r["jobid"]: r for r in shown["jobs"]}
        for job, row in rows.items():
            if row["st"] == "R":            # R only for what Slurm runs
                assert job in before | after, (job, row, before, after)
        for job, shape in stuck.items():
            assert job not in before | after, shape
            assert rows[job]["st"] == "W" and rows[job]["reason"], (shape, rows[job])
        busy = sum(r["busy"] for r in per_type)
        gpus_running = len((before | after) & set(rows)) + 3     # the exclusive job's node: 4 GPUs
        assert busy <= gpus_running, (busy, before, after)
    rows = {r["jobid"]: r for r in views[-1][1]["jobs"]}
    by_shape = {shape: rows[job]["reason"] for job, shape in stuck.items()}
    assert by_shape["twelve GPUs"].startswith("needs 12 GPUs in equal parts on nodes of one type")
    assert by_shape["five GPUs"].startswith("needs 5 GPUs in equal parts on nodes of one type")
    assert "memory" in by_shape["memory"] and "CPUs" in by_shape["cpus"]
    assert "dependency" in by_shape["dependency"]
    # the --exclusive job ran on a k80 node of its own
    assert rows[exclusive]["st"] == "R" and rows[exclusive]["type"] == "k80", rows[exclusive]

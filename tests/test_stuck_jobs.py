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

from slurm_gavel.slurm.store import SqliteStore

from test_daemon import clean, start_daemon, stop_daemon, submit, write_config  # noqa: F401

STUCK = {
    "two nodes": ["-N", "2", "--gres=gpu:4"],
    "three nodes": ["-N", "3", "--gres=gpu:1"],
    "memory": ["--mem=20G", "--gres=gpu:1"],            # nodes have 16 GB
    "cpus": ["-c", "12", "--gres=gpu:1"],               # nodes have 8 CPUs
}
# --exclusive can run, but only alone on a node: the plan must leave it a whole node
EXCLUSIVE = ["--exclusive"]


def running_gpus(cluster, ordinary) -> int:
    out = cluster.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i %b"]).stdout
    busy = 0
    for line in out.splitlines():
        job, _, gres = line.partition(" ")
        if job in ordinary:
            busy += int(gres.rsplit(":", 1)[-1]) if ":" in gres else 1
    return busy


def test_ordinary_jobs_keep_the_gpus_busy_next_to_jobs_slurm_cannot_start(clean, tmp_path):
    cluster = clean
    config = write_config(tmp_path, cluster, round_seconds=6, tick_seconds=1)
    text = config.read_text() + "start_timeout_seconds = 8\n"
    config.write_text(text)
    stuck = {}
    for shape, args in STUCK.items():
        gpus = int(args[-1].rsplit(":", 1)[1])
        # submit() adds --gres=gpu:N; the shape's own flags come after it
        stuck[submit(cluster, tmp_path, "convnet", gpus, 200, extra=args[:-1])] = shape
    # a plain job held for good: the gavel job that depends on it can never start
    blocker = cluster.run(["sbatch", "--parsable", "--hold", "-o", "/dev/null", "--wrap", "true"]).stdout.strip()
    dep = submit(cluster, tmp_path, "convnet", 1, 200, extra=[f"--dependency=afterok:{blocker}"])
    stuck[dep] = "dependency"
    exclusive = submit(cluster, tmp_path, "convnet", 1, 200, extra=EXCLUSIVE)
    # 18 ordinary 1-GPU jobs, the exclusive job's node and the stuck jobs' 15 GPUs: more
    # than the 24 GPUs (the stuck jobs would crowd the ordinary ones out, as on the real cluster)
    ordinary = {submit(cluster, tmp_path, "convnet", 1, 200) for _ in range(18)}
    daemon = start_daemon(config)
    samples = []
    try:
        deadline = time.time() + 60
        while time.time() < deadline and running_gpus(cluster, ordinary) < len(ordinary):
            assert daemon.poll() is None, daemon.communicate()[0][-3000:]
            time.sleep(1)
        # then a few rounds (6 s each): the ordinary jobs must hold their GPUs all along
        end = time.time() + 30
        while time.time() < end:
            samples.append(running_gpus(cluster, ordinary))
            time.sleep(1)
        shown = subprocess.run([sys.executable, "-m", "slurm_gavel", "queue", "--db", str(tmp_path / "gavel.db"),
                                "--json"], capture_output=True, text=True)
        cluster_view = subprocess.run([sys.executable, "-m", "slurm_gavel", "queue", "--db",
                                       str(tmp_path / "gavel.db"), "--cluster", "--json"],
                                      capture_output=True, text=True)
        slurm_running = cluster.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i"]).stdout.split()
    finally:
        code, log = stop_daemon(daemon)
    assert code == 0, log[-3000:]
    # busy GPU-seconds, from Slurm: at least 80% of what the ordinary jobs could use
    assert samples and sum(samples) >= 0.8 * len(ordinary) * len(samples), (samples, log[-4000:])
    assert not set(stuck) & set(slurm_running)
    rows = {r["jobid"]: r for r in json.loads(shown.stdout)["jobs"]}
    for job in slurm_running:
        if job in rows:
            assert rows[job]["st"] == "R"
    for job, shape in stuck.items():
        assert rows[job]["st"] != "R", (shape, rows[job])
        assert rows[job]["reason"], (shape, rows[job])
    assert "distributed jobs not supported" in rows[[j for j, s in stuck.items() if s == "two nodes"][0]]["reason"]
    assert "dependency" in rows[dep]["reason"]
    assert rows[exclusive]["st"] in ("R", "PD", "S"), rows[exclusive]
    assert "memory" in rows[[j for j, s in stuck.items() if s == "memory"][0]]["reason"]
    busy = sum(r["busy"] for r in json.loads(cluster_view.stdout))
    assert busy <= len([j for j in slurm_running if j in rows]) , (busy, slurm_running)

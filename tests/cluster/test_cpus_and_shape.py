"""A job's shape is what it asked, and jobs are planned only where a node has their CPUs too.

On the session cluster (3 types x 2 nodes, 4 GPUs and 8 CPUs each), with the daemon:

* a one-node DDP job as researchers submit it, ``-N 1 --ntasks=1 --cpus-per-task=2
  --gres=gpu:2``, runs (Slurm 22.05's squeue says node_count 2 for it while it pends;
  its request, NumNodes=1-1, is one node);
* a gavel job on 1 GPU and every CPU of a k80 node keeps that node: the other k80 jobs
  run on the other node, none is released onto GPUs Slurm cannot start it on; a plain
  job on 1 GPU and every CPU of p100-0 leaves it no free GPU for the daemon; gqueue
  says why a job waits in words ("node p100-0: 3 GPUs free, 0 of 8 CPUs free").
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

WORDS = "node p100-0: 3 GPUs free, 0 of 8 CPUs free"      # why a p100 job waits


def running(cluster) -> dict[str, str]:
    """Running job -> its nodes, as Slurm says."""
    out = cluster.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i %N"]).stdout
    return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)


def gqueue(tmp_path) -> dict[str, dict]:
    done = subprocess.run([sys.executable, "-m", "slurm_gavel", "queue", "--db", str(tmp_path / "gavel.db"),
                           "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return {r["jobid"]: r for r in json.loads(done.stdout)["jobs"]}


def explain(tmp_path, job) -> str:
    done = subprocess.run([sys.executable, "-m", "slurm_gavel", "explain", job, "--db",
                           str(tmp_path / "gavel.db")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def only(cluster, gpu_type) -> list[str]:
    """-x every node but those of `gpu_type`."""
    return ["-x", ",".join(f"{t}-{i}" for t in cluster.types for i in range(cluster.types[t][0])
                           if t != gpu_type)]


def test_a_one_node_ddp_job_runs(clean, tmp_path):
    cluster = clean
    config = write_config(tmp_path, cluster, round_seconds=6, tick_seconds=1)
    job = submit(cluster, tmp_path, "convnet", 2, 300, extra=["-N", "1", "--ntasks=1", "--cpus-per-task=2"])
    shown = cluster.run(["scontrol", "show", "job", job]).stdout
    assert "NumNodes=1-1" in shown, shown
    daemon = start_daemon(config)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and job not in running(cluster):
            assert daemon.poll() is None, daemon.communicate()[0][-3000:]
            time.sleep(1)
        ran = running(cluster)
        rows = gqueue(tmp_path)
    finally:
        code, log = stop_daemon(daemon)
    assert code == 0, log[-3000:]
    assert job in ran, (rows.get(job), log[-3000:])
    assert "without a total" not in (rows[job].get("reason") or ""), rows[job]


def test_jobs_are_planned_only_where_a_node_has_their_cpus(clean, tmp_path):
    cluster = clean
    config = write_config(tmp_path, cluster, round_seconds=6, tick_seconds=1)
    config.write_text(config.read_text() + "start_timeout_seconds = 8\n")
    # a plain job on 1 GPU and every CPU of p100-0: no GPU there is free for anyone
    plain = cluster.run(["sbatch", "--parsable", "-o", "/dev/null", "-p", "p100", "-w", "p100-0", "-c", "8",
                         "--gres=gpu:1", "--wrap", "sleep 600"]).stdout.strip()
    # a gavel job on 1 GPU and every CPU of a k80 node, and four 1-GPU jobs of other users'
    # kind on k80 only: they fit the other k80 node exactly
    heavy = submit(cluster, tmp_path, "convnet", 1, 100000, extra=["-c", "8", *only(cluster, "k80")])
    light_k80 = [submit(cluster, tmp_path, "convnet", 1, 100000, extra=only(cluster, "k80")) for _ in range(4)]
    # five 1-GPU jobs on p100 only: four fit p100-1, one waits
    light_p100 = [submit(cluster, tmp_path, "convnet", 1, 100000, extra=only(cluster, "p100")) for _ in range(5)]
    ours = [heavy, *light_k80, *light_p100]
    daemon = start_daemon(config)
    samples, words, explained = [], set(), []
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not (heavy in running(cluster)
                                              and sum(j in running(cluster) for j in light_k80) == 4):
            assert daemon.poll() is None, daemon.communicate()[0][-3000:]
            time.sleep(1)
        end = time.time() + 30          # five rounds (and, until explain said why one waits, 60 s more)
        while time.time() < end or time.time() < end + 60 and not any(WORDS in e for e in explained):
            ran = running(cluster)
            samples.append(ran)
            for row in gqueue(tmp_path).values():
                if row["jobid"] in light_p100 and row["st"] != "R":
                    words.add(row.get("reason") or "")
                    # (it may start between gqueue and explain: asked again while it waits)
                    if "CPUs free" in (row.get("reason") or "") and not any(WORDS in e for e in explained):
                        explained.append(explain(tmp_path, row["jobid"]))
            time.sleep(1)
    finally:
        code, log = stop_daemon(daemon)
        cluster.run(["scancel", plain], check=False)
    assert code == 0, log[-3000:]
    store = SqliteStore(tmp_path / "gavel.db")
    stuck = [e for e in store.events(ours) if e["kind"] in ("stuck", "start_taken")]
    # never released where Slurm could not start it (it would wait "Resources" and back off)
    assert not stuck, (stuck, log[-4000:])
    assert not [line for line in log.splitlines() if "release" in line and "nodes p100-0" in line], log[-4000:]
    assert samples
    for ran in samples:
        assert ran.get(plain) == "p100-0"
        # nothing of ours on p100-0; the k80 node of the heavy job, while it runs, is its own
        assert not [j for j in ours if ran.get(j) == "p100-0"], ran
        if heavy in ran:
            assert not [j for j in light_k80 if ran.get(j) == ran[heavy]], ran
    # the GPUs Slurm can use stay busy: p100-1 (4 of the p100 jobs) and both k80 nodes
    busy = [sum(j in ran for j in light_p100) for ran in samples]
    assert sum(busy) >= 0.8 * 4 * len(samples), busy
    assert any(WORDS in w for w in words), words
    assert any(WORDS in e for e in explained), explained

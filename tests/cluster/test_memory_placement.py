"""Where Slurm counts memory (CR_Core_Memory), jobs are planned only where a node has it free.

On a cluster of 2 types x 2 nodes (4 GPUs, 8 CPUs, 16384 MB each; DefMemPerCPU=2048, so a
1-GPU job without --mem asks 2048 MB): a gavel job on 1 GPU and every MB of a k80 node keeps
that node (the other k80 jobs run on the other node, none is released onto GPUs Slurm cannot
start it on); a plain job on 1 GPU and every MB of p100-0 leaves it no free GPU for the
daemon; gqueue and explain say why a job waits in words. squeue --json gives --mem the same
way on 22.05 and 24.11 (tests/unit/test_memory_capacity.py has both shapes).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

from slurm_gavel.daemon.store import SqliteStore

from tests.support.daemon import start_daemon, stop_daemon, submit, write_config

WORDS = "node p100-0: 3 GPUs free, 0 of 16384 MB memory free"      # why a p100 job waits


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


def test_jobs_are_planned_only_where_a_node_has_their_memory(slurm_memory_cluster, tmp_path):
    cluster = slurm_memory_cluster
    cluster.run(["scancel", "--user", "root"], check=False)
    config = write_config(tmp_path, cluster, round_seconds=6, tick_seconds=1)
    config.write_text(config.read_text() + "start_timeout_seconds = 8\n")
    plain = cluster.run(["sbatch", "--parsable", "-o", "/dev/null", "-p", "p100", "-w", "p100-0",
                         "--mem=16384", "--gres=gpu:1", "--wrap", "sleep 600"]).stdout.strip()
    heavy = submit(cluster, tmp_path, "convnet", 1, 100000, extra=["--mem=16384", *only(cluster, "k80")])
    light_k80 = [submit(cluster, tmp_path, "convnet", 1, 100000, extra=only(cluster, "k80")) for _ in range(4)]
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
        end = time.time() + 30
        while time.time() < end or time.time() < end + 60 and not any(WORDS in e for e in explained):
            ran = running(cluster)
            samples.append(ran)
            for row in gqueue(tmp_path).values():
                if row["jobid"] in light_p100 and row["st"] != "R":
                    words.add(row.get("reason") or "")
                    if "memory free" in (row.get("reason") or "") and not any(WORDS in e for e in explained):
                        explained.append(explain(tmp_path, row["jobid"]))
            time.sleep(1)
    finally:
        code, log = stop_daemon(daemon)
        cluster.run(["scancel", "--user", "root"], check=False)
    assert code == 0, log[-3000:]
    store = SqliteStore(tmp_path / "gavel.db")
    stuck = [e for e in store.events(ours) if e["kind"] in ("stuck", "start_taken")]
    assert not stuck, (stuck, log[-4000:])
    assert not [line for line in log.splitlines() if "release" in line and "nodes p100-0" in line], log[-4000:]
    assert samples
    for ran in samples:
        assert ran.get(plain) == "p100-0"
        assert not [j for j in ours if ran.get(j) == "p100-0"], ran
        if heavy in ran:
            assert not [j for j in light_k80 if ran.get(j) == ran[heavy]], ran
    busy = [sum(j in ran for j in light_p100) for ran in samples]
    assert sum(busy) >= 0.8 * 4 * len(samples), busy
    assert any(WORDS in w for w in words), words
    assert any(WORDS in e for e in explained), explained
    assert "memory is consumable (SelectTypeParameters=CR_CORE_MEMORY" in log, log[:3000]

"""No job runs twice: a job lost with its node is not restarted while its old copy may run.

A slurmd that dies leaves its jobs' slurmstepds (and the jobs) running. When Slurm
declares the node DOWN (after SlurmdTimeout; here an admin's `state=down`, the same
verdict at once) it requeues the job, though its first copy still runs. The daemon
must not start it elsewhere until the node is back and Slurm has stopped that copy.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.support.daemon import TICK, queue, start_daemon, stop_daemon, submit, write_config

# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24


def copies(job: str, jobdir: Path) -> dict[int, str]:
    """pid -> SLURM_RESTART_COUNT of every live process of `job`'s script (and its children) here."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        # other clusters on this host (other test sessions) number their jobs too
        if f"SLURM_JOB_ID={job}".encode() not in env or f"JOBDIR={jobdir}".encode() not in env:
            continue
        restart = next((e.split(b"=", 1)[1].decode() for e in env
                        if e.startswith(b"SLURM_RESTART_COUNT=")), "0")
        out[int(entry.name)] = restart
    return out


def test_a_job_lost_with_its_node_is_not_run_twice(clean, tmp_path):
    cluster = clean
    config = write_config(tmp_path, cluster, round_seconds=6, tick_seconds=1)
    job = submit(cluster, tmp_path, "convnet", 1, 120)
    daemon = start_daemon(config)
    node = None
    try:
        deadline = time.time() + 60
        while queue(cluster).get(job) != "RUNNING":
            assert time.time() < deadline, "never started"
            time.sleep(0.5)
        node = cluster.run(["squeue", "-h", "-j", job, "-o", "%N"]).stdout.strip()
        time.sleep(2)
        assert set(copies(job, tmp_path).values()) == {"0"}
        cluster.kill_node(node)                           # the job goes on running
        cluster.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=gavel-test"])
        # Slurm requeued it; its first copy still runs; several rounds pass
        watch_until = time.time() + 4 * 6
        while time.time() < watch_until:
            assert queue(cluster).get(job) != "RUNNING", "restarted while its old copy runs"
            assert "0" in copies(job, tmp_path).values(), "the old copy should still be running"
            time.sleep(0.5)
        shown = cluster.run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip()
        assert shown == "PENDING"
        # the node comes back: Slurm stops the old copy, then the daemon may restart the job
        cluster.start_node(node)
        resumed = cluster.run(["scontrol", "update", f"nodename={node}", "state=resume"], check=False)
        # ReturnToService=2: a slurmd that registers before the resume has brought its node back
        state = cluster.run(["sinfo", "-h", "-n", node, "-o", "%T"]).stdout.strip()
        assert resumed.returncode == 0 or "down" not in state, (resumed.stderr, state)
        deadline = time.time() + 90
        while True:
            live = copies(job, tmp_path)
            assert len(set(live.values())) <= 1, f"two copies at once: {live}"
            if "1" in live.values():
                break
            assert time.time() < deadline, f"not restarted after the node came back: {live}"
            time.sleep(0.2)
    finally:
        code, log = stop_daemon(daemon)
        if node:
            if not cluster.daemons()[f"slurmd:{node}"]["running"]:
                cluster.start_node(node)
            cluster.run(["scontrol", "update", f"nodename={node}", "state=resume"], check=False)
        cluster.run(["scancel", job], check=False)
    assert code == 0, log[-3000:]
    assert "not restarted until the node is back" in log, log[-3000:]

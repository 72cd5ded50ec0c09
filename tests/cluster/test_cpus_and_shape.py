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

import time

import pytest

from tests.support.capacity import plan_around_a_full_node
from tests.support.daemon import gqueue, start_daemon, stop_daemon, submit, write_config
from tests.support.slurm import running

# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24

WORDS = "node p100-0: 3 GPUs free, 0 of 8 CPUs free"      # why a p100 job waits


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
    plan_around_a_full_node(clean, tmp_path, ["-c", "8"], "CPUs free", WORDS)

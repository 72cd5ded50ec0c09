"""Space sharing on real Slurm (issue 13, docs/space-sharing.md): gres/shard on the cluster
of conftest.py's `slurm_shard_cluster` (fake GPUs that are devices, so Slurm sets each job's
CUDA_VISIBLE_DEVICES), job_submit.lua asking a one-GPU gavel job's GPU as shards, and the
daemon running pair rows: both jobs at the same time on the same GPU, no third job there.

The cases of tests/cluster/test_space_sharing.py that need no Slurm cluster.
"""
from __future__ import annotations

import time

import pytest

from slurm_gavel.slurm.records import parse_jobs, parse_nodes


# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24


# -- what Slurm reports, parsed (no cluster) ------------------------------------------------
def test_shard_jobs_and_nodes_are_read_from_both_versions_json():
    jobs = parse_jobs({"jobs": [
        {"job_id": 7, "job_state": "RUNNING", "nodes": "v100-0", "tres_per_node": "gres:shard:2",
         "gres_detail": ["shard:2(IDX:0)"], "node_count": 1},
        {"job_id": 8, "job_state": ["PENDING"], "nodes": "", "tres_per_node": "gres/shard:4"},
        {"job_id": 9, "job_state": "RUNNING", "nodes": "v100-0", "tres_per_node": "gres:gpu:2",
         "gres_detail": ["gpu:v100:2(IDX:1-2)"], "node_count": 1},
        # 24.11 (measured): a shard job's detail is its count on each GPU of the node
        {"job_id": 10, "job_state": ["RUNNING"], "nodes": "v100-0", "tres_per_node": "gres/shard:2",
         "gres_detail": ["shard:2(0/4,2/4)"], "node_count": 1}]})
    by_id = {j.job_id: j for j in jobs}
    assert (by_id["10"].shards, by_id["10"].gpus, by_id["10"].gpu_indices) == (2, 1, ("1",))
    assert (by_id["7"].shards, by_id["7"].gpus, by_id["7"].gpu_indices) == (2, 1, ("0",))
    assert (by_id["8"].shards, by_id["8"].gpus, by_id["8"].total_gpus) == (4, 1, 1)
    assert (by_id["9"].shards, by_id["9"].gpus, by_id["9"].gpu_indices) == (0, 2, ("1-2",))
    nodes = parse_nodes({"nodes": [
        {"name": "a", "gres": "gpu:v100:4,shard:v100:16", "state": "IDLE", "partitions": ["v100"]},
        {"name": "b", "gres": "gpu:v100:4(S:0),shard:v100:16(S:0)", "state": ["IDLE"]},
        {"name": "c", "gres": "gpu:k80:4", "state": "IDLE"}]})
    assert [(n.gpus, n.shards) for n in nodes] == [(4, 16), (4, 16), (4, 0)]


def test_with_space_sharing_off_a_packed_policy_alias_runs_no_pair():
    """The daemon builds its engine with config.space_sharing: off (the default), no pair
    throughputs reach the policy, so even a `..._packed` alias plans no pair row."""
    from slurm_gavel.daemon.config import from_dict
    from tests.support.engine import job, run_engine, small_table
    jobs = [job(m, 200000) for m in ["fast", "flat"] * 2]
    config = from_dict({"policy": "max_min_fairness_packed"})
    assert config.space_sharing is False
    _, _, off = run_engine(jobs, {"v100": 1}, policy=config.policy, rounds=20,
                           table=small_table(pairs=True), space_sharing=config.space_sharing)
    assert not [a for _, plan in off.rounds for a in plan.assignments if len(a.jobs) == 2]
    _, _, on = run_engine(jobs, {"v100": 1}, policy=config.policy, rounds=20,
                          table=small_table(pairs=True), space_sharing=True)
    assert [a for _, plan in on.rounds for a in plan.assignments if len(a.jobs) == 2]

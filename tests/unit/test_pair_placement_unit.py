"""Where Slurm puts a pair's two halves (docs/space-sharing.md): the cases of
tests/cluster/test_pair_placement.py that need no Slurm cluster (what Slurm does, and why the
backend releases a pair only where both halves fit, is told there).
"""
from __future__ import annotations

import pytest


# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24


# -- the rule, on polls as both versions list them (no cluster) -----------------------------
def _job(job_id, state, shards, detail, gres=None):
    from slurm_gavel.slurm.records import parse_jobs
    return parse_jobs({"jobs": [{"job_id": job_id, "job_state": state, "nodes": "n",
                                 "tres_per_node": gres or f"gres/shard:{shards}",
                                 "gres_detail": detail, "node_count": 1}]})[0]


def test_first_fit_gives_a_pair_one_gpu_only_where_the_first_gpu_with_room_for_a_half_has_room_for_both():
    from slurm_gavel.slurm.backend.pairs.room import gpu_room, pair_gpu
    per = lambda n: 4                                           # noqa: E731
    leaving = {"3"}
    room = lambda jobs: gpu_room(jobs, {"n": 3}, per, lambda j: j.job_id in leaving)["n"]  # noqa: E731
    # 24.11's shard detail (count per GPU) and 22.05's IDX, and a whole-GPU job
    survivor = _job(1, ["RUNNING"], 2, ["shard:2(0/4,2/4,0/4)"])
    whole = _job(2, "RUNNING", 0, ["gpu:v100:1(IDX:0)"], gres="gres:gpu:1")
    assert room([survivor]).free == [4, 2, 4]
    assert pair_gpu(room([survivor]), (2, 2)) == (0, "")          # GPU 0 comes first
    gpu, why = pair_gpu(room([whole, survivor]), (2, 2))          # GPU 1 would take a half
    assert gpu is None and "part of its shards" in why and "job 1" in why
    assert pair_gpu(room([whole, survivor]), (3, 1))[0] is None    # whichever half goes first
    leaver = _job(3, ["RUNNING"], 4, ["shard:4(IDX:0)"])          # preempted, checkpointing
    gpu, why = pair_gpu(room([leaver]), (2, 2))
    assert gpu is None and "leaving GPU 0" in why                 # it frees GPU 0 any moment
    assert pair_gpu(room([_job(4, ["RUNNING"], 4, ["shard:4(IDX:0)"])]), (2, 2)) == (1, "")
    unseen = _job(5, ["PENDING", "COMPLETING"], 2, [])            # 24.11 after a requeue-hold
    assert pair_gpu(room([unseen]), (2, 2))[0] is None
    full = [_job(10 + k, "RUNNING", 4, [f"shard:4(IDX:{k})"]) for k in range(3)]
    assert pair_gpu(room(full), (2, 2)) == (None, "no GPU has room for both halves yet")

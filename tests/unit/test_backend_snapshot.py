"""The backend's poll as one immutable snapshot (slurm/backend/snapshot.py), from the recorded
22.05 queue and nodes: which jobs are gavel's, what other jobs hold, who holds each GPU."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_gavel.slurm.backend.snapshot import at_start, build
from slurm_gavel.slurm.gputypes import discover
from slurm_gavel.slurm.records import parse_jobs, parse_nodes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def recorded():
    jobs = parse_jobs(json.loads((FIXTURES / "squeue-22.05.json").read_text()))
    nodes = parse_nodes(json.loads((FIXTURES / "sinfo-22.05.json").read_text()))
    return jobs, nodes, discover(nodes)


def test_a_poll_reads_gavel_jobs_other_jobs_gpus_and_who_holds_each_gpu():
    jobs, nodes, types = recorded()
    snap = build(jobs, nodes, types)
    assert [j.job_id for j in snap.listed] == ["1", "2", "3", "4", "5", "6"]
    assert sorted(snap.gavel) == ["1", "2", "3"]           # 4-6 are not gavel's (5, 6 finished)
    assert dict(snap.others_gpus) == {"k80-0": 2}           # job 4 runs on 2 of its GPUs
    assert dict(snap.gpu_users) == {("v100-0", "0"): ("1",), ("k80-0", "0"): ("4",),
                                    ("k80-0", "1"): ("4",)}
    assert snap.type_of["v100-1"] == "v100" and snap.type_of["k80-0"] == "k80"
    assert snap.node_named["p100-0"].gpus == 4 and snap.shards_per_gpu("p100-0") == 0
    assert at_start(nodes, types).gavel == {} and at_start(nodes, types).nodes == snap.nodes


def test_a_snapshot_never_changes_an_action_makes_a_new_one():
    jobs, nodes, types = recorded()
    snap = build(jobs, nodes, types)
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.nodes = ()
    with pytest.raises(TypeError):
        snap.gavel["1"] = snap.gavel["2"]
    released = snap.with_job(replace(snap.gavel["2"], reason=""))
    assert released.gavel["2"].reason == "" and snap.gavel["2"].reason != ""
    assert released.listed is snap.listed and released.nodes is snap.nodes

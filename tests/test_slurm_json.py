"""Reading Slurm's JSON: a recorded 22.05 output and the same jobs in the later releases' shape."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_gavel.slurm_backend import discover_partitions
from slurm_gavel.slurm_json import (expand_hostlist, gpu_request, number, parse_jobs, parse_nodes,
                                    states)

FIXTURES = Path(__file__).parent / "fixtures"


def load(name):
    return json.loads((FIXTURES / name).read_text())


def test_both_shapes_read_the_same_jobs():
    old = parse_jobs(load("squeue-22.05.json"))
    new = parse_jobs(load("squeue-24.11-shaped.json"))
    assert old == new
    held, running = old
    assert held.job_id == "1" and held.primary_state == "PENDING" and held.reason == "JobHeldUser"
    assert held.admin_comment.startswith("gavel:v1 ") and held.gpus == 1 and not held.running
    assert held.start_time is None and held.nodes == ()
    assert running.running and running.nodes == ("k80-0",) and running.gpus == 2
    assert running.partition == "k80" and running.exit_code == 0 and not running.finished


def test_both_shapes_read_the_same_nodes():
    old = parse_nodes(load("sinfo-22.05.json"))
    new = parse_nodes(load("nodes-24.11-shaped.json"))
    assert [(n.name, n.gpu_type, n.gpus, n.partitions, n.usable) for n in old] == \
           [(n.name, n.gpu_type, n.gpus, n.partitions, n.usable) for n in new]
    assert {n.name: n.gpu_type for n in old} == {"k80-0": "k80", "k80-1": "k80", "p100-0": "p100",
                                                 "p100-1": "p100", "v100-0": "v100", "v100-1": "v100"}
    assert discover_partitions(old) == {"k80": "k80", "p100": "p100", "v100": "v100"}


@pytest.mark.parametrize("text, expected", [
    ("gres:gpu:2", (None, 2)), ("gres:gpu:v100:4", ("v100", 4)), ("gres/gpu:3", (None, 3)),
    ("gres/gpu=8", (None, 8)), ("cpu=4,mem=1G,gres/gpu:h100=2", ("h100", 2)), ("gpu:1", (None, 1)),
    ("cpu=4,mem=1G", (None, 0)), ("", (None, 0)), (None, (None, 0)),
])
def test_gpu_request_forms(text, expected):
    assert gpu_request(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("v100-[0-1]", ["v100-0", "v100-1"]), ("k80-3", ["k80-3"]),
    ("a[01-03],b7", ["a01", "a02", "a03", "b7"]), ("n[1,3-4]", ["n1", "n3", "n4"]), ("", []),
])
def test_hostlists(text, expected):
    assert expand_hostlist(text) == expected


def test_numbers_and_states_of_every_version():
    assert number(5) == 5 and number({"set": True, "infinite": False, "number": 7}) == 7
    assert number({"set": False, "number": 0}, None) is None
    assert number({"set": True, "infinite": True, "number": 0}) == float("inf")
    assert number("x", 3) == 3 and number(True, 1) == 1
    assert states("RUNNING") == ("RUNNING",) and states(["PENDING", "REQUEUED"]) == ("PENDING", "REQUEUED")
    assert states("idle+drain") == ("IDLE", "DRAIN") and states(None) == ()


def test_unknown_or_missing_fields_never_raise():
    jobs = parse_jobs({"jobs": [{}, {"job_id": {"set": True, "number": 9}, "job_state": 3}, "junk"]})
    assert [j.job_id for j in jobs] == ["", "9"]
    assert parse_nodes({"nodes": [{"name": "x", "state": None}]})[0].usable is False
    assert parse_jobs({}) == [] and parse_nodes({"nodes": None}) == []

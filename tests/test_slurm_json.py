"""Reading Slurm's JSON: the same jobs and nodes recorded on Slurm 22.05 and 24.11.

tests/fixtures/record.sh made both recordings (see tests/fixtures/README.md):
gavel jobs running, held and requeued held after USR2 + exit 85, plain jobs
running, completed and failed, and a drained node.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_gavel.slurm.backend import discover_partitions
from slurm_gavel.slurm.records import (expand_hostlist, gpu_request, number, parse_jobs,
                                       parse_nodes, slurm_release, states)

FIXTURES = Path(__file__).parent / "fixtures"
SQUEUE = {"22.05": "squeue-22.05.json", "24.11": "squeue-24.11.json"}
NODES = {"22.05": "sinfo-22.05.json", "24.11": "nodes-24.11.json"}     # what SlurmCLI.nodes() runs


def load(name):
    return json.loads((FIXTURES / name).read_text())


def jobs_by_name(version):
    return {j.name: j for j in parse_jobs(load(SQUEUE[version]))}


@pytest.mark.parametrize("version", sorted(SQUEUE))
def test_recorded_jobs(version):
    assert slurm_release(load(SQUEUE[version])).startswith(version)
    jobs = jobs_by_name(version)
    assert list(jobs) == ["gavel-run", "gavel-held", "gavel-requeued", "plain", "done", "failed"]
    assert [j.job_id for j in jobs.values()] == ["1", "2", "3", "4", "5", "6"]

    run = jobs["gavel-run"]
    assert run.state == ("RUNNING",) and run.running and not run.finished and run.reason == "None"
    assert run.partition == "v100" and run.nodes == ("v100-0",) and run.node_count == 1
    assert (run.gpu_type, run.gpus, run.total_gpus) == (None, 1, 1)
    assert run.comment == "gavel model=resnet50 steps=1000"
    assert run.admin_comment == "gavel:v1 model=resnet50 weight=1 steps=1000"
    assert run.user == "root" and run.work_dir.startswith("/tmp/gavel-fixtures.")
    assert run.submit_time <= run.start_time < run.end_time              # end: an estimate
    assert run.restarts == 0 and run.exit_code == 0

    held = jobs["gavel-held"]                       # asked for gpu:v100:2: job_submit.lua untyped it
    assert held.state == ("PENDING",) and held.reason == "JobHeldUser" and not held.running
    assert held.partition == "v100" and held.nodes == () and (held.gpu_type, held.gpus) == (None, 2)
    assert held.admin_comment == "gavel:v1 model=vgg16 weight=2 entity=physics"
    assert held.start_time is None and held.end_time is None and held.submit_time > 0

    requeued = jobs["gavel-requeued"]               # USR2, exit 85: requeued held by Slurm
    assert requeued.state == ("PENDING", "SPECIAL_EXIT") and requeued.reason == "JobHeldUser"
    assert not requeued.running and not requeued.finished and requeued.primary_state == "PENDING"
    assert requeued.partition == "p100" and requeued.nodes == () and requeued.gpus == 1
    assert requeued.restarts == 1 and requeued.exit_code == 85
    assert requeued.start_time > requeued.submit_time                   # its next eligible time
    assert requeued.admin_comment == "gavel:v1 model=transformer weight=1 slo=129600"

    plain = jobs["plain"]
    assert plain.running and plain.partition == "k80" and plain.nodes == ("k80-0",)
    assert plain.gpus == 2 and plain.admin_comment == "" and plain.comment == ""

    done, failed = jobs["done"], jobs["failed"]
    assert done.state == ("COMPLETED",) and done.finished and done.exit_code == 0 and done.gpus == 0
    assert failed.state == ("FAILED",) and failed.finished and failed.reason == "NonZeroExitCode"
    assert failed.exit_code == 3 and failed.nodes == ("k80-0",)
    for j in (done, failed):
        assert j.submit_time <= j.start_time <= j.end_time


def test_both_versions_read_the_same_jobs():
    def key(j):
        return (j.job_id, j.name, j.user, j.partition, j.state, j.reason, j.nodes, j.comment,
                j.admin_comment, j.gpu_type, j.gpus, j.node_count, j.restarts, j.exit_code,
                j.start_time is None, j.end_time is None, j.end_time == j.start_time)
    assert [key(j) for j in jobs_by_name("22.05").values()] == \
           [key(j) for j in jobs_by_name("24.11").values()]


@pytest.mark.parametrize("version", sorted(NODES))
def test_recorded_nodes(version):
    nodes = parse_nodes(load(NODES[version]))
    assert slurm_release(load(NODES[version])).startswith(version)
    assert [(n.name, n.gpu_type, n.gpus, n.partitions) for n in nodes] == [
        (f"{t}-{i}", t, 4, (t,)) for t in ("k80", "p100", "v100") for i in (0, 1)]
    state = {n.name: n.state for n in nodes}
    assert state["k80-0"] == ("MIXED",) and state["v100-0"] == ("MIXED",)
    assert state["k80-1"] == ("IDLE",) and state["p100-1"] == ("IDLE", "DRAIN")
    assert [n.name for n in nodes if not n.usable] == ["p100-1"]
    assert discover_partitions(nodes) == {"k80": "k80", "p100": "p100", "v100": "v100"}


def test_exit_codes_of_both_versions():
    jobs = parse_jobs({"jobs": [
        {"job_id": 1, "exit_code": 85 << 8}, {"job_id": 2, "exit_code": 9},    # 22.05: wait status
        {"job_id": 3, "exit_code": {"status": ["SIGNALED"], "return_code": {"set": True, "number": 0},
                                    "signal": {"id": {"set": True, "number": 9}, "name": "KILL"}}},
        {"job_id": 4, "exit_code": {"status": ["ERROR"], "return_code": {"set": True, "number": 2}}},
        {"job_id": 5, "exit_code": {"status": ["PENDING"], "return_code": {"set": False, "number": 0}}},
    ]})
    assert [j.exit_code for j in jobs] == [85, 128 + 9, 128 + 9, 2, None]


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

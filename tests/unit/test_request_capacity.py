"""A job's shape is what it asked, and a node's CPUs count as much as its GPUs (the pure parts).

tests/fixtures/squeue-request-22.05.json and sinfo-cpus-22.05.json: recorded on Slurm 22.05.8
from the dev cluster (3 types x 2 nodes, 4 GPUs and 8 CPUs each), see tests/fixtures/README.md.
Gavel jobs held by the plugin: 1 ``-N 1 --ntasks=1 --cpus-per-task=2 --gres=gpu:2`` (22.05's
squeue says node_count 2; scontrol NumNodes=1-1), 2 ``-N 1 --ntasks=4 --cpus-per-task=2
--gres=gpu:2``, 3 ``-N 2 --gres=gpu:2``, 4 ``-N 1-2 --gres=gpu:2``, 5 ``-c 8 --gres=gpu:1``;
plain jobs running: 6 ``-w k80-0 -c 8 --gres=gpu:1``, 7 ``-w k80-1 -c 2 --mem=1G --gres=gpu:1``.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from slurm_gavel.slurm.backend import discover_partitions
from slurm_gavel.slurm.backend.holds import held_gpus
from slurm_gavel.slurm.backend.snapshot import build
from slurm_gavel.slurm.capacity import cpu_shortage, cpus_of, free_gpus, gpus_kept
from slurm_gavel.slurm.feasibility import judge
from slurm_gavel.slurm.gputypes import discover
from slurm_gavel.slurm.records import parse_jobs, parse_nodes

from tests.support.slurm import as_24_11

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def load(name):
    return json.loads((FIXTURES / name).read_text())


def recorded(shape="22.05"):
    data = load("squeue-request-22.05.json")
    if shape != "22.05":
        data = {"jobs": [as_24_11(j) for j in data["jobs"]]}
    return {j.job_id: j for j in parse_jobs(data)}, parse_nodes(load("sinfo-cpus-22.05.json"))


# -- (a) the shape a job asked, not a pending job's estimate ---------------------------------
def test_the_recording_has_the_estimate_that_misled():
    raw = {str(j["job_id"]): j for j in load("squeue-request-22.05.json")["jobs"]}
    assert raw["1"]["node_count"] == 2 and raw["1"]["max_nodes"] == 1     # what 22.05 said


@pytest.mark.parametrize("shape", ["22.05", "24.11-shaped"])
def test_node_count_is_the_request(shape):
    jobs, _ = recorded(shape)
    assert [jobs[i].node_count for i in "1234567"] == [1, 1, 2, 1, 1, 1, 1]
    assert (jobs["1"].gpus, jobs["1"].total_gpus, jobs["1"].reshapeable) == (2, 2, False)
    assert jobs["3"].total_gpus == 4        # -N 2 --gres=gpu:2: the plugin adds --gpus=4
    assert [jobs[i].cpus_needed for i in "12345"] == [2, 8, 1, 1, 8]


def test_a_one_node_ddp_job_is_planned_on_one_node():
    jobs, nodes = recorded()
    verdict = judge(jobs["1"], nodes, discover_partitions(nodes))
    assert verdict.hold == "" and verdict.placement is None, verdict
    # -n 4 -c 2 on one node needs 8 CPUs there (its per-node minimum says 2)
    small = [dataclasses.replace(n, cpus=4) for n in nodes]
    assert "needs 8 CPUs per node" in judge(jobs["2"], small, discover_partitions(nodes)).hold


# -- (b) CPUs in GPUs ---------------------------------------------------------------------
def test_nodes_say_what_is_allocated():
    _, nodes = recorded()
    alloc = {n.name: n.alloc_cpus for n in nodes}
    assert alloc == {"k80-0": 8, "k80-1": 2, "p100-0": 0, "p100-1": 0, "v100-0": 0, "v100-1": 0}


def test_a_job_keeps_the_gpus_whose_cpus_it_takes():
    jobs, nodes = recorded()
    node = next(n for n in nodes if n.name == "v100-0")           # 4 GPUs, 8 CPUs
    assert gpus_kept(jobs["5"], node) == 4      # 1 GPU, 8 CPUs: the whole node
    assert gpus_kept(jobs["1"], node) == 2      # 2 GPUs, 2 CPUs: its GPUs
    assert gpus_kept(dataclasses.replace(jobs["5"], cpus=3, cpus_per_node=3), node) == 2
    assert gpus_kept(dataclasses.replace(jobs["5"], cpus=0, cpus_per_node=None), node) == 1
    wide = dataclasses.replace(node, cpus=64, gpus=8)
    assert gpus_kept(jobs["5"], wide) == 1


def test_held_gpus_is_the_scale_factor_the_mechanism_plans():
    jobs, nodes = recorded()
    snap = build(jobs.values(), nodes, discover(nodes))
    assert held_gpus(snap, jobs["5"], None) == 4
    assert held_gpus(snap, jobs["1"], None) == 2
    assert held_gpus(snap, jobs["3"], None) == 4           # distributed: its total


def test_free_gpus_count_the_cpus_other_jobs_left():
    jobs, nodes = recorded()
    by = {n.name: n for n in nodes}
    snap = build(jobs.values(), nodes, discover(nodes))
    # plain job 6: 1 GPU and every CPU of k80-0; plain job 7: 1 GPU, 2 CPUs of k80-1
    assert dict(snap.others_cpus) == {"k80-0": 8, "k80-1": 2}
    assert dict(snap.others_gpus) == {"k80-0": 1, "k80-1": 1}
    assert free_gpus(by["k80-0"], 1, 8) == 0
    assert free_gpus(by["k80-1"], 1, 2) == 3
    assert free_gpus(by["v100-0"], 0, 0) == 4
    assert free_gpus(by["v100-0"], 0, 3) == 2        # a CPU-only job on 3 CPUs: 5 left, 2 GPUs' worth
    # a running gavel job's CPUs are its own (the mechanism places it), not another's
    mine = dataclasses.replace(jobs["5"], state=("RUNNING",), nodes=("k80-0",))
    assert cpus_of([mine, jobs["1"]], "k80-0") == 8 and cpus_of([mine], "k80-1") == 0
    assert build([mine], nodes, discover(nodes)).others_cpus == {}


def test_cpu_shortage_in_words():
    jobs, nodes = recorded()
    used = {"k80-0": 1, "k80-1": 1}
    said = cpu_shortage(jobs["1"], nodes, used, frozenset({"k80-0", "k80-1"}))
    assert said == "needs 2 CPUs on a node; node k80-0: 3 GPUs free, 0 of 8 CPUs free", said
    assert cpu_shortage(jobs["4"], nodes, used, frozenset({"k80-1"})) == ""


def test_a_start_whose_cpus_a_plain_job_took_is_taken_back():
    from slurm_gavel.core.plan import Assignment
    from slurm_gavel.slurm.backend.holds import taken_from
    jobs, nodes = recorded()
    snap = build(jobs.values(), nodes, discover(nodes))
    # job 1 (2 GPUs, 2 CPUs) released onto k80-0, where plain job 6 holds 1 GPU and 8 CPUs
    assert taken_from(snap, jobs["1"], Assignment(("1",), "k80", (("k80-0", 2),))) == "k80-0 (8 of its 8 CPUs)"
    # job 5 (1 GPU, 8 CPUs: planned as 4) onto k80-1, where plain job 7 holds a GPU and 2 CPUs
    assert taken_from(snap, jobs["5"], Assignment(("5",), "k80", (("k80-1", 4),))) == "k80-1 (1 of its 4 GPUs)"
    assert taken_from(snap, jobs["1"], Assignment(("1",), "k80", (("k80-1", 2),))) == ""
    assert taken_from(snap, jobs["5"], Assignment(("5",), "v100", (("v100-0", 4),))) == ""


def test_24_11_nodes_say_what_is_allocated_too():
    # the 24.11 recording (tests/fixtures/README.md): a 1-CPU job runs on v100-0 and on k80-0
    alloc = {n.name: n.alloc_cpus for n in parse_nodes(load("nodes-24.11.json"))}
    assert alloc == {"k80-0": 1, "k80-1": 0, "p100-0": 0, "p100-1": 0, "v100-0": 1, "v100-1": 0}

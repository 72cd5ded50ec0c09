"""Where Slurm counts memory (CR_Core_Memory), a node's memory counts as much as its GPUs.

The job and node fields below are what squeue --json / sinfo --json (22.05.8) and squeue
--json (24.11.5) said on the dev cluster with `DevCluster(..., memory=True)`
(CR_Core_Memory, DefMemPerCPU=2048, nodes of 4 GPUs, 8 CPUs, RealMemory=16384), for
pending 1-GPU jobs asking --mem=16384, --mem-per-cpu=3000 -c 2, --mem-per-gpu=5000, nothing:

    22.05  memory_per_node 16384 | memory_per_cpu 3000 | memory_per_cpu 2048 (the default),
           memory_per_tres "gres:gpu:5000" | memory_per_cpu 2048
    24.11  the same in {"set", "number"} objects, but --mem-per-gpu=5000 is memory_per_node
           5000 and memory_per_tres "gres/gpu:5000"
    node   real_memory 16384, alloc_memory 16384 (a running --mem=16384 job), 0 (none)
"""
from __future__ import annotations

import dataclasses

import pytest

from slurm_gavel.core.plan import Assignment
from slurm_gavel.slurm.backend.holds import held_gpus, taken_from
from slurm_gavel.slurm.backend.snapshot import build
from slurm_gavel.slurm.capacity import cpu_shortage, free_gpus, gpus_kept, memory_consumable
from slurm_gavel.slurm.gputypes import discover
from slurm_gavel.slurm.records import parse_jobs, parse_nodes

from tests.support.slurm import as_24_11


def job(job_id, state="PENDING", nodes="", **fields):
    return {"job_id": job_id, "name": "j", "user_name": "root", "account": "a", "partition": "k80",
            "job_state": state, "nodes": nodes, "comment": "", "admin_comment": "",
            "tres_per_node": "gres:gpu:1", "node_count": 1, "minimum_cpus_per_node": 1,
            "cpus": 1, "memory_per_node": None, "memory_per_cpu": None, "memory_per_tres": "",
            **fields}


JOBS_22_05 = [
    job(1, memory_per_node=16384),
    job(2, memory_per_cpu=3000, minimum_cpus_per_node=2, cpus=2),
    job(3, memory_per_cpu=2048, memory_per_tres="gres:gpu:5000"),
    job(4, memory_per_cpu=2048),
    # plain, running on k80-0 with every MB of it
    job(5, state="RUNNING", nodes="k80-0", memory_per_node=16384),
]


def node(name, alloc_memory=0, alloc_cpus=0):
    return {"name": name, "state": "MIXED" if alloc_cpus else "IDLE", "partitions": [name.split("-")[0]],
            "gres": f"gpu:{name.split('-')[0]}:4", "cpus": 8, "real_memory": 16384,
            "alloc_memory": alloc_memory, "alloc_cpus": alloc_cpus}


NODES = parse_nodes({"nodes": [node("k80-0", 16384, 1), node("k80-1"), node("v100-0")]})


def parsed(shape):
    jobs = JOBS_22_05
    if shape == "24.11":
        jobs = [as_24_11(j) for j in jobs]
        jobs[2]["memory_per_tres"] = "gres/gpu:5000"                 # as 24.11 writes it
        jobs[2]["memory_per_cpu"] = {"set": False, "infinite": False, "number": 0}
        jobs[2]["memory_per_node"] = {"set": True, "infinite": False, "number": 5000}
    return {j.job_id: j for j in parse_jobs({"jobs": jobs})}


@pytest.mark.parametrize("shape", ["22.05", "24.11"])
def test_a_jobs_memory_per_node_from_what_it_asked(shape):
    jobs = parsed(shape)
    assert [jobs[i].memory_needed for i in "1234"] == [16384, 6000, 5000, 2048]
    assert jobs["3"].memory_per_gpu == 5000
    assert dataclasses.replace(jobs["3"], gpus=2).memory_needed == 10000     # per GPU, times its GPUs


def test_nodes_say_their_allocated_memory():
    assert [(n.memory, n.alloc_memory) for n in NODES] == [(16384, 16384), (16384, 0), (16384, 0)]


@pytest.mark.parametrize("params,counted", [
    ("CR_Core_Memory", True), ("CR_CPU_Memory,OTHER_CONS_RES", True), ("CR_Memory", True),
    ("CR_Socket_Memory", True), ("CR_Core", False), ("CR_Core,MULTIPLE_SHARING_GRES_PJ", False),
    ("", False)])
def test_memory_is_counted_only_where_slurm_counts_it(params, counted):
    assert memory_consumable({"SelectTypeParameters": params}) is counted


def test_a_job_keeps_the_gpus_whose_memory_it_takes():
    jobs, k80_1 = parsed("22.05"), NODES[1]
    assert gpus_kept(jobs["1"], k80_1, memory=True) == 4        # 1 GPU, all 16384 MB: the node
    assert gpus_kept(jobs["1"], k80_1) == 1                     # memory not counted: its GPU
    assert gpus_kept(jobs["2"], k80_1, memory=True) == 2        # 6000 MB of 4096 a GPU
    assert gpus_kept(jobs["4"], k80_1, memory=True) == 1        # the default, 2048 MB


def test_held_gpus_and_free_gpus_count_memory_where_slurm_does():
    jobs = parsed("22.05")
    counted = build(jobs.values(), NODES, discover(NODES), memory=True)
    assert held_gpus(counted, jobs["1"], None) == 4
    assert held_gpus(build(jobs.values(), NODES, discover(NODES)), jobs["1"], None) == 1
    # plain job 5 holds 1 GPU, 1 CPU and all 16384 MB of k80-0: no GPU there is free
    assert dict(counted.others_memory) == {"k80-0": 16384}
    assert free_gpus(NODES[0], 1, 1, 16384) == 0
    assert free_gpus(NODES[0], 1, 1) == 3                       # not counted
    assert free_gpus(NODES[0], 1, 1, 6000) == 2                 # 10384 MB left: 2 GPUs' worth


def test_memory_shortage_in_words():
    jobs = parsed("22.05")
    said = cpu_shortage(jobs["4"], NODES, {"k80-0": 1}, frozenset({"k80-0", "k80-1"}), memory=True)
    assert said == "needs 2048 MB memory on a node; node k80-0: 3 GPUs free, 0 of 16384 MB memory free", said
    assert cpu_shortage(jobs["4"], NODES, {"k80-0": 1}, frozenset({"k80-0"})) == ""


def test_a_start_whose_memory_a_plain_job_took_is_taken_back():
    jobs = parsed("22.05")
    snap = build(jobs.values(), NODES, discover(NODES), memory=True)
    a = Assignment(("4",), "k80", (("k80-0", 1),))
    assert taken_from(snap, jobs["4"], a) == "k80-0 (16384 of its 16384 MB memory)"
    assert taken_from(build(jobs.values(), NODES, discover(NODES)), jobs["4"], a) == ""

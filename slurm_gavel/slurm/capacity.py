"""A node's CPUs in GPUs: what a job keeps from others, and what is left for the scheduler.

Slurm starts a job on a node only where every resource it asks is free there: GPUs, and
the CPUs it asks too.  The mechanism plans in GPUs alone (free GPUs per server, a scale
factor per job: the narrow waist), so the driver speaks to it in GPUs: a node's CPUs
are shared out at its own rate, ``cpus / gpus`` per GPU (8 CPUs and 4 GPUs: 2 a GPU).

* A job keeps from others the GPUs it asks, or, if more, the GPUs whose CPUs it takes:
  ``-c 8 --gres=gpu:1`` on that node keeps all 4 (`gpus_kept`), as an ``--exclusive``
  job keeps its whole node.  The mechanism then leaves the node to it and plans other
  jobs elsewhere, instead of on 3 GPUs Slurm will never start anything on.
* A node's free GPUs for the scheduler (`free_gpus`) are those no job the scheduler does
  not place (a non-gavel job) holds, at most as many as the CPUs those jobs left free
  hold at the node's rate: a plain job on 1 GPU and 8 CPUs leaves none.  Those jobs' CPUs
  are read from their own records (snapshot.py), in the same squeue as the gavel jobs: the
  node's own count (``alloc_cpus``, read by a second call) may already hold a gavel job
  that started in between, which would take a GPU from the plan for one poll.

Counted this way, the gavel jobs planned on a node never ask more CPUs than it has (each
takes at most its GPUs' worth of the node's rate, and they take at most its free GPUs).  It
is on the safe side: a 1-GPU job asking 1 CPU still counts a whole GPU, and a job asking
3 CPUs on that node keeps 2 GPUs.  Memory is not counted: the clusters this runs on
(``SelectTypeParameters=CR_Core``) do not treat it as consumable, and a job asking more
than a node has is ruled out by feasibility.py.  `cpu_shortage` says in words why GPUs
that look free cannot take a job ("node k80-0: 3 GPUs free, 0 of 8 CPUs free").
Pure functions over `records` values.
"""
from __future__ import annotations

import math
from typing import Iterable, Mapping

from .records import SlurmJob, SlurmNode


def gpus_kept(job: SlurmJob, node: SlurmNode) -> int:
    """GPUs of `node` the one-node `job` keeps from others: its own, or the GPUs whose CPUs
    it takes at the node's CPUs per GPU (at most the node's GPUs)."""
    own = max(1, job.gpus)
    need = job.cpus_needed
    if not need or not node.cpus or not node.gpus:
        return own
    return max(own, min(node.gpus, math.ceil(need * node.gpus / node.cpus - 1e-9)))


def free_gpus(node: SlurmNode, others_gpus: int, others_cpus: int) -> int:
    """The GPUs of `node` the scheduler may plan: those other jobs do not hold, at most the
    GPUs the CPUs they left free make up at the node's rate."""
    free = node.gpus - max(0, others_gpus)
    if node.cpus and node.gpus and others_cpus > 0:
        left = max(0, node.cpus - others_cpus)
        free = min(free, left * node.gpus // node.cpus)
    return max(0, free)


def cpus_of(jobs: Iterable[SlurmJob], node: str) -> int:
    """CPUs the running `jobs` hold on `node` (a job on several nodes: its CPUs spread evenly)."""
    held = 0
    for j in jobs:
        if j.running and node in j.nodes and j.cpus:
            held += -(-j.cpus // len(j.nodes))
    return held


def cpu_shortage(job: SlurmJob, nodes: Iterable[SlurmNode], gpus_used: Mapping[str, int],
                 allowed: frozenset[str] | None = None) -> str:
    """Why GPUs that are free cannot take `job`: the nodes (of `allowed`, None: all) with
    GPUs enough free (`gpus_used`: GPUs running jobs hold there) but not its CPUs, in words;
    '' when there is no such node."""
    need = max(1, job.cpus_needed)
    per_node = max(1, job.gpus)
    said = []
    for n in nodes:
        if allowed is not None and n.name not in allowed or not n.cpus or not n.usable:
            continue
        gpus = n.gpus - gpus_used.get(n.name, 0)
        cpus = max(0, n.cpus - n.alloc_cpus)
        if gpus >= per_node and cpus < need:
            said.append(f"node {n.name}: {gpus} GPUs free, {cpus} of {n.cpus} CPUs free")
    if not said:
        return ""
    more = f" (and {len(said) - 3} more)" if len(said) > 3 else ""
    return f"needs {need} CPUs on a node; " + "; ".join(said[:3]) + more


__all__ = ["cpu_shortage", "cpus_of", "free_gpus", "gpus_kept"]

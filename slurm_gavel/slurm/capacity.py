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
3 CPUs on that node keeps 2 GPUs.

Memory is counted the same way, at ``RealMemory / gpus`` per GPU, where Slurm treats it as
consumable (`memory_consumable`: SelectTypeParameters ``CR_Core_Memory``, ``CR_CPU_Memory``,
...): ``--mem=16G --gres=gpu:1`` on a 16 GB, 4-GPU node keeps the node, a plain job holding
all its memory leaves it no free GPU.  Where it is not (``CR_Core``) a job asking more than
a node has is still ruled out by feasibility.py.  `cpu_shortage` says in words why GPUs
that look free cannot take a job ("node k80-0: 3 GPUs free, 0 of 8 CPUs free", "..., 0 of
16384 MB memory free").  Pure functions over `records` values.
"""
from __future__ import annotations

import math
from typing import Iterable, Mapping

from .records import SlurmJob, SlurmNode


def memory_consumable(conf: Mapping[str, str]) -> bool:
    """Whether Slurm counts memory as a node's consumable resource (`scontrol show config`'s
    SelectTypeParameters has CR_Memory, CR_Core_Memory, CR_CPU_Memory or CR_Socket_Memory)."""
    flags = str(conf.get("SelectTypeParameters", "")).upper().split(",")
    return any(f.strip().startswith("CR_") and f.strip().endswith("MEMORY") for f in flags)


def _share(need: float, total: float, gpus: int) -> int:
    """GPUs whose share of `total` (at total / gpus a GPU) `need` takes, at most `gpus`."""
    return min(gpus, math.ceil(need * gpus / total - 1e-9))


def gpus_kept(job: SlurmJob, node: SlurmNode, memory: bool = False) -> int:
    """GPUs of `node` the one-node `job` keeps from others: its own, or the GPUs whose CPUs
    it takes at the node's CPUs per GPU, or (`memory`: consumable) whose memory it takes
    (at most the node's GPUs)."""
    kept = max(1, job.gpus)
    if not node.gpus:
        return kept
    if job.cpus_needed and node.cpus:
        kept = max(kept, _share(job.cpus_needed, node.cpus, node.gpus))
    mem = job.memory_needed if memory else None
    if mem and node.memory:
        kept = max(kept, _share(mem, node.memory, node.gpus))
    return kept


def free_gpus(node: SlurmNode, others_gpus: int, others_cpus: int, others_memory: float = 0.0) -> int:
    """The GPUs of `node` the scheduler may plan: those other jobs do not hold, at most the
    GPUs the CPUs (and the memory: `others_memory`, 0 where it is not consumable) they left
    free make up at the node's rate."""
    free = node.gpus - max(0, others_gpus)
    if node.cpus and node.gpus and others_cpus > 0:
        left = max(0, node.cpus - others_cpus)
        free = min(free, left * node.gpus // node.cpus)
    if node.memory and node.gpus and others_memory > 0:
        left_mb = max(0.0, node.memory - others_memory)
        free = min(free, int(left_mb * node.gpus // node.memory))
    return max(0, free)


def cpus_of(jobs: Iterable[SlurmJob], node: str) -> int:
    """CPUs the running `jobs` hold on `node` (a job on several nodes: its CPUs spread evenly)."""
    held = 0
    for j in jobs:
        if j.running and node in j.nodes and j.cpus:
            held += -(-j.cpus // len(j.nodes))
    return held


def memory_of(jobs: Iterable[SlurmJob], node: str) -> float:
    """MB the running `jobs` hold on `node` (what each asks per node)."""
    return sum(j.memory_needed or 0.0 for j in jobs if j.running and node in j.nodes)


def cpu_shortage(job: SlurmJob, nodes: Iterable[SlurmNode], gpus_used: Mapping[str, int],
                 allowed: frozenset[str] | None = None, memory: bool = False) -> str:
    """Why GPUs that are free cannot take `job`: the nodes (of `allowed`, None: all) with
    GPUs enough free (`gpus_used`: GPUs running jobs hold there) but not its CPUs, or
    (`memory`: consumable) not its memory, in words; '' when there is no such node."""
    need = max(1, job.cpus_needed)
    mem = (job.memory_needed or 0.0) if memory else 0.0
    per_node = max(1, job.gpus)
    said, short_cpus, short_mem = [], False, False
    for n in nodes:
        if allowed is not None and n.name not in allowed or not n.usable:
            continue
        gpus = n.gpus - gpus_used.get(n.name, 0)
        if gpus < per_node:
            continue
        words = []
        cpus = max(0, n.cpus - n.alloc_cpus) if n.cpus else None
        if cpus is not None and cpus < need:
            words.append(f"{cpus} of {n.cpus} CPUs free")
            short_cpus = True
        left = max(0.0, n.memory - n.alloc_memory) if mem and n.memory else None
        if left is not None and left < mem:
            words.append(f"{left:.0f} of {n.memory:.0f} MB memory free")
            short_mem = True
        if words:
            said.append(f"node {n.name}: {gpus} GPUs free, " + ", ".join(words))
    if not said:
        return ""
    more = f" (and {len(said) - 3} more)" if len(said) > 3 else ""
    needs = " and ".join([f"{need} CPUs"] * short_cpus + [f"{mem:.0f} MB memory"] * short_mem)
    return f"needs {needs} on a node; " + "; ".join(said[:3]) + more


__all__ = ["cpu_shortage", "cpus_of", "free_gpus", "gpus_kept", "memory_consumable", "memory_of"]

"""Where a Slurm job can run at all: its request against the nodes of each GPU partition.

The daemon must only plan what Slurm can start.  A job whose request no node
of a partition can hold (GPUs per node, memory, CPUs, constraint, excluded
nodes) gets that partition's worker type ruled out; nodes of a type
that cannot hold it are ruled out one by one; a job no node anywhere can
hold, one that needs several nodes (distributed jobs are not supported yet),
or one waiting for its dependency is not planned at all, and says why.
Pure functions over `records` values: no Slurm calls.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from ..core.mechanism import Placement
from .records import SlurmJob, SlurmNode

_SIMPLE_CONSTRAINT = re.compile(r"^[A-Za-z0-9_.\-]+(?:[&,][A-Za-z0-9_.\-]+)*$")


def node_refuses(job: SlurmJob, node: SlurmNode) -> str:
    """Why `node` can never run `job` ("" when it can, as far as the request says)."""
    if job.gpus > node.gpus:
        return f"needs {job.gpus} GPUs per node, {node.name} has {node.gpus}"
    need = job.memory_needed
    if need and node.memory and need > node.memory:
        return f"needs {need:.0f} MB memory per node, {node.name} has {node.memory:.0f}"
    if job.cpus_per_node and node.cpus and job.cpus_per_node > node.cpus:
        return f"needs {job.cpus_per_node} CPUs per node, {node.name} has {node.cpus}"
    if job.features and _SIMPLE_CONSTRAINT.match(job.features):
        # a&b (or a,b): every feature; anything fancier (|, [], counts) is left to Slurm
        missing = [f for f in re.split(r"[&,]", job.features) if f not in node.features]
        if missing:
            return f"constraint {job.features!r}: {node.name} lacks {', '.join(missing)}"
    # (required nodes are not checked: the daemon itself sets them when it places a job)
    if node.name in job.excluded_nodes:
        return f"{node.name} is excluded by the job"
    return ""


@dataclass(frozen=True)
class Verdict:
    """Where a job may run (`placement`, None: anywhere) or why it is not planned (`hold`)."""

    placement: Placement | None = None
    hold: str = ""


def judge(job: SlurmJob, nodes: Sequence[SlurmNode], partitions: Mapping[str, str]) -> Verdict:
    """The job's request against every node of the GPU `partitions` ({partition: worker type})."""
    if job.node_count > 1:
        return Verdict(hold=f"needs {job.node_count} nodes: distributed jobs not supported yet")
    ours = [n for n in nodes if any(p in partitions for p in n.partitions)]
    largest = max((n.gpus for n in ours), default=0)
    if job.gpus > largest:
        return Verdict(hold=f"needs {job.gpus} GPUs, the largest node has {largest}: "
                            f"distributed jobs not supported yet")
    if job.waiting_for_dependency:
        return Verdict(hold=f"waiting for its dependency ({job.dependency or job.reason})")
    fitting: set[str] = set()
    types: set[str] = set()
    why = ""
    for n in ours:
        refused = node_refuses(job, n)
        if refused:
            why = why or refused
            continue
        fitting.add(n.name)
        types.update(partitions[p] for p in n.partitions if p in partitions)
    if not fitting:
        return Verdict(hold=f"fits no node: {why}")
    if len(fitting) == len(ours):
        return Verdict()
    all_types = set(partitions.values())
    return Verdict(Placement(worker_types=frozenset(types) if types != all_types else None,
                             servers=frozenset(fitting)))


__all__ = ["Verdict", "judge", "node_refuses"]

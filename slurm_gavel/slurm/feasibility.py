"""Where a Slurm job can run at all: its request against the nodes of each GPU partition.

The daemon must only plan what Slurm can start.  A job whose request no node
of a partition can hold (GPUs per node, memory, CPUs, constraint, excluded
nodes) gets that partition's worker type ruled out; nodes of a type
that cannot hold it are ruled out one by one; a job no node anywhere can
hold, or one waiting for its dependency is not planned at all, and says why.

A distributed job (its GPU total per job, `--gpus=N`: `SlurmJob.reshapeable`)
may run on any type with nodes enough to hold N in equal parts (Slurm gives a
job one GPU count per node): its placement says so (`same_gpus_per_server`).
A job asking GPUs per node on several nodes without a total keeps its shape,
which the mechanism cannot plan: it is not planned, and says how to submit it.
What the user restricted at submission narrows it further (`accepts`): the GPU
types of ``types=`` and of the partition list given with ``sbatch -p`` (kept in
the flags as ``partitions``); ``--constraint`` is a node's features, checked with
the rest of the request (``a``, ``a&b``, ``a|b``).
Pure functions over `records` values: no Slurm calls.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from ..core.plan import Placement
from .records import SlurmJob, SlurmNode

_SIMPLE_CONSTRAINT = re.compile(r"^[A-Za-z0-9_.\-]+(?:[&,][A-Za-z0-9_.\-]+)*$")
_ANY_CONSTRAINT = re.compile(r"^[A-Za-z0-9_.\-]+(?:\|[A-Za-z0-9_.\-]+)+$")   # a|b: one of them


def node_refuses(job: SlurmJob, node: SlurmNode, gpus: bool = True) -> str:
    """Why `node` can never run `job` ("" when it can, as far as the request says);
    without `gpus`, everything but the GPU count (a reshapeable job chooses it)."""
    if gpus and job.gpus > node.gpus:
        return f"needs {job.gpus} GPUs per node, {node.name} has {node.gpus}"
    if job.gpu_type and node.gpu_type and job.gpu_type != node.gpu_type:
        # a typed request (--gres=gpu:v100:2) in a partition of mixed GPU nodes
        return f"asks for {job.gpu_type} GPUs, {node.name} has {node.gpu_type}"
    need = job.memory_needed
    if need and node.memory and need > node.memory:
        return f"needs {need:.0f} MB memory per node, {node.name} has {node.memory:.0f}"
    if job.cpus_needed and node.cpus and job.cpus_needed > node.cpus:
        return f"needs {job.cpus_needed} CPUs per node, {node.name} has {node.cpus}"
    if job.features and _SIMPLE_CONSTRAINT.match(job.features):
        # a&b (or a,b): every feature; anything fancier (|, [], counts) is left to Slurm
        missing = [f for f in re.split(r"[&,]", job.features) if f not in node.features]
        if missing:
            return f"constraint {job.features!r}: {node.name} lacks {', '.join(missing)}"
    elif job.features and _ANY_CONSTRAINT.match(job.features):
        if not set(job.features.split("|")) & set(node.features):
            return f"constraint {job.features!r}: {node.name} has none of them"
    # (required nodes are not checked: the daemon itself sets them when it places a job)
    if node.name in job.excluded_nodes:
        return f"{node.name} is excluded by the job"
    return ""


@dataclass(frozen=True)
class Verdict:
    """Where a job may run (`placement`, None: anywhere) or why it is not planned (`hold`)."""

    placement: Placement | None = None
    hold: str = ""


def equal_split(total: int, sizes: Sequence[int]) -> tuple[int, int] | None:
    """(nodes, GPUs per node) holding `total` in equal parts on nodes of these `sizes`
    (GPUs each), as few nodes as possible; None when none does."""
    for k in range(1, total + 1):
        if total % k == 0 and sum(1 for g in sizes if g >= total // k) >= k:
            return k, total // k
    return None


def _typer(partitions: Mapping[str, str], node_types: Mapping[str, str] | None):
    """node -> its worker types: from `node_types` (node name -> type, gputypes.TypeMap:
    mixed partitions) when given, else from its partitions."""
    if node_types is not None:
        return lambda n: {node_types[n.name]} if n.name in node_types else set()
    return lambda n: {partitions[p] for p in n.partitions if p in partitions}


def judge(job: SlurmJob, nodes: Sequence[SlurmNode], partitions: Mapping[str, str],
          node_types: Mapping[str, str] | None = None) -> Verdict:
    """The job's request against every node of the GPU `partitions` ({partition: worker type}),
    or of the typed nodes `node_types` ({node: worker type}) when given."""
    types_of = _typer(partitions, node_types)
    all_types = set(node_types.values()) if node_types is not None else set(partitions.values())
    if job.reshapeable:
        return _judge_reshapeable(job, nodes, types_of, all_types)
    if job.node_count > 1:
        return Verdict(hold=f"asks {job.gpus} GPUs per node on {job.node_count} nodes without a "
                            f"total, so its shape cannot be chosen: submit it with --gpus="
                            f"{job.total_gpus} (the job_submit plugin adds it to -N k --gres=gpu:m)")
    ours = [n for n in nodes if types_of(n)]
    largest = max((n.gpus for n in ours), default=0)
    if job.gpus > largest:
        return Verdict(hold=f"needs {job.gpus} GPUs, the largest node has {largest}: ask "
                            f"--gpus={job.gpus} instead of GPUs per node to be spread over nodes")
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
        types.update(types_of(n))
    if not fitting:
        return Verdict(hold=f"fits no node: {why}")
    if len(fitting) == len(ours):
        return Verdict()
    return Verdict(Placement(worker_types=frozenset(types) if types != all_types else None,
                             servers=frozenset(fitting)))


def _judge_reshapeable(job: SlurmJob, nodes: Sequence[SlurmNode], types_of, all_types) -> Verdict:
    if job.waiting_for_dependency:
        return Verdict(hold=f"waiting for its dependency ({job.dependency or job.reason})")
    total = max(1, job.total_gpus)
    by_type: dict[str, list[SlurmNode]] = {}
    why = ""
    for n in nodes:
        types = types_of(n)
        if not types:
            continue
        refused = node_refuses(job, n, gpus=False)
        if refused:
            why = why or refused
            continue
        for wt in types:
            by_type.setdefault(wt, []).append(n)
    types, fitting = set(), set()
    for wt, members in by_type.items():
        if equal_split(total, [n.gpus for n in members]) is not None:
            types.add(wt)
            fitting.update(n.name for n in members)
    if not types:
        sizes = {wt: sorted((n.gpus for n in m), reverse=True) for wt, m in sorted(by_type.items())}
        shown = "; ".join(f"{wt}: {'+'.join(map(str, g))}" for wt, g in sizes.items())
        return Verdict(hold=f"needs {total} GPUs in equal parts on nodes of one type, and no type "
                            f"has them ({shown or why or 'no GPU node'})")
    return Verdict(Placement(worker_types=frozenset(types) if types != all_types else None,
                             servers=frozenset(fitting), same_gpus_per_server=True))


def accepts(flags, placement: Placement, nodes: Sequence[SlurmNode],
            type_of: Mapping[str, str | None]) -> tuple[Placement, str]:
    """`placement` narrowed to the GPU types the job accepts (its ``types=`` flag, the
    types of the partitions it was submitted to), or why it cannot run anywhere
    (`type_of`: node -> the GPU type the scheduler runs there)."""
    if flags.types is None and flags.partitions is None:
        return placement, ""
    known = sorted({t for t in type_of.values() if t})
    allowed: set[str] | None = None
    if flags.types is not None:
        unknown = [t for t in flags.types if t not in known]
        if unknown:
            return placement, (f"types={','.join(flags.types)}: unknown GPU type {unknown[0]} "
                               f"(this cluster has {', '.join(known)}): resubmit with known types")
        allowed = set(flags.types)
    if flags.partitions is not None:
        theirs = {type_of.get(n.name) for n in nodes if set(n.partitions) & set(flags.partitions)}
        theirs.discard(None)
        if not theirs:
            return placement, (f"submitted to partition {','.join(flags.partitions)}, where the "
                               f"scheduler has no GPUs (its GPU types: {', '.join(known)})")
        allowed = theirs if allowed is None else allowed & theirs
        if not allowed:
            return placement, (f"types={','.join(flags.types)} and partition "
                               f"{','.join(flags.partitions)} share no GPU type")
    fits = placement.worker_types if placement.worker_types is not None else set(known)
    types = frozenset(fits) & frozenset(allowed)
    if not types:
        return placement, (f"accepts only {', '.join(sorted(allowed))}, and fits no node there")
    servers = placement.servers
    if servers is not None:
        servers = frozenset(n for n in servers if type_of.get(n) in types)
    return replace(placement, worker_types=types, servers=servers), ""


__all__ = ["Verdict", "accepts", "equal_split", "judge", "node_refuses"]

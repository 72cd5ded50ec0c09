"""Which Slurm nodes are which GPU type, and in which partition each type's jobs run.

Two cluster layouts, also mixed on one cluster:

* a partition per GPU type ("GRES-typed partitions"): every node of partition
  `v100` is a v100 node; the partition names the type;
* one partition of mixed GPU nodes with typed GRES (``Gres=gpu:v100:4`` on some
  nodes, ``Gres=gpu:a100:8`` on others): a type is the nodes of that partition
  whose GRES type it is (or an explicit node set the admin names).  The daemon
  chooses the type by the node list it pins on the job (``NodeList=``) inside the
  shared partition; requests stay untyped (``--gres=gpu:N``) and a pending job's
  GRES type is never changed (22.05 appends a new GRES to the old one).

A `TypeMap` is worker type -> `Where` (partition, GRES type, node set).  It is
read from gavel.toml (``[partitions]`` partition = type, ``[gpu_types]`` type =
partition or a table) or discovered from the nodes' GRES (`discover`).
Plain data over `records.SlurmNode`; no Slurm calls.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from ..core.errors import InputError
from .records import SlurmNode, expand_hostlist


@dataclass(frozen=True)
class Where:
    """Where a GPU type is: nodes of `partition`, those with GRES type `gres` (None: any),
    and among them only `nodes` (None: all)."""

    partition: str
    gres: str | None = None
    nodes: frozenset[str] | None = None

    def holds(self, node: SlurmNode) -> bool:
        return (self.partition in node.partitions
                and (self.gres is None or node.gpu_type == self.gres)
                and (self.nodes is None or node.name in self.nodes))

    @property
    def whole_partition(self) -> bool:
        return self.gres is None and self.nodes is None


class TypeMap:
    """GPU type -> `Where`, in the order given (a node belongs to the first type holding it)."""

    def __init__(self, where: Mapping[str, Where]):
        self.where = dict(where)

    @classmethod
    def from_partitions(cls, partitions: Mapping[str, str]) -> "TypeMap":
        """partition -> type (one type per partition; a type may have several partitions,
        the last one is where its jobs start, as before)."""
        where: dict[str, Where] = {}
        for p, wt in partitions.items():
            where.pop(wt, None)
            where[wt] = Where(p)
        return cls(where)

    @property
    def worker_types(self) -> tuple[str, ...]:
        return tuple(self.where)

    @property
    def pairs(self) -> tuple[tuple[str, str], ...]:
        """(partition, type) for every type: what decisions and metrics label."""
        return tuple((w.partition, wt) for wt, w in self.where.items())

    @property
    def partitions(self) -> dict[str, str]:
        """partition -> type where a partition is one type; a mixed partition maps to its
        types joined by '+' (for display only)."""
        out: dict[str, list[str]] = {}
        for wt, w in self.where.items():
            out.setdefault(w.partition, []).append(wt)
        return {p: "+".join(types) for p, types in out.items()}

    def partition_of(self, worker_type: str) -> str:
        return self.where[worker_type].partition

    def node_type(self, node: SlurmNode) -> str | None:
        """The GPU type of `node`, None when it is in none of the scheduler's types."""
        return next((wt for wt, w in self.where.items() if w.holds(node)), None)

    def node_types(self, nodes: Iterable[SlurmNode]) -> dict[str, str]:
        out = {}
        for n in nodes:
            wt = self.node_type(n)
            if wt is not None:
                out[n.name] = wt
        return out

    def run_type(self, partition: str | None, nodes: Iterable[str],
                 node_types: Mapping[str, str]) -> str | None:
        """The type a job ran on: its partition's, or in a mixed partition its nodes'."""
        here = [wt for wt, w in self.where.items() if w.partition == partition]
        if len(here) == 1 and self.where[here[0]].whole_partition:
            return here[0]
        seen = {node_types.get(n) for n in nodes}
        if len(seen) == 1:
            wt = next(iter(seen))
            if wt in here:
                return wt
        return None

    def __repr__(self) -> str:
        return f"TypeMap({self.where!r})"


def partition_types(nodes: Iterable[SlurmNode]) -> dict[str, set]:
    """partition -> the GPU types of its nodes (None for a node without typed GPUs: no GPU,
    or untyped `gpu:4`).  The one grouping the driver, doctor and billing read partitions by."""
    types: dict[str, set] = {}
    for n in nodes:
        for p in n.partitions:
            types.setdefault(p, set()).add(n.gpu_type)
    return types


def discover(nodes: Iterable[SlurmNode]) -> TypeMap:
    """Types from Slurm's nodes: a partition whose GPU nodes are all of one GRES type is that
    type; a partition of several GRES types holds each type not already a partition of
    its own, by GRES type.  A partition with untyped GPU nodes (gpu:4) or nodes without
    GPUs is left out."""
    types = partition_types(nodes)
    single = {p: next(iter(t)) for p, t in sorted(types.items()) if len(t) == 1 and None not in t}
    where = dict(TypeMap.from_partitions(single).where)
    for p, t in sorted(types.items()):
        if len(t) > 1 and None not in t:
            for wt in sorted(t):
                where.setdefault(wt, Where(p, gres=wt))
    return TypeMap(where)


def from_config(partitions: Mapping[str, str], gpu_types: Mapping[str, object],
                where: str = "config") -> TypeMap | None:
    """The configured types ([partitions] and [gpu_types]), None when neither is set.
    A [gpu_types] entry: "partition", or {partition = "gpu", gres = "v100"} or
    {partition = "gpu", nodes = "node[1-4]"} (a Slurm host list or a list of names)."""
    if not partitions and not gpu_types:
        return None
    out = dict(TypeMap.from_partitions(partitions).where)
    for wt, spec in gpu_types.items():
        key = f"{where}: gpu_types.{wt}"
        if not isinstance(wt, str) or not wt:
            raise InputError(key, "a GPU type needs a name")
        if isinstance(spec, str):
            spec = {"partition": spec}
        if not isinstance(spec, Mapping):
            raise InputError(key, "must be a partition name or a table {partition, gres | nodes}")
        unknown = set(spec) - {"partition", "gres", "nodes"}
        if unknown:
            raise InputError(key, f"unknown key {sorted(unknown)[0]!r} (known: partition, gres, nodes)")
        p, gres, names = spec.get("partition"), spec.get("gres"), spec.get("nodes")
        if not isinstance(p, str) or not p:
            raise InputError(key, "needs partition = \"name\"")
        if gres is not None and (not isinstance(gres, str) or not gres):
            raise InputError(key, f"gres must name a GRES type, got {gres!r}")
        if names is not None:
            if isinstance(names, str):
                names = expand_hostlist(names)
            if (not isinstance(names, list) or not names
                    or not all(isinstance(n, str) and n for n in names)):
                raise InputError(key, "nodes must be a Slurm host list (\"node[1-4]\") or a list of names")
            names = frozenset(names)
        if wt in out:
            raise InputError(key, f"{wt} is also given in [partitions]")
        out[wt] = Where(p, gres=gres, nodes=names)
    mixed = {}
    for wt, w in out.items():
        mixed.setdefault(w.partition, []).append((wt, w))
    for p, entries in mixed.items():
        if len(entries) > 1 and any(w.whole_partition for _, w in entries):
            raise InputError(f"{where}: gpu_types", f"partition {p} holds several types: each "
                                                    "needs gres = \"TYPE\" or nodes = \"...\"")
    return TypeMap(out)


__all__ = ["TypeMap", "Where", "discover", "from_config", "partition_types"]

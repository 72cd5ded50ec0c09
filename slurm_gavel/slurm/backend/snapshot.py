"""One poll of Slurm as plain, immutable data: the `Snapshot` the backend decides from.

A poll is one `squeue --json` and one `scontrol show nodes --json` (records.py parses
them).  The snapshot keeps every job listed (gavel or not, finished ones too: their end
is read from them), the nodes, the gavel jobs Slurm lists as active (those whose
AdminComment the job_submit plugin marked ``gavel:``), the GPUs non-gavel jobs hold on
each node (and the CPUs and memory they hold there), which running jobs hold each GPU (node, gres_detail IDX), and each node's GPU
type.  A snapshot never changes: what the backend knows of a job after acting on it
("as Slurm has it now, until the next poll") is a new snapshot (`with_job`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import Iterable, Mapping

from ..flags import ADMIN_PREFIX, is_admin_comment
from ..gputypes import TypeMap, partition_types
from ..records import SlurmJob, SlurmNode, index_list

GAVEL_PREFIX = ADMIN_PREFIX       # the AdminComment prefix of a gavel job (flags.py)


@dataclass(frozen=True, eq=False)
class Snapshot:
    listed: tuple[SlurmJob, ...] = ()                  # every job squeue lists
    nodes: tuple[SlurmNode, ...] = ()
    gavel: Mapping[str, SlurmJob] = field(default_factory=lambda: MappingProxyType({}))
    others_gpus: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    gpu_users: Mapping[tuple[str, str], tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType({}))   # (node, IDX) -> running jobs
    type_of: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # node -> CPUs non-gavel jobs hold there, from their own records (the same squeue)
    others_cpus: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    # node -> MB non-gavel jobs hold there (what they ask per node), and whether Slurm counts
    # memory at all (capacity.memory_consumable): only then does it limit placement
    others_memory: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    memory: bool = False

    @cached_property
    def node_named(self) -> Mapping[str, SlurmNode]:
        return MappingProxyType({n.name: n for n in self.nodes})

    @cached_property
    def _shards(self) -> Mapping[str, int]:
        return MappingProxyType({n.name: n.shards // n.gpus if n.gpus else 0 for n in self.nodes})

    def shards_per_gpu(self, node: str) -> int:
        """gres/shard per GPU of `node` (slurm.conf Gres=gpu:4,shard:16 -> 4); 0: none."""
        return self._shards.get(node, 0)

    def with_job(self, job: SlurmJob) -> "Snapshot":
        """This snapshot with one gavel job as Slurm has it after an action of ours."""
        return replace(self, gavel=MappingProxyType({**self.gavel, job.job_id: job}))


def at_start(nodes: Iterable[SlurmNode], types: TypeMap, memory: bool = False) -> Snapshot:
    """Before the first poll: the nodes only (read once when the backend is made)."""
    nodes = tuple(nodes)
    return Snapshot(nodes=nodes, type_of=MappingProxyType(types.node_types(nodes)), memory=memory)


def build(jobs: Iterable[SlurmJob], nodes: Iterable[SlurmNode], types: TypeMap,
          memory: bool = False) -> Snapshot:
    """The snapshot of one poll's jobs and nodes (`memory`: Slurm counts memory)."""
    jobs, nodes = tuple(jobs), tuple(nodes)
    gavel: dict[str, SlurmJob] = {}
    others: dict[str, int] = {}
    cpus: dict[str, int] = {}
    mem: dict[str, float] = {}
    users: dict[tuple[str, str], list[str]] = {}
    for j in jobs:
        if j.running:
            for n, idx in zip(j.nodes, j.gpu_indices):
                for i in index_list(idx):
                    users.setdefault((n, str(i)), []).append(j.job_id)
        if is_admin_comment(j.admin_comment):
            if not j.finished:
                gavel[j.job_id] = j
        elif j.running:
            for n in j.nodes:                  # as Slurm split them (4+2 for --gpus=6)
                others[n] = others.get(n, 0) + j.gpus_on(n)
                cpus[n] = cpus.get(n, 0) + -(-j.cpus // len(j.nodes))
                mem[n] = mem.get(n, 0.0) + (j.memory_needed or 0.0)
    return Snapshot(jobs, nodes, MappingProxyType(gavel), MappingProxyType(others),
                    MappingProxyType({k: tuple(v) for k, v in users.items()}),
                    MappingProxyType(types.node_types(nodes)), MappingProxyType(cpus),
                    MappingProxyType(mem), memory)


def id_order(job_id: str) -> tuple[int, int]:
    """35 -> (35, -1), array task 35_2 -> (35, 2): submission order, then task order."""
    head, _, task = job_id.partition("_")
    return (int(head) if head.isdigit() else 0, int(task) if task.isdigit() else -1)


def discover_partitions(nodes: Iterable[SlurmNode]) -> dict[str, str]:
    """partition -> GPU type, for partitions whose nodes all hold GPUs of one type."""
    types = partition_types(nodes)
    return {p: next(iter(t)) for p, t in sorted(types.items()) if len(t) == 1 and None not in t}

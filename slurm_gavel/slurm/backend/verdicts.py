"""Each gavel job's flags and its request's verdicts, kept until its record or the nodes change.

A poll at 5,000 queued jobs and 200 nodes spent most of its reconcile judging every job's
request against every node (feasibility.judge, holds.held_gpus: 1.3 ms a job) although
neither the request nor the nodes had changed.  Both depend only on the job's record and on
what a node is (its name, GPUs and their type, memory, CPUs, features, partitions, its GPU
type, and whether Slurm counts memory), never on what runs there, so they are kept per job
until one of those changes: `records.JobReader` hands back the same `SlurmJob` object for an
unchanged record, and `node_shapes` the same key for unchanged nodes, so a check is two
identity tests.  The AdminComment's flags (flags.from_admin_comment) are kept per job until
its AdminComment changes.  Nothing here calls Slurm.
"""
from __future__ import annotations

from typing import Mapping

from ...core.errors import InputError
from ...core.plan import Placement
from ..feasibility import Verdict, judge
from ..flags import GavelFlags, from_admin_comment
from ..records import SlurmJob
from .holds import held_gpus
from .snapshot import Snapshot


def node_shapes(snap: Snapshot) -> tuple:
    """What the verdicts read of the nodes: each node as it is, not what runs on it."""
    return (snap.memory, tuple(sorted(snap.type_of.items())),
            tuple((n.name, n.gpus, n.gpu_type, n.memory, n.cpus, n.features, n.partitions)
                  for n in snap.nodes))


class Verdicts:
    """The per-job cache of `SlurmBackend._job_states`: `begin` at each observation, then
    `flags`, `verdict` and `held` per job, and `keep` with the jobs still listed."""

    def __init__(self):
        self._shapes: tuple | None = None
        self._flags: dict[str, tuple[str, GavelFlags | InputError]] = {}
        self._judged: dict[str, tuple[SlurmJob, tuple, Verdict]] = {}
        self._held: dict[str, tuple[SlurmJob, tuple, Placement | None, int]] = {}
        self.judged = 0            # verdicts worked out (not found kept) since `begin`

    def begin(self, snap: Snapshot) -> None:
        shapes = node_shapes(snap)
        if shapes != self._shapes:
            self._shapes = shapes          # a new object: every verdict is worked out again
        self.judged = 0

    def flags(self, j: SlurmJob) -> GavelFlags:
        """The job's flags from its AdminComment; raises InputError for bad ones (each time)."""
        kept = self._flags.get(j.job_id)
        if kept is None or kept[0] != j.admin_comment:
            try:
                kept = (j.admin_comment, from_admin_comment(j.admin_comment))
            except InputError as e:
                kept = (j.admin_comment, e)
            self._flags[j.job_id] = kept
        if isinstance(kept[1], InputError):
            raise kept[1]
        return kept[1]

    def verdict(self, j: SlurmJob, snap: Snapshot, partitions: Mapping[str, str]) -> Verdict:
        """feasibility.judge of the job against the snapshot's nodes."""
        kept = self._judged.get(j.job_id)
        if kept is not None and kept[0] is j and kept[1] is self._shapes:
            return kept[2]
        verdict = judge(j, snap.nodes, partitions, node_types=snap.type_of)
        self._judged[j.job_id] = (j, self._shapes, verdict)
        self.judged += 1
        return verdict

    def held(self, j: SlurmJob, snap: Snapshot, placement: Placement | None) -> int:
        """holds.held_gpus of the job where it may run."""
        kept = self._held.get(j.job_id)
        if kept is not None and kept[0] is j and kept[1] is self._shapes and kept[2] == placement:
            return kept[3]
        gpus = held_gpus(snap, j, placement)
        self._held[j.job_id] = (j, self._shapes, placement, gpus)
        return gpus

    def keep(self, jobs: Mapping[str, SlurmJob]) -> None:
        """Forget the jobs no longer listed."""
        self._flags = {k: v for k, v in self._flags.items() if k in jobs}
        self._judged = {k: v for k, v in self._judged.items() if k in jobs}
        self._held = {k: v for k, v in self._held.items() if k in jobs}

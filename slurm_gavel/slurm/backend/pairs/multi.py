"""Pairs of multi-GPU jobs (docs/space-sharing.md, "Multi-GPU pairs"): when they may run, the
`scontrol update` fields that make one, and the requests they replace, kept for the job's
next start alone.

A pair of two N-GPU jobs runs on Slurm 23.11+ with `SelectTypeParameters` holding both
MULTIPLE_SHARING_GRES_PJ and ONE_TASK_PER_SHARING_GRES: each held `--gres=gpu:N` job is
switched to N tasks of half a GPU's shards (`TresPerNode= TresPerTask=gres/shard:S/2
NumTasks=N`), one task per GPU, and the two, released together, run on the same N GPUs
(measured on 24.11.5: tests/test_multi_gpu_shards.py, tests/test_multi_gpu_pairs.py).  Its
GPU request and task count are replaced, so they are remembered (`StoredRequests`: in the
daemon's SQLite database, across a restart) and given back when it next starts alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

# slurm.conf SelectTypeParameters flags a multi-GPU pair needs (23.11+): a job's per-task
# shards may come from several GPUs, and no two tasks of a job on one GPU
REQUIRED_FLAGS = ("MULTIPLE_SHARING_GRES_PJ", "ONE_TASK_PER_SHARING_GRES")
FIRST_VERSION = (23, 11)


def version_text(version: tuple[int, ...]) -> str:
    """(22, 5, 8) -> '22.05.8', as Slurm writes it; 'unknown' for ()."""
    if not version:
        return "unknown"
    return ".".join([str(version[0]), *(f"{v:02d}" for v in version[1:2]), *map(str, version[2:])])


def allowed_pair_gpus(wanted: int, version: tuple[int, ...], conf: Mapping[str, str]) -> tuple[int, str]:
    """The largest job of a pair row this Slurm can run when the admin asks `wanted`
    (config `max_pair_gpus`), and why, in words: `wanted` only on 23.11+ whose slurmctld
    has both REQUIRED_FLAGS (`scontrol show config`), else 1."""
    if wanted <= 1:
        return 1, "pairs of one-GPU jobs (max_pair_gpus = 1)"
    shown = version_text(version)
    if tuple(version[:2]) < FIRST_VERSION:
        return 1, (f"pairs of one-GPU jobs only: max_pair_gpus = {wanted} needs Slurm 23.11+ "
                   f"(MULTIPLE_SHARING_GRES_PJ, ONE_TASK_PER_SHARING_GRES), this is {shown}")
    flags = {f.strip().upper() for f in str(conf.get("SelectTypeParameters", "")).split(",")}
    missing = [f for f in REQUIRED_FLAGS if f not in flags]
    if missing:
        return 1, (f"pairs of one-GPU jobs only: max_pair_gpus = {wanted} needs "
                   f"SelectTypeParameters with {' and '.join(missing)} in slurm.conf")
    return wanted, (f"pairs of jobs of up to {wanted} GPUs (Slurm {shown}, "
                    f"SelectTypeParameters has {' and '.join(REQUIRED_FLAGS)})")


@dataclass(frozen=True)
class Request:
    """What a gavel job asked before its first multi-GPU pair: GPUs per node and tasks."""
    gpus: int
    tasks: int


def pair_fields(shards_per_task: int, gpus: int) -> dict[str, str]:
    """The `scontrol update` fields that make a pending job one half of an N-GPU pair: no
    per-node request, `shards_per_task` shards per task, one task per GPU."""
    if shards_per_task < 1 or gpus < 2:
        raise ValueError(f"a multi-GPU pair half needs shards and 2+ GPUs, not {shards_per_task} x {gpus}")
    return {"TresPerNode": "", "TresPerTask": f"gres/shard:{int(shards_per_task)}", "NumTasks": str(int(gpus))}


def restore_fields(request: Request) -> dict[str, str]:
    """The fields that give a pending job back what it asked before its pair (`Request`):
    measured on 24.11.5, `TresPerTask= Gres=gpu:N NumTasks=T` in one update."""
    if request.gpus < 1 or request.tasks < 1:
        raise ValueError(f"not a request to restore: {request}")
    return {"TresPerTask": "", "Gres": f"gpu:{int(request.gpus)}", "NumTasks": str(int(request.tasks))}


class Requests:
    """job -> its `Request` before a multi-GPU pair, in memory (a backend without a database)."""

    def __init__(self):
        self._known: dict[str, Request] = {}

    def get(self, job: str) -> Request | None:
        return self._known.get(job)

    def put(self, job: str, request: Request) -> None:
        self._known[job] = request

    def forget(self, job: str) -> None:
        self._known.pop(job, None)


class StoredRequests(Requests):
    """`Requests` kept in the daemon's SQLite store (table paired_requests), so that a
    restarted daemon gives a paired job its request back; a write that fails raises (the
    store's error), and the pair is then not started."""

    def __init__(self, store):
        super().__init__()
        self.store = store
        for job, (gpus, tasks) in store.paired_requests().items():
            self._known[job] = Request(gpus, tasks)

    def put(self, job: str, request: Request) -> None:
        self.store.remember_request(job, request.gpus, request.tasks)
        super().put(job, request)

    def forget(self, job: str) -> None:
        if job in self._known:
            self.store.forget_request(job)
        super().forget(job)

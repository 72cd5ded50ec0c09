"""Where Slurm's first fit puts a pair's two halves: the free shards of each GPU, from a poll.

Slurm gives a shard job the first GPU of its node, in gres.conf order, with room for its
whole count (`_pick_specific_topo` in cons_common/gres_select_filter.c at 22.05.8,
`_pick_shared_gres_topo` in cons_tres/gres_select_filter.c at 24.11.5; without
`Flags=one_sharing` or `SelectTypeParameters=LL_SHARED_GRES`, which change the order), on a
node whose GPUs are not bound to sockets: where gres.conf `Cores=` binds them, Slurm looks at
the GPUs on the job's cores' sockets first, which this model cannot see (a pair on an empty
two-socket node got GPUs 0 and 2: tests/test_pair_sockets.py), so the backend starts no
pair there (pairs/sharing.py `pair_problem`).  The two halves of a pair, released together, therefore land
on one GPU for certain only when (a) the first GPU with room for the smaller half has
room for both (whichever half Slurm places first, both then go there), (b) Slurm places
them now, not later as room appears half a GPU at a time (a pair released onto a full
node waits, and each half takes the first half-GPU freed: measured, tests/
test_pair_placement.py), and (c) no GPU before that one is about to free room (a job
leaving it: preempted, completing, or listed without its GPU).  Two pairs released
together on one node can cross (A with C, B with D), so a node takes one pair at a time.
`pair_gpu` says which GPU a pair would get, or why it must wait; `first_fit`, the GPU of
one job; `pair_gpus` and `first_fit_gpus` the same for the halves of a multi-GPU pair (a
task per GPU, on 23.11+ with ONE_TASK_PER_SHARING_GRES: pairs/multi.py), `first_fit_gpus`
also the GPUs of a new partner joining a survivor's free halves; the backend calls them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from ...records import SlurmJob


@dataclass
class NodeRoom:
    """One node's GPUs as first fit sees them: free shards per GPU (index order), the jobs
    on each, the GPUs a leaving job still holds, and shard jobs whose GPU is not listed."""
    free: list[int]
    users: dict[int, list[str]] = field(default_factory=dict)
    leaving: set[int] = field(default_factory=set)
    unseen: list[str] = field(default_factory=list)


def gpu_room(jobs: Iterable[SlurmJob], gpus: dict[str, int], per_gpu: Callable[[str], int],
             leaving: Callable[[SlurmJob], bool]) -> dict[str, NodeRoom]:
    """node -> its `NodeRoom`, for the nodes with shards (`per_gpu(node)` > 0), from every
    running job of a poll (gavel or not): a shard job takes its count of each GPU it is on
    (per task, a GPU per task: `SlurmJob.gpu_shards`), a job holding whole GPUs (gres/gpu)
    takes all of theirs.  A job holding GPUs or shards on a node whose gres_detail lists
    none there (completing, or not readable) is `unseen`: first fit there is not certain."""
    room = {n: NodeRoom([per_gpu(n)] * count) for n, count in gpus.items() if per_gpu(n) > 0}
    for j in jobs:
        if not j.running:
            continue
        for k, n in enumerate(j.nodes):
            r = room.get(n)
            if r is None:
                continue
            use = j.gpu_shards[k] if k < len(j.gpu_shards) else ()
            if not use and (j.shards or j.gpus or j.gpus_on(n)):
                r.unseen.append(j.job_id)            # it holds GPUs or shards not listed
            for i, shards in use:
                if i >= len(r.free):
                    continue
                r.free[i] = 0 if shards is None else max(0, r.free[i] - shards)
                r.users.setdefault(i, []).append(j.job_id)
                if leaving(j):
                    r.leaving.add(i)
    return room


def first_fit_gpus(r: NodeRoom, shards: int, count: int) -> tuple[tuple[int, ...] | None, str]:
    """The GPUs (indices) a job of `count` tasks of `shards` each gets if released now, one
    task per GPU (ONE_TASK_PER_SHARING_GRES: the first `count` GPUs with room, in order), or
    (None, why not for certain).  `count` = 1 is `first_fit`."""
    if r.unseen:
        return None, (f"job {','.join(sorted(r.unseen))} holds GPUs or shards Slurm does not "
                      "list yet")
    got: list[int] = []
    for i, free in enumerate(r.free):
        if free >= shards:
            got.append(i)
            if len(got) == count:
                return tuple(got), ""
        elif i in r.leaving:
            return None, (f"job {','.join(sorted(r.users.get(i, [])))} is leaving GPU {i}: its "
                          "shards would take a half")
    return None, ("no GPU has room for both halves yet" if count == 1 else
                  f"no {count} GPUs have room for both halves yet")


def first_fit(r: NodeRoom, shards: int) -> tuple[int | None, str]:
    """The GPU (index) a job of `shards` gets if released now, or (None, why not for certain)."""
    got, why = first_fit_gpus(r, shards, 1)
    return (got[0] if got else None), why


def pair_gpus(r: NodeRoom, halves: tuple[int, int], count: int = 1) -> tuple[tuple[int, ...] | None, str]:
    """The GPUs both halves get if released now (each half `count` tasks, one per GPU, of its
    shards; `count` = 1: a one-GPU pair), or (None, why the pair waits).  Both land on the
    same GPUs only when the first `count` GPUs with room for the smaller half each have room
    for both: whichever half Slurm places first takes those, and the other finds them again
    (a GPU skipped has less than the smaller half free)."""
    got, why = first_fit_gpus(r, min(halves), count)
    if got is None:
        return None, why
    short = [i for i in got if r.free[i] < sum(halves)]
    if not short:
        return got, ""
    i = short[0]
    return None, (f"GPU {i} has part of its shards in use (job "
                  f"{','.join(sorted(r.users.get(i, [])))}): first fit would put one half "
                  "there and the other on another GPU")


def pair_gpu(r: NodeRoom, halves: tuple[int, int]) -> tuple[int | None, str]:
    """The GPU (index) both halves of a one-GPU pair get if released now, or (None, why the
    pair waits)."""
    got, why = pair_gpus(r, halves, 1)
    return (got[0] if got else None), why


def take(r: NodeRoom, gpu: int | tuple[int, ...], halves: tuple[int, ...], jobs: tuple[str, ...]) -> None:
    """What a released pair takes of `r` (so that the next decision sees it): both halves on
    `gpu` (or on each of several GPUs, a multi-GPU pair); one half, a survivor's new partner."""
    for i in (gpu,) if isinstance(gpu, int) else gpu:
        r.free[i] -= sum(halves)
        r.users.setdefault(i, []).extend(jobs)

"""Space sharing on Slurm (docs/space-sharing.md): what a pair row is, asks and may do.

A pair row is two one-GPU gavel jobs on one GPU of one node (or, on 23.11+ when the admin
enables it, two N-GPU jobs on the same N GPUs: pairs/multi.py).  Both ask gres/shard
(job_submit.lua stores a one-GPU job as a whole GPU's shards); for a pair each gets
half of them in its start's `scontrol update`, and Slurm puts both halves on one
GPU (first fit, pairs/room.py).  This module owns, as functions of a poll's `Snapshot`:
which shard count a start asks (`share_fields`), why a pair cannot run here
(`pair_problem`), a survivor that a row pairs with a new job (`lone_half`, `joins`),
the usage of pair rows (`usage_rows`), pairs found running after a restart
(`adopted_pairs`) and the per-poll check of which jobs hold each GPU (`gpu_alarms`).
`PairLimit` is the largest pair row the backend offers the policy.
"""
from __future__ import annotations

import logging
from typing import Callable, Iterable, Mapping

from ....core.backend import Usage
from ....core.errors import GavelError
from ....core.plan import Assignment, RoundPlan
from ...records import SlurmJob, SlurmNode, index_list, socket_bound
from ..snapshot import Snapshot, id_order
from .multi import Request, Requests, allowed_pair_gpus, pair_fields, restore_fields, version_text

log = logging.getLogger("slurm_gavel.slurm")


class PairLimit:
    """The pair rows a backend offers (it sets `_nodes` and `partitions`)."""

    # The pair rows this backend can run (core/backend.py): jobs of one GPU each, since a
    # per-node shard count sits on one GPU; the engine offers the policy no other pair row,
    # and `pair_problem` refuses one all the same.  `allow_pair_gpus` raises it on a Slurm
    # that runs multi-GPU pairs (pairs/multi.py), when the admin asks.
    pair_limit = 1

    @property
    def max_pair_gpus(self) -> int:
        """`pair_limit`, or 0 (no pair row offered to the policy) while every node of ours
        with shards has them bound to 2+ sockets, where no pair is started (`pair_problem`):
        a share given to a pair there would go unused."""
        return offered_pair_gpus(self._nodes, self.partitions, self.pair_limit)

    @max_pair_gpus.setter
    def max_pair_gpus(self, value: int) -> None:
        self.pair_limit = value

    def allow_pair_gpus(self, wanted: int, version: tuple[int, ...], conf) -> str:
        """Set `pair_limit` to `wanted` if this Slurm can run such pairs (23.11+, both
        SelectTypeParameters flags: multi.allowed_pair_gpus), else 1; says why."""
        self.pair_limit, why = allowed_pair_gpus(int(wanted), tuple(version), conf)
        return why

    def space_sharing_problems(self, version: tuple[int, ...]) -> list[str]:
        """What keeps pairs from running safely on this cluster (said once at daemon start)."""
        return space_sharing_problems(self._nodes, self.partitions, version)


def offered_pair_gpus(nodes: Iterable[SlurmNode], partitions: Mapping[str, str], limit: int) -> int:
    shard_nodes = [n for n in nodes if n.shards and any(p in partitions for p in n.partitions)]
    if shard_nodes and all(n.shard_sockets > 1 for n in shard_nodes):
        return 0
    return limit


def space_sharing_problems(nodes: Iterable[SlurmNode], partitions: Mapping[str, str],
                           version: tuple[int, ...]) -> list[str]:
    problems = []
    ours = [n for n in nodes if any(p in partitions for p in n.partitions)]
    if not any(n.shards for n in ours):
        problems.append("no GPU node has gres/shard: pairs are not started (slurm.conf "
                        "Gres=gpu:N,shard:M, gres.conf Name=shard; docs/space-sharing.md)")
    bound = socket_bound(ours)
    if bound:
        problems.append(f"{bound}, where Slurm gives a shard job a GPU on its cores' socket first: no "
                        "pair is started there, its jobs run alone (docs/space-sharing.md, "
                        "\"Sockets\")")
    if tuple(version[:2]) < (23, 11):
        problems.append(f"Slurm {version_text(version)} may give a whole-GPU job a GPU "
                        "already used by shards (fixed in 23.11): the daemon checks every poll "
                        "which jobs hold each GPU and logs any third job on a pair's GPU")
    return problems


def partner(pairs: Mapping[str, Assignment], job: str) -> str | None:
    a = pairs.get(job)
    return next((m for m in a.jobs if m != job), None) if a is not None else None


def shard_sockets(snap: Snapshot, node: str) -> int:
    """The sockets `node`'s shards are bound to (records.shard_sockets); 0: not bound.  On
    more than one, which GPU a shard job gets depends on its cores, which first fit
    (pairs/room.py) cannot know: no pair starts there (measured, tests/test_pair_sockets.py)."""
    n = snap.node_named.get(node)
    return n.shard_sockets if n is not None else 0


def shards_wanted(snap: Snapshot, job: str, a: Assignment) -> int:
    """The shards a shard job asks for this start: its GPU's all (alone), or half of
    them (in a pair; the first job of the row takes the odd one); 0: not a shard job."""
    j = snap.gavel.get(job)
    if j is None or not j.shards or j.task_shards or len(a.servers) != 1 or len(a.jobs) > 1 and a.gpus > 1:
        return 0                          # (per-task shards: `share_fields`)
    per = snap.shards_per_gpu(a.servers[0][0])
    if len(a.jobs) == 1:
        return per
    return per - per // 2 if a.jobs.index(job) == 0 else per // 2


def halves(snap: Snapshot, a: Assignment) -> tuple[int, int]:
    """The shards each job of a pair row takes of each of its GPUs (the first the odd one)."""
    per = snap.shards_per_gpu(a.servers[0][0])
    return per - per // 2, per // 2


def pair_problem(snap: Snapshot, a: Assignment, limit: int, requests: Requests) -> str:
    """Why Slurm cannot run this pair row as planned, in words; '' if it can."""
    if len(a.jobs) != 2 or len(a.servers) != 1 or not 1 <= a.gpus <= limit:
        if limit <= 1:
            return ("only pairs of one-GPU jobs on one node share a GPU here (Slurm puts a "
                    "job's shards on one GPU)")
        return (f"only pairs of jobs of up to {limit} GPUs on one node share "
                "GPUs here (max_pair_gpus)")
    node = a.servers[0][0]
    if snap.shards_per_gpu(node) < 2:
        return (f"node {node} has no gres/shard (slurm.conf Gres=gpu:N,shard:M and gres.conf "
                "Name=shard lines, docs/space-sharing.md)")
    sockets = shard_sockets(snap, node)
    if sockets > 1:
        return (f"node {node}: its GPUs are bound to {sockets} sockets (gres.conf Cores=): Slurm "
                "gives a shard job a GPU on its cores' socket first, so a pair's halves can "
                "land on two GPUs (docs/space-sharing.md, \"Sockets\")")
    if a.gpus > 1:
        bad = [job for job in a.jobs if not multi_ok(snap.gavel.get(job), a.gpus, requests)]
        if bad:
            return (f"job {','.join(bad)} does not ask {a.gpus} GPUs of one node per node "
                    f"(--gres=gpu:{a.gpus}): only such a request is switched to shards per task")
        return ""
    whole = [job for job in a.jobs if job not in snap.gavel or not snap.gavel[job].shards]
    if whole:
        return (f"job {','.join(whole)} asks a whole GPU, not shards (set GAVEL_SHARDS_PER_GPU "
                "in job_submit.lua; jobs submitted before keep their request)")
    return ""


def multi_ok(j: SlurmJob | None, gpus: int, requests: Requests) -> bool:
    """The job can be half of a pair of `gpus`-GPU jobs: it asks `gpus` GPUs per node on one
    node (not a distributed --gpus=N job, which reshaping changes; no --ntasks-per-gpu),
    or it is such a job the daemon already switched to per-task shards (its request kept)."""
    if j is None or j.gpus_per_job or j.tasks_per_gpu or j.node_count != 1:
        return False
    if j.task_shards:
        return j.tasks == gpus and requests.get(j.job_id) is not None
    return j.gpus == gpus and not j.shards


def forget_request(requests: Requests, job: str) -> None:
    """A paired job's old request is no longer needed (given back, or the job left)."""
    try:
        requests.forget(job)
    except GavelError as e:               # kept: forgotten at the next chance
        log.warning("job %s: cannot forget its request before its pair: %s", job, e)


def share_fields(snap: Snapshot, requests: Requests, job: str, a: Assignment, joined: int = 0,
                 dry_run: bool = False) -> tuple[dict[str, str], str]:
    """What a start's `scontrol update` adds for space sharing, and its words for the log:
    a one-GPU pair's half (`Gres=shard:K`), a multi-GPU pair's half (per-task shards,
    multi.pair_fields; the job's request is remembered first, and a failed write
    raises: the pair is not started), or a job paired before started alone (its request
    given back: restore_fields).  `joined`: the shards a survivor's new partner takes (of
    each of its GPUs), what the survivor leaves free."""
    j = snap.gavel.get(job)
    if j is None:
        return {}, ""
    if len(a.jobs) > 1 and a.gpus > 1:
        if not j.task_shards and requests.get(job) is None and not dry_run:
            requests.put(job, Request(j.gpus, j.tasks or 1))
        k = joined or halves(snap, a)[a.jobs.index(job)]
        return pair_fields(k, a.gpus), f" ({k} shards of each of {a.gpus} GPUs, paired)"
    before = requests.get(job)
    if before is not None and j.task_shards:
        return restore_fields(before), f" (its own request again: {before.gpus} GPUs, {before.tasks} tasks)"
    if before is not None:
        forget_request(requests, job)     # its pair's update never happened
    shards = joined or shards_wanted(snap, job, a)
    if shards and j.shards != shards:
        return {"Gres": f"shard:{shards}"}, (f" ({shards} shards of one GPU"
                                             f"{', paired' if len(a.jobs) > 1 else ''})")
    return {}, ""


def lone_half(snap: Snapshot, job: str, a: Assignment) -> tuple[tuple[int, ...], int] | None:
    """The GPUs and shards per GPU of `job` if it can be the survivor that row `a` pairs
    with a new job: running on `a`'s node on part of the shards of `a.gpus` GPUs, the same
    count on each (a one-GPU pair's half, or a multi-GPU one's: a task per GPU); else None."""
    j = snap.gavel.get(job)
    if (j is None or not j.running or tuple(j.nodes) != a.nodes or len(j.gpu_shards) != 1
            or len(j.gpu_shards[0]) != a.gpus or a.gpus > 1 and not j.task_shards):
        return None
    counts = {n for _, n in j.gpu_shards[0]}
    k = counts.pop() if len(counts) == 1 else None
    if k is None or not 0 < k < snap.shards_per_gpu(a.nodes[0]):
        return None
    return tuple(i for i, _ in j.gpu_shards[0]), k


def joins(snap: Snapshot, plan: RoundPlan, running: Mapping[str, object], stopping: Iterable[str],
          pairs: Mapping[str, Assignment], problem: Callable[[Assignment], str]) -> dict[str, Assignment]:
    """Survivors of a pair (running alone on part of the shards of one GPU, or of each of
    a multi-GPU pair's GPUs) that this plan pairs with a new job on the same node, type and
    GPU count: the survivor keeps running (not preempted and restarted with its new
    partner), the partner takes the free half of each of its GPUs (`lone_half`).
    `running`: job -> its run (a `worker_type`); `stopping`: jobs preempted already."""
    out = {}
    stopping = set(stopping)
    for a in plan.start:
        if len(a.jobs) != 2 or problem(a):
            continue
        alive = [m for m in a.jobs if m in running and m not in stopping]
        if len(alive) != 1 or alive[0] in pairs:
            continue
        s = alive[0]
        if running[s].worker_type == a.worker_type and lone_half(snap, s, a) is not None:
            out[s] = a
    return out


def adopted_pairs(snap: Snapshot, running: Mapping[str, object],
                  pairs: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Two running gavel jobs holding half of one GPU's shards each are a pair (one a
    previous run of the daemon started): job -> its row, for pairs not known yet."""
    found: dict[tuple[str, tuple[int, ...]], list[str]] = {}
    for job, j in snap.gavel.items():
        if (job in running and job not in pairs and j.shards and len(j.nodes) == 1
                and len(j.gpu_shards) == 1 and j.gpu_shards[0]):
            # half of each GPU it is on (a multi-GPU pair's half: a task on each)
            use, per = j.gpu_shards[0], snap.shards_per_gpu(j.nodes[0])
            if all(n is not None and 0 < n < per for _, n in use):
                found.setdefault((j.nodes[0], tuple(i for i, _ in use)), []).append(job)
    out: dict[str, Assignment] = {}
    for (node, gpus), jobs in sorted(found.items()):
        if len(jobs) == 2:
            a = Assignment(tuple(sorted(jobs, key=id_order)), running[jobs[0]].worker_type,
                           ((node, len(gpus)),))
            for m in jobs:
                out[m] = a
            log.info("jobs %s share GPU %s:%s: running as a pair", "+".join(a.jobs), node,
                     ",".join(map(str, gpus)))
    return out


def gpu_alarms(snap: Snapshot, pairs: Mapping[str, Assignment]) -> list[tuple[tuple, str]]:
    """Every running gavel job's GPU (node, IDX from gres_detail) is held by its row only:
    a pair's two jobs on the same GPU, and no third job there.  What Slurm did otherwise
    (first-fit gave the second job another GPU; 22.05's bug gave a whole-GPU job a GPU
    that shards use): (key, message) each, for the log and an event."""
    out = []
    for job, j in snap.gavel.items():
        if not j.running or not j.gpu_indices:
            continue
        row = set(pairs[job].jobs) if job in pairs else {job}
        other = partner(pairs, job)
        if other is not None and other in snap.gavel and snap.gavel[other].running:
            p = snap.gavel[other]
            mine = list(zip(j.nodes, j.gpu_indices))
            theirs = list(zip(p.nodes, p.gpu_indices))
            # (a job listed without its GPU, completing, says nothing about where it ran)
            if mine and theirs and mine != theirs and all(i for _, i in mine + theirs):
                out.append((("split", job, other), f"pair {job}+{other} does not share a "
                            f"GPU: Slurm gave {job} {_gpus(mine)} and {other} {_gpus(theirs)}"))
        for n, idx in zip(j.nodes, j.gpu_indices):
            others = sorted({o for i in _indices(idx) for o in snap.gpu_users.get((n, i), ())} - row)
            if others:
                out.append((("shared", job, tuple(others)), f"job {job} shares GPU {n}:{idx} "
                            f"with job {','.join(others)}, which the plan did not put there"))
    return out


class OnceLog:
    """Pair warnings and GPU alarms said once per reason (then at debug level), bounded."""

    def __init__(self, on_event: Callable[[str, str | None, str], None]):
        self.on_event = on_event
        self.warned: set[str] = set()
        self.alarms: set[tuple] = set()

    def warn_pair(self, round_number: int | None, a: Assignment, why: str) -> None:
        """A pair that cannot start is said once per reason (then at debug level)."""
        where = f"round {round_number}: " if round_number is not None else ""
        if why in self.warned:
            log.debug("%spair %s not started: %s", where, "+".join(a.jobs), why)
            return
        if len(self.warned) > 10000:
            self.warned.clear()                       # bounded: a reason may be said again
        self.warned.add(why)
        log.warning("%spair %s not started (space sharing): %s", where, "+".join(a.jobs), why)
        for job in a.jobs:
            self.on_event("pair_refused", job, why)

    def alarm(self, key: tuple, message: str) -> None:
        if key in self.alarms:
            return
        if len(self.alarms) > 10000:
            self.alarms.clear()
        self.alarms.add(key)
        log.error("%s", message)
        self.on_event("gpu_shared", key[1], message)


def usage_rows(snap: Snapshot, usage: Mapping[tuple, float],
               pairs: Mapping[str, Assignment]) -> tuple[Usage, ...]:
    """What ran since the last observation, per row: a job alone, or a pair for the time
    both of its jobs ran together (what one of them ran beyond that: alone).  `usage`:
    (job, type, nodes, partner or None) -> seconds."""
    out = []
    left = dict(usage)
    for key in sorted(usage, key=lambda k: (k[0], k[1], k[2], k[3] or "")):
        if key not in left:
            continue
        job, wt, nodes, other = key
        seconds = left.pop(key)
        if other is not None:
            theirs = left.pop((other, wt, nodes, job), 0.0)
            # (its row gone: as many GPUs as the job holds, two of a two-GPU pair's half)
            pair = pairs.get(job) or Assignment(
                tuple(sorted((job, other), key=id_order)), wt,
                tuple((n, max(1, c)) for n, c in alone(snap, job, wt, nodes).servers))
            together = min(seconds, theirs)
            if together > 0:
                out.append(Usage(pair, together))
            for j_id, by_itself in ((job, seconds - together), (other, theirs - together)):
                if by_itself > 0:
                    out.append(Usage(alone(snap, j_id, wt, nodes), by_itself))
            continue
        out.append(Usage(alone(snap, job, wt, nodes), seconds))
    return tuple(out)


def alone(snap: Snapshot, job: str, wt: str, nodes: tuple[str, ...]) -> Assignment:
    j = snap.gavel.get(job)
    return Assignment((job,), wt, tuple((n, j.gpus_on(n) if j is not None else 0) for n in nodes))


def _indices(idx: str) -> list[str]:
    """'0-1,3' -> ['0', '1', '3'] (a gres_detail IDX list; bounded: records.index_list)."""
    return [str(i) for i in index_list(idx)]


def _gpus(where) -> str:
    return ",".join(f"{n}:{i}" for n, i in where)


def gpu_list(gpus: tuple[int, ...]) -> str:
    """(1,) -> 'GPU 1', (2, 3) -> 'GPUs 2,3'."""
    return f"GPU{'s' if len(gpus) > 1 else ''} {','.join(map(str, gpus))}"

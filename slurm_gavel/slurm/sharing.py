"""Space sharing on Slurm (docs/space-sharing.md): the pair rows' part of `SlurmBackend`.

A pair row is two one-GPU gavel jobs on one GPU of one node (or, on 23.11+ when the admin
enables it, two N-GPU jobs on the same N GPUs: multi_pairs.py).  Both ask gres/shard
(job_submit.lua stores a one-GPU job as a whole GPU's shards); for a pair each gets
half of them in its start's `scontrol update`, and Slurm puts both halves on one
GPU (first fit).  This mixin owns what that needs beyond a plain start: which
shard count a start asks, why a pair cannot run here, the pairs the backend runs
(`_pairs`: job -> its row), a survivor that a row pairs with a new job (`_lone_half`),
their usage as pair rows, pairs found running after a restart, and the per-poll check of which jobs hold each GPU (gres_detail IDX).
`SlurmBackend` calls these from its poll, observe and execute.
"""
from __future__ import annotations

import logging

from ..core.backend import Usage
from ..core.mechanism import Assignment
from ..core.errors import GavelError
from .multi_pairs import Request, allowed_pair_gpus, pair_fields, restore_fields, version_text
from .records import index_list, socket_bound

log = logging.getLogger("slurm_gavel.slurm")


def _id_order(job_id: str) -> tuple[int, int]:
    """35 -> (35, -1), array task 35_2 -> (35, 2): submission order, then task order."""
    head, _, task = job_id.partition("_")
    return (int(head) if head.isdigit() else 0, int(task) if task.isdigit() else -1)


class SpaceSharing:
    """The pair rows of a `SlurmBackend` (which sets every attribute used here)."""

    # The pair rows this backend can run (core/backend.py): jobs of one GPU each, since a
    # per-node shard count sits on one GPU; the engine offers the policy no other pair row,
    # and `_pair_problem` refuses one all the same.  `allow_pair_gpus` raises it on a Slurm
    # that runs multi-GPU pairs (multi_pairs.py), when the admin asks.
    pair_limit = 1

    @property
    def max_pair_gpus(self) -> int:
        """`pair_limit`, or 0 (no pair row offered to the policy) while every node of ours
        with shards has them bound to 2+ sockets, where no pair is started (`_shard_sockets`):
        a share given to a pair there would go unused."""
        shard_nodes = [n for n in self._nodes if n.shards and
                       any(p in self.partitions for p in n.partitions)]
        if shard_nodes and all(n.shard_sockets > 1 for n in shard_nodes):
            return 0
        return self.pair_limit

    @max_pair_gpus.setter
    def max_pair_gpus(self, value: int) -> None:
        self.pair_limit = value

    def allow_pair_gpus(self, wanted: int, version: tuple[int, ...], conf) -> str:
        """Set `pair_limit` to `wanted` if this Slurm can run such pairs (23.11+, both
        SelectTypeParameters flags: multi_pairs.allowed_pair_gpus), else 1; says why."""
        self.pair_limit, why = allowed_pair_gpus(int(wanted), tuple(version), conf)
        return why

    def shards_per_gpu(self, node: str) -> int:
        """gres/shard per GPU of `node` (slurm.conf Gres=gpu:4,shard:16 -> 4); 0: none."""
        if self._shards_of is None or self._shards_of[0] is not self._nodes:
            self._shards_of = (self._nodes, {n.name: n.shards // n.gpus if n.gpus else 0
                                             for n in self._nodes})
        return self._shards_of[1].get(node, 0)

    def _shard_sockets(self, node: str) -> int:
        """The sockets `node`'s shards are bound to (records.shard_sockets); 0: not bound.  On
        more than one, which GPU a shard job gets depends on its cores, which first fit
        (pair_room.py) cannot know: no pair starts there (measured, tests/test_pair_sockets.py)."""
        return next((n.shard_sockets for n in self._nodes if n.name == node), 0)

    def _partner(self, job: str) -> str | None:
        a = self._pairs.get(job)
        return next((m for m in a.jobs if m != job), None) if a is not None else None

    def _shards_wanted(self, job: str, a: Assignment) -> int:
        """The shards a shard job asks for this start: its GPU's all (alone), or half of
        them (in a pair; the first job of the row takes the odd one); 0: not a shard job."""
        j = self._jobs.get(job)
        if j is None or not j.shards or j.task_shards or len(a.servers) != 1 or len(a.jobs) > 1 and a.gpus > 1:
            return 0                          # (per-task shards: `_share_fields`)
        per = self.shards_per_gpu(a.servers[0][0])
        if len(a.jobs) == 1:
            return per
        return per - per // 2 if a.jobs.index(job) == 0 else per // 2

    def _halves(self, a: Assignment) -> tuple[int, int]:
        """The shards each job of a pair row takes of each of its GPUs (the first the odd one)."""
        per = self.shards_per_gpu(a.servers[0][0])
        return per - per // 2, per // 2

    def _pair_problem(self, a: Assignment) -> str:
        """Why Slurm cannot run this pair row as planned, in words; '' if it can."""
        if len(a.jobs) != 2 or len(a.servers) != 1 or not 1 <= a.gpus <= self.pair_limit:
            if self.pair_limit <= 1:
                return ("only pairs of one-GPU jobs on one node share a GPU here (Slurm puts a "
                        "job's shards on one GPU)")
            return (f"only pairs of jobs of up to {self.pair_limit} GPUs on one node share "
                    "GPUs here (max_pair_gpus)")
        node = a.servers[0][0]
        if self.shards_per_gpu(node) < 2:
            return (f"node {node} has no gres/shard (slurm.conf Gres=gpu:N,shard:M and gres.conf "
                    "Name=shard lines, docs/space-sharing.md)")
        sockets = self._shard_sockets(node)
        if sockets > 1:
            return (f"node {node}: its GPUs are bound to {sockets} sockets (gres.conf Cores=): Slurm "
                    "gives a shard job a GPU on its cores' socket first, so a pair's halves can "
                    "land on two GPUs (docs/space-sharing.md, \"Sockets\")")
        if a.gpus > 1:
            bad = [job for job in a.jobs if not self._multi_ok(job, a.gpus)]
            if bad:
                return (f"job {','.join(bad)} does not ask {a.gpus} GPUs of one node per node "
                        f"(--gres=gpu:{a.gpus}): only such a request is switched to shards per task")
            return ""
        whole = [job for job in a.jobs if job not in self._jobs or not self._jobs[job].shards]
        if whole:
            return (f"job {','.join(whole)} asks a whole GPU, not shards (set GAVEL_SHARDS_PER_GPU "
                    "in job_submit.lua; jobs submitted before keep their request)")
        return ""

    def _multi_ok(self, job: str, gpus: int) -> bool:
        """`job` can be half of a pair of `gpus`-GPU jobs: it asks `gpus` GPUs per node on one
        node (not a distributed --gpus=N job, which reshaping changes; no --ntasks-per-gpu),
        or it is such a job the daemon already switched to per-task shards (its request kept)."""
        j = self._jobs.get(job)
        if j is None or j.gpus_per_job or j.tasks_per_gpu or j.node_count != 1:
            return False
        if j.task_shards:
            return j.tasks == gpus and self.requests.get(job) is not None
        return j.gpus == gpus and not j.shards

    def _share_fields(self, job: str, a: Assignment, joined: int = 0) -> tuple[dict[str, str], str]:
        """What a start's `scontrol update` adds for space sharing, and its words for the log:
        a one-GPU pair's half (`Gres=shard:K`), a multi-GPU pair's half (per-task shards,
        multi_pairs.pair_fields; the job's request is remembered first, and a failed write
        raises: the pair is not started), or a job paired before started alone (its request
        given back: restore_fields).  `joined`: the shards a survivor's new partner takes (of
        each of its GPUs), what the survivor leaves free."""
        j = self._jobs.get(job)
        if j is None:
            return {}, ""
        if len(a.jobs) > 1 and a.gpus > 1:
            if not j.task_shards and self.requests.get(job) is None and not self.dry_run:
                self.requests.put(job, Request(j.gpus, j.tasks or 1))
            k = joined or self._halves(a)[a.jobs.index(job)]
            return pair_fields(k, a.gpus), f" ({k} shards of each of {a.gpus} GPUs, paired)"
        before = self.requests.get(job)
        if before is not None and j.task_shards:
            return restore_fields(before), f" (its own request again: {before.gpus} GPUs, {before.tasks} tasks)"
        if before is not None:
            self._forget_request(job)         # its pair's update never happened
        shards = joined or self._shards_wanted(job, a)
        if shards and j.shards != shards:
            return {"Gres": f"shard:{shards}"}, (f" ({shards} shards of one GPU"
                                                 f"{', paired' if len(a.jobs) > 1 else ''})")
        return {}, ""

    def _lone_half(self, job: str, a: Assignment) -> tuple[tuple[int, ...], int] | None:
        """The GPUs and shards per GPU of `job` if it can be the survivor that row `a` pairs
        with a new job: running on `a`'s node on part of the shards of `a.gpus` GPUs, the same
        count on each (a one-GPU pair's half, or a multi-GPU one's: a task per GPU); else None."""
        j = self._jobs.get(job)
        if (j is None or not j.running or tuple(j.nodes) != a.nodes or len(j.gpu_shards) != 1
                or len(j.gpu_shards[0]) != a.gpus or a.gpus > 1 and not j.task_shards):
            return None
        counts = {n for _, n in j.gpu_shards[0]}
        k = counts.pop() if len(counts) == 1 else None
        if k is None or not 0 < k < self.shards_per_gpu(a.nodes[0]):
            return None
        return tuple(i for i, _ in j.gpu_shards[0]), k

    def _forget_request(self, job: str) -> None:
        """A paired job's old request is no longer needed (given back, or the job left)."""
        try:
            self.requests.forget(job)
        except GavelError as e:               # kept: forgotten at the next chance
            log.warning("job %s: cannot forget its request before its pair: %s", job, e)

    def _warn_pair(self, round_number: int | None, a: Assignment, why: str) -> None:
        """A pair that cannot start is said once per reason (then at debug level)."""
        where = f"round {round_number}: " if round_number is not None else ""
        if why in self._pair_warned:
            log.debug("%spair %s not started: %s", where, "+".join(a.jobs), why)
            return
        if len(self._pair_warned) > 10000:
            self._pair_warned.clear()                 # bounded: a reason may be said again
        self._pair_warned.add(why)
        log.warning("%spair %s not started (space sharing): %s", where, "+".join(a.jobs), why)
        for job in a.jobs:
            self.on_event("pair_refused", job, why)

    def _adopt_pairs(self) -> None:
        """Two running gavel jobs holding half of one GPU's shards each are a pair (one a
        previous run of the daemon started): reported as its row, stopped together."""
        halves: dict[tuple[str, tuple[int, ...]], list[str]] = {}
        for job, j in self._jobs.items():
            if (job in self._running and job not in self._pairs and j.shards and len(j.nodes) == 1
                    and len(j.gpu_shards) == 1 and j.gpu_shards[0]):
                # half of each GPU it is on (a multi-GPU pair's half: a task on each)
                use, per = j.gpu_shards[0], self.shards_per_gpu(j.nodes[0])
                if all(n is not None and 0 < n < per for _, n in use):
                    halves.setdefault((j.nodes[0], tuple(i for i, _ in use)), []).append(job)
        for (node, gpus), jobs in sorted(halves.items()):
            if len(jobs) == 2:
                a = Assignment(tuple(sorted(jobs, key=_id_order)), self._running[jobs[0]].worker_type,
                               ((node, len(gpus)),))
                for m in jobs:
                    self._pairs[m] = a
                log.info("jobs %s share GPU %s:%s: running as a pair", "+".join(a.jobs), node,
                         ",".join(map(str, gpus)))

    def _check_pairs(self) -> None:
        """Every running gavel job's GPU (node, IDX from gres_detail) is held by its row only:
        a pair's two jobs on the same GPU, and no third job there.  What Slurm did otherwise
        (first-fit gave the second job another GPU; 22.05's bug gave a whole-GPU job a GPU
        that shards use) is logged once, with both GPUs, and recorded as an event."""
        for job, j in self._jobs.items():
            if not j.running or not j.gpu_indices:
                continue
            row = set(self._pairs[job].jobs) if job in self._pairs else {job}
            partner = self._partner(job)
            if partner is not None and partner in self._jobs and self._jobs[partner].running:
                p = self._jobs[partner]
                mine = list(zip(j.nodes, j.gpu_indices))
                theirs = list(zip(p.nodes, p.gpu_indices))
                # (a job listed without its GPU, completing, says nothing about where it ran)
                if mine and theirs and mine != theirs and all(i for _, i in mine + theirs):
                    self._alarm(("split", job, partner), f"pair {job}+{partner} does not share a "
                                f"GPU: Slurm gave {job} {_gpus(mine)} and {partner} {_gpus(theirs)}")
            for n, idx in zip(j.nodes, j.gpu_indices):
                others = sorted({o for i in _indices(idx) for o in self._gpu_users.get((n, i), [])} - row)
                if others:
                    self._alarm(("shared", job, tuple(others)), f"job {job} shares GPU {n}:{idx} "
                                f"with job {','.join(others)}, which the plan did not put there")

    def _alarm(self, key: tuple, message: str) -> None:
        if key in self._pair_alarms:
            return
        if len(self._pair_alarms) > 10000:
            self._pair_alarms.clear()
        self._pair_alarms.add(key)
        log.error("%s", message)
        self.on_event("gpu_shared", key[1], message)

    def space_sharing_problems(self, version: tuple[int, ...]) -> list[str]:
        """What keeps pairs from running safely on this cluster (said once at daemon start)."""
        problems = []
        ours = [n for n in self._nodes if any(p in self.partitions for p in n.partitions)]
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

    def _usage_rows(self) -> tuple[Usage, ...]:
        """What ran since the last observation, per row: a job alone, or a pair for the time
        both of its jobs ran together (what one of them ran beyond that: alone)."""
        out = []
        left = dict(self._usage)
        for key in sorted(self._usage, key=lambda k: (k[0], k[1], k[2], k[3] or "")):
            if key not in left:
                continue
            job, wt, nodes, partner = key
            seconds = left.pop(key)
            if partner is not None:
                other = left.pop((partner, wt, nodes, job), 0.0)
                # (its row gone: as many GPUs as the job holds, two of a two-GPU pair's half)
                pair = self._pairs.get(job) or Assignment(
                    tuple(sorted((job, partner), key=_id_order)), wt,
                    tuple((n, max(1, c)) for n, c in self._alone(job, wt, nodes).servers))
                together = min(seconds, other)
                if together > 0:
                    out.append(Usage(pair, together))
                for j_id, alone in ((job, seconds - together), (partner, other - together)):
                    if alone > 0:
                        out.append(Usage(self._alone(j_id, wt, nodes), alone))
                continue
            out.append(Usage(self._alone(job, wt, nodes), seconds))
        return tuple(out)

    def _alone(self, job: str, wt: str, nodes: tuple[str, ...]) -> Assignment:
        j = self._jobs.get(job)
        return Assignment((job,), wt, tuple((n, j.gpus_on(n) if j is not None else 0) for n in nodes))


def _indices(idx: str) -> list[str]:
    """'0-1,3' -> ['0', '1', '3'] (a gres_detail IDX list; bounded: records.index_list)."""
    return [str(i) for i in index_list(idx)]


def _gpus(where) -> str:
    return ",".join(f"{n}:{i}" for n, i in where)

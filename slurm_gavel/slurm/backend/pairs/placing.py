"""Placing pairs: where a pair row may be released now, reading Slurm's placement back.

Each half of a pair gets half of one GPU's shards on the node (`Gres=shard:S/2` in its
update); both are released in one call, only where Slurm's first fit gives both one GPU
now (room.py), one pair per node per release, the node's next pair once Slurm lists the
previous one on its GPU (`_await_pairs`, in the same call).  A pair that Slurm split
anyway (a job left a GPU between the poll and Slurm's placement) is requeued held and
started again together (`_undo_split`).  A survivor of a pair keeps running when the plan
pairs it with a new job; the new partner takes its free half, only where first fit gives
it the survivor's GPUs (`room_for_partner`).  Each poll the pairs still alive are kept,
pairs found running are adopted and what holds each GPU is checked (`_follow_pairs`).

`Pairing` holds this state for `SlurmBackend`: `_pairs`, `_room`, `_joining`, `pair_log`,
`requests`.
"""
from __future__ import annotations

import logging
import time
from typing import Collection, Mapping

from ....core.plan import Assignment
from ...commands import SlurmCLI
from ...records import SlurmJob, parse_jobs
from ..snapshot import Snapshot
from .room import NodeRoom, first_fit_gpus, gpu_room, pair_gpus, take
from .sharing import adopted_pairs, gpu_alarms, gpu_list, halves, lone_half

log = logging.getLogger("slurm_gavel.slurm")

# The pairs of one node are released one after another: the next once Slurm lists the
# previous one running on its GPU (read every PAIR_READ_SECONDS, at most PAIR_PLACED_SECONDS;
# Slurm places a released job within its next scheduling pass, well under a second here).
PAIR_READ_SECONDS = 0.2
PAIR_PLACED_SECONDS = 3.0


def unplaced_shard_nodes(starting: Mapping[str, tuple[Assignment, float]], settled: Collection[str],
                         jobs: Mapping[str, SlurmJob]) -> set[str]:
    """Nodes with a shard job released but not placed yet (a pair, or a lone job that will
    take a whole GPU's shards): a pair there waits until it is placed."""
    return {a.nodes[0] for job, (a, _) in starting.items()
            if job not in settled and len(a.servers) == 1 and job in jobs
            and jobs[job].shards and not jobs[job].running}


def room_for_partner(snap: Snapshot, room: NodeRoom | None, a: Assignment,
                     survivor: str) -> tuple[tuple[int, ...] | None, tuple[int, ...], int, str]:
    """(GPUs first fit gives the survivor's new partner or None, the survivor's GPUs, the
    shards the partner asks of each, why not).  A task per GPU, each on the first GPU with
    room it does not use yet (ONE_TASK_PER_SHARING_GRES): the survivor's GPUs must come first."""
    mine, held = lone_half(snap, survivor, a) or ((), 0)
    want = snap.shards_per_gpu(a.nodes[0]) - held
    gpus, why = (first_fit_gpus(room, want, a.gpus) if room is not None and mine
                 else (None, "no shards listed" if mine else "the survivor holds no half"))
    return gpus, mine, want, why


def leaving(preempted: Collection[str]):
    """A running job about to free its GPU: preempted by us, or completing."""
    return lambda j: j.job_id in preempted or "COMPLETING" in j.state


def placed_pairs(cli: SlurmCLI, want: set[str]) -> tuple[list[SlurmJob], dict[str, SlurmJob]] | None:
    """Read Slurm until every job of `want` runs with its GPU listed (at most
    PAIR_PLACED_SECONDS): (the jobs of that read, the jobs of `want`); None if not in time."""
    deadline = time.monotonic() + PAIR_PLACED_SECONDS
    while True:
        # real time, not the clock's sleep: that one is the daemon's, woken by its signals
        time.sleep(PAIR_READ_SECONDS)
        jobs = parse_jobs(cli.squeue())
        seen = {j.job_id: j for j in jobs if j.job_id in want and j.running and any(j.gpu_indices)}
        if len(seen) == len(want):
            return jobs, seen
        if time.monotonic() >= deadline:
            return None


class Pairing:
    """The pair rows of `SlurmBackend` (which sets the attributes used here)."""

    def _room_of(self, jobs) -> dict[str, NodeRoom]:
        """Each shard node's GPUs as Slurm's first fit sees them (room.py): where a pair
        released now would go, or why it waits."""
        return gpu_room(jobs, {n.name: n.gpus for n in self._nodes}, self.shards_per_gpu,
                        leaving(self._preempted))

    def _follow_pairs(self, snap: Snapshot) -> None:
        """After a poll: a pair lasts while both run or are released (a released job Slurm
        lists no more, cancelled before it ran, ends its pair now: its partner runs on
        alone); pairs found running are adopted; what holds each GPU is checked."""
        self._pairs = {job: a for job, a in self._pairs.items()
                       if all(m in self._running or m in self._starting and m in snap.gavel for m in a.jobs)}
        self._room = self._room_of(snap.listed)
        self._pairs.update(adopted_pairs(snap, self._running, self._pairs))
        for key, message in gpu_alarms(snap, self._pairs):
            self.pair_log.alarm(key, message)

    def _room_for(self, a: Assignment, members: list[str], survivor: str | None,
                  joined: dict[str, int]) -> bool:
        """Whether pair row `a` may be released now on its node (first fit gives both halves,
        or a survivor's new partner, the same GPUs); if so its shards are taken from `_room`
        (and the partner's count noted in `joined`); else it waits, said once or at debug."""
        node = a.nodes[0]
        room = self._room.get(node)
        if survivor is not None:      # the new partner takes the survivor's free halves
            gpus, mine, want, why = room_for_partner(self.snapshot, room, a, survivor)
            if gpus != mine:
                if gpus is not None:  # first fit would put it elsewhere: said once
                    self.pair_log.warn_pair(None, a, f"node {node}: first fit would give job {members[0]} "
                                            f"{gpu_list(gpus)}, not {gpu_list(mine)} beside job "
                                            f"{survivor}; it waits")
                else:
                    log.debug("job %s waits to join %s on %s: %s", members[0], survivor, node, why)
                return False
            take(room, gpus, (want,), (members[0],))
            joined[members[0]] = want
            return True
        shares = halves(self.snapshot, a)
        gpus, why = pair_gpus(room, shares, a.gpus) if room is not None else (None, "no shards listed")
        if gpus is None:
            if "part of its shards" in why:   # a survivor of a pair in the way: said once
                self.pair_log.warn_pair(None, a, f"node {node}: {why}; it waits")
            else:
                log.debug("pair %s waits on %s: %s", "+".join(a.jobs), node, why)
            return False
        take(room, gpus, shares, a.jobs)
        return True

    def _whole_gpu_free(self, node: str) -> bool:
        r = self._room.get(node)
        return r is not None and any(free >= self.shards_per_gpu(node) for free in r.free)

    def _await_pairs(self, pairs: list[Assignment], settled: set[str]) -> bool:
        """Read Slurm until every job of `pairs` (pairs and lone shard jobs just released)
        runs with its GPU listed (`placed_pairs`), undo any pair that Slurm split
        (`_undo_split`), then take the GPUs' room from that read; False if not placed
        in time."""
        want = {m for a in pairs for m in a.jobs}
        read = placed_pairs(self.cli, want)
        if read is None:
            return False
        jobs, seen = read
        for a in pairs:
            where = {seen[m].gpu_indices for m in a.jobs}
            if len(a.jobs) > 1 and len(where) > 1:
                self._undo_split(a, {m: seen[m].gpu_indices[0] for m in a.jobs})
        self._room = self._room_of(jobs)
        settled.update(want)
        return True

    def _undo_split(self, a: Assignment, gpus: Mapping[str, str]) -> None:
        """Slurm put the halves of a pair just released on two GPUs: a job left a GPU before
        the chosen one between the poll and Slurm's placement (first fit then gave it a half).
        The pair's new jobs are requeued held at once (seconds after their start: little
        lost) and start again, together, from a later poll; a survivor joined keeps running."""
        node = a.nodes[0]
        joined = [m for m in a.jobs if m in self._running]         # a survivor, running before
        new = [m for m in a.jobs if m not in joined]
        said = ", ".join(f"{m} GPU {node}:{gpus[m]}" for m in a.jobs)
        log.warning("pair %s landed on two GPUs (%s): a job left a GPU first fit took between "
                    "the poll and Slurm's placement; job %s requeued held, started again together",
                    "+".join(a.jobs), said, ",".join(new))
        for m in a.jobs:
            self.on_event("pair_split_undone", m, said)
        if not self._act("requeuehold (pair split by Slurm)", new, lambda: self.cli.requeue_hold(new),
                         why=f"its pair {'+'.join(a.jobs)} landed on two GPUs"):
            return                            # the next poll's check reports the split
        now = self.clock.now()
        for m in a.jobs:
            self._pairs.pop(m, None)
        for m in new:
            self._starting.pop(m, None)
            self._stopped[m] = (now, a.nodes)  # restart guard: not on that node within the second
            self._deferred[m] = a
        for m in joined:
            self._joining[m] = a

"""What a round is made of: servers, where a job may run, assignments and the round's plan.

Plain frozen data shared by the mechanism (core/mechanism.py), which decides a
`RoundPlan`, and the backends (the simulated cluster, Slurm), which carry it
out and report back what held which GPUs (`Assignment`) on which `Server`.
A `Placement` is what a backend knows of where a job may run; the policy and
the mechanism respect it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

Row = tuple[str, ...]          # one job ("7",) or a pair of jobs ("7", "9")


@dataclass(frozen=True)
class Server:
    """A node: its name, the GPU type it holds, and how many of its GPUs are free to schedule."""

    name: str
    worker_type: str
    gpus: int


@dataclass(frozen=True)
class Placement:
    """Where a job may run, as its backend knows it (the policy and the mechanism respect it).

    `worker_types`: the types it can run on (None: every type); `servers`: the
    servers it can run on (None: any server of those types); `one_server`: all
    its GPUs must be on one server (a backend that cannot spread a job);
    `same_gpus_per_server`: spread over servers, it holds as many GPUs on each
    (Slurm gives a job one GPU count per node: 2+2, never 3+1).
    """

    worker_types: frozenset[str] | None = None
    servers: frozenset[str] | None = None
    one_server: bool = False
    same_gpus_per_server: bool = False

    def allows(self, worker_type: str) -> bool:
        return self.worker_types is None or worker_type in self.worker_types

    @property
    def restricts(self) -> bool:
        return (self.worker_types is not None or self.servers is not None or self.one_server
                or self.same_gpus_per_server)


@dataclass(frozen=True)
class Assignment:
    """A row (job or pair) on GPUs of one type for a round: (server, GPUs there) pairs."""

    jobs: Row
    worker_type: str
    servers: tuple[tuple[str, int], ...]

    @cached_property
    def gpus(self) -> int:
        return sum(count for _, count in self.servers)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.servers)


@dataclass(frozen=True)
class RoundPlan:
    """One round: everything that runs, and how that differs from the round before."""

    round: int
    assignments: tuple[Assignment, ...]
    keep: tuple[Assignment, ...]       # same jobs, type and servers as last round: lease renewed
    start: tuple[Assignment, ...]      # new, resumed or moved
    preempt: tuple[str, ...]           # jobs that ran last round and must stop now
    filling: frozenset[str] = frozenset()   # jobs on a type where they have no share (idle GPUs)

    @property
    def running_jobs(self) -> set[str]:
        return {job for a in self.assignments for job in a.jobs}



__all__ = ["Assignment", "Placement", "RoundPlan", "Row", "Server"]

"""The cluster backend interface: what the engine learns from a cluster and asks of it.

A backend (the simulated cluster, Slurm) does two things:

* `observe()` reports the cluster as it is now: the active jobs (waiting or
  running), the servers whose GPUs the scheduler may use, what ran since the
  last observation and for how long (`Usage`: the ledger is fed from what
  really ran, not from what was planned), and the jobs that left.
* `execute(plan, round_end)` carries out a round plan: leave `keep` alone,
  stop `preempt`, start `start`.

Everything crossing this line is plain frozen data; the engine knows nothing
of how a backend does its work.

A backend also says which pair rows (space sharing) it can run:
`max_pair_gpus`, the most GPUs each job of a pair may have (Slurm: 1, its shards of
one GPU per job; the simulator: any, as Gavel's, unless told to mimic Slurm; None,
the default: any).  The engine gives the policy only those pair rows
(`pair_gpu_limit`), so a policy never plans a pair the backend would refuse, and two
backends with the same limit get the same policy input.

The interface itself (`Backend`) is declared in interfaces.py; this module
keeps the data and re-exports it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from .interfaces import Backend
from .plan import Assignment, Placement, Server


@dataclass(frozen=True)
class JobState:
    """An active job's fixed facts, as the backend sees them (its progress is in `Observation`)."""

    id: str
    job_type: str                 # model name, the key into throughput tables
    scale_factor: int             # GPUs it needs
    arrival_time: float           # seconds (same clock as the engine's)
    total_steps: float = float("nan")   # NaN when unknown
    weight: float = 1.0
    entity: str = ""
    slo: float | None = None      # seconds after arrival; None = no SLO
    name: str = ""                # for people: job name, owner, account
    user: str = ""
    account: str = ""
    speeds: tuple[tuple[str, float], ...] = ()   # the user's hint: (worker type, steps/s)
    # Where it may run (allowed worker types, servers): the policy sees the other
    # types as infeasible and the mechanism never places it elsewhere.  None: anywhere.
    placement: Placement | None = None
    # Not to be planned now, and why in words (it can never run here; it failed to
    # start and is backing off).  Empty: it may be planned.
    hold_reason: str = ""


@dataclass(frozen=True)
class Usage:
    """An assignment that held its GPUs for `seconds` since the previous observation."""

    assignment: Assignment
    seconds: float


@dataclass(frozen=True)
class Departure:
    """A job that left the system at `time`: completed, failed, cancelled, node_fail,
    timeout, preempted or lost (the cluster knows it no more); `detail` says why, in words."""

    id: str
    time: float
    state: str = "completed"
    detail: str = ""


@dataclass(frozen=True)
class Measurement:
    """A throughput seen running: `job` made `steps_per_second` on `worker_type`.

    `partner` is the job it shared the GPUs with (space sharing), `spread`
    whether its GPUs were on more than one server.  The estimator learns T
    from these (the feedback arrow of the narrow waist).
    """

    job: str
    worker_type: str
    steps_per_second: float
    partner: str | None = None
    spread: bool = False


@dataclass(frozen=True)
class Observation:
    time: float
    jobs: tuple[JobState, ...]             # active jobs, in arrival order
    servers: tuple[Server, ...]            # GPUs the scheduler may use (all of them, busy or not)
    steps_done: Mapping[str, float] = field(default_factory=dict)   # per active job id
    running: tuple[Assignment, ...] = ()   # what holds GPUs now (departed jobs left out)
    usage: tuple[Usage, ...] = ()
    departures: tuple[Departure, ...] = ()
    measurements: tuple[Measurement, ...] = ()
    # per active job id: seconds it reports having lost to being stopped (saves, restarts)
    lost_seconds: Mapping[str, float] = field(default_factory=dict)


def pair_gpu_limit(backend: Backend) -> int | None:
    """The most GPUs per job of a pair row `backend` can run (its `max_pair_gpus`, checked);
    None: any."""
    limit = backend.max_pair_gpus
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"max_pair_gpus must be an integer >= 0 or None, got {limit!r}")
    return limit


__all__ = ["Backend", "Departure", "JobState", "Measurement", "Observation", "Placement", "Usage",
           "pair_gpu_limit"]

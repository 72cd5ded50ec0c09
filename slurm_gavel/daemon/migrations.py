"""The database's schema, version by version: `MIGRATIONS[i]` turns version i into i + 1.

`SqliteStore` runs the ones a database lacks, in order, each in its own transaction
(a daemon killed during an upgrade leaves the previous version intact), and refuses a
database newer than `len(MIGRATIONS)`; `slurm-gavel doctor` says which an upgrade
will run.  A migration is never edited once released: a change is a new one.
"""
from __future__ import annotations

from typing import Callable

import sqlite_utils


def _v1(db: sqlite_utils.Database):
    db["jobs"].create({
        "id": str, "name": str, "user": str, "account": str, "model": str, "scale_factor": int,
        "weight": float, "entity": str, "slo": float, "steps": float, "submitted": float,
        "first_seen": float, "last_seen": float, "state": str, "finished": float,
    }, pk="id", not_null={"id"})
    db["job_time"].create({"job": str, "worker_type": str, "seconds": float},
                          pk=("job", "worker_type"))
    db["rounds"].create({"number": int, "started": float, "keep": int, "start": int,
                         "preempt": int}, pk="number")
    db["placements"].create({"round": int, "job": str, "action": str, "worker_type": str,
                             "nodes": str, "gpus": int}, pk=("round", "job", "action"))
    db["placements"].create_index(["job"])
    db["allocations"].create({"id": int, "round": int, "time": float, "policy": str,
                              "fresh": int, "objective": float, "interim_jobs": str}, pk="id")
    db["allocation_rows"].create({"allocation": int, "jobs": str, "worker_type": str,
                                  "share": float}, pk=("allocation", "jobs", "worker_type"))
    db["status"].create({"job": str, "round": int, "time": float, "worker_type": str,
                         "priority": float, "reason": str}, pk="job")
    db["events"].create({"id": int, "time": float, "kind": str, "job": str, "detail": str}, pk="id")
    db["events"].create_index(["job"])
    # the GPUs the scheduler could use at the last observation, per server
    db["servers"].create({"name": str, "worker_type": str, "gpus": int, "time": float}, pk="name")


def _v2(db: sqlite_utils.Database):
    # progress the jobs report (iterator): steps done, for `gqueue` and the policies
    db["jobs"].add_column("steps_done", float)


def _v3(db: sqlite_utils.Database):
    """Throughputs: measured per model and per job (EMA, sample counts), estimates."""
    # partner: '' when alone, else the partner's model (job) name; spread: 1 = over several servers
    db["measured_throughputs"].create({
        "model": str, "scale_factor": int, "worker_type": str, "partner": str, "spread": int,
        "steps_per_second": float, "samples": int, "updated": float,
    }, pk=("model", "scale_factor", "worker_type", "partner", "spread"))
    db["job_throughputs"].create({
        "job": str, "worker_type": str, "partner": str, "spread": int,
        "steps_per_second": float, "samples": int, "updated": float,
    }, pk=("job", "worker_type", "partner", "spread"))
    # what the policy was last given per job and type, where it came from, how sure it is
    db["throughput_estimates"].create({
        "job": str, "model": str, "scale_factor": int, "worker_type": str,
        "steps_per_second": float, "kind": str, "confidence": float, "phase": str, "proxy": str,
        "time": float,
    }, pk=("job", "worker_type"))


def _v4(db: sqlite_utils.Database):
    """What Slurm really does with each job, for gqueue's ST: state R (Slurm runs it), S (released,
    not started yet), W (held back by the daemon), PD; and the GPUs Slurm runs it on."""
    db["status"].add_column("state", str)
    db["status"].add_column("gpus", int)


def _v5(db: sqlite_utils.Database):
    """The engine's working state (core/state.py), so that a restarted daemon goes on where it stopped: one row."""
    db["engine_state"].create({"id": int, "time": float, "state": str}, pk="id")


def _v6(db: sqlite_utils.Database):
    """The GPU types a job may run on (types=, sbatch -p, what fits it), for gqueue:
    comma-separated, NULL for any."""
    db["jobs"].add_column("types", str)


def _v7(db: sqlite_utils.Database):
    """The nodes Slurm runs each running job on (comma-separated), for gqueue's SHAPE: a job
    the last plan moves runs where it ran until it stops."""
    db["status"].add_column("nodes", str)


def _v8(db: sqlite_utils.Database):
    """What a gavel job asked before the daemon made it half of a multi-GPU pair (GPUs per
    node, tasks; slurm.backend.pairs.multi): given back when it next starts alone, also after a
    restart."""
    db["paired_requests"].create({"job": str, "gpus": int, "tasks": int}, pk="job")


def _v9(db: sqlite_utils.Database):
    """The time a job reports having lost to preemptions (checkpoint saves, restarts)."""
    db["jobs"].add_column("lost_seconds", float)


MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = [_v1, _v2, _v3, _v4, _v5, _v6, _v7, _v8, _v9]


__all__ = ["MIGRATIONS"]

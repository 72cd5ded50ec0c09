"""Replaying a site's own history: every policy on the same jobs, and what really happened.

This module owns the comparison behind `slurm-gavel replay`: `Outcome` (one job's arrival,
first start, finish, GPU-seconds per type and restarts: what a simulation or Slurm itself
did), `metrics` (one table row from outcomes: average and p90 JCT, queue wait, makespan,
GPU utilization per type, restarts per job, all over the same span so that rows compare),
`with_job_rows` (a throughput table plus one row per replayed job whose speed came from its
measured run time) and `compare` (simulate each policy on the trace and cluster shape).
Plain data in and out; it knows nothing of Slurm (slurm/replay.py turns sacct into these).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from ..core.errors import InputError
from ..estimator.table import ThroughputTable
from .simulator import Simulation, simulate
from .workloads import TraceJob


@dataclass(frozen=True)
class Outcome:
    """What happened to one job (times in seconds on one clock)."""
    id: str
    arrival: float
    first_start: float           # NaN: never started
    finish: float                # NaN: never finished
    gpu_seconds: Mapping[str, float] = field(default_factory=dict)   # per GPU type
    restarts: int = 0


def outcomes(sim: Simulation) -> list[Outcome]:
    """A simulation's per-job results as outcomes."""
    return [Outcome(r.id, r.arrival, r.first_start, r.finish,
                    {wt: s * r.scale_factor for wt, s in r.seconds.items() if s},
                    max(0, r.starts - 1)) for r in sim.results.values()]


def metrics(label: str, jobs: Sequence[Outcome], gpus: Mapping[str, int]) -> dict:
    """One row: JCT (mean, p90), queue wait (mean, p90), makespan (first arrival to last
    finish), utilization per type (GPU-seconds over the GPUs of the type for the makespan),
    restarts per job; hours.  Jobs that never finished count in `jobs` only."""
    done = [j for j in jobs if math.isfinite(j.finish)]
    jct = np.array([j.finish - j.arrival for j in done])
    wait = np.array([j.first_start - j.arrival for j in jobs if math.isfinite(j.first_start)])
    span = (max(j.finish for j in done) - min(j.arrival for j in jobs)) if done else math.nan
    used: dict[str, float] = {wt: 0.0 for wt in gpus}
    for j in jobs:
        for wt, s in j.gpu_seconds.items():
            used[wt] = used.get(wt, 0.0) + s

    def hours(values, q=None):
        if not len(values):
            return None
        return float(values.mean() if q is None else np.percentile(values, q)) / 3600.0

    return {
        "policy": label, "jobs": len(jobs), "finished": len(done),
        "average_jct_hours": hours(jct), "p90_jct_hours": hours(jct, 90),
        "average_wait_hours": hours(wait), "p90_wait_hours": hours(wait, 90),
        "makespan_hours": span / 3600.0 if math.isfinite(span) else None,
        "utilization": {wt: (used.get(wt, 0.0) / (n * span) if n and span and math.isfinite(span)
                             else None) for wt, n in gpus.items()},
        "gpu_hours": {wt: s / 3600.0 for wt, s in used.items()},
        "restarts_per_job": float(np.mean([j.restarts for j in done])) if done else None,
        "jct_hours": sorted(float(v) / 3600.0 for v in jct),
    }


def with_job_rows(table: ThroughputTable, rows: Mapping[tuple[str, int], Mapping[str, float]],
                  worker_types: Sequence[str]) -> ThroughputTable:
    """A copy of `table` over `worker_types` (types it lacks get only the new rows), plus a
    solo row per (job type, scale factor) in `rows`: {worker type: steps/s}."""
    solo = {wt: dict(table.solo_by_type.get(wt, {})) for wt in worker_types}
    pairs = {wt: dict(table.pairs_by_type.get(wt, {})) for wt in worker_types}
    spread = {wt: dict(m) for wt, m in table.unconsolidated_solo_by_type.items() if wt in worker_types}
    spread_pairs = {wt: dict(m) for wt, m in table.unconsolidated_pairs_by_type.items()
                    if wt in worker_types}
    for key, rates in rows.items():
        for wt, rate in rates.items():
            if wt in solo and rate > 0:
                solo[wt][key] = float(rate)
    return ThroughputTable(tuple(worker_types), solo, pairs, spread, spread_pairs)


def compare(trace: Sequence[TraceJob], table: ThroughputTable, cluster: Mapping[str, int],
            gpus_per_node: Mapping[str, int], policies: Sequence[tuple[str, bool]],
            observed: Sequence[Outcome] | None = None, observed_label: str = "slurm (what it did)",
            round_seconds: float = 360.0, restart_seconds: float = 0.0,
            max_rounds: int | None = None) -> list[dict]:
    """A row per policy (name, agnostic) simulated on `trace`, after the `observed` row."""
    from ..policies import make_policy

    if not trace:
        raise InputError("replay", "no job to replay (no job with GPUs ran in the time range)")
    rows = [metrics(observed_label, observed, cluster)] if observed is not None else []
    order = sorted(trace, key=lambda j: j.arrival_time)
    for name, agnostic in policies:
        policy = make_policy(name, agnostic=agnostic)
        sim = simulate(order, table, cluster, policy, round_seconds=round_seconds,
                       gpus_per_node=dict(gpus_per_node), restart_seconds=restart_seconds,
                       max_rounds=max_rounds)
        row = metrics(name + (":agnostic" if agnostic else ""), outcomes(sim), cluster)
        row["complete"] = sim.complete
        rows.append(row)
    return rows


__all__ = ["Outcome", "compare", "metrics", "outcomes", "with_job_rows"]

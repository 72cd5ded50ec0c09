"""Replaying a site's own history: every policy on the same jobs, and what really happened.

This module owns the comparison behind `slurm-gavel replay`.  `build` turns plain job
records (slurm.history.replay_records makes them from sacct) into a trace (arrival, GPUs,
account as entity, work), the throughput rows that trace needs, the "what Slurm did"
outcomes (real queue waits and completion times) and, per job, where its speed came from:

- ``table model``: its model (a gavel job's flags, or a job-name pattern) is in the
  throughput table at its GPU count: its work is the steps it made (its `steps` flag, else
  its run time on each type times the table's speed there);
- otherwise its work is its measured run time on the type it had, and its speed on the other
  types is extrapolated from ``nearest MODEL`` (the table model whose name the job's model
  names, e.g. resnet18 -> ResNet-18 (batch size 16)), else ``speeds`` (the ratios the admin
  gives), else ``table median`` (the median ratio over every table model at that GPU count).

`Outcome` is one job's arrival, first start, finish, GPU-seconds per type and restarts (what
a simulation or Slurm itself did); `metrics` makes one table row from outcomes (average and
p90 JCT, queue wait, makespan, GPU utilization per type, restarts per job, all over the same
span so that rows compare); `with_job_rows` adds the replayed jobs' rows to a throughput
table; `compare` simulates each policy; `table_text` prints the rows (user text made
printable).  Plain data in and out; nothing here knows about Slurm.
"""
from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from ..core.display import printable
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


# -- from a history to a trace -----------------------------------------------------------------
JOB_TYPE_PREFIX = "slurm job "          # the trace's job type of a job replayed from its run time


@dataclass
class Replay:
    """A history made ready for the simulator."""
    trace: list[TraceJob]
    rows: dict                     # (job type, scale factor) -> {worker type: steps/s}
    observed: list[Outcome]        # what Slurm did, on the trace's clock (0 = first arrival)
    jobs: list[dict]               # per replayed job: ids, shape, where its speed came from
    skipped: list[dict] = field(default_factory=list)
    origin: float = 0.0            # epoch seconds of time 0


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _nearest(model: str, table: ThroughputTable, gpus: int) -> str | None:
    """The table model (at `gpus`) whose name starts with `model`'s letters and digits:
    resnet18 -> ResNet-18 (batch size 16), the first such in table order."""
    want = _key(model)
    if not want:
        return None
    for m in table.models(gpus):
        if _key(m).startswith(want):
            return m
    return None


def _median_ratios(table: ThroughputTable, gpus: int, types: Sequence[str]) -> dict[str, float]:
    """Each type's speed relative to the first type, the median over the table's models."""
    ratios: dict[str, list[float]] = {t: [] for t in types}
    sf = gpus if table.models(gpus) else 1
    for m in table.models(sf):
        solo = table.solo(m, sf)
        base = [solo.get(t, 0.0) for t in types]
        if all(v > 0 for v in base):
            for t, v in zip(types, base):
                ratios[t].append(v / base[0])
    return {t: statistics.median(v) for t, v in ratios.items() if v}


def build(records: Sequence[Mapping], table: ThroughputTable, worker_types: Sequence[str],
          speeds: Mapping[str, float] | None = None) -> Replay:
    """The trace of every job that ran with GPUs of a cluster type and has ended.  `records`:
    plain job records, oldest submission first (slurm.history.replay_records: job, name,
    user, account, partition, state, submit, start, end, gpus, gpu_type, model, steps, runs
    of {gpu_type, gpus, elapsed})."""
    types = tuple(worker_types)
    candidates, skipped = [], []
    for job in records:
        reason = None
        if not job["runs"]:
            reason = "never ran"
        elif job["end"] is None or job["state"] in ("RUNNING", "PENDING", "REQUEUED", "SUSPENDED"):
            reason = "still running"
        elif not job["gpus"]:
            reason = "no GPUs (or AccountingStorageTRES lacks gres/gpu)"
        elif not job["gpu_type"]:
            reason = "GPU type unknown"
        elif any(r["gpus"] and r["gpu_type"] not in types for r in job["runs"]):
            reason = f"GPU type {job['gpu_type']} is not in the cluster"
        elif job["submit"] is None or job["start"] is None:
            reason = "no submit time"
        if reason:
            skipped.append({"job": job["job"], "name": job["name"], "reason": reason})
        else:
            candidates.append(job)
    origin = min((j["submit"] for j in candidates), default=0.0)
    trace, rows, observed, described = [], {}, [], []
    for job in candidates:
        sf, last, model, runs = job["gpus"], job["gpu_type"], job["model"], job["runs"]
        solo = table.solo(model, sf) if model else {}
        run_types = {r["gpu_type"] for r in runs}
        if model and all(solo.get(t, 0) > 0 for t in run_types):
            steps = job["steps"] or sum(r["elapsed"] * solo[r["gpu_type"]] for r in runs)
            job_type, total, source = model, max(1, round(steps)), "table model"
        else:
            near = _nearest(model, table, sf) if model else None
            if near and all(table.solo(near, sf).get(t, 0) > 0 for t in run_types):
                speed, source = table.solo(near, sf), f"nearest {near}"
            elif speeds:
                speed, source = dict(speeds), "speeds"
            else:
                speed, source = _median_ratios(table, sf, types), "table median"
            if any(speed.get(t, 0) <= 0 for t in run_types):
                missing = sorted(t for t in run_types if speed.get(t, 0) <= 0)
                raise InputError("--speeds", f"job {job['job']} ran on {', '.join(missing)}, which "
                                             f"no table model covers: give its speed ratio")
            # work in seconds on its last type: 1 step = 1 second there
            work = sum(r["elapsed"] * speed[r["gpu_type"]] / speed[last] for r in runs)
            job_type, total = f"{JOB_TYPE_PREFIX}{job['job']}", max(1, round(work))
            rows[(job_type, sf)] = {t: speed[t] / speed[last] for t in types if speed.get(t, 0) > 0}
        arrival = job["submit"] - origin
        held: dict[str, float] = {}
        for r in runs:
            if r["gpus"]:
                held[r["gpu_type"]] = held.get(r["gpu_type"], 0.0) + r["gpus"] * r["elapsed"]
        trace.append(TraceJob(job_type, "", "", "", False, total, sf, 1.0, None, arrival,
                              entity=job["account"]))
        observed.append(Outcome(str(len(observed)), arrival, job["start"] - origin,
                                job["end"] - origin, held, len(runs) - 1))
        described.append({"job": job["job"], "name": job["name"], "account": job["account"],
                          "user": job["user"], "partition": job["partition"], "gpu_type": last,
                          "gpus": sf, "runs": len(runs), "arrival": arrival,
                          "run_seconds": sum(r["elapsed"] for r in runs), "model": model,
                          "job_type": job_type, "total_steps": total, "speed_from": source})
    return Replay(trace, rows, observed, described, skipped, origin)


def parse_speeds(value: str | None, option: str = "--speeds") -> dict[str, float]:
    """'v100=1,k80=0.25' -> {'v100': 1.0, 'k80': 0.25} (each > 0)."""
    out = {}
    for part in filter(None, (p.strip() for p in (value or "").split(","))):
        k, sep, v = part.partition("=")
        try:
            number = float(v)
        except ValueError:
            number = math.nan
        if not sep or not k.strip() or not (number > 0 and math.isfinite(number)):
            raise InputError(option, f"expected TYPE=NUMBER (> 0), got {part!r}")
        out[k.strip()] = number
    return out


# -- the table ------------------------------------------------------------------------------
def _hours(v) -> str:
    if v is None:
        return "-"
    return f"{v * 3600:.0f} s" if v < 1 / 60 else (f"{v * 60:.1f} m" if v < 1 else f"{v:.2f} h")


def table_text(rows: Sequence[dict], replay: Replay, show_jobs: bool) -> str:
    types = list(rows[0]["utilization"]) if rows else []
    head = ["policy", "jobs", "avg JCT", "p90 JCT", "avg wait", "p90 wait", "makespan",
            *[f"util {printable(t)}" for t in types], "restarts/job"]
    body = []
    for r in rows:
        util = [("-" if r["utilization"][t] is None else f"{r['utilization'][t]:.0%}") for t in types]
        restarts = "-" if r["restarts_per_job"] is None else f"{r['restarts_per_job']:.2f}"
        body.append([printable(r["policy"]) + ("" if r.get("complete", True) else " (incomplete)"),
                     f"{r['finished']}/{r['jobs']}", _hours(r["average_jct_hours"]),
                     _hours(r["p90_jct_hours"]), _hours(r["average_wait_hours"]),
                     _hours(r["p90_wait_hours"]), _hours(r["makespan_hours"]), *util, restarts])
    lines = _columns([head] + body)
    counts: dict[str, int] = {}
    for j in replay.jobs:
        kind = "nearest model" if j["speed_from"].startswith("nearest ") else j["speed_from"]
        counts[kind] = counts.get(kind, 0) + 1
    lines.append("")
    lines.append(f"{len(replay.jobs)} jobs replayed (speed from: "
                 + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ")"
                 + (f"; {len(replay.skipped)} skipped: "
                    + ", ".join(f"{k} {v}" for k, v in sorted(_reasons(replay.skipped).items()))
                    if replay.skipped else ""))
    if show_jobs and replay.jobs:
        lines.append("")
        lines += _columns([["job", "name", "account", "GPUs", "type", "runs", "ran", "speed from"]]
                          + [[printable(j["job"]), printable(j["name"])[:24], printable(j["account"]),
                              str(j["gpus"]), printable(j["gpu_type"]), str(j["runs"]),
                              f"{j['run_seconds']:.0f} s", printable(j["speed_from"])]
                             for j in replay.jobs])
    return "\n".join(lines)


def _reasons(skipped) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in skipped:
        out[s["reason"]] = out.get(s["reason"], 0) + 1
    return out


def _columns(rows) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


__all__ = ["JOB_TYPE_PREFIX", "Outcome", "Replay", "build", "compare", "metrics", "outcomes", "parse_speeds",
           "table_text", "with_job_rows"]

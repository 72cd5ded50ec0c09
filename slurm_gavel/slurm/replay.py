"""`slurm-gavel replay`: a site's own Slurm history, replayed under each policy.

This module owns the step from accounting to the simulator: `build` turns `HistoryJob`s
(slurm/history.py) into a trace (arrival, GPUs, account as entity, work), the throughput
rows that trace needs, the "what Slurm did" outcomes (real queue waits and completion times)
and, per job, where its speed came from:

- ``table model``: a gavel job's model (its AdminComment flags) or the model a configurable
  job-name pattern names is in the throughput table at its GPU count: its work is the steps it
  made (its `steps` flag, else its run time on each type times the table's speed there);
- otherwise its work is its measured run time on the type it had, and its speed on the other
  types is extrapolated from ``nearest MODEL`` (the table model whose name the job's model
  names, e.g. resnet18 -> ResNet-18 (batch size 32)), else ``speeds`` (the ratios the admin
  gives, --speeds v100=1,k80=0.25), else ``table median`` (the median ratio over every table
  model at that GPU count).

The command runs sacct (or reads a saved output), reads the cluster shape from Slurm (or
--cluster), and prints one table (sim/replay.py computes it).  Every user-controlled text
(job names, accounts) is made printable before it is shown.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..core.display import clean, printable
from ..core.errors import InputError
from ..estimator.table import ThroughputTable
from ..sim.replay import Outcome, compare, with_job_rows
from ..sim.workloads import TraceJob
from .flags import from_admin_comment, is_admin_comment
from .history import HISTORY_FIELDS, HistoryJob, parse_history_json, parse_history_parsable

DEFAULT_POLICIES = "fifo,max_min_fairness:agnostic,max_min_fairness"
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


def model_of(job: HistoryJob, pattern: re.Pattern | None) -> str | None:
    """A gavel job's `model` flag, else the name pattern's group `model` (or group 1, or the
    whole match)."""
    if is_admin_comment(job.admin_comment):
        try:
            flags = from_admin_comment(job.admin_comment)
        except InputError:
            flags = None
        if flags is not None and flags.model:
            return flags.model
    if pattern is not None:
        m = pattern.search(job.name)
        if m:
            groups = m.groupdict()
            value = groups.get("model") or (m.group(1) if m.re.groups else m.group(0))
            return value or None
    return None


def _steps_flag(job: HistoryJob) -> int | None:
    if is_admin_comment(job.admin_comment):
        try:
            return from_admin_comment(job.admin_comment).steps
        except InputError:
            return None
    return None


def build(history: Sequence[HistoryJob], table: ThroughputTable, worker_types: Sequence[str],
          pattern: re.Pattern | None = None, speeds: Mapping[str, float] | None = None) -> Replay:
    """The trace of every job that ran with GPUs of a cluster type and has ended."""
    types = tuple(worker_types)
    candidates, skipped = [], []
    for job in history:
        reason = None
        if not job.ran:
            reason = "never ran"
        elif job.end is None or job.state in ("RUNNING", "PENDING", "REQUEUED", "SUSPENDED"):
            reason = "still running"
        elif not job.gpus:
            reason = "no GPUs (or AccountingStorageTRES lacks gres/gpu)"
        elif not job.gpu_type:
            reason = "GPU type unknown"
        elif any(r.gpus and r.gpu_type not in types for r in job.ran):
            reason = f"GPU type {job.gpu_type} is not in the cluster"
        elif job.submit is None:
            reason = "no submit time"
        if reason:
            skipped.append({"job": job.job_id, "name": job.name, "reason": reason})
        else:
            candidates.append(job)
    origin = min((j.submit for j in candidates), default=0.0)
    trace, rows, observed, described = [], {}, [], []
    for job in candidates:
        sf, last = job.gpus, job.gpu_type
        model = model_of(job, pattern)
        solo = table.solo(model, sf) if model else {}
        run_types = {r.gpu_type for r in job.ran}
        if model and all(solo.get(t, 0) > 0 for t in run_types):
            steps = _steps_flag(job) or sum(r.elapsed * solo[r.gpu_type] for r in job.ran)
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
                raise InputError("--speeds", f"job {job.job_id} ran on {', '.join(missing)}, which "
                                             f"no table model covers: give its speed ratio")
            # work in seconds on its last type: 1 step = 1 second there
            work = sum(r.elapsed * speed[r.gpu_type] / speed[last] for r in job.ran)
            job_type, total = f"{JOB_TYPE_PREFIX}{job.job_id}", max(1, round(work))
            rows[(job_type, sf)] = {t: speed[t] / speed[last] for t in types if speed.get(t, 0) > 0}
        arrival = job.submit - origin
        trace.append(TraceJob(job_type, "", "", "", False, total, sf, 1.0, None, arrival,
                              entity=job.account))
        observed.append(Outcome(str(len(observed)), arrival, job.start - origin, job.end - origin,
                                job.gpu_seconds(), job.restarts))
        described.append({"job": job.job_id, "name": job.name, "account": job.account,
                          "user": job.user, "partition": job.partition, "gpu_type": last,
                          "gpus": sf, "runs": len(job.ran), "arrival": arrival,
                          "run_seconds": sum(r.elapsed for r in job.ran), "model": model,
                          "job_type": job_type, "total_steps": total, "speed_from": source})
    return Replay(trace, rows, observed, described, skipped, origin)


# -- reading Slurm ------------------------------------------------------------------------
def read_history(text: str, node_types: Mapping[str, str] | None = None) -> list[HistoryJob]:
    """A saved or live sacct output: JSON when it is one, else --parsable2 of HISTORY_FIELDS."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise InputError("sacct", f"output is not JSON ({e.msg} at line {e.lineno})") from None
        return parse_history_json(data, node_types)
    return parse_history_parsable(text, HISTORY_FIELDS, node_types)


def cluster_shape(nodes) -> tuple[dict[str, int], dict[str, int], dict[str, str]]:
    """(GPUs per type, GPUs per node per type, node -> type) of `SlurmNode`s with GPUs."""
    gpus, per_node, node_types = {}, {}, {}
    for n in nodes:
        if n.gpu_type and n.gpus:
            gpus[n.gpu_type] = gpus.get(n.gpu_type, 0) + n.gpus
            per_node[n.gpu_type] = max(per_node.get(n.gpu_type, 0), n.gpus)
            node_types[n.name] = n.gpu_type
    return gpus, per_node, node_types


def _pairs(value: str | None, option: str) -> dict[str, float]:
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


def _names(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _policies(value: str) -> list[tuple[str, bool]]:
    from ..core.errors import UnknownPolicyError
    from ..policies import make_policy

    out = []
    for item in _names(value):
        name, _, mod = item.partition(":")
        if mod not in ("", "agnostic"):
            raise InputError("--policies", f"{item!r}: the only modifier is ':agnostic'")
        try:
            make_policy(name)
        except UnknownPolicyError as e:
            raise InputError("--policies", str(e)) from None
        out.append((name, mod == "agnostic"))
    if not out:
        raise InputError("--policies", "name at least one policy")
    return out


def register(commands) -> argparse.ArgumentParser:
    from ..core.engine import MEASURED_RESTART_SECONDS

    p = commands.add_parser(
        "replay", help="replay the cluster's own Slurm history under each policy (sacct)",
        description="Read the jobs that ran (sacct), turn them into a trace, simulate it on "
                    "the cluster's own shape under each policy, and compare with what Slurm "
                    "did: average and p90 JCT, queue wait, makespan, GPU utilization per type, "
                    "restarts per job.")
    p.add_argument("--throughputs", required=True, metavar="FILE",
                   help="throughput table in Gavel's JSON layout")
    p.add_argument("--start", default="now-30days", metavar="TIME",
                   help="sacct --starttime (default: %(default)s)")
    p.add_argument("--end", default="now", metavar="TIME", help="sacct --endtime (default: now)")
    p.add_argument("--partition", metavar="P,...", help="only jobs of these partitions")
    p.add_argument("--account", metavar="A,...", help="only jobs of these accounts")
    p.add_argument("--user", metavar="U,...", help="only jobs of these users")
    p.add_argument("--sacct-file", metavar="FILE",
                   help="a saved `sacct -X -D --json` (or --parsable2 of the fields "
                        f"{','.join(HISTORY_FIELDS)}) instead of running sacct")
    p.add_argument("--parsable", action="store_true",
                   help="run sacct with --parsable2, not --json (a Slurm without --json)")
    p.add_argument("--cluster", metavar="TYPE=N,...",
                   help="GPUs per type (default: Slurm's nodes, `scontrol show nodes`/`sinfo`)")
    p.add_argument("--gpus-per-node", type=int, metavar="N",
                   help="GPUs per node with --cluster (default: 4)")
    p.add_argument("--policies", default=DEFAULT_POLICIES, metavar="NAME[:agnostic],...",
                   help="policies to simulate (default: %(default)s)")
    p.add_argument("--model-pattern", metavar="REGEX",
                   help="a job name's model: the match's group `model`, else group 1, else all")
    p.add_argument("--speeds", metavar="TYPE=RATIO,...",
                   help="speed of each type relative to the others, for jobs of unknown model")
    p.add_argument("--round", type=float, default=360.0, metavar="SECONDS", dest="round_seconds",
                   help="round length (default: %(default)s)")
    p.add_argument("--restart-seconds", type=float, default=MEASURED_RESTART_SECONDS, metavar="S",
                   help="time a job loses at each start or resume (default: %(default)s)")
    p.add_argument("--max-rounds", type=int, metavar="N", help="stop each simulation after N rounds")
    p.add_argument("--jobs", action="store_true", help="also list every replayed job")
    p.add_argument("--plot", metavar="FILE.png", help="write every row's JCT CDF on one figure")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_replay)
    return p


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


def cmd_replay(args) -> int:
    from ..sim.simulator import parse_cluster
    from .commands import SlurmCLI
    from .records import parse_nodes

    policies = _policies(args.policies)
    speeds = _pairs(args.speeds, "--speeds")
    for value, option in ((args.round_seconds, "--round"),):
        if not (value > 0 and math.isfinite(value)):
            raise InputError(option, f"must be > 0, got {value}")
    if not (args.restart_seconds >= 0 and math.isfinite(args.restart_seconds)):
        raise InputError("--restart-seconds", f"must be >= 0, got {args.restart_seconds}")
    if args.max_rounds is not None and args.max_rounds < 1:
        raise InputError("--max-rounds", f"must be >= 1, got {args.max_rounds}")
    try:
        pattern = re.compile(args.model_pattern) if args.model_pattern else None
    except re.error as e:
        raise InputError("--model-pattern", f"not a regular expression: {e}") from None
    if args.plot:
        from ..cli import _check_output
        _check_output(args.plot, "--plot")
    table = ThroughputTable.from_gavel_json(args.throughputs)
    cli = SlurmCLI()
    if args.cluster:
        cluster = parse_cluster(args.cluster)
        per = args.gpus_per_node or 4
        if per < 1:
            raise InputError("--gpus-per-node", f"must be >= 1, got {per}")
        gpus_per_node, node_types = {t: per for t in cluster}, {}
    else:
        cluster, gpus_per_node, node_types = cluster_shape(parse_nodes(cli.nodes()))
        if not cluster:
            raise InputError("--cluster", "Slurm lists no node with GPUs: give --cluster")
    if args.sacct_file:
        try:
            with open(args.sacct_file, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError as e:
            raise InputError("--sacct-file", f"cannot read {args.sacct_file}: {e.strerror or e}") from None
    else:
        text = cli.history(args.start, args.end, _names(args.partition), _names(args.account),
                           _names(args.user), as_json=not args.parsable, fields=HISTORY_FIELDS)
    history = read_history(text, node_types)
    keep = {"partition": set(_names(args.partition)), "account": set(_names(args.account)),
            "user": set(_names(args.user))}
    history = [j for j in history if all(not want or getattr(j, k) in want for k, want in keep.items())]
    replay = build(history, table, list(cluster), pattern, speeds)
    sim_table = with_job_rows(table, replay.rows, list(cluster))
    rows = compare(replay.trace, sim_table, cluster, gpus_per_node, policies, replay.observed,
                   round_seconds=args.round_seconds, restart_seconds=args.restart_seconds,
                   max_rounds=args.max_rounds)
    if args.plot:
        from ..sim.experiments import plot_jct_cdf
        plot_jct_cdf({printable(r["policy"]): r["jct_hours"] for r in rows}, args.plot,
                     title="JCT on this cluster's own history")
    if args.json:
        out = {"cluster": cluster, "gpus_per_node": gpus_per_node, "rows": rows,
               "jobs": replay.jobs, "skipped": replay.skipped}
        print(json.dumps(clean(out), indent=2, allow_nan=False))
    else:
        print(table_text(rows, replay, args.jobs))
    return 0


__all__ = ["DEFAULT_POLICIES", "Replay", "build", "cluster_shape", "model_of", "read_history",
           "register"]

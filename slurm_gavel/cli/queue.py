"""`slurm-gavel queue` (also `gqueue`): the scheduler's view of every job, squeue-style.

It only reads the daemon's SQLite store (the rows are `daemon.views.rows`) (while the daemon writes to it):
per job its GPU type now, its target share per type (its row of the
allocation X), the time it has received per type, its priority, the rounds
it ran, and why it waits, in words.  `--cluster` summarizes per GPU type.
ST is what Slurm really does: R only for a job Slurm runs, S for one released
but not started yet, W for one the daemon holds back (REASON says why: Slurm's
pending reason, its backoff), PD otherwise; BUSY and UTIL count only GPUs that
Slurm runs jobs on.

Names, users, accounts, models and reasons come from users: every string is passed
through `core.display.clean` before it is printed, in the table and in ``--json``
(control and bidi characters escaped visibly, e.g. ``\\x1b``; an infinite priority
is the string ``"inf"``, so the JSON is strict JSON).
"""
from __future__ import annotations

import argparse
from typing import Sequence

from ..core.display import clean
from ..core.errors import GavelError, InputError
from ..daemon.views import DEPARTED, SHADOW, cluster_rows, rows
from .common import (EXIT_INPUT, add_database_arguments, add_json_argument, align, dumps, fail,
                     hours, job_ids, reading)

COLUMNS = {
    "jobid": "JOBID", "user": "USER", "name": "NAME", "st": "ST", "type": "TYPE",
    "shape": "SHAPE", "share": "SHARE", "time": "TIME", "priority": "PRIORITY", "rounds": "ROUNDS",
    "progress": "STEPS", "reason": "REASON",
    # optional (-o): what the policy was told each type runs the job at, and where from
    "throughput": "STEPS/S", "estimate": "ESTIMATE",
    "types": "TYPES",      # the GPU types it may run on (types=, sbatch -p, what fits it)
    "finish": "FINISH",    # estimated time to its last step at its shares; ~ a guess in it
    "level": "LEVEL",      # where its share came from: its user's share split over their jobs
}
KIND_MARK = {"measured": "", "learned": "~", "hint": "h", "reference": "r", "fingerprint": "f",
             "explore": "?", "mean": "?", "default": "?"}
DEFAULT_FORMAT = "jobid,user,name,st,type,shape,share,time,priority,rounds,progress,reason"


def _number(v) -> str:
    """A number of a `clean`ed row: "inf" is already a string there."""
    return "-" if v is None else (v if isinstance(v, str) else f"{v:.3g}")


def _cell(row: dict, key: str, worker_types: list[str]) -> str:
    v = row.get(key)
    if key == "share":
        text = "/".join(f"{v[t]:.2f}" for t in worker_types)
        return text + ("*" if row["interim_share"] else "")
    if key == "time":
        return "/".join(hours(v[t]) for t in worker_types)
    if key == "progress":
        done, total = row["steps_done"], row["steps"]
        if done is None:
            return "-"
        return f"{done:.0f}/{total:.0f}" if total else f"{done:.0f}"
    if key == "throughput":
        # the number, marked by where it comes from: nothing = measured, ~ learned from
        # jobs of the same model, h hint, r reference table, f fingerprint, ? a guess
        return "/".join(f"{_number(v[t]['steps_per_second'])}{KIND_MARK.get(v[t]['kind'], '?')}"
                        if t in v else "-" for t in worker_types) if v else "-"
    if key == "finish":
        seconds = row.get("finish_seconds")
        if seconds is None:
            return "-"
        return hours(seconds) + ("~" if row.get("finish_is_guess") else "")
    if key == "priority":
        return _number(v)
    if key == "types":
        return ",".join(v) if v else "any"
    if key == "shape":
        return f"{v['nodes']}x{v['gpus_per_node']}" if v else "-"
    if v is None or v == "":
        return "-"          # keeps the columns aligned for `awk` and friends
    return str(v)


def table(data: list[dict], worker_types: list[str], fmt: str) -> str:
    keys = [k.strip().lower() for k in fmt.split(",") if k.strip()]
    for k in keys:
        if k not in COLUMNS:
            raise InputError("-o", f"unknown column {k!r} (columns: {', '.join(COLUMNS)})")
    header = [COLUMNS[k] + (f"({'/'.join(worker_types)})" if k in ("share", "time", "throughput") else "")
              for k in keys]
    body = [[_cell(r, k, worker_types) for k in keys] for r in data]
    return "\n".join(align([header] + body))


def cluster_table(data: list[dict]) -> str:
    header = ["TYPE", "GPUS", "BUSY", "GAVEL_SHARE", "UTIL"]
    body = [[r["worker_type"], str(r["gpus"]), str(r["busy"]), f"{r['gavel_share']:.2f}",
             f"{r['utilization']:.0%}"] for r in data]
    return "\n".join(align([header] + body))


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_database_arguments(p)
    p.add_argument("-u", "--user", action="append", default=[], metavar="USER", help="only these users")
    p.add_argument("-p", "--partition", action="append", default=[], metavar="TYPE",
                   help="only jobs running on this GPU type")
    p.add_argument("-j", "--jobs", action="append", default=[], metavar="ID[,ID]", help="only these jobs")
    p.add_argument("-o", "--format", default=DEFAULT_FORMAT, metavar="COLS",
                   help=f"columns (default: {DEFAULT_FORMAT}; also: throughput, estimate, types, finish)")
    p.add_argument("-t", "--states", default="active", metavar="STATE[,STATE]",
                   help="jobs in these states (default: active; also completed, failed, "
                        "cancelled, node_fail, timeout, preempted, lost, or all)")
    add_json_argument(p)
    p.add_argument("--cluster", action="store_true", help="per GPU type: GPUs, busy, share, utilization")
    p.add_argument("--explain", action="store_true",
                   help="with -j JOB: its share per type, what it received, what it needs to run "
                        "next round (as `slurm-gavel explain JOB`)")


def run(args) -> int:
    if getattr(args, "explain", False):
        ids = job_ids(args.jobs)
        if len(ids) != 1:
            raise InputError("--explain", "give one job: gqueue -j JOB --explain")
        from .explain import run as explain
        return explain(args, ids[0])
    with reading(args) as store:
        if args.cluster:
            data = clean(cluster_rows(store))
            if store.shadow():
                print(dumps({"shadow_mode": SHADOW, "types": data}) if args.json
                      else "# " + SHADOW + "\n" + cluster_table(data))
                return 0
            print(dumps(data) if args.json else cluster_table(data))
            return 0
        ids = job_ids(args.jobs)
        data, worker_types = clean(rows(store, args.user, args.partition, ids, _states(args.states)))
        shadow = store.shadow()
        if args.json:
            print(dumps({"worker_types": worker_types, "jobs": data,
                         **({"shadow_mode": SHADOW} if shadow else {})}))
        else:
            print(("# " + SHADOW + "\n" if shadow else "") + table(data, worker_types, args.format))
        return 0


def _states(text: str) -> tuple[str, ...]:
    wanted = [s.strip().lower() for s in (text or "").split(",") if s.strip()]
    known = ("active", *DEPARTED)
    if "all" in wanted:
        return known
    bad = [s for s in wanted if s not in known]
    if bad or not wanted:
        raise InputError("--states", f"unknown state {', '.join(bad) or '(none)'!r} "
                                     f"(states: {', '.join(known)}, all)")
    return tuple(wanted)


def main(argv: Sequence[str] | None = None) -> int:
    """`gqueue`: the same as `slurm-gavel queue`."""
    parser = argparse.ArgumentParser(prog="gqueue", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except GavelError as e:
        fail(e, "gqueue")
        return EXIT_INPUT       # gqueue has always said every error with 2 (scripts test it)


__all__ = ["DEFAULT_FORMAT", "add_arguments", "cluster_table", "main", "run", "table"]

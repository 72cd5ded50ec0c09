"""`slurm-gavel explain JOB` (also `gqueue -j JOB --explain`): one job, from the database.

Its share per GPU type in the allocation in force and the time that share asks for
since the job arrived, next to what it received per type; its state, priority and why
it waits; and what it would need to run next round: a free GPU of a type it has a share
on, or a priority above the lowest of the jobs running on such a type (priorities are
share / time received since the last reset, so a waiting job's rises every round).
Strings pass through `core.display.clean`; `--json` is strict JSON.
"""
from __future__ import annotations

import argparse
import math
import sys

from ..core.display import clean
from ..core.errors import InputError
from .queue import _hours, add_database_arguments, dumps, reading
from ..daemon.store import SqliteStore


def _num(p) -> str:
    if p is None:
        return "-"
    if isinstance(p, str):
        return p
    return "inf" if math.isinf(p) else f"{p:.3g}"


def explain(store: SqliteStore, job: str) -> dict:
    found = [j for j in store.jobs(("active", "completed", "failed", "cancelled", "node_fail",
                                    "timeout", "preempted", "lost")) if j["id"] == job]
    if not found:
        raise InputError("JOB", f"job {job} is not in the database {store.path}")
    j = found[0]
    _, shares = store.latest_allocation()
    times = store.job_time([job]).get(job, {})
    status = store.status_rows()
    mine = status.get(job, {})
    share = shares.get(job, {})
    now = max([r["time"] for r in status.values() if r.get("time")] + [j["last_seen"] or 0])
    elapsed = max(0.0, now - (j["first_seen"] or now))
    servers = store.servers()
    # gqueue's order of the types: the cluster's, then any the job has time on
    types = list(dict.fromkeys([s["worker_type"] for s in servers if s["worker_type"] in share]
                               + sorted(share) + sorted(times)))
    per_type = [{"worker_type": wt, "share": share.get(wt, 0.0),
                 "target_seconds": share.get(wt, 0.0) * elapsed, "received_seconds": times.get(wt, 0.0)}
                for wt in types]
    gpus = {}
    for s in servers:
        gpus[s["worker_type"]] = gpus.get(s["worker_type"], 0) + s["gpus"]
    busy, lowest = {}, {}
    for other, r in status.items():
        if r.get("state") == "R" and r.get("worker_type"):
            wt = r["worker_type"]
            busy[wt] = busy.get(wt, 0) + (r.get("gpus") or 0)
            if other != job and r.get("priority") is not None:
                lowest[wt] = min(lowest.get(wt, math.inf), r["priority"])
    size = j["scale_factor"] or 1
    state = mine.get("state") or ("R" if mine.get("worker_type") else "PD")
    if j["state"] != "active":
        needs = f"nothing: it left ({j['state']})"
    elif state == "R":
        needs = f"nothing: it runs on {mine.get('worker_type')}"
    elif state == "W":
        needs = f"the daemon holds it back: {mine.get('reason')}"
    elif not any(v > 0 for v in share.values()):
        needs = "a share: the allocation in force gives it no GPU time now (it waits for a new solve)"
    else:
        options = []
        for wt, x in share.items():
            if x <= 0:
                continue
            free = gpus.get(wt, 0) - busy.get(wt, 0)
            if free >= size:
                options.append(f"{wt}: {free} GPUs free, it should start there next round")
            elif wt in lowest:
                options.append(f"{wt}: a priority above {_num(lowest[wt])} (the lowest of the jobs "
                               f"running there; its own is {_num(mine.get('priority'))})")
            else:
                options.append(f"{wt}: {size} free GPUs ({max(free, 0)} free now)")
        needs = "; or ".join(options)
    return {"jobid": job, "user": j["user"], "name": j["name"], "model": j["model"], "gpus": size,
            "state": state if j["state"] == "active" else j["state"],
            "worker_type": mine.get("worker_type"), "priority": mine.get("priority"),
            "reason": mine.get("reason") or "", "arrived": j["first_seen"],
            "elapsed_seconds": elapsed, "types": per_type, "needs": needs,
            # the GPU types it may run on (types=, sbatch -p, what fits it); None: any
            "may_run_on": j["types"].split(",") if j.get("types") else None}


def text(e: dict) -> str:
    lines = [f"job {e['jobid']} ({e['name']}, user {e['user']}, model {e['model']}, {e['gpus']} GPU"
             f"{'s' if e['gpus'] != 1 else ''}): {e['state']}"
             + (f" on {e['worker_type']}" if e["worker_type"] and e["state"] == "R" else ""),
             f"  priority {_num(e['priority'])}" + (f"; {e['reason']}" if e["reason"] else ""),
             f"  since it arrived ({_hours(e['elapsed_seconds'])} ago), per GPU type:"]
    if e.get("may_run_on"):
        lines.insert(2, f"  may run on {', '.join(e['may_run_on'])} only")
    for t in e["types"]:
        lines.append(f"    {t['worker_type']:<8} share {t['share']:.2f}  asks {_hours(t['target_seconds'])}"
                     f"  received {_hours(t['received_seconds'])}")
    if not e["types"]:
        lines.append("    (no share and no time yet)")
    lines.append(f"  to run next round it needs: {e['needs']}")
    return "\n".join(lines)


def register(commands) -> argparse.ArgumentParser:
    p = commands.add_parser("explain", help="one job: its share per type, what it received, "
                                            "what it needs to run next round",
                            description=__doc__.splitlines()[0])
    p.add_argument("job", metavar="JOB", help="the Slurm job id")
    add_database_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=run)
    return p


def run(args, job: str | None = None) -> int:
    with reading(args) as store:
        data = clean(explain(store, job or args.job))
    print(dumps(data) if args.json else text(data))
    return 0


__all__ = ["explain", "register", "run", "text"]

"""`slurm-gavel queue` (also `gqueue`): the scheduler's view of every job, squeue-style.

It only reads the daemon's SQLite store (while the daemon writes to it):
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
import json
import sys
from contextlib import contextmanager
from typing import Iterator, Sequence

from ..core.display import clean
from ..core.errors import GavelError, InputError
from ..daemon.store import SqliteStore

COLUMNS = {
    "jobid": "JOBID", "user": "USER", "name": "NAME", "st": "ST", "type": "TYPE",
    "shape": "SHAPE", "share": "SHARE", "time": "TIME", "priority": "PRIORITY", "rounds": "ROUNDS",
    "progress": "STEPS", "reason": "REASON",
    # optional (-o): what the policy was told each type runs the job at, and where from
    "throughput": "STEPS/S", "estimate": "ESTIMATE",
    "types": "TYPES",      # the GPU types it may run on (types=, sbatch -p, what fits it)
}
KIND_MARK = {"measured": "", "learned": "~", "hint": "h", "reference": "r", "fingerprint": "f",
             "explore": "?", "mean": "?", "default": "?"}
DEFAULT_FORMAT = "jobid,user,name,st,type,shape,share,time,priority,rounds,progress,reason"
# How a job left, in the ST column (`--states`); its REASON is what Slurm said of its end.
# A shadow database (the daemon ran with --dry-run): said above the table, in the JSON,
# and as the ST of every job the plan placed.
SHADOW = "shadow mode (--dry-run): planned, not done"
PLANNED = "PLAN"
DEPARTED = {"completed": "CD", "failed": "F", "cancelled": "CA", "node_fail": "NF",
            "timeout": "TO", "preempted": "PR", "lost": "LOST"}


def _hours(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}"


def rows(store: SqliteStore, users=(), types=(), job_ids=(),
         states=("active",)) -> tuple[list[dict], list[str]]:
    """One dict per job in `states` (default: the active ones), with everything the table
    shows; and the worker types."""
    jobs = store.jobs(states)
    ended = store.departure_details() if set(states) - {"active"} else {}
    meta, shares = store.latest_allocation()
    times = store.job_time()
    status = store.status_rows()
    rounds = store.rounds_of()
    servers = store.servers()
    worker_types = list(dict.fromkeys([s["worker_type"] for s in servers]
                                      + [wt for t in shares.values() for wt in t]
                                      + [wt for t in times.values() for wt in t]))
    interim = set(meta["interim_jobs"]) if meta else set()
    shadow = store.shadow()
    placed = store.last_placement()
    estimates: dict[str, dict[str, dict]] = {}
    for e in store.throughput_estimates(active_only=False):
        estimates.setdefault(e["job"], {})[e["worker_type"]] = e
    out = []
    for j in jobs:
        st = status.get(j["id"], {})
        wt = st.get("worker_type")
        if users and j["user"] not in users:
            continue
        if types and wt not in types:
            continue
        if job_ids and j["id"] not in job_ids:
            continue
        reason = st.get("reason") if st else "not yet scheduled (waiting for the next round)"
        if j["state"] != "active":
            wt, reason = None, ended.get(j["id"], j["state"])
        state = (DEPARTED.get(j["state"], j["state"]) if j["state"] != "active"
                 else st.get("state") or ("R" if wt else "PD"))
        if shadow and j["state"] == "active" and wt and state != "R":
            # --dry-run released nothing: a placed job is a plan, never R (nor S, "released")
            state, reason = PLANNED, f"{SHADOW}: on {wt}"
        shape = None
        if j["state"] == "active" and wt:
            # running: where Slurm runs it (a job the plan moves runs there until it stops);
            # else where the last round placed it
            running = state == "R" and st.get("nodes")
            shape = _shape({"worker_type": wt, "nodes": st["nodes"], "gpus": st.get("gpus")}
                           if running else placed.get(j["id"]))
        est = estimates.get(j["id"], {})
        first = next(iter(est.values()), {})          # phase and proxy are per job
        phase, proxy = first.get("phase"), first.get("proxy")
        out.append({
            "jobid": j["id"], "user": j["user"], "name": j["name"], "account": j["account"],
            "model": j["model"], "gpus": j["scale_factor"], "weight": j["weight"],
            "st": state,
            "state": j["state"], "finished": j.get("finished"), "type": wt,
            "shape": shape,
            "share": {t: shares.get(j["id"], {}).get(t, 0.0) for t in worker_types},
            "interim_share": j["id"] in interim,
            "time": {t: times.get(j["id"], {}).get(t, 0.0) for t in worker_types},
            "priority": st.get("priority"), "rounds": rounds.get(j["id"], 0),
            "steps_done": j.get("steps_done"), "steps": j.get("steps"),
            "reason": reason or "",
            "throughput": {t: {"steps_per_second": est[t]["steps_per_second"], "kind": est[t]["kind"],
                               "confidence": est[t]["confidence"]} for t in worker_types if t in est},
            "estimate": (f"{phase} (like {proxy})" if phase == "fingerprint" and proxy else phase),
            "types": j["types"].split(",") if j.get("types") else None,     # None: any
        })
    return out, worker_types


def _shape(placement: dict | None) -> dict | None:
    """Where the last round put the job: nodes x GPUs per node on a type (a distributed job
    holds as many GPUs on each of its nodes; the backend starts it exactly so)."""
    if not placement or not placement.get("nodes"):
        return None
    nodes = placement["nodes"].split(",")
    return {"worker_type": placement["worker_type"], "nodes": len(nodes), "node_list": nodes,
            "gpus_per_node": (placement["gpus"] or 0) // len(nodes)}


def cluster_rows(store: SqliteStore) -> list[dict]:
    """Per GPU type: GPUs the scheduler may use, busy, the allocation's share, utilization."""
    servers = store.servers()
    _, shares = store.latest_allocation()
    status = store.status_rows()
    slurm_states = any(r.get("state") for r in status.values())
    placed = store.last_placement()     # for a store without Slurm states (a simulation's)
    sf = {j["id"]: j["scale_factor"] or 1 for j in store.jobs()}
    out = []
    for wt in dict.fromkeys(s["worker_type"] for s in servers):
        gpus = sum(s["gpus"] for s in servers if s["worker_type"] == wt)
        # only what Slurm runs: a job planned (released) but not started holds nothing
        if slurm_states:
            busy = sum(r["gpus"] or 0 for r in status.values()
                       if r.get("state") == "R" and r["worker_type"] == wt)
        else:
            busy = sum(p["gpus"] for p in placed.values() if p["worker_type"] == wt)
        wanted = sum(share.get(wt, 0.0) * sf.get(job, 1) for job, share in shares.items())
        out.append({"worker_type": wt, "gpus": gpus, "busy": busy, "gavel_share": wanted,
                    "utilization": busy / gpus if gpus else 0.0})
    return out


def _number(v) -> str:
    """A number of a `clean`ed row: "inf" is already a string there."""
    return "-" if v is None else (v if isinstance(v, str) else f"{v:.3g}")


def _cell(row: dict, key: str, worker_types: list[str]) -> str:
    v = row.get(key)
    if key == "share":
        text = "/".join(f"{v[t]:.2f}" for t in worker_types)
        return text + ("*" if row["interim_share"] else "")
    if key == "time":
        return "/".join(_hours(v[t]) for t in worker_types)
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
    widths = [max(len(x) for x in col) for col in zip(header, *body)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [header] + body]
    return "\n".join(lines)


def cluster_table(data: list[dict]) -> str:
    header = ["TYPE", "GPUS", "BUSY", "GAVEL_SHARE", "UTIL"]
    body = [[r["worker_type"], str(r["gpus"]), str(r["busy"]), f"{r['gavel_share']:.2f}",
             f"{r['utilization']:.0%}"] for r in data]
    widths = [max(len(x) for x in col) for col in zip(header, *body)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip()
                     for line in [header] + body)


def add_config_argument(p: argparse.ArgumentParser) -> None:
    """`--config FILE`: the daemon's gavel.toml (read by `config_path`)."""
    p.add_argument("--config", metavar="FILE", help="the daemon's config (default: /etc/slurm/gavel.toml)")


def add_database_arguments(p: argparse.ArgumentParser) -> None:
    """`--db PATH` and `--config FILE`: where a command finds the daemon's database
    (`database_path`); every command that reads it takes these two."""
    p.add_argument("--db", metavar="PATH", help="the daemon's database (default: from --config)")
    add_config_argument(p)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_database_arguments(p)
    p.add_argument("-u", "--user", action="append", default=[], metavar="USER", help="only these users")
    p.add_argument("-p", "--partition", action="append", default=[], metavar="TYPE",
                   help="only jobs running on this GPU type")
    p.add_argument("-j", "--jobs", action="append", default=[], metavar="ID[,ID]", help="only these jobs")
    p.add_argument("-o", "--format", default=DEFAULT_FORMAT, metavar="COLS",
                   help=f"columns (default: {DEFAULT_FORMAT}; also: throughput, estimate)")
    p.add_argument("-t", "--states", default="active", metavar="STATE[,STATE]",
                   help="jobs in these states (default: active; also completed, failed, "
                        "cancelled, node_fail, timeout, preempted, lost, or all)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--cluster", action="store_true", help="per GPU type: GPUs, busy, share, utilization")
    p.add_argument("--explain", action="store_true",
                   help="with -j JOB: its share per type, what it received, what it needs to run "
                        "next round (as `slurm-gavel explain JOB`)")


def config_path(args) -> str | None:
    """--config, else /etc/slurm/gavel.toml where it exists, else None (the built-in defaults)."""
    import os
    from ..daemon import config as config_mod
    return args.config or (config_mod.DEFAULT_PATH if os.path.exists(config_mod.DEFAULT_PATH) else None)


def database_path(args) -> str:
    """--db, else the database of the config `config_path` finds."""
    if args.db:
        return args.db
    from ..daemon import config as config_mod
    return config_mod.load(config_path(args)).database


@contextmanager
def reading(args, path: str | None = None) -> Iterator[SqliteStore]:
    """The daemon's database (`path`, else `database_path(args)`) opened read-only, closed
    when the block ends."""
    store = SqliteStore(path or database_path(args), readonly=True)
    try:
        yield store
    finally:
        store.close()


def job_ids(values: Sequence[str]) -> list[str]:
    """The job ids of repeated `-j ID[,ID]` options, in order."""
    return [i for item in values for i in item.split(",") if i]


def dumps(data) -> str:
    """`data` (already `clean`ed: no raw control characters, no inf) as strict JSON."""
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False, default=lambda v: None)


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
        print(f"gqueue: error: {e}", file=sys.stderr)
        return 2


__all__ = ["add_arguments", "add_config_argument", "add_database_arguments", "cluster_rows", "config_path",
           "database_path", "job_ids", "main", "reading", "rows", "run", "table"]

"""`slurm-gavel events [-j JOB] [--since TIME] [--json]`: what happened to jobs, in words.

It reads the events the daemon records in its database (the `events` table, oldest
first): a job submitted (first seen), started on a GPU type with its partition, nodes,
share and priority, preempted for another job (the two priorities), an action Slurm
refused (Slurm's message), released but not started, lost with a node, and how it
ended.  The daemon's own Slurm commands (`action` events) are shown with `--actions`.
Like `gqueue`: a table, or `--json` (strict JSON); every string passes through
`core.display.clean` (details may quote Slurm, which may quote users).
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import datetime

from ..core.display import clean
from ..core.errors import InputError
from .queue import add_database_arguments, dumps, job_ids, reading
from ..daemon.store import SqliteStore

ENDED = {"completed": "finished", "failed": "failed", "cancelled": "cancelled",
         "timeout": "hit its time limit", "node_fail": "ended with its node failing",
         "preempted": "preempted by Slurm", "lost": "lost"}
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def words(kind: str, detail: str | None) -> str:
    """An event as a sentence fragment (`detail` is already cleaned or Slurm's/ours)."""
    d = detail or ""
    if kind == "arrival":
        return f"submitted (model {d})" if d else "submitted"
    if kind == "start":
        return f"started {d}"
    if kind == "preempt":
        return f"preempted {d}"
    if kind == "action_failed":
        what, _, why = d.partition(": ")
        return (f"failed to {what}: {why}" if why else f"an action failed: {d}")
    if kind == "stuck":
        return f"released but Slurm did not start it ({d})"
    if kind == "start_taken":
        return f"start taken back: {d}; planned again at once"
    if kind == "lost_with_node":
        return f"lost with node {d}: waits until the node is back"
    if kind == "action":
        return f"daemon asked Slurm to {d}"
    if kind == "dry_run":
        return f"would {d} (dry run: not done)"
    if kind in ENDED:
        return f"{ENDED[kind]}: {d}" if d else ENDED[kind]
    return f"{kind}: {d}" if d else kind


def since_time(text: str | None, now: float | None = None) -> float | None:
    """--since: '30m', '2h', '1d' ago, an ISO date/time (local time), or epoch seconds."""
    if text is None:
        return None
    text = text.strip()
    m = _RELATIVE.match(text)
    if m:
        return (now if now is not None else time.time()) - float(m.group(1)) * _UNIT[m.group(2)]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise InputError("--since", f"not a time: {text!r} (e.g. 30m, 2h, 1d, "
                                    f"2026-12-01 14:00, or epoch seconds)") from None


def rows(store: SqliteStore, jobs=(), since: float | None = None, actions: bool = False) -> list[dict]:
    out = []
    for e in store.events(jobs, since):
        if e["kind"] == "action" and not actions:
            continue
        out.append({"time": e["time"],
                    "at": datetime.fromtimestamp(e["time"]).isoformat(sep=" ", timespec="seconds"),
                    "job": e["job"], "kind": e["kind"], "detail": e["detail"],
                    "event": words(e["kind"], e["detail"])})
    return out


def table(data: list[dict]) -> str:
    header = ["TIME", "JOB", "EVENT"]
    body = [[r["at"], r["job"] or "-", r["event"]] for r in data]
    widths = [max(len(x) for x in col) for col in zip(header, *body)][:2]
    return "\n".join("  ".join([line[0].ljust(widths[0]), line[1].ljust(widths[1]), line[2]]).rstrip()
                     for line in [header] + body)


def register(commands) -> argparse.ArgumentParser:
    p = commands.add_parser(
        "events", help="what happened to jobs, in words (from the daemon's database)",
        description="Each job's history as the daemon recorded it: submitted, started on a GPU "
                    "type (partition, nodes, share, priority), preempted for another job, "
                    "refused by Slurm, finished.")
    add_database_arguments(p)
    p.add_argument("-j", "--jobs", action="append", default=[], metavar="ID[,ID]", help="only these jobs")
    p.add_argument("--since", metavar="TIME", help="from TIME on: 30m, 2h, 1d (ago), an ISO "
                                                   "date/time, or epoch seconds")
    p.add_argument("--actions", action="store_true", help="also the daemon's Slurm commands")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_events)
    return p


def cmd_events(args) -> int:
    since = since_time(args.since)
    with reading(args) as store:
        data = clean(rows(store, job_ids(args.jobs), since, args.actions))
    print(dumps({"events": data}) if args.json else table(data))
    return 0


__all__ = ["register", "rows", "since_time", "table", "words"]

"""`slurm-gavel events [-j JOB] [--since TIME] [--json]`: what happened to jobs, in words.

It reads (`daemon.views.events`) the events the daemon records in its database (the `events` table, oldest
first): a job submitted (first seen), started on a GPU type with its partition, nodes,
share and priority, preempted for another job (the two priorities), an action Slurm
refused (Slurm's message), released but not started (held again after a timeout, or taken
back by the next round: `take_back`), lost with a node, and how it
ended.  The daemon's own Slurm commands (`action` events) are shown with `--actions`.
Like `gqueue`: a table, or `--json` (strict JSON); every string passes through
`core.display.clean` (details may quote Slurm, which may quote users).
"""
from __future__ import annotations

import argparse
import re
import time
from datetime import datetime

from ..core.display import clean
from ..core.errors import InputError
from ..daemon.views import events
from .common import add_database_arguments, add_json_argument, align, dumps, job_ids, reading

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


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


def table(data: list[dict]) -> str:
    header = ["TIME", "JOB", "EVENT"]
    body = [[r["at"], r["job"] or "-", r["event"]] for r in data]
    return "\n".join(align([header] + body))


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
    add_json_argument(p)
    p.set_defaults(handler=cmd_events)
    return p


def cmd_events(args) -> int:
    since = since_time(args.since)
    with reading(args) as store:
        data = clean(events(store, job_ids(args.jobs), since, args.actions))
    print(dumps({"events": data}) if args.json else table(data))
    return 0


__all__ = ["register", "since_time", "table"]

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

from ..core.display import clean
from ..daemon.views import explain, number
from .common import add_database_arguments, add_json_argument, dumps, hours, reading


def text(e: dict) -> str:
    lines = [f"job {e['jobid']} ({e['name']}, user {e['user']}, model {e['model']}, {e['gpus']} GPU"
             f"{'s' if e['gpus'] != 1 else ''}): {e['state']}"
             + (f" on {e['worker_type']}" if e["worker_type"] and e["state"] == "R" else ""),
             f"  priority {number(e['priority'])}" + (f"; {e['reason']}" if e["reason"] else ""),
             f"  since it arrived ({hours(e['elapsed_seconds'])} ago), per GPU type:"]
    if e.get("may_run_on"):
        lines.insert(2, f"  may run on {', '.join(e['may_run_on'])} only")
    for t in e["types"]:
        lines.append(f"    {t['worker_type']:<8} share {t['share']:.2f}  asks {hours(t['target_seconds'])}"
                     f"  received {hours(t['received_seconds'])}")
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
    add_json_argument(p)
    p.set_defaults(handler=run)
    return p


def run(args, job: str | None = None) -> int:
    with reading(args) as store:
        data = clean(explain(store, job or args.job))
    print(dumps(data) if args.json else text(data))
    return 0


__all__ = ["register", "run", "text"]

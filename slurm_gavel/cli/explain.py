"""`slurm-gavel explain JOB` (also `gqueue -j JOB --explain`): one job, from the database.

Its share per GPU type in the allocation in force and the time that share asks for
since the job arrived, next to what it received per type and its speed there (measured,
or where the estimate comes from: a guess is said to be one); its steps, estimated finish
and preemptions; its state, priority and why
it waits; and what it would need to run next round: a free GPU of a type it has a share
on, or a priority above the lowest of the jobs running on such a type (priorities are
the ones the next round picks by: share / time received since the last reset, less what
was owed before it, a running job's lease counted; a waiting job's rises every round);
and where its share came from (its user's share split over the user's jobs, or its own).
Strings pass through `core.display.clean`; `--json` is strict JSON.
"""
from __future__ import annotations

import argparse

from ..core.display import clean
from ..daemon.views import explain, number
from .common import add_database_arguments, add_json_argument, dumps, hours, reading


SOURCE_WORDS = {"measured": "measured", "learned": "learned from its model's jobs",
                "hint": "the user's hint", "reference": "reference table",
                "fingerprint": "like a similar job", "guess": "guess"}


def _speed(t: dict) -> str:
    if t.get("steps_per_second") is None:
        return ""
    return (f"  {t['steps_per_second']:.3g} steps/s "
            f"({SOURCE_WORDS.get(t.get('source'), 'guess')})")


def text(e: dict) -> str:
    lines = [f"job {e['jobid']} ({e['name']}, user {e['user']}, model {e['model']}, {e['gpus']} GPU"
             f"{'s' if e['gpus'] != 1 else ''}): {e['state']}"
             + (f" on {e['worker_type']}" if e["worker_type"] and e["state"] == "R" else ""),
             f"  priority {number(e['priority'])}" + (f"; {e['reason']}" if e["reason"] else "")]
    if e.get("share_from"):
        lines.append(f"  share: {e['share_from']}")
    if e.get("may_run_on"):
        lines.append(f"  may run on {', '.join(e['may_run_on'])} only")
    if e.get("steps_done") is not None:
        progress = f"  steps {e['steps_done']:.0f}"
        if e.get("steps"):
            progress += f"/{e['steps']:.0f} ({100 * e['steps_done'] / e['steps']:.0f}%)"
        if e.get("finish_seconds") is not None:
            progress += (f"; estimated finish in {hours(e['finish_seconds'])} at its shares"
                         + (" (a guess: some speeds are not measured)"
                            if e.get("finish_is_guess") else ""))
        lines.append(progress)
    if e.get("preemptions") or e.get("lost_seconds"):
        line = f"  preempted {e.get('preemptions') or 0} time{'s' if e.get('preemptions') != 1 else ''}"
        if e.get("lost_seconds") is not None:
            line += (f"; {hours(e['lost_seconds'])} lost to it (saving checkpoints, restarting and "
                     "loading them, as the job reports)")
        lines.append(line)
    arrived = (f"  arrived {hours(e['ago_seconds'])} ago; " if e.get("ago_seconds") is not None
               else "  ")
    lines.append(f"{arrived}over its {hours(e['elapsed_seconds'])} in the system up to the last "
                 "round, per GPU type:")
    for t in e["types"]:
        lines.append(f"    {t['worker_type']:<8} share {t['share']:.2f}  asks {hours(t['target_seconds'])}"
                     f"  received {hours(t['received_seconds'])}{_speed(t)}")
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

"""`slurm-gavel check-job SCRIPT`: try a job script's preemption before submitting it
(`slurm.checkjob`: two runs as a preempted and requeued gavel job, outside Slurm)."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..core.display import clean
from ..core.errors import InputError
from ..slurm.checkjob import Options, check_job
from .common import add_json_argument, print_json

EXIT_PROBLEM = 1


def register(commands) -> argparse.ArgumentParser:
    p = commands.add_parser(
        "check-job", help="run a job script for a few steps, preempt it, and say whether it "
                          "saved, exited and resumed as a gavel job must",
        description="Run SCRIPT here (not through Slurm) as a gavel job: with SLURM_JOB_ID and "
                    "its own checkpoint and progress directories. When it has trained a few "
                    "steps, send its process the preemption signal, as the daemon does: it "
                    "must save a checkpoint and exit 85. Then run it again as the requeued job: "
                    "it must resume at the saved step. No process it started may be left. "
                    "Exit 0 when all is right, 1 when something is not.")
    p.add_argument("script", metavar="SCRIPT", help="the sbatch script (runs with its #! line)")
    p.add_argument("--signal", default="USR2", help="preemption signal (default USR2, the "
                                                    "daemon's default)")
    p.add_argument("--steps", type=int, default=3, metavar="N",
                   help="trained steps to wait for before the signal (default 3)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                   help="time allowed to reach those steps (default 300)")
    p.add_argument("--keep", action="store_true",
                   help="keep the working directory (checkpoints, progress, the job's log)")
    add_json_argument(p)
    p.set_defaults(handler=cmd_check_job)
    return p


def cmd_check_job(args) -> int:
    script = Path(args.script)
    if not script.is_file():
        raise InputError("SCRIPT", f"{clean(str(script))} is not a file")
    if args.steps < 1 or args.timeout <= 0:
        raise InputError("--steps/--timeout", "must be positive")
    from ..slurm.commands import SIGNALS
    name = args.signal.upper().removeprefix("SIG")
    if name not in SIGNALS:
        raise InputError("--signal", f"{clean(args.signal)} is not one of {', '.join(SIGNALS)}")
    report = check_job(script, Options(signal=name, min_steps=args.steps,
                                       start_timeout=args.timeout, keep=args.keep))
    if args.json:
        print_json({"ok": report.ok,
                    "findings": [{"ok": f.ok, "text": f.text} for f in report.findings],
                    "log_tail": report.tail,
                    "directory": str(report.directory) if report.directory else None})
    else:
        for f in report.findings:
            print(f"{'ok     ' if f.ok else 'PROBLEM'}  {f.text}")
        if report.tail:
            print("the job's last lines:")
            print(report.tail)
        if report.directory:
            print(f"kept: {report.directory}")
        print("the script keeps the preemption protocol" if report.ok else
              "the script would lose work when preempted: see the problems above")
    return 0 if report.ok else EXIT_PROBLEM


__all__ = ["cmd_check_job", "register"]

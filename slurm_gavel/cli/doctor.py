"""`slurm-gavel doctor`: the cluster's Slurm configuration and gavel.toml against what the daemon needs.

The checks are `daemon.doctor.diagnose` (the daemon's files) and `slurm.doctor` (Slurm's
side); this prints their findings, one line each, or `--json`.  Exit code 1 when there
is an error.  It changes nothing.
"""
from __future__ import annotations

import argparse

from ..core.display import clean, printable
from ..daemon import config as config_mod
from ..daemon.doctor import diagnose
from .common import (EXIT_FAILED, EXIT_OK, add_config_argument, add_json_argument, align,
                     config_path, dumps)


def table(rows: list[dict]) -> str:
    cells = [[r["level"].upper(), r["check"], r["finding"] + (f" -- fix: {r['fix']}" if r["fix"] else "")]
             for r in rows]
    lines = align(cells, sep=" ", minimum={0: 8, 1: 17})
    errors = sum(r["level"] == "error" for r in rows)
    warnings = sum(r["level"] == "warning" for r in rows)
    lines.append(f"{errors} error(s), {warnings} warning(s)" if rows else "no finding: the configuration "
                 "is what slurm-gavel needs")
    return "\n".join(printable(line) for line in lines)


def register(commands) -> argparse.ArgumentParser:
    p = commands.add_parser(
        "doctor", help="check the cluster's Slurm configuration and gavel.toml against what the "
                       "daemon needs",
        description="Check slurm.conf (as slurmctld runs it), the nodes' GRES, job_submit.lua, "
                    "munge, gavel.toml, the database and the progress directory: one line per "
                    "finding with its fix. Exit code 1 when there is an error. Changes nothing.")
    add_config_argument(p)
    add_json_argument(p)
    p.set_defaults(handler=cmd_doctor)
    return p


def cmd_doctor(args) -> int:
    rows = clean(diagnose(config_mod.load(config_path(args))))
    errors = sum(r["level"] == "error" for r in rows)
    if args.json:
        print(dumps({"findings": rows, "errors": errors}))
    else:
        print(table(rows))
    return EXIT_FAILED if errors else EXIT_OK


__all__ = ["cmd_doctor", "register", "table"]

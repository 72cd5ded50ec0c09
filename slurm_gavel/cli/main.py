"""The `slurm-gavel` command: its parser (every subcommand, from the module that owns it) and `main`.

    slurm-gavel policies | solve | simulate | sweep | replay        (`policy`, `simulate`, `replay`)
    slurm-gavel daemon | queue | events | explain | doctor | backup | billing | release-all
    slurm-gavel throughputs | submit | check-job | run | cluster up|down|status

`main` runs the handler the subcommand set and turns what it raises into an exit code
(`common.exit_code`): 0 success, 1 the work failed (no optimal allocation, Slurm or the
database refused), 2 bad input or bad arguments (one line on stderr naming the field),
130 interrupted.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Sequence

from .. import __version__
from ..core.errors import GavelError, InputError
from .common import EXIT_INPUT, EXIT_OK, PROG, fail


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit 2), like every other input error."""

    def error(self, message: str):
        self.exit(EXIT_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# command -> the module of this folder whose register() adds it.  A command line names one
# command, and only that module is imported: the others' imports (the database layer, the
# Slurm driver) cost `simulate` about half a CPU second it does not need.
COMMAND_MODULES = {"policies": "policy", "solve": "policy", "simulate": "simulate", "sweep": "simulate",
                   "cluster": "cluster", "submit": "submit", "check-job": "checkjob", "run": "run",
                   "throughputs": "throughputs", "release-all": "undo", "events": "events",
                   "explain": "explain", "replay": "replay", "billing": "billing", "doctor": "doctor",
                   "backup": "backup"}
BUILTIN_COMMANDS = ("daemon", "queue")      # defined here
# the order of `slurm-gavel --help`
_ORDER = ("policy", "simulate", "daemon", "queue", "cluster", "submit", "checkjob", "run", "throughputs",
          "undo", "events", "explain", "replay", "billing", "doctor", "backup")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with `only` (a command's name) just that command's part."""
    parser = _Parser(prog=PROG, description="Heterogeneity-aware GPU scheduling policies "
                                            "(Gavel, OSDI '20) for Slurm clusters.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    wanted = set(_ORDER) if only is None else {COMMAND_MODULES.get(only, only)}
    for step in _ORDER:
        if step not in wanted:
            continue
        if step == "daemon":
            _add_daemon(commands)
        elif step == "queue":
            _add_queue(commands)
        else:
            importlib.import_module(f"{__package__}.{step}").register(commands)
    return parser


def _add_daemon(commands) -> None:
    daemon = commands.add_parser(
        "daemon", help="schedule a Slurm cluster (runs in the foreground; systemd starts it)",
        description="Read the Slurm queue, solve the policy, and start, keep or preempt gavel "
                    "jobs in rounds. Logs to stderr. SIGTERM stops it after the current step, "
                    "SIGHUP re-reads the configuration.")
    daemon.add_argument("--config", metavar="FILE",
                        help="configuration (default: /etc/slurm/gavel.toml if it exists)")
    daemon.add_argument("--dry-run", action="store_true",
                        help="shadow mode: compute and log every decision, change nothing in Slurm")
    daemon.add_argument("--max-rounds", type=int, metavar="N", help="stop after N rounds (tests)")
    daemon.add_argument("--accept-lost-rounds", action="store_true",
                        help="start on a database that holds fewer rounds than the daemon committed "
                             "(an older copy restored): afresh from the jobs Slurm has, not from its "
                             "saved plan")
    daemon.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    daemon.set_defaults(handler=cmd_daemon)


def _add_queue(commands) -> None:
    from .queue import add_arguments
    queue = commands.add_parser(
        "queue", help="the scheduler's view of the jobs (also installed as gqueue)",
        description="Every gavel job: GPU type now, target share per type, time received per "
                    "type, priority, rounds, and why it waits. Reads the daemon's database.")
    add_arguments(queue)
    queue.set_defaults(handler=cmd_queue)


def cmd_daemon(args) -> int:
    from ..daemon.daemon import main as daemon_main
    from .common import config_path

    if args.max_rounds is not None and args.max_rounds < 1:
        raise InputError("--max-rounds", f"must be >= 1, got {args.max_rounds}")
    return daemon_main(config_path(args), dry_run=args.dry_run, max_rounds=args.max_rounds,
                       log_level=args.log_level, accept_lost_rounds=args.accept_lost_rounds)


def cmd_queue(args) -> int:
    from .queue import run
    return run(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # a known command alone; anything else (--help, --version, a typo) sees every command
    parser = build_parser(only=argv[0] if argv and (argv[0] in COMMAND_MODULES
                                                    or argv[0] in BUILTIN_COMMANDS) else None)
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help, --version, usage errors
        code = done.code
        return code if isinstance(code, int) else (0 if code is None else EXIT_INPUT)
    try:
        return args.handler(args)
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): stop quietly, and keep Python's
        # final flush of stdout from failing again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except (GavelError, KeyboardInterrupt, OSError) as err:
        return fail(err)

if __name__ == "__main__":
    sys.exit(main())

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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Heterogeneity-aware GPU scheduling policies "
                                            "(Gavel, OSDI '20) for Slurm clusters.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    # the order of `slurm-gavel --help`
    from . import (backup, billing, checkjob, cluster, doctor, events, explain, policy, replay,
                   run, simulate, submit, throughputs, undo)
    policy.register(commands)
    simulate.register(commands)
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
    from .queue import add_arguments
    queue = commands.add_parser(
        "queue", help="the scheduler's view of the jobs (also installed as gqueue)",
        description="Every gavel job: GPU type now, target share per type, time received per "
                    "type, priority, rounds, and why it waits. Reads the daemon's database.")
    add_arguments(queue)
    queue.set_defaults(handler=cmd_queue)
    cluster.register(commands)
    submit.register(commands)
    checkjob.register(commands)
    run.register(commands)
    throughputs.register(commands)
    undo.register(commands)
    events.register(commands)
    explain.register(commands)
    replay.register(commands)
    billing.register(commands)
    doctor.register(commands)
    backup.register(commands)
    return parser


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
    parser = build_parser()
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

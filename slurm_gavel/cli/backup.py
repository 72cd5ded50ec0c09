"""`slurm-gavel backup DEST`: a consistent copy of the daemon's database, while it runs (`daemon.backup`)."""
from __future__ import annotations

import argparse

from ..daemon.backup import backup
from .common import add_database_arguments, database_path


def register(commands) -> argparse.ArgumentParser:
    p = commands.add_parser(
        "backup", help="a consistent copy of the daemon's database (also while it runs)",
        description="Copy the daemon's SQLite database to DEST with SQLite's online backup: "
                    "one committed state, also while the daemon runs. Run it before an upgrade "
                    "(schema migrations are automatic and one-way).")
    p.add_argument("dest", metavar="DEST", help="the copy to write")
    add_database_arguments(p)
    p.add_argument("--force", action="store_true", help="replace DEST if it exists")
    p.set_defaults(handler=cmd_backup)
    return p


def cmd_backup(args) -> int:
    src = database_path(args)
    dest = backup(src, args.dest, force=args.force)
    print(f"{src} -> {dest}")
    return 0


__all__ = ["cmd_backup", "register"]

"""`slurm-gavel release-all`: hand every held gavel job back to Slurm's own scheduler (`slurm.undo`).

Exit code 1 when Slurm refused one of the jobs (its row says why), else 0.
"""
from __future__ import annotations

import argparse

from ..core.display import clean, printable
from ..daemon import config as config_mod
from ..slurm.commands import SlurmCLI
from ..slurm.undo import release_all
from .common import EXIT_FAILED, EXIT_OK, add_json_argument, print_json


def register(commands) -> argparse.ArgumentParser:
    p = commands.add_parser(
        "release-all", help="release every held gavel job to Slurm's own scheduler (undo)",
        description="Release every pending gavel job that slurm-gavel holds and clear the node "
                    "list the daemon pinned on it, so that Slurm schedules it as any other job. "
                    "Stop the daemon first (it would hold them again).")
    p.add_argument("--config", metavar="FILE", help="gavel.toml (for slurm_conf and slurm_bin_dir)")
    p.add_argument("--partitions", metavar="P1,P2",
                   help="also set each job's partition to this list (e.g. all GPU partitions)")
    p.add_argument("--dry-run", action="store_true", help="list what would be done, change nothing")
    add_json_argument(p, "print the jobs as JSON")
    p.set_defaults(handler=cmd_release_all)
    return p


def cmd_release_all(args) -> int:
    cli = config_mod.slurm_cli(config_mod.load(args.config)) if args.config else SlurmCLI()
    rows = release_all(cli, args.partitions, dry_run=args.dry_run)
    if args.json:
        print_json(clean(rows))
    else:
        verb = "would" if args.dry_run else "done:"
        for r in rows:
            state = f"failed: {printable(r['error'])}" if r["error"] else f"{verb} {', '.join(r['actions'])}"
            print(f"{r['job']}  {printable(r['user'])}  {printable(r['partition'])}  {state}")
        print(f"{len(rows)} held gavel job(s){' (dry run: nothing changed)' if args.dry_run else ''}")
    return EXIT_FAILED if any(r["error"] for r in rows) else EXIT_OK


__all__ = ["cmd_release_all", "register"]

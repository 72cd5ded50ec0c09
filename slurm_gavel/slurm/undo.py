"""`slurm-gavel release-all`: hand every gavel job back to Slurm's own scheduler.

What an admin runs to turn slurm-gavel off (after stopping the daemon and
removing `JobSubmitPlugins=lua`, or to let the jobs run while the daemon is
down): every pending gavel job that the plugin or the daemon holds is
released, and the node list the daemon pinned on it (``ReqNodeList``) is
cleared, so that Slurm may start it on any node of its partition instead of
waiting for one node (and going to BadConstraints when the owner moves it).
``--partitions`` also widens each job's partition to a list (the daemon
placed it on one GPU type's partition).  Running jobs are left alone; other
jobs are never touched.
"""
from __future__ import annotations

import argparse
import json
import sys

from ..core.display import clean, printable
from ..core.errors import GavelError
from .backend import GAVEL_PREFIX
from .commands import SlurmCLI, name
from .flags import admin_flags, admin_status
from .records import parse_jobs


def held_gavel_jobs(cli: SlurmCLI) -> list:
    """Pending gavel jobs (AdminComment written by job_submit.lua) that are held."""
    return [j for j in parse_jobs(cli.squeue())
            if j.admin_comment.startswith(GAVEL_PREFIX) and j.primary_state == "PENDING"
            and "JobHeld" in j.reason]


def release_all(cli: SlurmCLI, partitions: str | None = None, dry_run: bool = False) -> list[dict]:
    """Release every held gavel job; one row per job: {job, user, partition, actions, error}."""
    if partitions is not None:
        name(partitions, "--partitions")
    rows = []
    for j in held_gavel_jobs(cli):
        actions = ["clear node list"] + ([f"partition {partitions}"] if partitions else []) + ["release"]
        row = {"job": j.job_id, "user": j.user, "partition": j.partition, "actions": actions,
               "error": None}
        if not dry_run:
            try:
                cli.clear_node_list([j.job_id])
                if admin_status(j.admin_comment):      # no longer held by slurm-gavel
                    cli.update([j.job_id], AdminComment=admin_flags(j.admin_comment))
                if partitions:
                    cli.update([j.job_id], Partition=partitions)
                cli.release([j.job_id])
            except GavelError as e:
                row["error"] = str(e)      # one job's refusal (it just ended...) stops no other
        rows.append(row)
    return rows


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
    p.add_argument("--json", action="store_true", help="print the jobs as JSON")
    p.set_defaults(handler=cmd_release_all)
    return p


def cmd_release_all(args) -> int:
    from ..daemon import config as config_mod
    cli = config_mod.slurm_cli(config_mod.load(args.config)) if args.config else SlurmCLI()
    rows = release_all(cli, args.partitions, dry_run=args.dry_run)
    if args.json:
        json.dump(clean(rows), sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        verb = "would" if args.dry_run else "done:"
        for r in rows:
            state = f"failed: {printable(r['error'])}" if r["error"] else f"{verb} {', '.join(r['actions'])}"
            print(f"{r['job']}  {printable(r['user'])}  {printable(r['partition'])}  {state}")
        print(f"{len(rows)} held gavel job(s){' (dry run: nothing changed)' if args.dry_run else ''}")
    return 1 if any(r["error"] for r in rows) else 0


__all__ = ["held_gavel_jobs", "release_all"]

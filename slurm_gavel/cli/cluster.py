"""`slurm-gavel cluster up|down|status`: the local Slurm cluster of `devcluster`, from the shell.

Exit codes: 0 done (or, for `status`, the cluster runs), 1 it failed or does not run,
2 bad input; the error is one line on stderr.
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Mapping

from ..core.errors import GavelError, InputError
from ..devcluster import (DEFAULT_CTLD_PORT, DEFAULT_SLURMD_PORT, DEFAULT_TYPES, DevCluster,
                          default_directory, default_job_submit_lua, format_types, parse_types)
from .common import add_json_argument, align, dumps, fail, print_json
def register(commands) -> argparse.ArgumentParser:
    """Add `cluster up|down|status` to an argparse subparsers object."""
    p = commands.add_parser(
        "cluster", help="a real local Slurm cluster for tests and demos: up, down, status",
        description="Run a real Slurm cluster on this machine (root, Slurm and MUNGE installed): "
                    "one partition per GPU type, one slurmd per node, fake GPUs, its own munged; "
                    "everything under one directory.")
    p.add_argument("action", choices=("up", "down", "status"))
    p.add_argument("--dir", metavar="DIR",
                   help="cluster directory (default: $XDG_RUNTIME_DIR/slurm-gavel-cluster, "
                        "else /tmp/slurm-gavel-cluster-$UID)")
    p.add_argument("--types", default=format_types(DEFAULT_TYPES), metavar="TYPE=NODESxGPUS,...",
                   help="GPU types: nodes and GPUs per node (default: %(default)s)")
    p.add_argument("--port", type=int, default=DEFAULT_CTLD_PORT, metavar="N",
                   help="slurmctld port; the slurmds use N+184 onwards (default: %(default)s)")
    p.add_argument("--accounting", action="store_true",
                   help="up: with accounting (sacct, sacctmgr, fair share): a private MariaDB "
                        "server and slurmdbd on random free ports (needs mariadb-server, slurmdbd)")
    p.add_argument("--mixed", metavar="PARTITION",
                   help="up: one partition of this name holding every node (mixed GPU nodes, typed "
                        "GRES) instead of one partition per GPU type")
    add_json_argument(p, "print the status as JSON")
    p.set_defaults(handler=cmd_cluster)
    return p


def cmd_cluster(args) -> int:
    """Handler of `cluster`: 0 ok, 2 bad input, 1 failure (one line on stderr)."""
    try:
        directory = Path(args.dir) if args.dir else default_directory()
        if args.action == "up":
            if not 1024 <= args.port <= 65000:
                raise InputError("--port", f"{args.port} is not in 1024-65000")
            cluster = DevCluster(directory, parse_types(args.types), ctld_port=args.port,
                                 slurmd_port=args.port + DEFAULT_SLURMD_PORT - DEFAULT_CTLD_PORT,
                                 job_submit_lua=default_job_submit_lua(),
                                 accounting=getattr(args, "accounting", False),
                                 mixed=getattr(args, "mixed", None))
            cluster.up()
            status = cluster.status()
            if args.json:
                print_json(status, indent=1)
            else:
                print(f"slurm-gavel: {len(status['nodes'])} nodes up in {cluster.directory}; "
                      f"stop with `slurm-gavel cluster down --dir {cluster.directory}`",
                      file=sys.stderr)
                print(f"export SLURM_CONF={shlex.quote(str(cluster.slurm_conf))}")
            return 0
        cluster = DevCluster(directory)
        if args.action == "down":
            pids = cluster.down()
            print(f"slurm-gavel: stopped {len(pids)} processes in {cluster.directory}",
                  file=sys.stderr)
            return 0
        status = cluster.status()
        print(dumps(status, indent=1) if args.json else format_status(status))
        return 0 if status["running"] else 1
    except GavelError as err:           # called directly by tests, not only through `main`
        return fail(err, limit=400)


def format_status(status: Mapping) -> str:
    if not status["daemons"]:
        return f"no cluster running in {status['directory']}"
    state = "running" if status["running"] else "NOT running (`cluster down`, then `up`)"
    lines = [f"cluster in {status['directory']}: {state}",
             f"export SLURM_CONF={shlex.quote(status['slurm_conf'])}", ""]
    # STATE is set off by two blanks: its cells start with one more
    daemons = [["DAEMON", "PID", " STATE"]] + [[name, d["pid"], " running" if d["running"] else " stopped"]
                                               for name, d in status["daemons"].items()]
    lines += align(daemons, right=(1,), sep=" ", minimum={0: 16, 1: 8})
    if status["nodes"]:
        nodes = [["NODE", "PARTITION", "STATE", "GRES"]]
        nodes += [[n["name"], ",".join(n["partitions"]), "+".join([n["state"]] + n["flags"]).lower(), n["gres"]]
                  for n in status["nodes"]]
        lines += [""] + align(nodes, sep=" ", minimum={0: 12, 1: 10, 2: 16})
    if status.get("error"):
        lines += ["", f"error: {status['error']}"]
    return "\n".join(lines)

"""`slurm-gavel billing`: suggest TRESBillingWeights per partition (`slurm.billing` computes them).

Speeds come from the daemon's database (`--db`/`--config`; none with `--no-db`) and the
throughput table; partitions from `--partitions`, else from Slurm's nodes.  Prints the
slurm.conf lines and how each number was made, or `--json`.
"""
from __future__ import annotations

import argparse
import math

from ..core.display import clean, printable
from ..core.errors import InputError
from ..estimator.table import ThroughputTable
from ..slurm.billing import Suggestion, explain, job_mix, partition_types, speeds, suggest
from .common import add_database_arguments, add_json_argument, database_path, dumps, reading


def register(commands) -> argparse.ArgumentParser:
    p = commands.add_parser(
        "billing", help="suggest TRESBillingWeights per partition from measured throughputs",
        description="Suggest per-partition TRESBillingWeights (GRES/gpu=W) so that an hour on a "
                    "GPU type is charged by the work it does for this site's job mix: measured "
                    "throughputs from the daemon's database, else the table's; print the "
                    "slurm.conf lines and how each number was made.")
    p.add_argument("--throughputs", required=True, metavar="FILE",
                   help="throughput table in Gavel's JSON layout")
    add_database_arguments(p)
    p.add_argument("--no-db", action="store_true",
                   help="the table alone, every model of it weighted equally")
    p.add_argument("--partitions", metavar="PARTITION=TYPE,...",
                   help="each partition's GPU type (default: read from Slurm's nodes)")
    p.add_argument("--scale", type=float, default=1.0, metavar="W",
                   help="the slowest type's weight (default: %(default)s)")
    add_json_argument(p)
    p.set_defaults(handler=cmd_billing)
    return p


def cmd_billing(args) -> int:
    if not (args.scale > 0 and math.isfinite(args.scale)):
        raise InputError("--scale", f"must be > 0, got {args.scale}")
    table = ThroughputTable.from_gavel_json(args.throughputs)
    if args.partitions:
        parts: dict[str, tuple[str, ...]] = {}
        for item in filter(None, (x.strip() for x in args.partitions.split(","))):
            name, sep, kind = item.partition("=")
            if not sep or not name.strip() or not kind.strip():
                raise InputError("--partitions", f"expected PARTITION=TYPE, got {item!r}")
            parts[name.strip()] = tuple(sorted(set(parts.get(name.strip(), ())) | {kind.strip()}))
    else:
        from ..slurm.commands import SlurmCLI
        from ..slurm.records import parse_nodes
        parts = partition_types(parse_nodes(SlurmCLI().nodes()))
        if not parts:
            raise InputError("--partitions", "Slurm lists no partition with GPU nodes: give --partitions")
    types = sorted({t for ts in parts.values() for t in ts})
    measured: list = []
    mix: dict = {}
    db = None if args.no_db else database_path(args)
    if db is not None:
        with reading(args, db) as store:
            measured = store.load_throughputs()[0]
            mix = job_mix(store)
    speed, sources = speeds(table, measured)
    mix_from = f"models weighted by the GPU time of their jobs in {printable(db)}" if mix else ""
    if not mix:        # no jobs yet: every model with a speed on some partition's type
        mix = {k: 1.0 for k, v in speed.items() if any(t in v for t in types)}
        mix_from = "every table model weighted equally"
    s = suggest(speed, mix, types, parts, args.scale)
    s = Suggestion(s.base, s.weights, s.partitions, s.mix, sources, s.scale, mix_from)
    if args.json:
        out = {"base": s.base, "scale": s.scale, "sources": s.sources,
               "weights": {t: {"weight": None if w.weight is None else w.weight * s.scale,
                               "models": w.models, "low": w.low, "high": w.high}
                           for t, w in s.weights.items()},
               "partitions": {p: list(ts) for p, ts in s.partitions.items()},
               "lines": s.lines(),
               "mix": [{"model": k[0], "scale_factor": k[1], "share": v} for k, v in s.mix.items()]}
        print(dumps(clean(out)))
    else:
        print("\n".join(explain(s) + [printable(line) for line in s.lines()]))
    return 0


__all__ = ["cmd_billing", "register"]

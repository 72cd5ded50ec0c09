"""`slurm-gavel replay`: the site's own Slurm history under each policy.

sacct (`slurm.history`) -> a trace and its throughput rows (`sim.replay`) -> one
simulation per policy on the cluster's own shape -> one table against what Slurm did.
"""
from __future__ import annotations

import math

from ..core.errors import InputError
from .common import EXIT_OK, add_json_argument, print_json
from .simulate import check_output, comma_list, policy_list


def register(commands) -> None:
    """Add `replay` to an argparse subparsers object."""
    _replay_parser(commands)


def _replay_parser(commands):
    from ..core.engine import MEASURED_RESTART_SECONDS
    from ..slurm.history import HISTORY_FIELDS

    p = commands.add_parser(
        "replay", help="replay the cluster's own Slurm history under each policy (sacct)",
        description="Read the jobs that ran (sacct), turn them into a trace, simulate it on "
                    "the cluster's own shape under each policy, and compare with what Slurm "
                    "did: average and p90 JCT, queue wait, makespan, GPU utilization per type, "
                    "restarts per job.")
    p.add_argument("--throughputs", required=True, metavar="FILE",
                   help="throughput table in Gavel's JSON layout")
    p.add_argument("--start", default="now-30days", metavar="TIME",
                   help="sacct --starttime (default: %(default)s)")
    p.add_argument("--end", default="now", metavar="TIME", help="sacct --endtime (default: now)")
    p.add_argument("--partition", metavar="P,...", help="only jobs of these partitions")
    p.add_argument("--account", metavar="A,...", help="only jobs of these accounts")
    p.add_argument("--user", metavar="U,...", help="only jobs of these users")
    p.add_argument("--sacct-file", metavar="FILE",
                   help="a saved `sacct -X -D --json` (or --parsable2 of the fields "
                        f"{','.join(HISTORY_FIELDS)}) instead of running sacct")
    p.add_argument("--parsable", action="store_true",
                   help="run sacct with --parsable2, not --json (a Slurm without --json)")
    p.add_argument("--cluster", metavar="TYPE=N,...",
                   help="GPUs per type (default: Slurm's nodes, `scontrol show nodes`/`sinfo`)")
    p.add_argument("--gpus-per-node", type=int, metavar="N",
                   help="GPUs per node with --cluster (default: 4)")
    p.add_argument("--policies", default="fifo,max_min_fairness:agnostic,max_min_fairness",
                   metavar="NAME[:agnostic],...", help="policies to simulate (default: %(default)s)")
    p.add_argument("--model-pattern", metavar="REGEX",
                   help="a job name's model: the match's group `model`, else group 1, else all")
    p.add_argument("--speeds", metavar="TYPE=RATIO,...",
                   help="speed of each type relative to the others, for jobs of unknown model")
    p.add_argument("--round", type=float, default=360.0, metavar="SECONDS", dest="round_seconds",
                   help="round length (default: %(default)s)")
    p.add_argument("--restart-seconds", type=float, default=MEASURED_RESTART_SECONDS, metavar="S",
                   help="time a job loses at each start or resume (default: %(default)s)")
    p.add_argument("--max-rounds", type=int, metavar="N", help="stop each simulation after N rounds")
    p.add_argument("--jobs", action="store_true", help="also list every replayed job")
    p.add_argument("--plot", metavar="FILE.png", help="write every row's JCT CDF on one figure")
    p.add_argument("--save-trace", metavar="PREFIX",
                   help="also write PREFIX.trace and PREFIX.json (its throughput table), for "
                        "`slurm-gavel simulate --trace PREFIX.trace --throughputs PREFIX.json`")
    add_json_argument(p)
    p.set_defaults(handler=cmd_replay)


def _replay_policies(value: str) -> list[tuple[str, bool]]:
    out = policy_list(value, False, "--policies")
    if not out:
        raise InputError("--policies", "name at least one policy")
    return out


def cmd_replay(args) -> int:
    """sacct -> slurm.history records -> sim.replay trace and rows -> one table."""
    import re
    from ..core.display import clean
    from ..estimator.table import ThroughputTable
    from ..sim.replay import build, compare, parse_speeds, table_text, with_job_rows
    from ..sim.simulator import parse_cluster
    from ..slurm.commands import SlurmCLI
    from ..slurm.history import cluster_shape, load_history, replay_records
    from ..slurm.records import parse_nodes

    policies = _replay_policies(args.policies)
    speeds = parse_speeds(args.speeds)
    if not (args.round_seconds > 0 and math.isfinite(args.round_seconds)):
        raise InputError("--round", f"must be > 0, got {args.round_seconds}")
    if not (args.restart_seconds >= 0 and math.isfinite(args.restart_seconds)):
        raise InputError("--restart-seconds", f"must be >= 0, got {args.restart_seconds}")
    if args.max_rounds is not None and args.max_rounds < 1:
        raise InputError("--max-rounds", f"must be >= 1, got {args.max_rounds}")
    try:
        pattern = re.compile(args.model_pattern) if args.model_pattern else None
    except re.error as e:
        raise InputError("--model-pattern", f"not a regular expression: {e}") from None
    check_output(args.plot, "--plot")
    check_output(args.save_trace and args.save_trace + ".trace", "--save-trace")
    table = ThroughputTable.from_gavel_json(args.throughputs)
    cli = SlurmCLI()
    if args.cluster:
        cluster = parse_cluster(args.cluster)
        per = args.gpus_per_node or 4
        if per < 1:
            raise InputError("--gpus-per-node", f"must be >= 1, got {per}")
        gpus_per_node, node_types = {t: per for t in cluster}, {}
    else:
        cluster, gpus_per_node, node_types = cluster_shape(parse_nodes(cli.nodes()))
        if not cluster:
            raise InputError("--cluster", "Slurm lists no node with GPUs: give --cluster")
    history = load_history(cli, args.start, args.end, comma_list(args.partition),
                           comma_list(args.account), comma_list(args.user), args.parsable,
                           args.sacct_file, node_types)
    replay = build(replay_records(history, pattern), table, list(cluster), speeds)
    if not replay.trace:
        reasons: dict[str, int] = {}
        for skipped in replay.skipped:
            reasons[skipped["reason"]] = reasons.get(skipped["reason"], 0) + 1
        raise InputError("replay", f"no job to replay among the {len(history)} jobs found"
                         + "".join(f"; {n} {why}" for why, n in sorted(reasons.items())))
    sim_table = with_job_rows(table, replay.rows, list(cluster))
    if args.save_trace:
        from ..sim.workloads import write_trace
        write_trace(args.save_trace + ".trace", replay.trace)
        sim_table.to_gavel_json(args.save_trace + ".json")
    rows = compare(replay.trace, sim_table, cluster, gpus_per_node, policies, replay.observed,
                   round_seconds=args.round_seconds, restart_seconds=args.restart_seconds,
                   max_rounds=args.max_rounds)
    if args.plot:
        from ..sim.experiments import plot_jct_cdf
        plot_jct_cdf({r["policy"]: r["jct_hours"] for r in rows}, args.plot,
                     title="JCT on this cluster's own history")
    if args.json:
        out = {"cluster": cluster, "gpus_per_node": gpus_per_node, "rows": rows,
               "jobs": replay.jobs, "skipped": replay.skipped}
        print_json(clean(out))
    else:
        print(table_text(rows, replay, args.jobs))
    return EXIT_OK


__all__ = ["cmd_replay", "register"]

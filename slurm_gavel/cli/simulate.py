"""`slurm-gavel simulate` and `slurm-gavel sweep`: a policy on a simulated cluster (`sim`).

    slurm-gavel simulate --policy NAME --throughputs FILE [--trace FILE | --rate R --jobs N ...]
    slurm-gavel sweep --policies A,B --rates 1,2,3 --seeds 0,1,2 --throughputs FILE ...

This parses the options into a `sim.experiments.RunConfig`, runs it, and prints the
summary (or `--json`, `--csv`, `--plot`).  The option checks here (`policy_list`,
`check_output`, ...) are shared with `replay`.
"""
from __future__ import annotations

import math
import os
import sys

from ..core.errors import InputError, UnknownPolicyError
from .common import EXIT_OK, add_json_argument, print_json
from .policy import jsonable


def register(commands) -> None:
    """Add `simulate` and `sweep` to an argparse subparsers object."""
    _simulate_parser(commands)
    _sweep_parser(commands)


def _workload_options(p):
    p.add_argument("--throughputs", required=True, metavar="FILE",
                   help="throughput table in Gavel's JSON layout (steps/s per model, scale "
                        "factor and GPU type)")
    p.add_argument("--cluster", default="v100=36,p100=36,k80=36", metavar="TYPE=N,...",
                   help="GPUs per type (default: %(default)s)")
    p.add_argument("--gpus-per-node", type=int, default=4, metavar="N",
                   help="GPUs per simulated server (default: %(default)s)")
    p.add_argument("--jobs", type=int, metavar="N",
                   help="jobs to generate (default with --window: as many as it takes)")
    p.add_argument("--multi-gpu", action="store_true",
                   help="continuous-multiple: scale factors 1/2/4/8 at 70/10/15/5%% "
                        "(default: all jobs use 1 GPU)")
    p.add_argument("--generator", choices=("ours", "gavel"), metavar="{ours,gavel}",
                   help="workload generator: ours (default), or gavel: exactly the jobs Gavel's own "
                        "simulator draws for the seed (type, steps, scale factor, arrival)")
    p.add_argument("--round", type=float, default=360.0, metavar="SECONDS", dest="round_seconds",
                   help="round length (default: %(default)s)")
    p.add_argument("--window", metavar="FIRST:END",
                   help="measure jobs FIRST <= id < END (the steady state) and stop when they are done")
    from ..core.engine import (DEFAULT_HYSTERESIS, DEFAULT_LEASE_LOAD_EXPONENT, DEFAULT_MAX_LEASE_SCALE,
                               DEFAULT_MOVE_HYSTERESIS,
                               MEASURED_RESTART_SECONDS)
    p.add_argument("--restart-seconds", "--checkpoint-seconds", type=float, dest="restart_seconds",
                   default=MEASURED_RESTART_SECONDS, metavar="S",
                   help="time a job loses each time it is started or resumed (requeue, launch, "
                        "checkpoint load); the mechanism weighs it against the gain of a move "
                        "(default: %(default)s)")
    p.add_argument("--hysteresis", type=float, default=DEFAULT_HYSTERESIS, metavar="ROUNDS",
                   help="a running job competes for its GPUs as if it had received this many rounds "
                        "less: a job replaces it only when clearly more behind (default: %(default)s)")
    p.add_argument("--move-hysteresis", type=float, default=DEFAULT_MOVE_HYSTERESIS, metavar="ROUNDS",
                   help="a running job moves to another GPU type of its own accord only when it is "
                        "this many rounds more behind its share there (default: %(default)s)")
    p.add_argument("--lease-load-exponent", type=float, default=DEFAULT_LEASE_LOAD_EXPONENT, metavar="P",
                   help="both leases grow by (GPUs asked for / GPUs) ** P while the cluster is "
                        "oversubscribed and restarts cost something; 0: fixed leases "
                        "(default: %(default)s)")
    p.add_argument("--max-lease-scale", type=float, default=DEFAULT_MAX_LEASE_SCALE, metavar="F",
                   help="the leases grow by this factor at most (default: %(default)s)")
    p.add_argument("--max-preemptions", type=int, default=0, metavar="JOBS",
                   help="at most this many jobs preempted in one round, a large reshuffle spread "
                        "over rounds (default 0: no cap, the paper's mechanism; the daemon's "
                        "max_preemptions_per_round is 64)")
    p.add_argument("--no-carry-owed", action="store_false", dest="carry_owed",
                   help="forget at each ledger reset what jobs were still owed (default: carry it "
                        "over, bounded, so that jobs the hysteresis keeps in place still get X's "
                        "split in the long run)")
    p.add_argument("--no-work-conserving", action="store_false", dest="work_conserving",
                   help="leave GPUs idle rather than give them to jobs with no share on their type")
    p.add_argument("--no-mid-round-starts", action="store_false", dest="mid_round_starts",
                   help="a job that arrives during a round waits for the next one (default: it "
                        "starts at once on GPUs that are idle)")
    p.add_argument("--solver-delay", type=float, default=0.0, metavar="S",
                   help="simulated seconds each policy solve takes; rounds go on meanwhile")
    p.add_argument("--prices", metavar="TYPE=$/h,...", help="GPU prices, for the cost line")
    p.add_argument("--space-sharing", action="store_true", help="let pairs of jobs share GPUs")
    p.add_argument("--max-pair-gpus", type=int, metavar="N",
                   help="with --space-sharing, pair only jobs of at most N GPUs each; 1 is what "
                        "the Slurm backend runs (default: any size, as Gavel's simulator)")
    p.add_argument("--max-rounds", type=int, metavar="N", help="stop after N rounds")
    p.add_argument("--reset-interval", type=float, default=1920.0, metavar="S", dest="reset_seconds",
                   help="restart the mechanism's since-reset time at most this often "
                        "(default: %(default)s; 0 = at every change of the allocation)")


def _simulate_parser(commands):
    p = commands.add_parser(
        "simulate", help="run a policy on a simulated cluster and trace",
        description="Run a policy with the scheduler's own engine and mechanism on a "
                    "simulated cluster: a trace file, or Gavel's synthetic workload.")
    p.add_argument("--policy", required=True, metavar="NAME", help="policy name or alias")
    p.add_argument("--agnostic", action="store_true", help="the heterogeneity-agnostic baseline")
    p.add_argument("--trace", metavar="FILE",
                   help="Gavel's trace file (10 fields, or the older 7 of its Philly-derived traces)")
    p.add_argument("--rate", type=float, metavar="JOBS_PER_HOUR",
                   help="Poisson arrivals (default without --trace: all jobs at time 0)")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated workload (default: 0)")
    _workload_options(p)
    add_json_argument(p, "print the summary as JSON")
    p.add_argument("--csv", metavar="FILE", help="write per-job results to FILE")
    p.add_argument("--plot", metavar="FILE.png", help="write the JCT CDF as a PNG")
    p.add_argument("--quiet", action="store_true", help="no progress line on a terminal")
    p.set_defaults(handler=cmd_simulate)


def _sweep_parser(commands):
    p = commands.add_parser(
        "sweep", help="simulate policies x rates x seeds in parallel",
        description="Simulate every policy at every rate with every seed (worker processes), "
                    "print a table and plot average JCT against input rate.")
    p.add_argument("--policies", required=True, metavar="NAME,...",
                   help="policies; NAME:agnostic for a baseline, e.g. "
                        "max_min_fairness,max_min_fairness:agnostic")
    p.add_argument("--rates", required=True, metavar="R,...", help="input rates, jobs per hour")
    p.add_argument("--seeds", default="0", metavar="S,...", help="workload seeds (default: 0)")
    _workload_options(p)
    p.add_argument("--processes", type=int, metavar="N", help="worker processes (default: CPUs)")
    add_json_argument(p, "print the rows as JSON")
    p.add_argument("--csv", metavar="FILE", help="write the table to FILE")
    p.add_argument("--plot", metavar="FILE.png", help="write average JCT against rate as a PNG")
    p.set_defaults(handler=cmd_sweep)


# -- simulate / sweep ----------------------------------------------------------
def _pairs(text: str | None, option: str, convert) -> tuple:
    if not text:
        return ()
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise InputError(option, f"expected NAME=VALUE, got {part!r}")
        try:
            out.append((name.strip(), convert(value)))
        except ValueError:
            raise InputError(option, f"{name}: not a number: {value!r}") from None
    return tuple(out)


def _window(text: str | None):
    if text is None:
        return None
    first, sep, end = text.partition(":")
    try:
        a, b = int(first), int(end)
    except ValueError:
        raise InputError("--window", f"expected FIRST:END (job ids), got {text!r}") from None
    if not sep or a < 0 or b <= a:
        raise InputError("--window", f"expected 0 <= FIRST < END, got {text!r}")
    return (a, b)


def _positive(value, option, allow_zero=False):
    if value is None:
        return
    if not (value >= 0 if allow_zero else value > 0) or not math.isfinite(value):
        raise InputError(option, f"must be {'>= 0' if allow_zero else '> 0'}, got {value}")


def check_output(path: str | None, option: str):
    """Fail before a long run, not after it, when an output file cannot be written."""
    if path is None:
        return
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise InputError(option, f"cannot write {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise InputError(option, f"cannot write {path}: directory {parent} is not writable")


def _run_config(args, **overrides):
    from ..sim.experiments import RunConfig
    from ..sim.simulator import parse_cluster

    _positive(args.round_seconds, "--round")
    _positive(args.restart_seconds, "--restart-seconds", allow_zero=True)
    _positive(args.hysteresis, "--hysteresis", allow_zero=True)
    _positive(args.move_hysteresis, "--move-hysteresis", allow_zero=True)
    _positive(args.lease_load_exponent, "--lease-load-exponent", allow_zero=True)
    if not args.max_lease_scale >= 1:
        raise InputError("--max-lease-scale", f"must be >= 1, got {args.max_lease_scale}")
    _positive(args.solver_delay, "--solver-delay", allow_zero=True)
    _positive(args.gpus_per_node, "--gpus-per-node")
    _positive(args.reset_seconds, "--reset-interval", allow_zero=True)
    _positive(args.max_pair_gpus, "--max-pair-gpus")
    if args.jobs is not None and args.jobs < 1:
        raise InputError("--jobs", f"must be >= 1, got {args.jobs}")
    prices = _pairs(args.prices, "--prices", float)
    for name, value in prices:
        _positive(value, f"--prices {name}", allow_zero=True)
    fields = dict(throughputs=args.throughputs, cluster=tuple(parse_cluster(args.cluster).items()),
                  jobs=args.jobs, multi_gpu=args.multi_gpu, generator=args.generator or "ours",
                  round_seconds=args.round_seconds,
                  window=_window(args.window), gpus_per_node=args.gpus_per_node,
                  restart_seconds=args.restart_seconds, hysteresis=args.hysteresis,
                  work_conserving=args.work_conserving, move_hysteresis=args.move_hysteresis,
                  max_preemptions=args.max_preemptions, lease_load_exponent=args.lease_load_exponent,
                  max_lease_scale=args.max_lease_scale,
                  carry_owed=args.carry_owed, mid_round_starts=args.mid_round_starts,
                  solver_delay=args.solver_delay,
                  space_sharing=args.space_sharing, max_pair_gpus=args.max_pair_gpus,
                  prices=prices, max_rounds=args.max_rounds,
                  reset_seconds=args.reset_seconds)
    fields.update(overrides)
    return RunConfig(**fields)


def _check_policy(name: str, space_sharing: bool, option: str = "--policy"):
    from ..policies import make_policy
    try:
        make_policy(name, space_sharing=space_sharing)
    except UnknownPolicyError as err:
        raise InputError(option, str(err)) from None


def comma_list(value: str | None) -> list[str]:
    """NAME,NAME,... (blanks around names and empty items dropped)."""
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def policy_list(value: str, space_sharing: bool, unknown: str) -> list[tuple[str, bool]]:
    """--policies NAME[:agnostic],... -> [(name, agnostic)]; an unknown name is an InputError
    of option `unknown`."""
    out = []
    for item in comma_list(value):
        name, _, mod = item.partition(":")
        if mod not in ("", "agnostic"):
            raise InputError("--policies", f"{item!r}: the only modifier is ':agnostic'")
        _check_policy(name, space_sharing, unknown)
        out.append((name, mod == "agnostic"))
    return out


class _Progress:
    """One self-rewriting line on a terminal: rounds, simulated days, jobs done."""

    def __init__(self, stream, every: float = 0.5):
        import time
        self.stream, self.every, self._time = stream, every, time.monotonic
        self._last = 0.0

    def __call__(self, rounds, now, departed, active):
        t = self._time()
        if t - self._last >= self.every:
            self._last = t
            self.stream.write(f"\rround {rounds}  day {now / 86400:.1f}  "
                              f"jobs done {departed}  active {active}   ")
            self.stream.flush()

    def close(self):
        self.stream.write("\r" + " " * 60 + "\r")
        self.stream.flush()


def format_summary(row: dict) -> str:
    def h(v):
        return "n/a" if v is None else f"{v:.2f} h"

    lines = [f"policy {row['policy']}: {row['finished']}/{row['jobs']} jobs finished"
             + ("" if row["complete"] else " (INCOMPLETE: stopped early)")
             + (f", window {row['window'][0]}:{row['window'][1]}" if row.get("window") else "")]
    jct = row["jct_hours"]
    lines.append(f"average JCT        {h(row['average_jct_hours'])}  (median {h(jct['p50'])}, "
                 f"p90 {h(jct['p90'])}, max {h(jct['max'])})")
    lines.append(f"makespan           {h(row['makespan_hours'])}")
    ftf = row["finish_time_fairness"]
    if ftf["mean"] is not None:
        lines.append(f"finish-time fair.  mean {ftf['mean']:.3f}, p90 {ftf['p90']:.3f}, "
                     f"max {ftf['max']:.3f}  (JCT / JCT with 1/n of the cluster)")
    lines.append("GPU hours          " + ", ".join(f"{wt} {v:.1f}" for wt, v in row["gpu_hours"].items()))
    if row.get("cost") is not None:
        lines.append(f"cost               ${row['cost']:.2f}")
    if row["jobs_with_slo"]:
        lines.append(f"SLO violations     {row['slo_violations']} of {row['jobs_with_slo']}")
    lines.append("utilization        " + ", ".join(f"{wt} {u:.1%}" for wt, u in row["utilization"].items())
                 + f"  (all {row['utilization_total']:.1%})")
    lines.append(f"allocation gap     {row['allocation_gap']:.3f}  (mean L1 distance, realized vs computed "
                 f"time fractions)")
    if row.get("restarts_per_job") is not None:
        lines.append(f"restarts per job   {row['restarts_per_job']:.2f}")
    lines.append(f"simulated          {row['simulated_hours']:.1f} h in {row['rounds']} rounds; "
                 f"{row['solves']} solves ({row['solve_seconds']:.1f} s); wall {row['wall_seconds']:.1f} s")
    if row["solver_errors"]:
        lines.append(f"solver errors      {row['solver_errors']} (the previous allocation stayed in force)")
    return "\n".join(lines)


def cmd_simulate(args) -> int:
    from ..sim.experiments import atomic_write, jobs_csv, plot_jct_cdf, simulate_config
    from ..sim.simulator import summarize

    _check_policy(args.policy, args.space_sharing)
    check_output(args.csv, "--csv")
    check_output(args.plot, "--plot")
    if args.seed < 0:
        raise InputError("--seed", f"must be >= 0, got {args.seed}")
    if args.trace and (args.rate is not None or args.jobs is not None or args.multi_gpu
                       or args.generator is not None):
        raise InputError("--trace", "a trace file fixes the jobs: drop --rate, --jobs, --multi-gpu "
                                    "and --generator")
    _positive(args.rate, "--rate")
    config = _run_config(args, policy=args.policy, agnostic=args.agnostic, trace=args.trace,
                         rate=args.rate, seed=args.seed)
    progress = None
    if not args.quiet and sys.stderr.isatty():
        progress = _Progress(sys.stderr)
    try:
        sim, table = simulate_config(config, progress)
    finally:
        if progress:
            progress.close()
    summary = summarize(sim, table, config.window, dict(config.prices))
    row = {"policy": config.label, "rate": config.rate, "seed": config.seed, **summary}
    if args.csv:
        atomic_write(args.csv, jobs_csv(sim.results.values(), list(sim.gpus)))
    if args.plot:
        chosen = [r for r in sim.results.values() if math.isfinite(r.finish)
                  and (config.window is None or config.window[0] <= int(r.id) < config.window[1])]
        plot_jct_cdf({config.label: [r.jct / 3600.0 for r in chosen]}, args.plot,
                     title=f"{config.label}, rate {config.rate}" if config.rate else config.label)
    if args.json:
        print_json(jsonable(row))
    else:
        print(format_summary(row))
    return EXIT_OK


def cmd_sweep(args) -> int:
    from ..sim.experiments import atomic_write, plot_sweep, rows_csv, sweep

    policies = policy_list(args.policies, args.space_sharing, "--policy")
    try:
        rates = [float(r) for r in args.rates.split(",") if r.strip()]
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError as err:
        raise InputError("--rates/--seeds", f"not a number list: {err}") from None
    for r in rates:
        _positive(r, "--rates")
    if any(s < 0 for s in seeds):
        raise InputError("--seeds", "seeds must be >= 0")
    check_output(args.csv, "--csv")
    check_output(args.plot, "--plot")
    if not policies or not rates or not seeds:
        raise InputError("--policies/--rates/--seeds", "each needs at least one value")
    base = _run_config(args, policy=policies[0][0])
    # check the table and cluster once here, not in every worker
    from ..sim.experiments import check_config
    check_config(base)
    if args.processes is not None and args.processes < 1:
        raise InputError("--processes", f"must be >= 1, got {args.processes}")

    def report(row):
        if not args.json:
            jct = row["average_jct_hours"]
            print(f"{row['policy']:<32} rate {row['rate']:<6g} seed {row['seed']:<4} "
                  f"avg JCT {'n/a' if jct is None else f'{jct:8.2f} h'}"
                  f"{'' if row['complete'] else '  (incomplete)'}  wall {row['wall_seconds']:.1f} s",
                  flush=True)

    rows = sweep(base, policies, rates, seeds, args.processes, on_result=report)
    if args.csv:
        atomic_write(args.csv, rows_csv(rows))
    if args.plot:
        plot_sweep(rows, args.plot)
    if args.json:
        print_json(jsonable(rows))
    return EXIT_OK


__all__ = ["cmd_simulate", "cmd_sweep", "format_summary", "register"]

"""The `slurm-gavel` command: a thin layer over the policy library.

    slurm-gavel policies [--json]
    slurm-gavel solve --policy NAME --input FILE|- [--agnostic] [--space-sharing] [--json]
    slurm-gavel simulate --policy NAME --throughputs FILE [--trace FILE | --rate R --jobs N ...]
    slurm-gavel sweep --policies A,B --rates 1,2,3 --seeds 0,1,2 --throughputs FILE ...

Exit codes: 0 success, 1 the solver found no optimal allocation, 2 bad input
or bad arguments (one line on stderr naming the field).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any, Sequence

import numpy as np

from .. import __version__
from ..core.errors import GavelError, InputError, SolverError, UnknownPolicyError

PROG = "slurm-gavel"
EXIT_OK, EXIT_SOLVER, EXIT_INPUT = 0, 1, 2
PAIR_NOISE = 1e-6   # pair rows below this (solver noise) are left out of the table


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit 2), like every other input error."""

    def error(self, message: str):
        self.exit(EXIT_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Heterogeneity-aware GPU scheduling policies "
                                            "(Gavel, OSDI '20) for Slurm clusters.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    policies = commands.add_parser("policies", help="list every policy, one line each",
                                   description="List every policy: name, aliases, summary.")
    policies.add_argument("--json", action="store_true", help="print the list as JSON")

    solve = commands.add_parser(
        "solve", help="compute a policy's allocation for the jobs in a JSON file",
        description="Compute the allocation X (fraction of time each job gets on each GPU "
                    "type) that a policy chooses for the jobs in a JSON input file.")
    solve.add_argument("--policy", required=True, metavar="NAME",
                       help="policy name or alias (see `slurm-gavel policies`)")
    solve.add_argument("--input", required=True, metavar="FILE",
                       help="JSON input file, or - for stdin")
    solve.add_argument("--agnostic", action="store_true",
                       help="heterogeneity-agnostic baseline: the policy sees every job run "
                            "at one speed on every type it fits")
    solve.add_argument("--space-sharing", action="store_true",
                       help="let pairs of jobs share a GPU (uses the input's `pairs`)")
    solve.add_argument("--json", action="store_true",
                       help="print the allocation as JSON instead of a table")
    _simulate_parser(commands)
    _sweep_parser(commands)
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
    daemon.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    from .queue import add_arguments
    queue = commands.add_parser(
        "queue", help="the scheduler's view of the jobs (also installed as gqueue)",
        description="Every gavel job: GPU type now, target share per type, time received per "
                    "type, priority, rounds, and why it waits. Reads the daemon's database.")
    add_arguments(queue)
    try:
        from .cluster import register
    except ImportError:      # pragma: no cover
        pass
    else:
        register(commands)
    from .submit import register as register_submit
    register_submit(commands)
    from .throughputs import register as register_throughputs
    register_throughputs(commands)
    from .undo import register as register_undo
    register_undo(commands)
    from .events import register as register_events
    register_events(commands)
    from .explain import register as register_explain
    register_explain(commands)
    _replay_parser(commands)
    from .billing import register as register_billing
    register_billing(commands)
    from .doctor import register as register_doctor
    register_doctor(commands)
    from .backup import register as register_backup
    register_backup(commands)
    return parser


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
    from ..core.engine import DEFAULT_HYSTERESIS, DEFAULT_MOVE_HYSTERESIS, MEASURED_RESTART_SECONDS
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
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--csv", metavar="FILE", help="write per-job results to FILE")
    p.add_argument("--plot", metavar="FILE.png", help="write the JCT CDF as a PNG")
    p.add_argument("--quiet", action="store_true", help="no progress line on a terminal")


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
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--csv", metavar="FILE", help="write the table to FILE")
    p.add_argument("--plot", metavar="FILE.png", help="write average JCT against rate as a PNG")


# -- policies ----------------------------------------------------------------
def _alias_label(name: str, alias) -> str:
    mods = [m for m, on in (("agnostic", alias.agnostic), ("space sharing", alias.space_sharing)) if on]
    return f"{name} ({', '.join(mods)})" if mods else name


def policy_table() -> list[dict]:
    """Every registered policy with its aliases, in registry order."""
    from ..policies import ALIASES, POLICIES

    rows = []
    for name, cls in POLICIES.items():
        aliases = [{"name": a, "agnostic": al.agnostic, "space_sharing": al.space_sharing}
                   for a, al in ALIASES.items() if al.policy == name]
        rows.append({"name": name, "aliases": aliases, "summary": cls.summary,
                     "supports_space_sharing": bool(getattr(cls, "supports_space_sharing", False))})
    return rows


def cmd_policies(args) -> int:
    from ..policies import ALIASES

    rows = policy_table()
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    width = max((len(r["name"]) for r in rows), default=0)
    for r in rows:
        labels = [_alias_label(a["name"], ALIASES[a["name"]]) for a in r["aliases"]]
        aliases = f"[aliases: {', '.join(labels)}]  " if labels else ""
        print(f"{r['name']:<{width}}  {aliases}{r['summary']}")
    return EXIT_OK


# -- solve -------------------------------------------------------------------
def _jsonable(value: Any) -> Any:
    """Plain JSON values; non-finite floats (e.g. an infinite objective) become null."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _num(value: float, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}g}"


def _info_text(value: Any) -> str:
    """A policy's extra fact in one short line; nested details are left to --json."""
    scalar = (str, int, float, bool, np.generic)
    if isinstance(value, scalar):
        return str(value)
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, scalar) for v in value):
            return ", ".join(map(str, value)) if value else "none"
        return f"{len(value)} {'entry' if len(value) == 1 else 'entries'} (see --json)"
    return "(see --json)"


def format_table(allocation, inp) -> str:
    """The allocation as a readable table (one row per job, then shared pairs)."""
    types = list(allocation.worker_types)
    effective = allocation.effective_throughputs(inp)
    isolated = inp.isolated_throughputs()
    header = ["job"] + types + ["throughput", "normalized"]
    rows = []
    for i, jid in enumerate(allocation.job_ids):
        norm = effective[i] / isolated[i] if isolated[i] > 0 else float("nan")
        rows.append([jid] + [f"{allocation.x[i, j]:.3f}" for j in range(len(types))]
                    + [_num(effective[i]), _num(norm, 3)])
    for r, (a, b) in enumerate(allocation.pair_jobs.tolist()):
        if allocation.x_pairs[r].max() > PAIR_NOISE:
            rows.append([f"{allocation.job_ids[a]}+{allocation.job_ids[b]}"]
                        + [f"{allocation.x_pairs[r, j]:.3f}" for j in range(len(types))] + ["", ""])
    widths = [max(len(str(row[c])) for row in [header] + rows) for c in range(len(header))]

    def line(cells):
        first = f"{cells[0]:<{widths[0]}}"
        rest = [f"{c:>{w}}" for c, w in zip(cells[1:], widths[1:])]
        return "  ".join([first] + rest).rstrip()

    counts = ", ".join(f"{wt} x{int(c)}" for wt, c in zip(types, inp.counts))
    out = [f"policy {allocation.policy}: {inp.n_jobs} job{'' if inp.n_jobs == 1 else 's'} on {counts}",
           "fraction of time on each GPU type; throughput in steps/s; "
           "normalized = throughput / throughput under the isolated allocation",
           "", line(header), line(["-" * w for w in widths])]
    out += [line(row) for row in rows]
    used = allocation.gpus_used(inp.scale_factors.astype(float))
    out.append("")
    out.append("GPUs in use: " + ", ".join(f"{wt} {u:.2f}/{int(c)}"
                                            for wt, u, c in zip(types, used, inp.counts)))
    out.append(f"objective: {_num(allocation.objective, 6)}"
               f"    solve time: {allocation.solve_seconds:.3f} s")
    for key, value in (allocation.info or {}).items():
        out.append(f"{key}: {_info_text(value)}")
    return "\n".join(out)


def cmd_solve(args) -> int:
    from ..core.inputs import load_policy_input
    from ..policies import make_policy, resolve

    try:
        policy = make_policy(args.policy, agnostic=args.agnostic, space_sharing=args.space_sharing)
    except UnknownPolicyError as err:
        raise InputError("--policy", str(err)) from None
    inp = load_policy_input(args.input)
    sharing = args.space_sharing or resolve(args.policy).space_sharing
    if inp.n_pairs and not sharing:
        print(f"{PROG}: note: the input's {inp.n_pairs} pair(s) are ignored "
              f"without --space-sharing", file=sys.stderr)
    allocation = policy.allocate(inp)
    if args.json:
        print(json.dumps(_jsonable(allocation.as_dict(inp)), indent=2))
    else:
        print(format_table(allocation, inp))
    return EXIT_OK


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


def _check_output(path: str | None, option: str):
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


def _policy_list(value: str, space_sharing: bool, unknown: str) -> list[tuple[str, bool]]:
    """--policies NAME[:agnostic],... -> [(name, agnostic)]; an unknown name is an InputError
    of option `unknown`."""
    out = []
    for item in _replay_names(value):
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
    _check_output(args.csv, "--csv")
    _check_output(args.plot, "--plot")
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
        print(json.dumps(_jsonable(row), indent=2))
    else:
        print(format_summary(row))
    return EXIT_OK


def cmd_daemon(args) -> int:
    from ..daemon.daemon import main as daemon_main
    from .common import config_path

    if args.max_rounds is not None and args.max_rounds < 1:
        raise InputError("--max-rounds", f"must be >= 1, got {args.max_rounds}")
    return daemon_main(config_path(args), dry_run=args.dry_run, max_rounds=args.max_rounds, log_level=args.log_level)


def cmd_queue(args) -> int:
    from .queue import run
    return run(args)


def cmd_sweep(args) -> int:
    from ..sim.experiments import atomic_write, plot_sweep, rows_csv, sweep

    policies = _policy_list(args.policies, args.space_sharing, "--policy")
    try:
        rates = [float(r) for r in args.rates.split(",") if r.strip()]
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError as err:
        raise InputError("--rates/--seeds", f"not a number list: {err}") from None
    for r in rates:
        _positive(r, "--rates")
    if any(s < 0 for s in seeds):
        raise InputError("--seeds", "seeds must be >= 0")
    _check_output(args.csv, "--csv")
    _check_output(args.plot, "--plot")
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
        print(json.dumps(_jsonable(rows), indent=2))
    return EXIT_OK


# -- replay: the site's own history under each policy (slurm.history + sim.replay) --------
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
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_replay)


def _replay_names(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _replay_policies(value: str) -> list[tuple[str, bool]]:
    out = _policy_list(value, False, "--policies")
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
    _check_output(args.plot, "--plot")
    _check_output(args.save_trace and args.save_trace + ".trace", "--save-trace")
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
    history = load_history(cli, args.start, args.end, _replay_names(args.partition),
                           _replay_names(args.account), _replay_names(args.user), args.parsable,
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
        print(json.dumps(clean(out), indent=2, allow_nan=False))
    else:
        print(table_text(rows, replay, args.jobs))
    return EXIT_OK


def _one_line(message: str) -> str:
    return "; ".join(part.strip() for part in str(message).splitlines() if part.strip())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help, --version, usage errors
        code = done.code
        return code if isinstance(code, int) else (0 if code is None else EXIT_INPUT)
    handler = getattr(args, "handler", None) or {
        "policies": cmd_policies, "solve": cmd_solve, "simulate": cmd_simulate, "sweep": cmd_sweep,
        "daemon": cmd_daemon, "queue": cmd_queue}[args.command]
    try:
        return handler(args)
    except (InputError, UnknownPolicyError) as err:
        print(f"{PROG}: error: {_one_line(err)}", file=sys.stderr)
        return EXIT_INPUT
    except SolverError as err:
        print(f"{PROG}: error: {_one_line(err)}", file=sys.stderr)
        return EXIT_SOLVER
    except GavelError as err:
        print(f"{PROG}: error: {_one_line(err)}", file=sys.stderr)
        return EXIT_SOLVER
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): stop quietly, and keep Python's
        # final flush of stdout from failing again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except OSError as err:     # e.g. an output file that cannot be written
        print(f"{PROG}: error: {_one_line(err)}", file=sys.stderr)
        return EXIT_INPUT


if __name__ == "__main__":
    sys.exit(main())

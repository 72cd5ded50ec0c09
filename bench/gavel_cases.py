#!/usr/bin/env python3
"""Issue 12's three cases on Gavel's own jobs, next to Gavel's numbers.

The jobs are exactly those Gavel's simulator draws for the seed
(`--generator gavel`); the settings are those of Gavel's continuous sweeps
(EXPERIMENTS.md, scripts/sweeps/run_sweep_continuous.py): 36 V100 + 36 P100
+ 36 K80, Gavel's simulation_throughputs.json, 6-minute rounds, measuring
jobs 4000-4999.  Gavel's sweeps give each GPU its own server, but its
simulator runs every job at its consolidated throughput whatever servers it
got; here one 36-GPU node per type gives the same rates (on smaller nodes a
multi-GPU job spread over several would run at its unconsolidated rate).

    case 1: 1-GPU jobs, 2 jobs/h
    case 2: multi-GPU jobs (1/2/4/8 GPUs at 70/10/15/5%), 1 job/h
    case 3: multi-GPU jobs, 2 jobs/h

For each case the policy runs heterogeneity-aware and agnostic; printed:
average JCT (h) of the window's jobs and restarts per job (rounds in which a
job that held GPUs did not get the same GPUs back: the simulator's starts
after the first, since a job that keeps its type and servers keeps running
and every other one must start again before it finishes), next to Gavel's
numbers from issue 12 (max-min fairness only) and the ratios ours / Gavel.
Restarts are averaged two ways: over the window's jobs (the summary's
`restarts_per_job`) and over every job of the run, the basis of issue 12's
numbers (its "ours" column is that one); the ratio to Gavel uses the latter.

    nice python bench/gavel_cases.py                           # all three, one process
    python bench/gavel_cases.py --cases 1 --window 800:1000     # a quick look
    python bench/gavel_cases.py --cases 3 --reset-interval 0    # other options go to simulate

Options this script does not know are `slurm-gavel simulate` options
(e.g. --reset-interval, --checkpoint-seconds, and --restart-seconds where
the simulator has it); they apply to every run.  The throughput file is not
part of the project: pass --throughputs, or keep this workspace's default.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _default_throughputs() -> Path:
    from _paths import gavel_data  # bench/_paths.py, beside this script
    return gavel_data("simulation_throughputs.json")


from slurm_gavel.cli.main import build_parser  # noqa: E402
from slurm_gavel.cli.simulate import _run_config  # noqa: E402
from slurm_gavel.core.errors import InputError  # noqa: E402
from slurm_gavel.sim.experiments import check_config, simulate_config  # noqa: E402
from slurm_gavel.sim.simulator import summarize  # noqa: E402


@dataclass(frozen=True)
class Case:
    number: int
    title: str
    multi_gpu: bool
    rate: float
    # Gavel's max-min fairness on the same jobs (issue 12): avg JCT h aware, agnostic; restarts/job
    gavel_aware: float
    gavel_agnostic: float
    gavel_restarts: float


CASES = {
    1: Case(1, "1-GPU jobs, 2 jobs/h", False, 2.0, 17.02, 23.69, 5.5),
    2: Case(2, "multi-GPU jobs, 1 job/h", True, 1.0, 17.65, 24.79, 13.7),
    3: Case(3, "multi-GPU jobs, 2 jobs/h", True, 2.0, 20.26, 27.01, 74.3),
}
GAVEL_POLICY = "max_min_fairness"


def _ratio(a, b) -> str:
    return "n/a" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def _num(v, fmt="{:.2f}") -> str:
    return "n/a" if v is None else fmt.format(v)


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def bound_jct_hours(results, table, window, worker_types) -> float | None:
    """Average JCT of the window's jobs if each ran alone on its fastest GPU type (consolidated)
    from the second it arrived: no queueing, no rounds, no restarts.  No scheduler can beat it
    in this model (a job runs no faster than its best solo throughput), so it caps how far any
    policy can get below Gavel's JCT on the same jobs."""
    first, end = window if window else (0, len(results))
    chosen = [r for r in results if first <= int(r.id) < end]
    if not chosen:
        return None
    total = 0.0
    for r in chosen:
        solo = table.solo(r.job_type, r.scale_factor)
        total += r.total_steps / max(solo[wt] for wt in worker_types if wt in solo)
    return total / len(chosen) / 3600.0


def run_one(config) -> dict:
    """One run's summary, plus restarts per job over every job of the run (issue 12's basis)."""
    sim, table = simulate_config(config)
    row = {"policy": config.label, "rate": config.rate, "seed": config.seed,
           **summarize(sim, table, config.window, dict(config.prices))}
    results = list(sim.results.values())
    row["bound_jct_hours"] = bound_jct_hours(results, table, config.window,
                                             [wt for wt, _ in config.cluster])
    row["restarts_per_job_all_jobs"] = (sum(max(0, r.starts - 1) for r in results) / len(results)
                                        if results else None)
    return row


def run_all(configs, processes: int) -> list[dict]:
    if processes <= 1:
        return [run_one(c) for c in configs]
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(max_workers=processes) as pool:
        return list(pool.map(run_one, configs))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="other options are passed to `slurm-gavel simulate`")
    parser.add_argument("--cases", default="1,2,3", help="which cases (default: %(default)s)")
    parser.add_argument("--policy", default=GAVEL_POLICY,
                        help="policy (default: %(default)s; Gavel's numbers are for it only)")
    parser.add_argument("--seeds", default="0", help="workload seeds, averaged (default: %(default)s)")
    parser.add_argument("--processes", type=int, default=1,
                        help="worker processes (default: 1; the runs are long)")
    parser.add_argument("--throughputs", default=str(_default_throughputs()))
    parser.add_argument("--json", action="store_true", help="also print every run's summary as JSON")
    args, extra = parser.parse_known_args(argv)
    try:
        cases = [CASES[int(c)] for c in args.cases.split(",") if c.strip()]
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except (KeyError, ValueError):
        parser.error(f"--cases takes numbers from {sorted(CASES)}, --seeds integers")
    if not cases or not seeds:
        parser.error("give at least one case and one seed")
    if not Path(args.throughputs).exists():
        print(f"throughput file not found: {args.throughputs} (pass --throughputs)", file=sys.stderr)
        return 2
    # defaults first: a passed-through option given again wins (argparse keeps the last)
    sim_argv = ["simulate", "--policy", args.policy, "--throughputs", args.throughputs,
                "--generator", "gavel", "--window", "4000:5000", "--gpus-per-node", "36",
                "--cluster", "v100=36,p100=36,k80=36", "--round", "360", *extra]
    sim_args = build_parser().parse_args(sim_argv)
    if sim_args.multi_gpu or sim_args.rate is not None or sim_args.trace:
        parser.error("the cases fix --multi-gpu and --rate; no --trace")
    try:
        base = _run_config(sim_args, policy=args.policy)
        check_config(base)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    w = base.window
    print(f"Gavel's jobs (--generator gavel), seeds {','.join(map(str, seeds))}, window {w[0]}:{w[1]}, "
          f"{','.join(f'{t}={n}' for t, n in base.cluster)}, {base.round_seconds:g} s rounds, "
          f"{base.gpus_per_node} GPUs per node, reset interval {base.reset_seconds:g} s"
          + (f", extra: {' '.join(extra)}" if extra else ""))
    print(f"cpus {os.cpu_count()}, load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}",
          flush=True)
    header = (f"{'case':<28} {'policy':<26} {'JCT h':>7} {'Gavel':>7} {'ratio':>6} "
              f"{'restarts: window':>16} {'all jobs':>8} {'Gavel':>6} {'ratio':>6} {'util':>6} {'wall s':>7}")
    print(header)
    results = []
    for case in cases:
        config = replace(base, multi_gpu=case.multi_gpu)
        rows = run_all([replace(config, agnostic=agnostic, rate=case.rate, seed=seed)
                        for agnostic in (False, True) for seed in seeds], args.processes)
        by = {}
        for agnostic in (False, True):
            mine = [r for r in rows if r["policy"].endswith("_agnostic") == agnostic]
            by[agnostic] = {
                "jct": _mean([r["average_jct_hours"] for r in mine]),
                "bound": _mean([r["bound_jct_hours"] for r in mine]),
                "restarts": _mean([r["restarts_per_job"] for r in mine]),
                "restarts_all": _mean([r["restarts_per_job_all_jobs"] for r in mine]),
                "util": _mean([r["utilization_total"] for r in mine]),
                "wall": sum(r["wall_seconds"] for r in mine),
                "complete": all(r["complete"] for r in mine),
                "label": mine[0]["policy"],
            }
            g_jct = (case.gavel_agnostic if agnostic else case.gavel_aware) \
                if args.policy == GAVEL_POLICY else None
            g_restarts = case.gavel_restarts if args.policy == GAVEL_POLICY and not agnostic else None
            b = by[agnostic]
            print(f"{case.number}: {case.title:<25} {b['label']:<26} {_num(b['jct']):>7} {_num(g_jct):>7} "
                  f"{_ratio(b['jct'], g_jct):>6} {_num(b['restarts']):>16} {_num(b['restarts_all']):>8} "
                  f"{_num(g_restarts, '{:.1f}'):>6} {_ratio(b['restarts_all'], g_restarts):>6} "
                  f"{_num(b['util'], '{:.1%}'):>6} "
                  f"{b['wall']:7.1f}" + ("" if b["complete"] else "  INCOMPLETE"), flush=True)
        ours = _ratio(by[True]["jct"], by[False]["jct"])
        gavel = _ratio(case.gavel_agnostic, case.gavel_aware) if args.policy == GAVEL_POLICY else "n/a"
        print(f"{'':<28} agnostic / aware JCT: ours {ours}, Gavel {gavel}", flush=True)
        bound = by[False]["bound"]
        if args.policy == GAVEL_POLICY and bound is not None:
            print(f"{'':<28} bound (every job alone on its fastest type from arrival): {bound:.2f} h"
                  f" = {bound / case.gavel_aware:.3f} of Gavel's aware JCT", flush=True)
        results.extend(rows)
    if args.json:
        print(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

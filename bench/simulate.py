#!/usr/bin/env python3
"""Wall time of a full simulation, and how a sweep uses the machine's cores.

The run of issue 3's target: continuous-single workload (Gavel's generator,
seed 0), 2 jobs/hour, max-min fairness, Gavel's measured throughputs, a
36:36:36 cluster, 6-minute rounds, stopping when jobs 4000-4999 are done
(the steady-state window).  Printed per policy: wall seconds, rounds,
solves, seconds inside the policy, and the rest per round (the engine, the
mechanism and the simulated cluster).

Then a small sweep (4 runs) in 1 and in 2 worker processes: on a machine
with two free cores the second should take about half the first.  The
machine is noisy: read ratios within one run of this script.

    python bench/simulate.py                    # the full 5000-job runs (a few minutes)
    python bench/simulate.py --window 800:1000  # smaller, for a quick look

The throughput file is not part of the project: pass --throughputs, or keep
the default path of this workspace (../shared/data/gavel/...).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DEFAULT_THROUGHPUTS = ROOT.parent / "shared" / "data" / "gavel" / "simulation_throughputs.json"

from slurm_gavel.sim.experiments import RunConfig, run, sweep  # noqa: E402


def _load() -> str:
    """The 1, 5 and 15-minute load averages: how busy the machine was."""
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--throughputs", default=str(DEFAULT_THROUGHPUTS))
    parser.add_argument("--window", default="4000:5000", help="FIRST:END job ids (default: %(default)s)")
    parser.add_argument("--rate", type=float, default=2.0)
    parser.add_argument("--sweep-window", default="300:400",
                        help="window of each sweep run (default: %(default)s)")
    parser.add_argument("--skip-sweep", action="store_true")
    parser.add_argument("--only", choices=("aware", "agnostic"),
                        help="run only the aware or only the agnostic policy")
    args = parser.parse_args()
    if not Path(args.throughputs).exists():
        print(f"throughput file not found: {args.throughputs} (pass --throughputs)", file=sys.stderr)
        return 2
    first, end = map(int, args.window.split(":"))
    base = RunConfig(policy="max_min_fairness", throughputs=args.throughputs, rate=args.rate,
                     window=(first, end), seed=0)
    print(f"full simulation: max-min fairness, rate {args.rate}/h, window {first}:{end}, "
          f"36:36:36, 360 s rounds, cpus {os.cpu_count()}, load average {_load()}")
    print(f"{'policy':<28} {'wall s':>8} {'rounds':>7} {'solves':>7} {'policy s':>9} "
          f"{'ms/solve':>9} {'rest ms/round':>14} {'avg JCT h':>10}")
    for agnostic in (False, True):
        if args.only and args.only != ("agnostic" if agnostic else "aware"):
            continue
        row = run(replace(base, agnostic=agnostic))
        rest = (row["wall_seconds"] - row["solve_seconds"]) / max(row["rounds"], 1) * 1e3
        print(f"{row['policy']:<28} {row['wall_seconds']:8.1f} {row['rounds']:7d} {row['solves']:7d} "
              f"{row['solve_seconds']:9.1f} {row['solve_seconds'] / max(row['solves'], 1) * 1e3:9.2f} "
              f"{rest:14.3f} {row['average_jct_hours']:10.2f}", flush=True)
    print(f"load average after: {_load()}")
    if args.skip_sweep:
        return 0
    a, b = map(int, args.sweep_window.split(":"))
    small = replace(base, window=(a, b))
    policies = [("max_min_fairness", False), ("max_min_fairness", True)]
    times = {}
    for processes in (1, 2):
        started = time.perf_counter()
        sweep(small, policies, [2.0, 3.0], [0], processes=processes)
        times[processes] = time.perf_counter() - started
    print(f"sweep of 4 runs (window {a}:{b}): 1 process {times[1]:.1f} s, 2 processes "
          f"{times[2]:.1f} s, speedup {times[1] / times[2]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

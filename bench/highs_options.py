#!/usr/bin/env python3
"""HiGHS' dual against its primal simplex on the max-min LPs a simulation solves.

Runs one simulation (max-min fairness, Gavel's throughputs, 36:36:36,
6-minute rounds, 2 jobs/h) and records the arguments of every max-min LP
that `policies/direct.py` hands to HiGHS.  Then solves them all again in
this process, alternating three times: with the simplex strategy that
`direct._strategy` picks (primal where the rates are within PRIMAL_RANGE of
each other) and with the dual simplex forced.  Printed: microseconds a solve
(fastest of the three), how many LPs took the primal route, and the largest difference between the two routes' X.

    python bench/highs_options.py --window 1000:1500

Gavel's throughput table ships in the package (slurm_gavel.estimator.gavel_data);
--throughputs picks another.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_gavel.policies import direct  # noqa: E402
from slurm_gavel.sim.experiments import RunConfig, run  # noqa: E402


def record(config: RunConfig) -> list:
    """The (args, kwargs) of every direct.max_min call of one simulation."""
    calls, real = [], direct.max_min

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    direct.max_min = spy
    try:
        run(config)
    finally:
        direct.max_min = real
    return calls


def solve_all(calls: list, force_dual: bool) -> tuple[float, list]:
    """Seconds to solve every recorded LP, and the solutions."""
    real = direct._solve
    if force_dual:
        direct._solve = lambda *args, **kw: real(*args[:8], direct.DUAL, **kw)
    started = time.perf_counter()
    try:
        out = [direct.max_min(*args, **kwargs) for args, kwargs in calls]
    finally:
        direct._solve = real
    return time.perf_counter() - started, out


def main() -> int:
    from _paths import gavel_data
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--throughputs", default=str(gavel_data("simulation_throughputs.json")))
    parser.add_argument("--window", default="1000:1500")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not Path(args.throughputs).exists():
        print(f"throughput file not found: {args.throughputs} (pass --throughputs)", file=sys.stderr)
        return 2
    first, end = map(int, args.window.split(":"))
    calls = record(RunConfig(policy="max_min_fairness", throughputs=args.throughputs, rate=2.0,
                             window=(first, end), seed=0))
    primal = sum(direct._strategy(np.asarray(a[0])[:, None] * np.asarray(a[1])) == direct.PRIMAL
                 for a, _ in calls)
    print(f"{len(calls)} max-min LPs (window {first}:{end}); {primal} take the primal route; "
          f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    best = {True: np.inf, False: np.inf}
    results = {}
    for _ in range(args.repeat):
        for force_dual in (False, True):
            seconds, out = solve_all(calls, force_dual)
            best[force_dual] = min(best[force_dual], seconds)
            results[force_dual] = out
    for force_dual, label in ((False, "chosen (primal where it applies)"), (True, "dual forced")):
        print(f"{label:<34} {best[force_dual] / len(calls) * 1e6:7.0f} us a solve")
    dx = max(float(np.abs(a.x - b.x).max()) for a, b in zip(results[False], results[True]))
    print(f"dual / chosen: {best[True] / best[False]:.2f}x; largest |X difference| {dx:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""One policy at high load on Gavel's jobs, with one mechanism or policy knob changed.

The case: Gavel's generator (`--generator gavel`), seed 0, 5.6 jobs/h, 1-GPU
jobs, 36 V100 + 36 P100 + 36 K80, jobs 4000-4999 measured; the default
mechanism settings unless a knob below changes one.  Prints one JSON line
per run (the knobs and the simulator's summary), so that several runs can be
compared side by side:

    nice python bench/high_load.py                                  # LAS as shipped
    nice python bench/high_load.py --restart-seconds 0              # starts cost nothing
    nice python bench/high_load.py --no-pareto                      # one-stage max-min
    nice python bench/high_load.py --round 720 --policy fifo --agnostic

`--no-pareto` turns off the second stage of the max-min and FTF policies
(`LinearPolicy.pareto`), i.e. the policy Gavel's simulator solves, but with
HiGHS's vertex in place of ECOS's interior point.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import slurm_gavel.policies as policies  # noqa: E402
from slurm_gavel.sim.experiments import RunConfig, run  # noqa: E402
from _paths import gavel_data  # noqa: E402


def _inner(policy):
    while hasattr(policy, "policy"):
        policy = policy.policy
    return policy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="max_min_fairness")
    parser.add_argument("--agnostic", action="store_true")
    parser.add_argument("--rate", type=float, default=5.6)
    parser.add_argument("--window", default="4000:5000")
    parser.add_argument("--round", type=float, default=360.0)
    parser.add_argument("--restart-seconds", type=float)
    parser.add_argument("--hysteresis", type=float)
    parser.add_argument("--move-hysteresis", type=float)
    parser.add_argument("--lease-load-exponent", type=float)
    parser.add_argument("--max-lease-scale", type=float)
    parser.add_argument("--reset-interval", type=float)
    parser.add_argument("--no-work-conserving", action="store_true")
    parser.add_argument("--no-mid-round-starts", action="store_true")
    parser.add_argument("--no-pareto", action="store_true")
    parser.add_argument("--throughputs", default=str(gavel_data("simulation_throughputs.json")))
    args = parser.parse_args()

    first, end = map(int, args.window.split(":"))
    knobs = {"round_seconds": args.round, "work_conserving": not args.no_work_conserving,
             "mid_round_starts": not args.no_mid_round_starts}
    for name in ("restart_seconds", "hysteresis", "move_hysteresis", "lease_load_exponent",
                 "max_lease_scale"):
        if getattr(args, name) is not None:
            knobs[name] = getattr(args, name)
    if args.reset_interval is not None:
        knobs["reset_seconds"] = args.reset_interval
    config = RunConfig(policy=args.policy, throughputs=args.throughputs, rate=args.rate,
                       window=(first, end), seed=0, generator="gavel", agnostic=args.agnostic,
                       **knobs)
    make_policy = policies.make_policy

    def make(*a, **k):
        policy = make_policy(*a, **k)
        if args.no_pareto:
            _inner(policy).pareto = False
        return policy

    policies.make_policy = make            # simulate_config imports it from the package
    started = time.perf_counter()
    try:
        summary = run(config)
    finally:
        policies.make_policy = make_policy
    print(json.dumps({"config": {k: v for k, v in asdict(config).items() if k != "throughputs"},
                      "pareto": not args.no_pareto, "wall_seconds": round(time.perf_counter() - started, 1),
                      "summary": summary}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

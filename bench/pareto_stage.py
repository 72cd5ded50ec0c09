#!/usr/bin/env python3
"""What the Pareto stage of the max-min policies does to allocations and solve time.

Runs one simulation (Gavel's throughputs, 36:36:36, 6-minute rounds) and
records every policy input it solves.  Printed for the run: average JCT,
restarts per job, utilization per type; per solve, averaged over the run:
the mean normalized throughput (throughput / isolated throughput) and the
share of each type's GPUs the allocation uses.  Then the recorded inputs are
solved again, in this process, with the Pareto stage on and off
(`LinearPolicy.pareto`), three times each, alternating; the fastest of each
is printed and their ratio.  Simulation results are deterministic; times
depend on the machine's load (printed).

    python bench/pareto_stage.py --window 1000:1500
    python bench/pareto_stage.py --window 1000:1500 --multi-gpu --gpus-per-node 36
    python bench/pareto_stage.py --window 1000:1500 --no-pareto    # the run without the stage

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

import slurm_gavel.policies as policies  # noqa: E402
from slurm_gavel.sim.experiments import RunConfig, run  # noqa: E402


def _default_throughputs() -> Path:
    from _paths import gavel_data  # bench/_paths.py, beside this script
    return gavel_data("simulation_throughputs.json")


def inner(policy):
    while hasattr(policy, "policy"):
        policy = policy.policy
    return policy


class Recorder:
    """A policy that remembers its inputs and what its allocations do."""

    def __init__(self, policy):
        self.policy = policy
        self.name, self.summary = policy.name, policy.summary
        self.supports_space_sharing = policy.supports_space_sharing
        self.inputs, self.normalized, self.used = [], [], []

    def allocate(self, inp):
        allocation = self.policy.allocate(inp)
        self.inputs.append(inp)
        if inp.n_jobs:
            iso = inp.isolated_throughputs()
            self.normalized.append(float(np.mean(allocation.effective_throughputs(inp) / iso)))
            self.used.append(allocation.gpus_used(inp.scale_factors.astype(float)) / inp.counts)
        return allocation


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="max_min_fairness")
    parser.add_argument("--throughputs", default=str(_default_throughputs()))
    parser.add_argument("--rate", type=float, default=2.0)
    parser.add_argument("--window", default="1000:1500")
    parser.add_argument("--multi-gpu", action="store_true")
    parser.add_argument("--gpus-per-node", type=int, default=4)
    parser.add_argument("--agnostic", action="store_true")
    parser.add_argument("--no-pareto", action="store_true", help="simulate without the Pareto stage")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not Path(args.throughputs).exists():
        print(f"throughput file not found: {args.throughputs} (pass --throughputs)", file=sys.stderr)
        return 2
    first, end = map(int, args.window.split(":"))
    made = []
    make_policy = policies.make_policy

    def make(*a, **k):
        policy = make_policy(*a, **k)
        if args.no_pareto:
            inner(policy).pareto = False
        made.append(Recorder(policy))
        return made[-1]

    policies.make_policy = make            # simulate_config imports it from the package
    try:
        config = RunConfig(policy=args.policy, throughputs=args.throughputs, rate=args.rate,
                           window=(first, end), seed=0, multi_gpu=args.multi_gpu,
                           agnostic=args.agnostic, gpus_per_node=args.gpus_per_node)
        summary = run(config)
    finally:
        policies.make_policy = make_policy
    (recorder,) = made
    types = recorder.inputs[-1].worker_types
    used = np.mean(recorder.used, axis=0)
    print(f"{config.label} rate {args.rate}/h window {args.window} multi-GPU {args.multi_gpu} "
          f"pareto {not args.no_pareto}; load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"  average JCT {summary['average_jct_hours']:.2f} h, restarts/job {summary['restarts_per_job']:.2f}, "
          "utilization " + ", ".join(f"{t} {u:.1%}" for t, u in summary["utilization"].items()))
    print(f"  per solve ({len(recorder.inputs)}): mean normalized throughput {np.mean(recorder.normalized):.3f}; "
          "GPUs allocated " + ", ".join(f"{t} {u:.1%}" for t, u in zip(types, used)))
    times = {False: [], True: []}
    for _ in range(args.repeats):
        for pareto in (False, True):
            policy = make_policy(args.policy, agnostic=args.agnostic)
            inner(policy).pareto = pareto
            started = time.perf_counter()
            for inp in recorder.inputs:
                policy.allocate(inp)
            times[pareto].append(time.perf_counter() - started)
    off, on = min(times[False]), min(times[True])
    n = len(recorder.inputs)
    print(f"  re-solving the {n} inputs: one stage {off:.2f} s ({1e3 * off / n:.3f} ms each), "
          f"with the Pareto stage {on:.2f} s ({1e3 * on / n:.3f} ms each), ratio {on / off:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

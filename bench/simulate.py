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

Gavel's throughput table ships in the package (slurm_gavel.estimator.gavel_data);
--throughputs picks another.

Before and after a change (`--versions`): the same `slurm-gavel simulate`
command run on each source tree given (e.g. a `git worktree` of main and this
one), alternating, `--repeat` times each, each in its own process.  Printed
per run: the simulation's wall seconds (`wall_seconds` of the summary), the
whole process's seconds (imports included) and CPU seconds (user + system:
less moved by other processes on a busy machine), seconds in the policy, rounds,
solves, and a digest of the summary (less its timings) and of the per-job
CSV: equal digests mean the results did not change.  The machine is noisy:
read the ratios of runs next to each other.

    python bench/simulate.py --versions /work/main . --repeat 2
    python bench/simulate.py --versions /work/main . -- --multi-gpu --gpus-per-node 36 --rate 1
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from slurm_gavel.estimator.gavel_data import gavel_data  # noqa: E402
from slurm_gavel.sim.experiments import RunConfig, run, sweep  # noqa: E402

DEFAULT_THROUGHPUTS = gavel_data("simulation_throughputs.json")


def _load() -> str:
    """The 1, 5 and 15-minute load averages: how busy the machine was."""
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


TIMINGS = ("wall_seconds", "solve_seconds")      # the summary's fields that vary run to run


def _one(root: Path, command: list[str]) -> dict:
    """`slurm-gavel simulate COMMAND` on the source tree at `root`, in a fresh process."""
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = Path(tmp) / "jobs.csv"
        env = dict(os.environ, PYTHONPATH=str(root))
        started = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run([sys.executable, "-m", "slurm_gavel", "simulate", *command, "--json",
                              "--quiet", "--csv", str(csv_path)],
                             cwd=root, env=env, capture_output=True, text=True, check=True)
        process = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        summary = json.loads(out.stdout)
        kept = {k: v for k, v in summary.items() if k not in TIMINGS}
        digest = hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:10]
        return {**summary, "process_seconds": process, "cpu_seconds": cpu, "summary_digest": digest,
                "csv_digest": hashlib.sha256(csv_path.read_bytes()).hexdigest()[:10]}


def compare(roots: list[str], command: list[str], repeat: int) -> int:
    """Run `command` on each tree in turn, `repeat` rounds; print one line per run and the ratios."""
    trees = [Path(r).resolve() for r in roots]
    print(f"slurm-gavel simulate {' '.join(command)}")
    print(f"cpus {os.cpu_count()}, load average {_load()}")
    print(f"{'tree':<28} {'wall s':>7} {'process s':>9} {'cpu s':>6} {'policy s':>8} {'rounds':>7} {'solves':>7} "
          f"{'avg JCT h':>9} {'summary':>10} {'csv':>10}")
    walls: dict[Path, list[float]] = {t: [] for t in trees}
    cpus: dict[Path, list[float]] = {t: [] for t in trees}
    digests = set()
    for _ in range(repeat):
        for tree in trees:
            row = _one(tree, command)
            walls[tree].append(row["wall_seconds"])
            cpus[tree].append(row["cpu_seconds"])
            digests.add((row["summary_digest"], row["csv_digest"]))
            print(f"{str(tree)[-28:]:<28} {row['wall_seconds']:7.2f} {row['process_seconds']:9.2f} "
                  f"{row['cpu_seconds']:6.2f} "
                  f"{row['solve_seconds']:8.2f} {row['rounds']:7d} {row['solves']:7d} "
                  f"{row['average_jct_hours']:9.3f} {row['summary_digest']:>10} {row['csv_digest']:>10}",
                  flush=True)
    first = trees[0]
    for tree in trees[1:]:
        ratios = [a / b for a, b in zip(walls[first], walls[tree])]
        print(f"wall {first.name} / {tree.name}: " + ", ".join(f"{r:.2f}x" for r in ratios))
        ratios = [a / b for a, b in zip(cpus[first], cpus[tree])]
        print(f"cpu  {first.name} / {tree.name}: " + ", ".join(f"{r:.2f}x" for r in ratios))
    print(f"load average after: {_load()}; results "
          + ("identical in every run" if len(digests) == 1 else f"DIFFER ({len(digests)} digests)"))
    return 0 if len(digests) == 1 else 1


def main() -> int:
    if "--versions" in sys.argv:
        parser = argparse.ArgumentParser(description="the same simulation on several source trees")
        parser.add_argument("--versions", nargs="+", required=True, metavar="TREE")
        parser.add_argument("--repeat", type=int, default=2)
        parser.add_argument("--throughputs", default=str(DEFAULT_THROUGHPUTS))
        argv, _, extra = " ".join(sys.argv[1:]).partition(" -- ")
        args = parser.parse_args(argv.split())
        command = (["--policy", "max_min_fairness", "--rate", "2", "--window", "4000:5000"]
                   if not extra else extra.split())
        if "--throughputs" not in command:
            command += ["--throughputs", str(Path(args.throughputs).resolve())]
        if "--policy" not in command:
            command += ["--policy", "max_min_fairness"]
        return compare(args.versions, command, args.repeat)
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

#!/usr/bin/env python3
"""Our simulator against Gavel's own, on issue 12's run, alternating in one script.

The run: heterogeneity-aware max-min fairness, seed 0, one job every 1800 s
(2 jobs/h), 36 V100 + 36 P100 + 36 K80, 6-minute
rounds, until jobs 4000-4999 are done.  Each simulator runs in a process of
its own, `nice`d, alternating `--repeat` times; printed per run: CPU seconds
(user + system of the process, imports included), wall seconds, the 1-minute
load average after it, and the average JCT the run reports.  Then the ratio
Gavel / ours of each run of Gavel's to the runs of ours next to it.  The
machine is noisy: read the ratios of neighbouring runs.  Our simulator draws
its jobs with its own generator (issue 12's "5000-job run") or, with
`--generator gavel`, exactly the jobs Gavel's run simulates.

Gavel's code is not part of the project.  Export it from its repository
(`git archive` of stanford-futuredata/gavel) and give its `scheduler/`
folder and a Python with its requirements (numpy, scipy, cvxpy, ...):

    python bench/versus_gavel.py --gavel /tmp/gavelsim/scheduler --gavel-python /tmp/gavelvenv/bin/python
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _paths import gavel_data  # noqa: E402


def timed(command: list[str], cwd: Path, env: dict | None = None) -> tuple[float, float, str]:
    """(CPU seconds, wall seconds, stdout) of `command` run to the end in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = subprocess.run(["nice", *command], cwd=cwd, env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall, out.stdout + out.stderr


def ours(throughputs: Path, generator: str) -> tuple[float, float, float]:
    cpu, wall, out = timed([sys.executable, "-m", "slurm_gavel", "simulate", "--generator", generator,
                            "--policy", "max_min_fairness", "--rate", "2", "--window", "4000:5000",
                            "--throughputs", str(throughputs), "--json", "--quiet"],
                           ROOT, dict(os.environ, PYTHONPATH=str(ROOT)))
    return cpu, wall, json.loads(out[out.index("{"):])["average_jct_hours"]


def gavels(scheduler: Path, python: str, throughputs: Path) -> tuple[float, float, float]:
    cpu, wall, out = timed([python, "scripts/drivers/simulate_scheduler_with_generated_jobs.py",
                            "-c", "36:36:36", "-p", "max_min_fairness_perf", "-l", "1800",
                            "-s", "4000", "-e", "5000", "--seed", "0", "-i", "360", "-v",
                            "--throughputs_file", str(throughputs)], scheduler)
    # its driver's summary line, in seconds (without -v the driver prints nothing at all)
    found = re.search(r"average JCT=([0-9.]+)", out)
    return cpu, wall, (float(found.group(1)) / 3600 if found else float("nan"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gavel", required=True, type=Path, help="Gavel's scheduler/ folder")
    parser.add_argument("--gavel-python", required=True, help="a Python with Gavel's requirements")
    parser.add_argument("--throughputs", type=Path, default=gavel_data("simulation_throughputs.json"))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--generator", choices=("ours", "gavel"), default="ours",
                        help="our simulator's jobs: its own generator (issue 12's run, the default) "
                             "or Gavel's (the very jobs Gavel's run simulates)")
    args = parser.parse_args()
    throughputs = args.throughputs.resolve()
    if not throughputs.exists():
        print(f"throughput file not found: {throughputs} (pass --throughputs)", file=sys.stderr)
        return 2
    print(f"cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}")
    print(f"{'run':<6} {'simulator':<9} {'cpu s':>7} {'wall s':>7} {'load':>5} {'avg JCT h':>9}")
    rows = []
    for i in range(args.repeat):
        order = (("ours", ours), ("Gavel", None)) if i % 2 == 0 else (("Gavel", None), ("ours", ours))
        for name, run in order:
            cpu, wall, jct = (run(throughputs, args.generator) if run
                              else gavels(args.gavel, args.gavel_python, throughputs))
            rows.append((name, cpu, wall))
            print(f"{len(rows):<6} {name:<9} {cpu:7.2f} {wall:7.2f} {os.getloadavg()[0]:5.2f} {jct:9.2f}",
                  flush=True)
    for i, (name, cpu, wall) in enumerate(rows):
        if name != "Gavel":
            continue
        for j in (i - 1, i + 1):
            if 0 <= j < len(rows) and rows[j][0] == "ours":
                print(f"Gavel run {i + 1} / ours run {j + 1}: cpu {cpu / rows[j][1]:.1f}x, "
                      f"wall {wall / rows[j][2]:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

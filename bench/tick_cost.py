#!/usr/bin/env python3
"""A tick between rounds on a real local Slurm cluster: the cheap look against the full read.

Starts a local cluster (3 GPU types x 2 nodes x 4 GPUs), submits N held gavel jobs (default
300), runs the daemon's first round in-process (it starts 24 of them) and its ticks until
every start is confirmed, then times the daemon's own tick (`Daemon._tick`) K times each
way, with the bytes the Slurm commands wrote to it:

* light: what a quiet tick does now: `SlurmCLI.job_states` (`squeue --only-job-state` on
  23.11+, a three-column squeue before), nothing else (slurm/backend/looks.py);
* full: what every tick did before, and a tick still does when something changed: the
  look, then `squeue --json`, the node listing and the partitions' states, the engine's
  observation and the status rows for gqueue.

Needs root, Slurm and MUNGE (as the tests do).

    python bench/tick_cost.py                 # 300 held jobs, 10 ticks each way
    python bench/tick_cost.py --jobs 500 --ticks 20
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._cluster import local_cluster, no_cluster  # noqa: E402
from slurm_gavel.daemon import config as config_mod  # noqa: E402
from slurm_gavel.daemon.daemon import Daemon  # noqa: E402
from slurm_gavel.devcluster import slurm_version  # noqa: E402

TYPES = {"v100": (2, 4), "p100": (2, 4), "k80": (2, 4)}
TOY_TABLE = ROOT / "examples" / "toy_throughputs.json"


def submit(cluster, directory: Path, n: int) -> None:
    script = directory / "job.sh"
    script.write_text("#!/bin/bash\nsleep 3600\n")
    for _ in range(n):
        cluster.run(["sbatch", "--parsable", "-o", "/dev/null", "--comment", "gavel model=convnet steps=1000",
                     "--gres=gpu:1", str(script)])


def measure(d: Daemon, ticks: int) -> tuple[list[float], list[int], dict[str, int]]:
    """Wall seconds and bytes read of each of `ticks` ticks, and the commands they ran."""
    got = {"bytes": 0}
    run = d.cli.run

    def counted(args, *a, **kw):
        done = run(args, *a, **kw)
        got["bytes"] += len(done.stdout or "")
        return done
    d.cli.run = counted
    before = dict(d.cli.commands)
    times, sizes = [], []
    try:
        for _ in range(ticks):
            got["bytes"] = 0
            started = time.perf_counter()
            d._tick()
            times.append(time.perf_counter() - started)
            sizes.append(got["bytes"])
    finally:
        d.cli.run = run
    return times, sizes, {k: v - before.get(k, 0) for k, v in d.cli.commands.items() if v - before.get(k, 0)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--ticks", type=int, default=10)
    args = ap.parse_args(argv)
    if no_cluster():
        return 2
    with tempfile.TemporaryDirectory(prefix="gv-tick-") as tmp:
        tmp = Path(tmp)
        with local_cluster(tmp, TYPES) as cluster:
            submit(cluster, tmp, args.jobs)
            (tmp / "gavel.toml").write_text(
                f'slurm_conf = "{cluster.slurm_conf}"\ndatabase = "{tmp / "gavel.db"}"\n'
                f'progress_dir = "{tmp}"\nthroughputs = "{TOY_TABLE}"\npolicy = "max_min_fairness"\n'
                f"round_seconds = 3600\ntick_seconds = 10\n")
            d = Daemon(config_mod.load(str(tmp / "gavel.toml")))
            try:
                d.engine.plan()                  # round 0: starts 24 jobs
                deadline = time.time() + 120
                while d.backend._starting and time.time() < deadline:
                    time.sleep(1)
                    d._tick()                    # confirms the starts
                d._tick()
                light = measure(d, args.ticks)
                d.backend.full_read_seconds = 0.0      # every tick reads in full, as before
                full = measure(d, args.ticks)
            finally:
                d.engine.allocator.close()
                d.store.close()
                d.lock.release()
    major, minor, micro = slurm_version()
    version = f"{major}.{minor:02d}.{micro}"
    running = sum(1 for j in d.backend._jobs.values() if j.running)
    print(f"Slurm {version}: {len(d.backend._jobs)} gavel jobs listed ({running} running), "
          f"{args.ticks} ticks each way")
    for name, (times, sizes, commands) in (("light", light), ("full", full)):
        print(f"  {name:5s} tick: median {statistics.median(times) * 1000:7.1f} ms (max "
              f"{max(times) * 1000:7.1f} ms), {statistics.median(sizes) / 1024:8.1f} KiB read; commands "
              + ", ".join(f"{k} {v}" for k, v in sorted(commands.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())

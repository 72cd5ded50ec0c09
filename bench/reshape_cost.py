#!/usr/bin/env python3
"""What reshaping a distributed job costs the daemon's round, on a real local Slurm cluster.

Starts a local cluster (3 GPU types x 2 nodes x 4 GPUs, the repository's
job_submit.lua), submits N held gavel jobs of each kind, and times the one
`scontrol update` per job that a start sends, without releasing the jobs (so
that each round finds them pending again):

* plain: a one-node job (`--gres=gpu:1`): Partition, NodeList, StartTime;
* reshape: a distributed job (`--gpus=4`): the same plus NumNodes=k-k and
  Gres=gpu:m (`SlurmCLI.reshape`), alternating 2x2 and 1x4 between rounds.

Prints the Slurm calls and the median and 90th-percentile seconds per call of each
kind.  Needs root, Slurm and MUNGE (as the tests do).

    python bench/reshape_cost.py              # 20 jobs of each kind, 5 rounds
    python bench/reshape_cost.py --jobs 50 --rounds 3
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_gavel.slurm.commands import SlurmCLI  # noqa: E402
from slurm_gavel.devcluster import DEFAULT_TYPES  # noqa: E402

from _cluster import local_cluster, no_cluster, summary  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=20, help="held jobs of each kind (default 20)")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    if no_cluster():
        return 2
    with tempfile.TemporaryDirectory(prefix="gavel-reshape-") as tmp, \
            local_cluster(Path(tmp), DEFAULT_TYPES) as cluster:
        return _measure(cluster, args.jobs, args.rounds)


def _submit(cluster, request) -> str:
    out = cluster.run(["sbatch", "--parsable", "-o", "/dev/null", "--comment", "gavel model=convnet",
                       *request, "--wrap=sleep 1"], cwd="/tmp").stdout
    return out.strip().split(";")[0]


def _measure(cluster, jobs: int, rounds: int) -> int:
    cli = SlurmCLI(env=cluster.env)
    plain = [_submit(cluster, ["--gres=gpu:1"]) for _ in range(jobs)]
    wide = [_submit(cluster, ["--gpus=4"]) for _ in range(jobs)]
    types = list(DEFAULT_TYPES)
    seconds: dict[str, list[float]] = {"plain": [], "reshape": []}
    calls = {"plain": 0, "reshape": 0}
    for r in range(rounds):
        wt = types[r % len(types)]
        for job in plain:
            before, t0 = cli.calls, time.perf_counter()
            cli.update([job], Partition=wt, NodeList=f"{wt}-0", StartTime="now")
            seconds["plain"].append(time.perf_counter() - t0)
            calls["plain"] += cli.calls - before
        nodes = [f"{wt}-0", f"{wt}-1"] if r % 2 == 0 else [f"{wt}-1"]
        for job in wide:
            before, t0 = cli.calls, time.perf_counter()
            cli.reshape(job, wt, nodes, 4 // len(nodes))
            seconds["reshape"].append(time.perf_counter() - t0)
            calls["reshape"] += cli.calls - before
    version = ".".join(map(str, cli.version()))
    print(f"Slurm {version}: {jobs} held jobs of each kind, {rounds} rounds")
    for kind, values in seconds.items():
        print(f"  {kind:8} {len(values):4} updates, {calls[kind] / len(values):.2f} Slurm calls each, "
              f"{summary(values)}")
    cluster.run(["scancel", *plain, *wide], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())

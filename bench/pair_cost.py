#!/usr/bin/env python3
"""What running a pair (space sharing) costs the daemon's round, on a real local Slurm cluster.

Starts a local cluster with gres/shard (two nodes of 4 GPUs, 4 shards per GPU; the
repository's job_submit.lua with GAVEL_SHARDS_PER_GPU = 4), then:

1. update: the one `scontrol update` a start sends, for N held one-GPU gavel jobs
   (stored as --gres=shard:4), without releasing them: alone (Partition,
   NodeList, StartTime; the shard count already right) against as half of a pair
   (the same plus Gres=shard:2), for some rounds;
2. start: P pairs planned in one round on one node, through SlurmBackend (one
   pair per release, the node's next once Slurm lists the previous one on its
   GPU, within the same call: docs/space-sharing.md): the seconds from the plan
   until every job runs and each pair shares its GPU, the polls and the Slurm
   calls it took.

Needs root, Slurm and MUNGE (as the tests do).

    python bench/pair_cost.py                 # 20 jobs, 5 rounds, 4 pairs
    python bench/pair_cost.py --jobs 50 --rounds 3 --pairs 2
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_gavel.core.clock import WallClock  # noqa: E402
from slurm_gavel.core.plan import Assignment, RoundPlan  # noqa: E402
from slurm_gavel.slurm.backend import SlurmBackend  # noqa: E402
from slurm_gavel.slurm.commands import SlurmCLI  # noqa: E402

from _cluster import local_cluster, no_cluster, summary  # noqa: E402

TYPES = {"v100": (2, 4)}
SHARDS = 4
TICK = 0.5


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=20, help="held jobs for the update timing (default 20)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--pairs", type=int, default=4, help="pairs started on one node (at most 4)")
    args = p.parse_args(argv)
    if no_cluster():
        return 2
    with tempfile.TemporaryDirectory(prefix="gavel-pairs-") as tmp, \
            local_cluster(Path(tmp), TYPES, shards=SHARDS) as cluster:
        _updates(cluster, args.jobs, args.rounds)
        return _starts(cluster, min(4, args.pairs))


def _submit(cluster, script: str = "sleep 1") -> str:
    out = cluster.run(["sbatch", "--parsable", "-o", "/dev/null", "--comment", "gavel model=convnet",
                       "--gres=gpu:1", f"--wrap={script}"], cwd="/tmp").stdout
    return out.strip().split(";")[0]


def _updates(cluster, jobs: int, rounds: int) -> None:
    cli = SlurmCLI(env=cluster.env)
    held = [_submit(cluster) for _ in range(jobs)]
    seconds: dict[str, list[float]] = {"alone": [], "paired": []}
    for r in range(rounds):
        node = f"v100-{r % 2}"
        for k, job in enumerate(held):
            # each job alternates: alone (all its GPU's shards, as submitted), then paired
            kind = "paired" if (k + r) % 2 else "alone"
            extra = {"Gres": f"shard:{SHARDS // 2}"} if kind == "paired" else {"Gres": f"shard:{SHARDS}"}
            if kind == "alone" and r == 0:
                extra = {}                        # as submitted: the count is right already
            t0 = time.perf_counter()
            cli.update([job], Partition="v100", NodeList=node, StartTime="now", **extra)
            seconds[kind].append(time.perf_counter() - t0)
    v = cli.version()
    print(f"Slurm {'.'.join([str(v[0]), *(f'{x:02d}' for x in v[1:2]), *map(str, v[2:])])}: {jobs} held one-GPU jobs, {rounds} rounds, "
          "one `scontrol update` per start")
    for kind, values in seconds.items():
        print(f"  {kind:7} {len(values):4} updates, {summary(values)}")
    cluster.run(["scancel", *held], check=False)


def _starts(cluster, pairs: int) -> int:
    cli = SlurmCLI(env=cluster.env)
    jobs = [_submit(cluster, "sleep 600") for _ in range(2 * pairs)]
    backend = SlurmBackend(cli, WallClock(), partitions={"v100": "v100"})
    try:
        obs = backend.observe()
        rows = tuple(Assignment((jobs[2 * i], jobs[2 * i + 1]), "v100", (("v100-0", 1),))
                     for i in range(pairs))
        calls, t0, polls = cli.calls, time.monotonic(), 0
        backend.execute(RoundPlan(0, rows, (), rows, ()), time.time() + 3600)
        while True:
            obs = backend.observe()
            polls += 1
            running = {j for r in obs.running for j in r.jobs if r in rows}
            real = {j.job_id for j in backend._jobs.values() if j.running}
            if set(jobs) <= running and set(jobs) <= real:
                break
            if time.monotonic() - t0 > 120:
                print("not all pairs started within 120 s", file=sys.stderr)
                return 1
            time.sleep(TICK)
        took = time.monotonic() - t0
        gpus = {j: backend._jobs[j].gpu_indices for j in jobs}
        shared = all(gpus[r.jobs[0]] == gpus[r.jobs[1]] for r in rows)
        print(f"  {pairs} pairs on one node: all {2 * pairs} jobs running after {took:.1f} s, "
              f"{polls} polls ({TICK} s apart), {cli.calls - calls} Slurm calls; "
              f"each pair on one GPU: {shared}")
        return 0 if shared else 1
    finally:
        cluster.run(["scancel", *jobs], check=False)


if __name__ == "__main__":
    sys.exit(main())

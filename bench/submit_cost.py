#!/usr/bin/env python3
"""What job_submit.lua costs slurmctld at the submission rates a large site sees.

Slurm's high-throughput guide warns that a job_submit plugin runs inside slurmctld while it
holds the job write lock, so its time adds to every submission's and stalls other RPCs.  This
bench starts two local clusters side by side (same size, same Slurm), one with the
repository's job_submit.lua and one without, and submits through `sbatch` from several
concurrent clients, in blocks that alternate between the arms so that both see the same
machine noise:

* `plain`: a held non-gavel job on the cluster without the plugin (Slurm alone);
* `plain+lua`: the same job where the plugin runs (it only looks at the comment);
* `gavel+lua`: a gavel job (`--comment "gavel model=... steps=..."`): parsed, checked, held.

Per arm it prints the submissions per second seen by the clients, the client-side latency
(median, p90) and slurmctld's own time per REQUEST_SUBMIT_BATCH_JOB from `sdiag` (the RPC's
average, which includes the plugin), and the ratio of each arm to `plain`.

    python bench/submit_cost.py                      # 600 submissions per arm, 8 clients
    python bench/submit_cost.py --jobs 2000 --clients 16 --block 100
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._cluster import local_cluster, no_cluster, rpcs, summary  # noqa: E402
from slurm_gavel.devcluster import DevCluster  # noqa: E402

TYPES = {"v100": (1, 4), "k80": (1, 4)}
MODELS = ("convnet", "rl-agent", "translation", "language-model")


def submit_rpc(cluster: DevCluster) -> tuple[int, int]:
    """sdiag's REQUEST_SUBMIT_BATCH_JOB (count, total_time in microseconds) so far."""
    return rpcs(cluster).get("REQUEST_SUBMIT_BATCH_JOB", (0, 0))


def sbatch_args(arm: str, i: int) -> list[str]:
    base = ["sbatch", "--parsable", "-o", "/dev/null", "-p", "v100", "--gres=gpu:1"]
    if arm.startswith("gavel"):
        # held by the plugin itself
        return base + ["--comment", f"gavel model={MODELS[i % 4]} steps=1000", "--wrap", "sleep 600"]
    return base + ["--hold", "--wrap", "sleep 600"]


class Arm:
    def __init__(self, name: str, cluster: DevCluster):
        self.name, self.cluster = name, cluster
        self.latencies: list[float] = []
        self.wall = 0.0
        self.rpcs = 0
        self.rpc_micros = 0
        self.failed = 0

    def block(self, pool: ThreadPoolExecutor, start: int, n: int) -> None:
        def one(i: int) -> float | None:
            t0 = time.perf_counter()
            result = self.cluster.run(sbatch_args(self.name, i), check=False, timeout=120)
            return time.perf_counter() - t0 if result.returncode == 0 else None
        count0, micros0 = submit_rpc(self.cluster)
        t0 = time.perf_counter()
        for latency in pool.map(one, range(start, start + n)):
            if latency is None:
                self.failed += 1
            else:
                self.latencies.append(latency)
        self.wall += time.perf_counter() - t0
        count1, micros1 = submit_rpc(self.cluster)
        self.rpcs += count1 - count0
        self.rpc_micros += micros1 - micros0

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.wall if self.wall else 0.0

    @property
    def rpc_ms(self) -> float:
        return self.rpc_micros / self.rpcs / 1000 if self.rpcs else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=600, help="submissions per arm (default: %(default)s)")
    parser.add_argument("--clients", type=int, default=8,
                        help="concurrent sbatch processes (default: %(default)s)")
    parser.add_argument("--block", type=int, default=50,
                        help="submissions per arm before switching arms (default: %(default)s)")
    args = parser.parse_args()
    if no_cluster():
        return 2
    with tempfile.TemporaryDirectory(prefix="gv-submit-", dir="/tmp") as tmp:
        tmp = Path(tmp)
        with local_cluster(tmp / "a", TYPES, plugin=False) as bare, \
                local_cluster(tmp / "b", TYPES) as lua:
            arms = [Arm("plain", bare), Arm("plain+lua", lua), Arm("gavel+lua", lua)]
            with ThreadPoolExecutor(args.clients) as pool:
                for start in range(0, args.jobs, args.block):
                    n = min(args.block, args.jobs - start)
                    for arm in arms:
                        arm.block(pool, start, n)
            held = lua.run(["squeue", "--noheader", "-h", "-t", "PD", "-o", "%r"]).stdout.split()
            base = arms[0]
            print(f"{args.jobs} submissions per arm, {args.clients} concurrent clients, blocks of {args.block}")
            print(f"{'arm':<10} {'submits/s':>9} {'vs plain':>8}  {'client latency':<32} "
                  f"{'slurmctld ms/submit':>19} {'vs plain':>8} {'failed':>6}")
            for arm in arms:
                print(f"{arm.name:<10} {arm.rate:9.1f} {arm.rate / base.rate:8.2f}  "
                      f"{summary(arm.latencies):<32} {arm.rpc_ms:19.2f} "
                      f"{arm.rpc_ms / base.rpc_ms:8.2f} {arm.failed:6d}")
            print(f"pending on the plugin's cluster: {len(held)} jobs "
                  f"({sum(r in ('JobHeldUser', 'JobHeldAdmin') for r in held)} held)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The real daemon on a large local cluster: a round's cost by phase, in Slurm calls and RPCs.

Builds a local Slurm cluster of many slurmd nodes (default 200 nodes x 8 GPUs in three types,
1,600 GPUs; the repository's job_submit.lua), submits plain (non-gavel) jobs that Slurm starts
at once and then N gavel jobs of 1, 2, 4 and 8 GPUs (`--gres=gpu:N`; each sleeps until it
is signalled, then exits 85 and is requeued held, as a checkpointing job does), and runs the
daemon itself (`Daemon.run`, its own rounds and ticks, in this process) for R rounds.  Per
round, the round's work and the ticks after the round before it:

* wall: seconds from the round before's start to this one's;
* look, read, reconcile, solve, plan, enforce, record, status: seconds by phase (the ticks'
  look at the jobs' states; `squeue --json` and the nodes; turning them into the observation; the policy, in its worker thread; the
  mechanism; the Slurm calls that start and preempt; the SQLite writes; the held jobs'
  AdminComment);
* started, preempted: the plan's;
* calls: the Slurm processes that change something (`SlurmCLI.commands` but reads);
  timeouts: commands that timed out (from the daemon's log);
* RPCs, ctld s: slurmctld's RPC count and its time spent on them (`sdiag`, all message types),
  and the update RPCs (REQUEST_UPDATE_JOB: starts, releases, holds, statuses);
* busy: the share of the cluster's GPUs running jobs (gavel and plain) at the round's poll;
* parsed: the job records the round's poll parsed again (`SlurmBackend.reconciled`: new or
  changed since the poll before; the others are kept as parsed).

Targets (issue 25): a round's enforce for 1,000 changes under 10 s, no command timeout, GPUs
full within 2 rounds of the start.  Needs root, Slurm and MUNGE, and memory for the slurmd
processes and one slurmstepd per running job (about 10 GB at 1,600 running jobs).

    python bench/scale_daemon.py                                 # 200 x 8 GPUs, 5,000 jobs, 6 rounds
    python bench/scale_daemon.py --types v100=5x8,p100=5x8,k80=5x8 --jobs 500 --plain 20 --rounds 4
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._cluster import Phases, local_cluster, no_cluster, rpcs  # noqa: E402
from slurm_gavel.daemon import config as config_mod  # noqa: E402
from slurm_gavel.daemon.daemon import Daemon  # noqa: E402
from slurm_gavel.devcluster import DevCluster, node_list, parse_types  # noqa: E402

READS = ("squeue", "sinfo", "scontrol show", "sacct", "sacctmgr show")
SIZES = (1, 1, 1, 1, 2, 2, 4, 8)           # GPUs of the gavel jobs, cycled: most are small
MODELS = {1: ("convnet", "rl-agent", "translation", "language-model"),
          2: ("convnet", "language-model"), 4: ("convnet", "language-model"),
          8: ("convnet", "language-model")}   # the models examples/toy_throughputs.json has per size


class Timeouts(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record):
        if "timed out" in record.getMessage():
            self.count += 1


def throughputs(path: Path, types) -> Path:
    """examples/toy_throughputs.json with a row for every type of the cluster: a type the
    table lacks runs each job at a fixed ratio of one it has (a100 1.6x a V100, t4 0.9x a
    P100, any other as a K80)."""
    table = json.loads((ROOT / "examples" / "toy_throughputs.json").read_text())
    like = {"a100": ("v100", 1.6), "t4": ("p100", 0.9)}
    for wt in types:
        if wt not in table:
            base, ratio = like.get(wt, ("k80", 1.0))
            table[wt] = {key: {k: ([x * ratio for x in v] if isinstance(v, list) else v * ratio)
                               for k, v in row.items()}
                         for key, row in table[base].items()}
    path.write_text(json.dumps(table))
    return path


def submit_all(cluster: DevCluster, argvs: list[list[str]], clients: int = 8) -> int:
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda a: cluster.run(a, check=False, timeout=120).returncode, argvs))
    return sum(r != 0 for r in results)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", default="a100=40x8,v100=40x8,p100=40x8,t4=40x8,k80=40x8",
                        help="GPU types as NODESxGPUS (default: %(default)s, 1,600 GPUs; "
                             "at most 64 nodes a type)")
    parser.add_argument("--jobs", type=int, default=5000, help="gavel jobs (default: %(default)s)")
    parser.add_argument("--plain", type=int, default=200, help="plain 1-GPU jobs (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--round-seconds", type=float, default=60.0)
    parser.add_argument("--policy", default="max_min_fairness")
    args = parser.parse_args()
    if no_cluster():
        return 2
    with tempfile.TemporaryDirectory(prefix="gv-scale-", dir="/tmp") as tmp:
        tmp = Path(tmp)
        types = parse_types(args.types)
        total_gpus = sum(n * g for n, g in types.values())
        t0 = time.perf_counter()
        with local_cluster(tmp, types) as cluster:
            print(f"cluster up: {len(node_list(types))} nodes, {total_gpus} GPUs in "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
            run(cluster, tmp, types, args)
    return 0


def run(cluster: DevCluster, tmp: Path, types, args) -> None:
    """Submit the jobs, then run the daemon for `args.rounds` rounds, a row printed each."""
    sleeper = "trap 'exit 85' USR2; sleep 100000 & wait"
    t0 = time.perf_counter()
    partitions = list(types)
    failed = submit_all(cluster, [["sbatch", "--parsable", "-o", "/dev/null", "-p",
                                   partitions[i % len(partitions)], "--gres=gpu:1",
                                   "--wrap", "sleep 100000"] for i in range(args.plain)])
    gavel = []
    for i in range(args.jobs):
        size = SIZES[i % len(SIZES)]
        model = MODELS[size][i % len(MODELS[size])]
        gavel.append(["sbatch", "--parsable", "-o", "/dev/null", "--comment",
                      f"gavel model={model} steps=100000", f"--gres=gpu:{size}",
                      "--wrap", sleeper])
    failed += submit_all(cluster, gavel)
    print(f"submitted {args.plain} plain and {args.jobs} gavel jobs in "
          f"{time.perf_counter() - t0:.0f} s ({failed} refused)", flush=True)
    config = config_mod.from_dict({
        "slurm_conf": str(cluster.slurm_conf), "database": str(tmp / "gavel.db"),
        "throughputs": str(throughputs(tmp / "throughputs.json", types)),
        "policy": args.policy, "round_seconds": args.round_seconds,
        "grace_seconds": 60}, source="bench")
    timeouts = Timeouts()
    logging.getLogger("slurm_gavel").addHandler(timeouts)
    daemon = Daemon(config)
    phases = Phases()
    cli, backend, store = daemon.cli, daemon.backend, daemon.store
    phases.wrap(cli, "squeue", "read")
    phases.wrap(cli, "nodes", "read")
    phases.wrap(cli, "job_states", "look")
    phases.wrap(backend, "observe", "observe")
    phases.wrap(backend, "execute", "enforce")
    phases.wrap(backend, "show_holds", "status")
    for name in ("observe", "round", "usage", "allocation", "status"):
        phases.wrap(store, name, "record")
    import slurm_gavel.core.engine as engine_mod
    phases.wrap(engine_mod, "plan_round", "plan")
    busy = {"share": float("nan")}       # not seen before the first poll

    def cluster_states(states, status, _original=daemon.metrics.cluster):
        by_state: dict[str, int] = {}
        for (_, _, s), n in states.items():
            by_state[s] = by_state.get(s, 0) + n
        gpus = sum(by_state.values()) or 1
        busy["share"] = (by_state.get("gavel", 0) + by_state.get("other", 0)) / gpus
        return _original(states, status)
    daemon.metrics.cluster = cluster_states

    header = (f"{'round':>5} {'wall s':>7} {'look':>5} {'read':>6} {'reconc':>6} {'solve':>6} {'plan':>5} "
              f"{'enforce':>7} {'record':>6} {'status':>6} {'started':>7} {'preempt':>7} "
              f"{'calls':>5} {'tmo':>3} {'RPCs':>6} {'ctld s':>6} {'upd RPCs':>8} {'busy':>5} {'parsed':>6}")
    print(header, flush=True)
    last = {"t": time.perf_counter(), "calls": 0, "rpcs": rpcs(cluster), "timeouts": 0,
            "solve": daemon.engine.allocator.solve_seconds}
    original_round = daemon.metrics.round

    def on_round(plan, *a, **k):
        original_round(plan, *a, **k)
        now = time.perf_counter()
        spent = phases.take()
        calls = sum(n for c, n in cli.commands.items() if c not in READS)
        seen = rpcs(cluster)
        count = sum(c for c, _ in seen.values()) - sum(c for c, _ in last["rpcs"].values())
        micros = sum(t for _, t in seen.values()) - sum(t for _, t in last["rpcs"].values())
        updates = seen.get("REQUEST_UPDATE_JOB", (0, 0))[0] - \
            last["rpcs"].get("REQUEST_UPDATE_JOB", (0, 0))[0]
        solve = daemon.engine.allocator.solve_seconds
        read = spent.get("read", 0.0)
        print(f"{plan.round:5d} {now - last['t']:7.1f} {spent.get('look', 0.0):5.2f} {read:6.2f} "
              f"{spent.get('observe', 0.0) - read:6.2f} {solve - last['solve']:6.2f} "
              f"{spent.get('plan', 0.0):5.2f} {spent.get('enforce', 0.0):7.2f} "
              f"{spent.get('record', 0.0):6.2f} {spent.get('status', 0.0):6.2f} "
              f"{len(plan.start):7d} {len(plan.preempt):7d} {calls - last['calls']:5d} "
              f"{timeouts.count - last['timeouts']:3d} {count:6d} {micros / 1e6:6.2f} "
              f"{updates:8d} {'-' if busy['share'] != busy['share'] else format(busy['share'], '.0%'):>5} "
              f"{getattr(backend, 'reconciled', -1):6d}",
              flush=True)
        last.update(t=now, calls=calls, rpcs=seen, timeouts=timeouts.count, solve=solve)
    daemon.metrics.round = on_round
    daemon.run(max_rounds=args.rounds)
    print("(each row: the round's plan and enforce, and the ticks and status writes "
          "since the round before; busy at the round's poll)")


if __name__ == "__main__":
    sys.exit(main())

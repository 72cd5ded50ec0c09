#!/usr/bin/env python3
"""The daemon's time per round on a real local Slurm cluster, split by phase.

Starts a local cluster (`slurm-gavel cluster up`, 3 GPU types x 2 nodes x 4
GPUs), submits N held gavel jobs (default 500) that sleep when started, and
runs the daemon's own objects round by round, timing each phase:

* read: `squeue --json` and the node listing (Slurm's side of a tick);
* reconcile: parsing and turning them into the engine's observation;
* solve: the policy (max-min fairness) on every queued job;
* plan: the mechanism (priorities, Algorithm 1, placement);
* enforce: the Slurm calls of the round (signals, updates, releases), with
  the number of jobs changed;
* record: the SQLite writes.

Targets (issue 4): a tick's read and reconcile under 1 s; enforcing 100
changes under 10 s.  Needs root, Slurm and MUNGE (as the tests do).

    python bench/daemon_round.py              # 500 jobs, 4 rounds
    python bench/daemon_round.py --jobs 200 --rounds 3
    python bench/daemon_round.py --types v100=5x8,p100=5x8,k80=5x8 --gpus 1   # >100 changes a round
    python bench/daemon_round.py --types v100=5x8,p100=5x8,k80=5x8 --gpus 1 --status-first   # starts drop a status
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._cluster import Phases, rpcs  # noqa: E402
from slurm_gavel.daemon import config as config_mod  # noqa: E402
from slurm_gavel.daemon.daemon import Daemon  # noqa: E402
from slurm_gavel.devcluster import (DevCluster, default_job_submit_lua,  # noqa: E402
                                          node_list, parse_types, pick_ports,
                                          unavailable_reason)
from slurm_gavel.slurm.records import parse_jobs, parse_nodes  # noqa: E402


READS = ("squeue", "sinfo", "scontrol show", "sacct", "sacctmgr show")


def update_rpcs(cluster) -> int:
    """slurmctld's REQUEST_UPDATE_JOB count so far (sdiag): starts, releases, holds, statuses."""
    return rpcs(cluster).get("REQUEST_UPDATE_JOB", (0, 0))[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--types", default="v100=2x4,p100=2x4,k80=2x4",
                        help="GPU types as NODESxGPUS (default: %(default)s)")
    parser.add_argument("--gpus", default="1,2", help="GPUs per job, cycled (default: %(default)s)")
    parser.add_argument("--status-first", action="store_true",
                        help="write a hold status into every job's AdminComment before round 0, as "
                             "a daemon that has run a while has: each start then drops it")
    args = parser.parse_args()
    why = unavailable_reason()
    if why:
        print(f"cannot run a local Slurm cluster here: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="gavel-bench-", dir="/tmp") as tmp:
        tmp = Path(tmp)
        types = parse_types(args.types)
        gpus = [int(g) for g in args.gpus.split(",")]
        ctld, slurmd = pick_ports(len(node_list(types)))
        cluster = DevCluster(tmp / "c", types, ctld_port=ctld, slurmd_port=slurmd,
                             job_submit_lua=default_job_submit_lua())
        cluster.up()
        try:
            started = time.perf_counter()
            models = ("convnet", "rl-agent", "translation", "language-model")
            for i in range(args.jobs):
                cluster.run(["sbatch", "--parsable", "-o", "/dev/null", "--comment",
                             f"gavel model={models[i % 4]} steps=1000", f"--gres=gpu:{gpus[i % len(gpus)]}",
                             "--wrap", "trap 'exit 85' USR2; sleep 600 & wait"])
            print(f"submitted {args.jobs} gavel jobs in {time.perf_counter() - started:.1f} s")
            config = config_mod.from_dict({
                "slurm_conf": str(cluster.slurm_conf), "database": str(tmp / "gavel.db"),
                "throughputs": str(ROOT / "examples" / "toy_throughputs.json"),
                "round_seconds": 10, "tick_seconds": 10, "grace_seconds": 30}, source="bench")
            daemon = Daemon(config)
            timer = Phases()
            cli, backend, engine = daemon.cli, daemon.backend, daemon.engine
            timer.wrap(cli, "squeue", "read")
            timer.wrap(cli, "nodes", "read")
            timer.wrap(backend, "observe", "read+reconcile")
            timer.wrap(backend, "execute", "enforce")
            timer.wrap(daemon.store, "observe", "record")
            timer.wrap(daemon.store, "round", "record")
            timer.wrap(daemon.store, "usage", "record")
            timer.wrap(daemon.store, "allocation", "record")
            timer.wrap(daemon.store, "status", "record")
            import slurm_gavel.core.engine as engine_mod
            plan_round = engine_mod.plan_round

            def timed_plan(*a, **k):
                t0 = time.perf_counter()
                try:
                    return plan_round(*a, **k)
                finally:
                    timer.spent["plan"] = timer.spent.get("plan", 0.0) + time.perf_counter() - t0
            engine_mod.plan_round = timed_plan
            print(f"{'round':>5} {'jobs':>5} {'read s':>7} {'reconcile s':>12} {'solve s':>8} "
                  f"{'plan s':>7} {'enforce s':>10} {'changes':>8} {'record s':>9} "
                  f"{'started':>7} {'preempted':>9} {'acting calls':>12} {'update RPCs':>11}")
            counted = getattr(cli, "commands", None)      # SlurmCLI.commands (processes per command)
            if args.status_first:
                backend.observe()
                backend.show_holds({job: "waiting for its round" for job in backend._jobs},
                                   limit=args.jobs)
            for r in range(args.rounds):
                timer.spent.clear()
                before = engine.allocator.solve_seconds
                calls0 = sum(n for c, n in counted.items() if c not in READS) if counted is not None else 0
                rpcs0 = update_rpcs(cluster)
                plan = engine.plan()
                # the solve runs in the daemon's worker thread: wait for it, then re-plan
                # once so that this round uses the solved allocation, as later rounds do
                engine.allocator.wait(timeout=600)
                rows = daemon._status()
                daemon.store.status(plan.round, daemon.clock.now(), rows)
                # as the daemon's round: held jobs say why in their AdminComment
                daemon.backend.show_holds({job: r.get("reason") or "" for job, r in rows.items()})
                s = timer.spent
                read = s.get("read", 0.0)
                reconcile = s.get("read+reconcile", 0.0) - read
                changes = len(plan.start) + len(plan.preempt)
                calls = (sum(n for c, n in counted.items() if c not in READS) - calls0
                         if counted is not None else -1)
                print(f"{plan.round:5d} {len(engine.active_ids):5d} {read:7.3f} {reconcile:12.3f} "
                      f"{engine.allocator.solve_seconds - before:8.3f} {s.get('plan', 0.0):7.3f} "
                      f"{s.get('enforce', 0.0):10.3f} {changes:8d} {s.get('record', 0.0):9.3f} "
                      f"{len(plan.start):7d} {len(plan.preempt):9d} {calls:12d} "
                      f"{update_rpcs(cluster) - rpcs0:11d}", flush=True)
                time.sleep(2)
            engine.allocator.close()
            # one tick's read + reconcile, alone
            t0 = time.perf_counter()
            jobs = parse_jobs(cli.squeue())
            nodes = parse_nodes(cli.nodes())
            t1 = time.perf_counter()
            backend.observe()
            t2 = time.perf_counter()
            print(f"one tick: squeue+nodes+parse {t1 - t0:.3f} s ({len(jobs)} jobs, {len(nodes)} nodes); "
                  f"observe (read + reconcile) {t2 - t1:.3f} s")
        finally:
            cluster.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())

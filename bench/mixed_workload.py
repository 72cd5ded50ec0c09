#!/usr/bin/env python3
"""A mixed workload of 1-, 2-, 4- and 8-GPU gavel jobs under the daemon on a real local cluster.

Starts a local cluster (3 GPU types x 2 nodes x 4 GPUs, the repository's
job_submit.lua), submits the jobs (1- and 2-GPU jobs as `--gres=gpu:N`, 4- and
8-GPU jobs as `--gpus=N`, which the daemon shapes each round: 1x4 or 2x2, 2x4;
with `--gres-upto 4` the 4-GPU jobs too ask `--gres=gpu:4`, a whole node),
each one step per second, checkpointing on the preemption signal, and runs the
daemon's own objects in this process until every job has finished.  Per round:

* busy GPU-seconds: what the daemon credited (the observations' usage, GPUs x
  seconds, which the ledger and the database's job_time are made of), against the
  cluster's GPUs x the round's length;
* the Slurm calls of the round (the plan's observe and enforce) and of the ticks
  after it (polls, deferred starts), with their seconds; of them, the reshapes
  (`scontrol update` with NumNodes: a distributed job's start) and their seconds;
* with `--space-sharing`, the pairs started (by their jobs' GPUs) and their Slurm
  calls: the `scontrol update` of each job of a pair (half its GPUs' shards; the
  release is shared with the round's other starts and not counted here), with
  their seconds.

The `--gres=gpu:N` jobs are convnet and rl-agent in turn: the throughput table
(examples/toy_throughputs.json) has pair rows for the two 1-GPU jobs, worth about
1.65 of a GPU's work where each alone is 1; it has none for bigger jobs, so the bench
adds rl-agent's 2- and 4-GPU rows and 2- and 4-GPU pair rows, each the 1-GPU one
times convnet's speed-up at that size on that type (1.8, 3.6).  `--space-sharing`
runs the same jobs on a shard cluster (4 shards per GPU; job_submit.lua with
GAVEL_SHARDS_PER_GPU = 4, so 1-GPU jobs ask `shard:4`) with `space_sharing = true`,
which gives the policy (max-min fairness, as `max_min_fairness_packed`) the pair
throughputs (docs/space-sharing.md) of 1-GPU jobs only (the engine drops the
others: `max_pair_gpus = 1`).
`--max-pair-gpus N` (Slurm 23.11+) adds SelectTypeParameters
MULTIPLE_SHARING_GRES_PJ,ONE_TASK_PER_SHARING_GRES to that cluster and sets
`max_pair_gpus = N`: pairs of two N-GPU jobs on the same N GPUs.  The `--gpus=N`
jobs (shaped by the daemon) are never paired (pair_refused).

Needs root, Slurm and MUNGE (as the tests do).

    python bench/mixed_workload.py                 # 8x1, 4x2, 3x4, 2x8 GPUs; 10 s rounds
    python bench/mixed_workload.py --space-sharing # the same, pairs of 1-GPU jobs allowed
    bash tools/slurm-chroot.sh python bench/mixed_workload.py --max-pair-gpus 2  # and of 2-GPU jobs
    bash tools/slurm-chroot.sh python bench/mixed_workload.py --max-pair-gpus 4 --gres-upto 4
    python bench/mixed_workload.py --jobs 4,2,2,1 --steps 20 --round 8
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_gavel.daemon import config as config_mod  # noqa: E402
from slurm_gavel.daemon.daemon import Daemon  # noqa: E402
from slurm_gavel.daemon.store import SqliteStore  # noqa: E402
from slurm_gavel.devcluster import DEFAULT_TYPES, slurm_version  # noqa: E402
from slurm_gavel.slurm.backend.pairs.multi import FIRST_VERSION, REQUIRED_FLAGS, version_text  # noqa: E402

from _cluster import local_cluster, no_cluster  # noqa: E402

SIZES = (1, 2, 4, 8)
MODELS = {1: "convnet", 2: "convnet", 4: "convnet", 8: "language-model"}
PARTNER = "rl-agent"      # every other --gres=gpu:N job: the pair rows are convnet + rl-agent
SHARDS = 4                # per GPU, with --space-sharing
# One step per second on the batch node; on USR2 its step is saved and it exits 85 (requeued held).
JOB = r"""#!/bin/bash
#SBATCH --requeue
#SBATCH --open-mode=append
stop=0
trap 'stop=1' USR2
state="$JOBDIR/$SLURM_JOB_ID.step"
step=$(cat "$state" 2>/dev/null || echo 0)
while [ "$step" -lt "$TOTAL" ]; do
  sleep 1
  step=$((step + 1))
  echo "$step" > "$state.tmp" && mv "$state.tmp" "$state"
  echo "{\"job\": \"$SLURM_JOB_ID\", \"event\": \"progress\", \"step\": $step, \"steps_per_second\": 1.0, \"partition\": \"$SLURM_JOB_PARTITION\", \"time\": $(date +%s)}" >> "$GAVEL_PROGRESS_DIR/$SLURM_JOB_ID.jsonl"
  if [ "$stop" = 1 ]; then exit 85; fi
done
"""


class Recorder:
    """Every Slurm call the daemon makes (seconds, whether a reshape), and the credited
    usage, by round: calls inside `engine.plan()` are the round's, the others its ticks'."""

    def __init__(self, daemon: Daemon):
        self.daemon = daemon
        self.in_plan = False
        self.calls: dict[tuple[int, str], list[float]] = defaultdict(list)      # (round, phase)
        self.reshapes: dict[tuple[int, str], list[float]] = defaultdict(list)
        self.pair_calls: dict[tuple[int, str], list[float]] = defaultdict(list)  # a pair's updates
        self.pair_refused = 0        # of them, failed (24.11 refuses a partition change at random: retried)
        self.pairs: dict[tuple[int, str], int] = defaultdict(int)              # pairs started
        self.pair_sizes: Counter = Counter()                                    # by a job's GPUs
        self.busy: dict[int, float] = defaultdict(float)                        # GPU-seconds
        self.started: dict[int, float] = {}
        self.observed: dict[int, float] = {}     # the round's own observation: credited up to here
        cli, engine, backend = daemon.cli, daemon.engine, daemon.backend
        run, plan, observe, start = cli.run, engine.plan, backend.observe, backend._start_deferred

        def timed_run(args, *a, **k):
            t0 = time.perf_counter()
            ok = False
            try:
                out = run(args, *a, **k)
                ok = True
                return out
            finally:
                key = self._key()
                spent = time.perf_counter() - t0
                self.calls[key].append(spent)
                if list(args[:2]) == ["scontrol", "update"] and any(
                        str(x).startswith("NumNodes=") for x in args):
                    self.reshapes[key].append(spent)
                if list(args[:2]) == ["scontrol", "update"] and any(
                        j in backend._planned and len(backend._planned[j].jobs) > 1
                        for j in _update_ids(args)):
                    self.pair_calls[key].append(spent)     # a pair's job: its shards, its node
                    self.pair_refused += not ok

        def timed_plan(*a, **k):
            self.in_plan = True
            self.started[engine.round] = time.time()
            try:
                return plan(*a, **k)
            finally:
                self.in_plan = False

        def counted_observe(*a, **k):
            obs = observe(*a, **k)
            if self.in_plan:
                self.observed.setdefault(engine.round, time.time())    # the round's boundary
            # usage since the last observation: credited to the round that was running
            for u in obs.usage:
                self.busy[max(0, engine.round - 1)] += u.assignment.gpus * u.seconds
            return obs
        def counted_start(*a, **k):
            before = set(backend._pairs.values())
            try:
                return start(*a, **k)
            finally:
                new = set(backend._pairs.values()) - before
                self.pairs[self._key()] += len(new)
                self.pair_sizes.update(a.gpus for a in new)
        cli.run, engine.plan, backend.observe = timed_run, timed_plan, counted_observe
        backend._start_deferred = counted_start

    def _key(self) -> tuple[int, str]:
        r = self.daemon.engine.round
        return (r, "round") if self.in_plan else (r - 1, "ticks")


def _update_ids(args) -> list[str]:
    """The job ids of an `scontrol update jobid=1,2 ...` argument list."""
    return next((str(x)[6:].split(",") for x in args if str(x).startswith("jobid=")), [])


class Alarms(logging.Handler):
    """The daemon's space-sharing complaints: pairs not started (with why), pairs Slurm
    split at their start and the backend requeued, and GPUs found split or shared by a
    third job (docs/space-sharing.md), counted."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.refused, self.undone, self.shared = [], [], []

    def emit(self, record):
        text = record.getMessage()
        if "not started (space sharing)" in text:
            self.refused.append(text)
        if "landed on two GPUs" in text:
            self.undone.append(text)
        if "shares GPU" in text or "does not share a GPU" in text:
            self.shared.append(text)


def _submit(cluster, tmp: Path, gpus: int, steps: int, model: str, gres_upto: int) -> str:
    request = [f"--gres=gpu:{gpus}"] if gpus <= gres_upto else [f"--gpus={gpus}"]
    out = cluster.run(["sbatch", "--parsable", f"--export=ALL,TOTAL={steps},JOBDIR={tmp},"
                       f"GAVEL_PROGRESS_DIR={tmp / 'progress'}", "-o", str(tmp / "out-%j.txt"),
                       "--comment", f"gavel model={model} steps={steps}", *request,
                       str(tmp / "job.sh")]).stdout
    return out.strip().split(";")[0]


def _table(tmp: Path) -> Path:
    """The toy table plus rl-agent's 2- and 4-GPU rows and convnet + rl-agent 2- and 4-GPU
    pair rows, each the 1-GPU one times convnet's speed-up at that size on that type (the
    toy table pairs 1-GPU jobs only), in `tmp`."""
    table = json.loads((ROOT / "examples" / "toy_throughputs.json").read_text())
    one, alone = "('convnet', 1)", f"('{PARTNER}', 1)"
    for rows in table.values():
        for size in (2, 4):
            key, partner = f"('convnet', {size})", f"('{PARTNER}', {size})"
            up = rows[key]["null"] / rows[one]["null"]
            rows[partner] = {"null": rows[alone]["null"] * up}
            rows[key][partner] = [v * up for v in rows[one][alone]]
    path = tmp / "throughputs.json"
    path.write_text(json.dumps(table, indent=1))
    return path


def _left(cluster, jobs) -> list[str]:
    out = cluster.run(["squeue", "-h", "-o", "%i %T"]).stdout
    states = dict(line.split() for line in out.splitlines() if line.strip())
    return [j for j in jobs if states.get(j, "COMPLETED") not in ("COMPLETED",)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", default="8,4,3,2", help="jobs of 1,2,4,8 GPUs (default: %(default)s)")
    p.add_argument("--steps", type=int, default=40, help="steps (seconds of work) per job")
    p.add_argument("--round", type=float, default=10.0, help="round seconds (default 10)")
    p.add_argument("--timeout", type=float, default=1200.0)
    p.add_argument("--log", type=Path, help="also write the daemon's log (INFO) to this file")
    p.add_argument("--space-sharing", action="store_true",
                   help="a shard cluster and space_sharing = true: pairs of 1-GPU jobs allowed")
    p.add_argument("--max-pair-gpus", type=int, default=1, metavar="N",
                   help="max_pair_gpus = N: pairs of jobs of up to N GPUs too (implies --space-sharing; "
                        "Slurm 23.11+, the cluster with SelectTypeParameters " + ",".join(REQUIRED_FLAGS) + ")")
    p.add_argument("--gres-upto", type=int, choices=(2, 4), default=2, metavar="N",
                   help="jobs of up to N GPUs (2 or 4) ask --gres=gpu:N on one node, and are "
                        "convnet and rl-agent in turn; bigger ones --gpus=N (default 2)")
    args = p.parse_args(argv)
    counts = [int(x) for x in args.jobs.split(",")]
    if args.max_pair_gpus < 1:
        p.error("--max-pair-gpus must be 1 or more")
    args.space_sharing = args.space_sharing or args.max_pair_gpus > 1
    if no_cluster():
        return 2
    if args.max_pair_gpus > 1 and slurm_version()[:2] < FIRST_VERSION:
        # 22.05's slurmctld does not even start with the flags ("Bad SelectTypeParameter")
        print(f"--max-pair-gpus {args.max_pair_gpus} needs Slurm 23.11+ ({', '.join(REQUIRED_FLAGS)}); "
              f"this is {version_text(slurm_version())}: run it with bash tools/slurm-chroot.sh "
              "(Slurm 24.11)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="gavel-mixed-", dir="/tmp") as tmp:
        tmp = Path(tmp)
        (tmp / "progress").mkdir()
        (tmp / "job.sh").write_text(JOB)
        # --space-sharing: 1-GPU gavel jobs ask a whole GPU's shards
        flags = ",".join(REQUIRED_FLAGS) if args.max_pair_gpus > 1 else ""
        with local_cluster(tmp, DEFAULT_TYPES, shards=SHARDS if args.space_sharing else 0,
                           select_parameters=flags) as cluster:
            return _run(cluster, tmp, counts, args)


def _run(cluster, tmp: Path, counts, args) -> int:
    gpus_total = sum(n * g for n, g in DEFAULT_TYPES.values())
    jobs = {}
    for size, n in zip(SIZES, counts):
        for k in range(n):
            model = PARTNER if size <= args.gres_upto and k % 2 else MODELS[size]
            jobs[_submit(cluster, tmp, size, args.steps, model, args.gres_upto)] = size
    config = config_mod.from_dict({
        "slurm_conf": str(cluster.slurm_conf), "database": str(tmp / "gavel.db"),
        "progress_dir": str(tmp / "progress"), "throughputs": str(_table(tmp)),
        "round_seconds": args.round, "tick_seconds": 1, "grace_seconds": 10,
        "space_sharing": bool(args.space_sharing), "max_pair_gpus": args.max_pair_gpus}, source="bench")
    alarms = Alarms()
    logger = logging.getLogger("slurm_gavel")
    logger.addHandler(alarms)
    if args.log:
        to_file = logging.FileHandler(args.log)
        to_file.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        logger.addHandler(to_file)
        logger.setLevel(logging.INFO)
    daemon = Daemon(config)
    rec = Recorder(daemon)
    began = time.time()
    finished = threading.Event()

    def watch():
        while time.time() - began < args.timeout:
            time.sleep(2)
            if not _left(cluster, jobs):
                finished.set()
                break
        daemon.request_stop()
    threading.Thread(target=watch, daemon=True).start()
    daemon.run()
    if daemon._watchdog is not None:
        daemon._watchdog.cancel()          # the daemon stopped: no need for its stop watchdog
    wall = time.time() - began
    version = ".".join(map(str, slurm_version()))
    print(f"Slurm {version}; {len(jobs)} jobs ({', '.join(f'{n}x{g} GPU' for n, g in zip(counts, SIZES))}), "
          f"{args.steps} steps each, {gpus_total} GPUs, {args.round:.0f} s rounds, "
          f"space sharing {'on' if args.space_sharing else 'off'}, "
          f"pairs of up to {daemon.backend.max_pair_gpus} GPUs (max_pair_gpus {args.max_pair_gpus}), "
          f"--gres=gpu:N up to {args.gres_upto} GPUs")
    print(f"{'finished' if finished.is_set() else 'NOT finished'} in {wall:.0f} s, {daemon.engine.round} rounds")
    rounds = sorted(rec.observed)
    print(f"{'round':>5} {'busy GPU-s':>10} {'util':>5} {'calls':>5} {'round s':>7} {'reshapes':>8} "
          f"{'reshape s':>9} {'pairs':>5} {'pair calls':>10} {'pair s':>6} {'tick calls':>10} {'tick s':>6}")
    per_reshape, per_pair_call = [], []
    for i, r in enumerate(rounds):
        length = (rec.observed[rounds[i + 1]] if i + 1 < len(rounds) else began + wall) - rec.observed[r]
        calls, ticks = rec.calls[(r, "round")], rec.calls[(r, "ticks")]
        reshapes = rec.reshapes[(r, "round")] + rec.reshapes[(r, "ticks")]
        pair_calls = rec.pair_calls[(r, "round")] + rec.pair_calls[(r, "ticks")]
        pairs = rec.pairs[(r, "round")] + rec.pairs[(r, "ticks")]
        per_reshape += reshapes
        per_pair_call += pair_calls
        busy = rec.busy.get(r, 0.0)
        print(f"{r:5d} {busy:10.0f} {busy / (gpus_total * length) if length > 0 else 0:5.0%} {len(calls):5d} "
              f"{sum(calls):7.3f} {len(reshapes):8d} {sum(reshapes):9.3f} {pairs:5d} {len(pair_calls):10d} "
              f"{sum(pair_calls):6.3f} {len(ticks):10d} {sum(ticks):6.3f}")
    busy = sum(rec.busy.values())
    work = sum(jobs.values()) * args.steps
    print(f"busy GPU-seconds credited {busy:.0f} (the jobs' work: {work} GPU-seconds of steps, "
          f"plus checkpoints and restarts; a pair's two jobs on one GPU count that GPU once)")
    if per_reshape:
        print(f"reshapes: {len(per_reshape)}, median {statistics.median(per_reshape) * 1000:.1f} ms, "
              f"max {max(per_reshape) * 1000:.1f} ms")
    pairs = sum(rec.pairs.values())
    print(f"pairs started: {pairs} ({', '.join(f'{rec.pair_sizes[g]} of {g}-GPU jobs' for g in (1, 2, 4))})"
          f"; their jobs' updates: {len(per_pair_call)}"
          + (f", median {statistics.median(per_pair_call) * 1000:.1f} ms, max {max(per_pair_call) * 1000:.1f} ms, "
             f"{sum(per_pair_call):.3f} s in all, {rec.pair_refused} refused by Slurm (tried again)"
             if per_pair_call else ""))
    print(f"pairs not started (space sharing, logged with why): {len(alarms.refused)}; "
          f"split at their start and requeued: {len(alarms.undone)}; "
          f"GPUs found split or shared by a third job: {len(alarms.shared)}")
    for text in (alarms.refused[:6] + alarms.undone + alarms.shared):
        print(f"  {text[:200]}")
    rounds_calls = [len(rec.calls[(r, "round")]) for r in rounds]
    rounds_secs = [sum(rec.calls[(r, "round")]) for r in rounds]
    print(f"Slurm calls in a round's plan: mean {statistics.mean(rounds_calls):.1f}, max {max(rounds_calls)}; "
          f"seconds mean {statistics.mean(rounds_secs):.3f}, max {max(rounds_secs):.3f}; "
          f"reshapes {sum(per_reshape):.3f} s of {sum(rounds_secs) + sum(sum(rec.calls[(r, 'ticks')]) for r in rounds):.1f} s "
          f"of Slurm calls in all")
    store = SqliteStore(config.database, readonly=True)      # what the daemon recorded
    try:
        times = store.job_time()
    finally:
        store.close()
    ledger = sum(sum(v.values()) * jobs[j] for j, v in times.items() if j in jobs)
    print(f"the database's job_time x GPUs: {ledger:.0f} GPU-seconds")
    logging.getLogger("slurm_gavel").removeHandler(alarms)
    done = [j for j in jobs if _steps(tmp, j) == args.steps]      # each job's own step file
    for size in SIZES:
        ids = [j for j, g in jobs.items() if g == size]
        if ids:
            print(f"steps done, {size}-GPU jobs: " + " ".join(f"{j}:{_steps(tmp, j)}" for j in ids))
    print(f"jobs that did all {args.steps} steps: {len(done)} of {len(jobs)}"
          + (f" (not: {', '.join(j for j in jobs if j not in done)})" if len(done) < len(jobs) else ""))
    # and the pairs asked for were allowed (the daemon says why not at its start)
    ok = daemon.backend.max_pair_gpus == args.max_pair_gpus
    return 0 if ok and finished.is_set() and len(done) == len(jobs) and not alarms.shared else 1


def _steps(tmp: Path, job: str) -> int:
    try:
        return int((tmp / f"{job}.step").read_text().strip())
    except (OSError, ValueError):
        return -1


if __name__ == "__main__":
    sys.exit(main())

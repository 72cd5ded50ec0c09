#!/usr/bin/env python3
"""What a start and a restart of a real gavel training job cost on a local Slurm cluster.

Starts a local cluster (slurm_gavel/devcluster/: one node of one GPU per
type, v100 and k80, random free ports, state in a temporary directory, stopped by
pid at the end), submits the project's PyTorch template job (job_templates/,
`slurm_gavel.job.templates`, default resnet18, held by job_submit.lua as every
gavel job is) and drives `SlurmBackend` the way the daemon does: `observe()`
(the daemon's poll) then `execute(plan)` with a start or a preemption.

Cold start (`--starts` jobs, each a new job): from the start decision (just
before `execute`) to the job's first training step, split into

* release: `scontrol update` (partition, node, StartTime=now) + `scontrol release`;
* launch: release to the job script running (slurmctld schedules it, slurmd and
  slurmstepd start the batch shell);
* setup: the batch shell to the iterator's ``start`` record (Python, importing
  torch, building the model and data; on a resume also loading the checkpoint,
  ``load`` column, from the record's ``load_seconds``);
* first step: the ``start`` record to the end of the first training step (on a
  resume the iterator first skips the batches of the current epoch it had done;
  the step itself is the ``step`` column, a steady-state step of the same run,
  which is work done, not lost).

Restart (`--restarts` cycles of one job, alternately onto the other GPU type, a
move, and back onto the node it just left): from the preemption decision (just
before `execute`, which signals the job with ``scancel --batch --signal=USR2``) to
its first training step after the resume, split into

* stop: the signal to the first poll that sees the job stopped (the job saves its
  checkpoint, ``save`` column, exits 85, Slurm requeues it held), at the poll's
  resolution (`--tick`);
* wait: that poll to the release (the backend starts a stopped job on the same
  node only `RESTART_GUARD_SECONDS` after it saw it stop);
* release, launch, setup, first step: as above.

Swap (`--swaps` plans, two jobs taking turns on the v100 GPU): one plan preempts
the running job and starts the other on the GPU it frees, the usual change of a
round. The incoming job is released at once and waits (Resources) until Slurm
sees the GPU free; from the decision to the incoming job's first step: ``exit``
(the outgoing job's checkpoint record), ``launch`` (the incoming job script
running), then setup and first step as above. The incoming job's first swap is its
cold start, shown but left out of the median.

Timestamps: the job's own records (progress file with ``GAVEL_PROGRESS_INTERVAL=0``:
a record after every step; the checkpoint record) and a line the bench adds to the
job script before its ``exec`` (``date +%s.%N``); the bench's own clock for the
decision, the polls and the Slurm calls. All on this machine's wall clock.

`--tick` is how often the backend is polled between decisions: the daemon's
default `tick_seconds` is 10 (a move waits for the first tick after the job
stopped); `--tick 0.25` measures the parts themselves.

    python bench/restart_cost.py                                  # resnet18, tick 10 s
    python bench/restart_cost.py --tick 0.25
    python bench/restart_cost.py --template resnet50

Needs root, Slurm and MUNGE (as the tests do) and torch.  A benchmark, not a test:
it prints numbers.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_gavel.core.clock import WallClock  # noqa: E402
from slurm_gavel.core.plan import Assignment, RoundPlan  # noqa: E402
from slurm_gavel.job.progress import parse_records  # noqa: E402
from slurm_gavel.slurm import backend as backend_mod  # noqa: E402
from slurm_gavel.slurm import jobscript  # noqa: E402
from slurm_gavel.slurm.commands import SlurmCLI  # noqa: E402
from slurm_gavel.devcluster import (DevCluster, default_job_submit_lua,  # noqa: E402
                                          node_list, parse_types, pick_ports,
                                          unavailable_reason)

TYPES = "v100=1x1,k80=1x1"
LAUNCH_MARK = "gavel-bench launch"


class Tail:
    """New complete lines of a file that grows (the job's progress file, its output)."""

    def __init__(self, path: Path):
        self.path, self.offset, self.rest = path, 0, b""

    def lines(self) -> list[bytes]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        data = self.rest + data
        *done, self.rest = data.split(b"\n")
        return done


class Job:
    """One submitted template job: its records and launch lines as they arrive."""

    def __init__(self, job_id: str, work: Path):
        self.id = job_id
        self.progress = Tail(work / ".gavel" / f"{job_id}.jsonl")
        self.output = Tail(work / f"job-{job_id}.out")
        self.records: list[dict] = []
        self.launches: list[float] = []

    def read(self) -> None:
        lines = self.progress.lines()
        if lines:
            self.records += parse_records(b"\n".join(lines) + b"\n")
        for line in self.output.lines():
            text = line.decode(errors="replace")
            if text.startswith(LAUNCH_MARK):
                self.launches.append(float(text.split()[2]))

    def after(self, t: float, event: str) -> dict | None:
        return next((r for r in self.records if r["event"] == event and r["time"] >= t), None)

    def first_step(self, start: dict) -> dict | None:
        """The first record after `start` that counts a step this run made."""
        i = self.records.index(start)
        return next((r for r in self.records[i + 1:] if r["step"] > start["step"]), None)

    def step_seconds(self, since: float, until: float) -> float | None:
        """Median time of one training step, from the per-step records in (since, until)."""
        times = [r["time"] for r in self.records if since < r["time"] < until and r["event"] == "progress"]
        gaps = [b - a for a, b in zip(times, times[1:])]
        return statistics.median(gaps) if len(gaps) >= 3 else None


class Bench:
    def __init__(self, cluster: DevCluster, work: Path, args):
        self.cluster, self.work, self.args = cluster, work, args
        self.calls: dict[str, float] = {}
        cli = SlurmCLI(env=cluster.env)
        for name in ("signal", "update", "release"):      # when each Slurm call of execute happened
            self._wrap(cli, name)
        self.backend = backend_mod.SlurmBackend(cli, WallClock(), grace_seconds=60.0)
        self.round = 0
        self.env = dict(cluster.env, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1",
                        GAVEL_PROGRESS_INTERVAL="0")

    def _wrap(self, cli, name):
        original = getattr(cli, name)

        def timed(*a, **k):
            t0 = time.time()
            try:
                return original(*a, **k)
            finally:
                self.calls.setdefault(name, t0)
                self.calls[name + "_done"] = time.time()
        setattr(cli, name, timed)

    def submit(self) -> Job:
        script = jobscript.render(self.args.template, steps=10**8, python=sys.executable)
        head, sep, tail = script.rpartition("\nexec ")
        script = head + f'\necho "{LAUNCH_MARK} $(date +%s.%N)"' + sep + tail
        done = subprocess.run(["sbatch", "--parsable", "-p", "v100", "-o",
                               str(self.work / "job-%j.out")], input=script, text=True,
                              capture_output=True, env=self.env, cwd=self.work, check=True)
        job = Job(done.stdout.strip().split(";")[0], self.work)
        self.wait(lambda: job.id in self.backend.job_status(), f"job {job.id} in the queue")
        return job

    def wait(self, done, what: str, job: Job | None = None, timeout: float = 300.0,
             tick_from: float | None = None) -> float:
        """Poll the backend every `--tick` seconds (counted from `tick_from`) and the job's
        files every 0.05 s until `done()`; the time it became true."""
        start = time.time()
        base = start if tick_from is None else tick_from
        next_tick = start if tick_from is None else base + self.args.tick
        while True:
            now = time.time()
            if now >= next_tick:
                polled = time.time()        # squeue is its first call
                self.backend.observe()
                seen = self.backend._jobs.get(job.id) if job is not None else None
                self.polls.append((polled, seen.state if seen is not None else "gone"))
                while next_tick <= now:
                    next_tick += self.args.tick
            if job is not None:
                job.read()
            if done():
                return time.time()
            if now - start > timeout:
                raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(min(0.05, max(0.0, next_tick - time.time())))

    def train_a_while(self) -> None:
        """Let the job train `--run-seconds`, the backend polled every tick meanwhile as the
        daemon's ticks do (else the next plan's poll would be the first to see a job that
        stopped meanwhile, and the restart guard would count from then)."""
        end = time.time() + self.args.run_seconds
        self.wait(lambda: time.time() >= end, "the end of a pause")

    def execute(self, start: Assignment | None, preempt: tuple[str, ...] = ()) -> float:
        self.backend.observe()          # the round's poll, then the decision
        self.calls.clear()
        self.polls = []
        self.round += 1
        starts = (start,) if start else ()
        t0 = time.time()
        self.backend.execute(RoundPlan(self.round, starts, (), starts, preempt), t0 + 360)
        return t0

    def place(self, job: Job, node: str) -> Assignment:
        wt = self.types[node]
        return Assignment((job.id,), wt, ((node, 1),))

    def cold_start(self, node: str) -> tuple[Job, dict]:
        job = self.submit()
        t0 = self.execute(self.place(job, node))
        t_first = self.wait(lambda: job.launches and (s := job.after(t0, "start")) and job.first_step(s),
                            "the first step", job, tick_from=t0)
        start = job.after(t0, "start")
        first = job.first_step(start)
        launch = job.launches[-1]
        row = {"release": self.calls["release_done"] - t0,
               "launch": launch - self.calls["release_done"],
               "setup": start["time"] - launch, "load": start.get("load_seconds", 0.0),
               "first": first["time"] - start["time"], "total": first["time"] - t0,
               "seen": t_first - t0}
        return job, row

    def restart(self, job: Job, node: str) -> dict:
        t0 = self.execute(self.place(job, node), preempt=(job.id,))
        self.wait(lambda: (s := job.after(t0, "start")) and job.first_step(s), "the resumed first step",
                  job, tick_from=t0)
        steps_before = job.step_seconds(t0 - 5.0, t0)
        ckpt = job.after(t0, "checkpoint")
        start = job.after(t0, "start")
        first = job.first_step(start)
        launch = next(t for t in job.launches if t >= t0)
        released = self.calls["release_done"]
        # the first poll that found the job no longer running (nor completing)
        stopped = next(t for t, state in self.polls
                       if t >= ckpt["time"] and "RUNNING" not in state and "COMPLETING" not in state)
        row = {"stop": stopped - t0, "save": ckpt.get("save_seconds", 0.0),
               "exit": ckpt["time"] - t0,
               "wait": self.calls["update"] - stopped, "release": released - self.calls["update"],
               "launch": launch - released, "setup": start["time"] - launch,
               "load": start.get("load_seconds", 0.0), "first": first["time"] - start["time"],
               "total": first["time"] - t0, "step": steps_before}
        return row

    def swap(self, out: Job, into: Job, node: str) -> dict:
        """Preempt `out` and start `into` on the GPU it frees, in one plan (the usual round
        change): `into` is released at once and Slurm starts it when `out` has stopped."""
        t0 = self.execute(self.place(into, node), preempt=(out.id,))
        self.wait(lambda: (into.read() or True) and (s := into.after(t0, "start")) and into.first_step(s),
                  "the incoming job's first step", out, tick_from=t0)
        ckpt = out.after(t0, "checkpoint")
        start = into.after(t0, "start")
        first = into.first_step(start)
        launch = next(t for t in into.launches if t >= t0)
        return {"exit": ckpt["time"] - t0, "save": ckpt.get("save_seconds", 0.0),
                "release": self.calls["release_done"] - t0, "launch": launch - t0,
                "setup": start["time"] - launch, "load": start.get("load_seconds", 0.0),
                "first": first["time"] - start["time"], "total": first["time"] - t0,
                "cold": "load_seconds" not in start}

    def run(self) -> int:
        nodes = node_list(parse_types(TYPES))
        self.types = {name: wt for name, wt, _ in nodes}
        [v100] = [n for n, wt, _ in nodes if wt == "v100"]
        [k80] = [n for n, wt, _ in nodes if wt == "k80"]
        self.polls = []
        print(f"template {self.args.template}, tick {self.args.tick:g} s, "
              f"load {load()} (1/5/15 min), RESTART_GUARD_SECONDS {backend_mod.RESTART_GUARD_SECONDS:g}",
              flush=True)
        cold = []
        job = None
        print(f"\ncold start (decision -> first step), s\n{'#':>2} {'release':>8} {'launch':>7} "
              f"{'setup':>7} {'first':>7} {'total':>7}")
        for i in range(self.args.starts):
            if job is not None:
                subprocess.run(["scancel", job.id], env=self.env, check=True)
                self.wait(lambda: "R" != self.backend.job_status().get(job.id, {}).get("state"),
                          f"job {job.id} cancelled")
                time.sleep(1.0)
            job, row = self.cold_start(v100)
            cold.append(row)
            print(f"{i:2d} {row['release']:8.2f} {row['launch']:7.2f} {row['setup']:7.2f} "
                  f"{row['first']:7.2f} {row['total']:7.2f}", flush=True)
        self.train_a_while()
        restarts = []
        where = v100
        print(f"\nrestart (preemption decision -> first step after resume), s\n"
              f"{'#':>2} {'to':<8} {'stop':>6} {'(save':>6} {'exit)':>6} {'wait':>6} {'release':>8} "
              f"{'launch':>7} {'setup':>7} {'(load)':>7} {'first':>7} {'(step)':>7} {'total':>7}")
        for i in range(self.args.restarts):
            move = i % 2 == 0
            if move:
                where = k80 if where == v100 else v100
            row = self.restart(job, where)
            row["to"] = ("other " if move else "same ") + where.split("-")[0]
            row["move"] = move
            restarts.append(row)
            step = "-" if row["step"] is None else f"{row['step']:.3f}"
            print(f"{i:2d} {row['to']:<8} {row['stop']:6.2f} {row['save']:6.2f} {row['exit']:6.2f} "
                  f"{row['wait']:6.2f} {row['release']:8.2f} {row['launch']:7.2f} {row['setup']:7.2f} "
                  f"{row['load']:7.2f} {row['first']:7.2f} {step:>7} {row['total']:7.2f}", flush=True)
            self.train_a_while()
        swaps = []
        if self.args.swaps:
            other = self.submit()          # held, never started: its first swap is a cold start
            if where != v100:              # both jobs take turns on the v100 node
                row = self.restart(job, v100)
                self.train_a_while()
            print(f"\nswap (preempt one job, start another on the GPU it frees, one plan: decision "
                  f"-> the incoming job's first step), s\n{'#':>2} {'exit':>6} {'(save)':>7} "
                  f"{'release':>8} {'launch':>7} {'setup':>7} {'(load)':>7} {'first':>7} {'total':>7}")
            pair = [job, other]
            for i in range(self.args.swaps):
                out, into = pair[i % 2], pair[(i + 1) % 2]
                row = self.swap(out, into, v100)
                swaps.append(row)
                print(f"{i:2d} {row['exit']:6.2f} {row['save']:7.2f} {row['release']:8.2f} "
                      f"{row['launch']:7.2f} {row['setup']:7.2f} {row['load']:7.2f} {row['first']:7.2f} "
                      f"{row['total']:7.2f}{'  (cold: first start)' if row['cold'] else ''}", flush=True)
                self.train_a_while()
            subprocess.run(["scancel", other.id], env=self.env, check=False)
        subprocess.run(["scancel", job.id], env=self.env, check=False)

        def med(rows, key):
            return statistics.median(r[key] for r in rows) if rows else float("nan")
        print(f"\nmedians, s (load {load()})")
        if cold:
            print(f"cold start  release {med(cold, 'release'):.2f}  launch {med(cold, 'launch'):.2f}  "
                  f"setup {med(cold, 'setup'):.2f}  first step {med(cold, 'first'):.2f}  "
                  f"total {med(cold, 'total'):.2f}  (n={len(cold)})")
        for label, rows in (("restart, moved", [r for r in restarts if r["move"]]),
                            ("restart, same node", [r for r in restarts if not r["move"]]),
                            ("restart, all", restarts)):
            if not rows:
                continue
            resume = [r["release"] + r["launch"] + r["setup"] + r["first"] for r in rows]
            print(f"{label:<19} stop {med(rows, 'stop'):.2f} (save {med(rows, 'save'):.2f}, exit "
                  f"{med(rows, 'exit'):.2f})  wait {med(rows, 'wait'):.2f}  release "
                  f"{med(rows, 'release'):.2f}  launch {med(rows, 'launch'):.2f}  setup "
                  f"{med(rows, 'setup'):.2f} (load {med(rows, 'load'):.2f})  first step "
                  f"{med(rows, 'first'):.2f}  resume {statistics.median(resume):.2f}  "
                  f"total {med(rows, 'total'):.2f}  (n={len(rows)})")
        resumed = [r for r in swaps if not r["cold"]]
        if resumed:
            print(f"swap (resumes)      exit {med(resumed, 'exit'):.2f} (save {med(resumed, 'save'):.2f})  "
                  f"launch {med(resumed, 'launch'):.2f}  setup {med(resumed, 'setup'):.2f} (load "
                  f"{med(resumed, 'load'):.2f})  first step {med(resumed, 'first'):.2f}  total "
                  f"{med(resumed, 'total'):.2f}  (n={len(resumed)})")
        return 0


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--template", default="resnet18", choices=jobscript.NAMES)
    parser.add_argument("--starts", type=int, default=5, help="cold starts (default: %(default)s)")
    parser.add_argument("--restarts", type=int, default=10,
                        help="restarts, alternately moved and on the same node (default: %(default)s)")
    parser.add_argument("--swaps", type=int, default=7,
                        help="swaps of two jobs on one GPU; the first is a cold start (default: %(default)s)")
    parser.add_argument("--tick", type=float, default=10.0,
                        help="seconds between the backend's polls (the daemon's tick_seconds; "
                             "default: %(default)s)")
    parser.add_argument("--run-seconds", type=float, default=3.0,
                        help="training between a first step and the next preemption (default: %(default)s)")
    args = parser.parse_args()
    why = unavailable_reason()
    if why:
        print(f"cannot run a local Slurm cluster here: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="gavel-restart-bench-", dir="/tmp") as tmp:
        tmp = Path(tmp)
        types = parse_types(TYPES)
        ctld, slurmd = pick_ports(len(node_list(types)))
        cluster = DevCluster(tmp / "c", types, ctld_port=ctld, slurmd_port=slurmd,
                             job_submit_lua=default_job_submit_lua())
        cluster.up()
        try:
            work = tmp / "work"
            work.mkdir()
            return Bench(cluster, work, args).run()
        finally:
            cluster.down()


if __name__ == "__main__":
    sys.exit(main())

"""The daemon on a local cluster, for the cluster tests: a preemptible batch job, its config,
submit, start and stop (its output piped, or written to a log file read while it runs, or
the daemon's own objects in a thread of the test's process)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import pytest


ROOT = Path(__file__).resolve().parents[2]
TOY_TABLE = ROOT / "examples" / "toy_throughputs.json"
TICK = 2.0
JOB = r"""#!/bin/bash
#SBATCH --requeue
#SBATCH --open-mode=append
# A preemptible job: one step per second, its step saved after each, and on
# USR2 a checkpoint and exit 85 (RequeueExitHold), so Slurm requeues it held.
stop=0
trap 'stop=1' USR2
dir="$JOBDIR"
state="$dir/$SLURM_JOB_ID.step"
step=$(cat "$state" 2>/dev/null || echo 0)
begin=$(date +%s.%N)
echo "start restart=${SLURM_RESTART_COUNT:-0} step=$step partition=$SLURM_JOB_PARTITION"
while [ "$step" -lt "$TOTAL" ]; do
  sleep 1
  step=$((step + 1))
  echo "$step" > "$state.tmp" && mv "$state.tmp" "$state"
  # a progress record, as the iterator writes them (slurm_gavel/progress.py)
  echo "{\"job\": \"$SLURM_JOB_ID\", \"event\": \"progress\", \"step\": $step, \"steps_per_second\": 1.0, \"partition\": \"$SLURM_JOB_PARTITION\", \"time\": $(date +%s)}" >> "$GAVEL_PROGRESS_DIR/$SLURM_JOB_ID.jsonl"
  if [ "$stop" = 1 ]; then
    echo "segment $SLURM_JOB_PARTITION $begin $(date +%s.%N)" >> "$dir/$SLURM_JOB_ID.segments"
    echo "checkpoint at $step"
    exit 85
  fi
done
echo "segment $SLURM_JOB_PARTITION $begin $(date +%s.%N)" >> "$dir/$SLURM_JOB_ID.segments"
echo "done at $step"
"""


MODELS = ("convnet", "rl-agent", "translation", "language-model")


def write_config(tmp: Path, cluster, **extra) -> Path:
    (tmp / "progress").mkdir(exist_ok=True)
    settings = {"slurm_conf": str(cluster.slurm_conf), "database": str(tmp / "gavel.db"),
                "progress_dir": str(tmp / "progress"),
                "round_seconds": 15, "tick_seconds": TICK, "grace_seconds": 10,
                "throughputs": str(TOY_TABLE),
                # the plain mechanism (no lease hysteresis, no restart cost weighed):
                # these tests watch jobs being preempted and moved within a few
                # 15-second rounds
                "hysteresis_rounds": 0.0, "move_hysteresis_rounds": 0.0, "restart_seconds": 0.0}
    settings.update(extra)
    lines = []
    for key, value in settings.items():
        lines.append(f"{key} = {value!r}".replace("'", '"') if isinstance(value, str)
                     else f"{key} = {str(value).lower() if isinstance(value, bool) else value}")
    path = tmp / "gavel.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def submit(cluster, tmp: Path, model: str, gpus: int, steps: int, extra=(), flags: str = "") -> str:
    script = tmp / "job.sh"
    if not script.exists():
        script.write_text(JOB)
    out = cluster.run(["sbatch", "--parsable",
                       f"--export=ALL,TOTAL={steps},JOBDIR={tmp},GAVEL_PROGRESS_DIR={tmp / 'progress'}",
                       "-o", str(tmp / "out-%j.txt"), "--comment", f"gavel model={model} steps={steps} {flags}".rstrip(),
                       f"--gres=gpu:{gpus}", *extra, str(script)]).stdout
    return out.strip().split(";")[0]


def queue(cluster) -> dict[str, str]:
    out = cluster.run(["squeue", "-h", "-o", "%i %T"]).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def start_daemon(config: Path, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "slurm_gavel", "daemon", "--config", str(config),
                             *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def stop_daemon(proc: subprocess.Popen) -> tuple[int, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return proc.returncode, out


class LoggedDaemon:
    """`slurm-gavel daemon` in a subprocess, its log in a file (read while it runs); `timeout`:
    how long `wait_for` waits and `stop` waits for the exit, unless told."""

    def __init__(self, config: Path, log: Path, *args, timeout: float = 60):
        self.log_path, self.timeout = log, timeout
        self.out = open(log, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "slurm_gavel", "daemon", "--config", str(config),
                                      *args], stdout=self.out, stderr=subprocess.STDOUT, text=True)

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_for(self, text: str, timeout: float | None = None, after: int = 0) -> int:
        """Wait until `text` is in the log past offset `after`; its offset."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.time() + timeout
        while time.time() < deadline:
            at = self.log().find(text, after)
            if at >= 0:
                return at
            assert self.proc.poll() is None, self.log()[-3000:]
            time.sleep(0.3)
        pytest.fail(f"{text!r} not in the daemon's log after {timeout} s:\n{self.log()[-3000:]}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.out.close()
        return self.proc.returncode


@contextmanager
def daemon_thread(config: Path, prepare: Callable = lambda daemon: None):
    """The daemon of `config` run in a thread of this process (its SQLite connection belongs
    to the thread that opens it), `prepare(daemon)` called before its first round; yields
    (daemon, thread), then stops it: it must have ended within 120 s."""
    from slurm_gavel.daemon import config as config_mod
    from slurm_gavel.daemon.daemon import Daemon
    holder, made = {}, threading.Event()

    def run():
        d = holder["daemon"] = Daemon(config_mod.load(config))
        prepare(d)
        made.set()
        d.run()

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    assert made.wait(60)
    daemon = holder["daemon"]
    try:
        yield daemon, runner
    finally:
        daemon.request_stop()
        runner.join(timeout=120)
        if daemon._watchdog is not None:
            daemon._watchdog.cancel()
    assert not runner.is_alive()


def gqueue(tmp: Path) -> dict[str, dict]:
    """job -> its row of `slurm-gavel queue --json` on the database in `tmp`."""
    done = subprocess.run([sys.executable, "-m", "slurm_gavel", "queue", "--db", str(tmp / "gavel.db"),
                           "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return {r["jobid"]: r for r in json.loads(done.stdout)["jobs"]}


def explain(tmp: Path, job: str) -> str:
    """What `slurm-gavel explain JOB` says on the database in `tmp`."""
    done = subprocess.run([sys.executable, "-m", "slurm_gavel", "explain", job, "--db",
                           str(tmp / "gavel.db")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def segments(tmp: Path, job: str) -> list[tuple[str, float]]:
    path = tmp / f"{job}.segments"
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        _, partition, begin, end = line.split()
        out.append((partition, float(end) - float(begin)))
    return out


def dry_run(cluster, tmp_path) -> tuple[str, int, str]:
    """One small job and two rounds of a `--dry-run` daemon: (job, exit code, log)."""
    config = write_config(tmp_path, cluster, round_seconds=4, tick_seconds=1)
    job = submit(cluster, tmp_path, "convnet", 1, 5)
    daemon = start_daemon(config, "--dry-run", "--max-rounds", "2")
    code, log = stop_daemon(daemon) if daemon.wait(timeout=60) is None else (daemon.returncode,
                                                                             daemon.stdout.read())
    return job, code, log

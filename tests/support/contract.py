"""The backend contract's harnesses: one adapter per cluster backend (simulated, Slurm) and the
small readers of an Observation the cases share."""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from slurm_gavel.core.backend import Observation
from slurm_gavel.core.clock import WallClock
from slurm_gavel.core.mechanism import Assignment, RoundPlan, Server


MODEL = "convnet"
ROUND = 3600.0          # round_end is this far ahead: no round ends within a case
SHORT_SECONDS = 3       # how long a short job runs before it completes


# -- harnesses ---------------------------------------------------------------------
class Harness:
    """What a case needs of an implementation, besides the backend itself."""

    kind: str
    clock = None
    tick: float          # time between observations while waiting
    timeout: float       # how long (on `clock`) a wait may take
    tolerance: float     # seconds: usage against elapsed time, departure times
    stop_seconds: float  # how long a preempted job may still hold its GPUs

    def __init__(self):
        self.history: list[Observation] = []

    @property
    def backend(self):
        raise NotImplementedError

    def submit(self, gpus: int, long: bool = True, distributed: bool = False) -> str:
        """A gavel job of `gpus` GPUs (model MODEL): `long` runs until preempted, otherwise it
        completes SHORT_SECONDS after it starts; `distributed`: its GPUs may be spread over
        servers (on Slurm: --gpus=N, not --gres=gpu:N)."""
        raise NotImplementedError

    def advance(self, seconds: float) -> None:
        raise NotImplementedError

    def starts(self, job: str) -> int:
        """How many times the job really started (not what the backend says)."""
        raise NotImplementedError

    def start_time(self, job: str) -> float:
        """When the job (started once) began to hold its GPUs, on `clock` (not what the backend says)."""
        raise NotImplementedError

    def devices(self, job: str) -> tuple[str, str]:
        """(server, devices) the job's last start really ran on (not what the backend says)."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    # -- shared -------------------------------------------------------------------
    def execute(self, plan: RoundPlan) -> None:
        self.backend.execute(plan, self.clock.now() + ROUND)

    def observe(self) -> Observation:
        obs = self.backend.observe()
        self.history.append(obs)
        return obs

    def observe_until(self, predicate, what: str, timeout: float | None = None) -> Observation:
        """Observe every `tick` until `predicate(observation)` holds."""
        deadline = self.clock.now() + (timeout or self.timeout)
        while True:
            obs = self.observe()
            if predicate(obs):
                return obs
            if self.clock.now() >= deadline:
                pytest.fail(f"{self.kind}: timed out waiting for {what}; last observation: {obs}")
            self.advance(self.tick)

    def observe_for(self, seconds: float) -> list[Observation]:
        """Observe every `tick` for `seconds`."""
        end = self.clock.now() + seconds
        seen = []
        while self.clock.now() < end:
            self.advance(min(self.tick, end - self.clock.now()))
            seen.append(self.observe())
        return seen


JOB_SCRIPT = r"""#!/bin/bash
# A gavel job: logs each start; on USR2 it exits with the requeue-hold code (85).
trap 'echo "stop $(date +%s.%N)" >> "$JOBDIR/$SLURM_JOB_ID.log"; exit 85' USR2
echo "start $SLURM_JOB_PARTITION $SLURMD_NODENAME $(date +%s.%N) ${CUDA_VISIBLE_DEVICES:-none}" >> "$JOBDIR/$SLURM_JOB_ID.log"
if [ "$SECONDS_TO_RUN" -gt 0 ]; then
  for i in $(seq $((SECONDS_TO_RUN * 10))); do sleep 0.1; done
  echo "end $(date +%s.%N)" >> "$JOBDIR/$SLURM_JOB_ID.log"
  exit 0
fi
while true; do sleep 0.1; done
"""


class SlurmHarness(Harness):
    """SlurmBackend on the session's dev cluster, wall clock; time passes by sleeping."""

    kind = "slurm"
    tick = 0.5
    timeout = 30.0
    tolerance = 2.0      # Slurm's whole-second start and end times, and a poll's own duration
    stop_seconds = 5.0   # a signalled job checkpoints, exits, and a poll sees it

    def __init__(self, cluster, tmp_path: Path):
        from slurm_gavel.slurm.backend import SlurmBackend
        from slurm_gavel.slurm.commands import SlurmCLI
        super().__init__()
        self.cluster, self.dir = cluster, tmp_path
        self.clock = WallClock()
        self.jobs: list[str] = []
        _cancel_all(cluster)
        self.script = tmp_path / "job.sh"
        self.script.write_text(JOB_SCRIPT)
        self._backend = SlurmBackend(SlurmCLI(env=cluster.env), self.clock, grace_seconds=20.0)

    @property
    def backend(self):
        return self._backend

    def submit(self, gpus: int, long: bool = True, distributed: bool = False) -> str:
        seconds = 0 if long else SHORT_SECONDS
        out = self.cluster.run(["sbatch", "--parsable", "-o", str(self.dir / "out-%j.txt"), "--open-mode=append",
                                f"--export=ALL,JOBDIR={self.dir},SECONDS_TO_RUN={seconds}",
                                "--comment", f"gavel model={MODEL}",
                                f"--gpus={gpus}" if distributed else f"--gres=gpu:{gpus}", str(self.script)],
                               cwd=self.dir).stdout
        job = out.strip().split(";")[0]
        self.jobs.append(job)
        return job

    def advance(self, seconds: float) -> None:
        time.sleep(seconds)

    def _log(self, job: str) -> list[list[str]]:
        path = self.dir / f"{job}.log"
        return [line.split() for line in path.read_text().splitlines()] if path.exists() else []

    def _starts(self, job: str) -> list[float]:
        """The job's start times from its log, once the log has caught up with Slurm (which says
        RUNNING a moment before the script writes its first line)."""
        deadline = time.monotonic() + 10
        while True:
            starts = [float(words[3]) for words in self._log(job) if words[0] == "start"]
            info = dict(re.findall(r"(\w+)=(\S*)", self.cluster.run(
                ["scontrol", "-o", "show", "job", job]).stdout))
            expected = int(info.get("Restarts", 0)) + 1 if info.get("JobState") == "RUNNING" else 0
            if len(starts) >= expected or time.monotonic() > deadline:
                return starts
            time.sleep(0.1)

    def starts(self, job: str) -> int:
        return len(self._starts(job))

    def start_time(self, job: str) -> float:
        # Slurm's StartTime (whole seconds), when it allocated the GPUs: the script itself
        # begins up to a few seconds later on this busy machine
        info = dict(re.findall(r"(\w+)=(\S*)", self.cluster.run(["scontrol", "-o", "show", "job", job]).stdout))
        return time.mktime(time.strptime(info["StartTime"], "%Y-%m-%dT%H:%M:%S"))

    def devices(self, job: str) -> tuple[str, str]:
        # what the job's script saw: its node and CUDA_VISIBLE_DEVICES (fake GPUs are devices
        # on the shard cluster, so Slurm sets it; see devcluster._fake_gpu)
        self._starts(job)
        words = [w for w in self._log(job) if w[0] == "start"][-1]
        return words[2], words[4]

    def close(self) -> None:
        if self.jobs:
            self.cluster.run(["scancel", *self.jobs], check=False)


def _cancel_all(cluster, timeout: float = 30.0) -> None:
    """No job left on the cluster (other tests of the session run jobs too): all GPUs free."""
    cluster.run(["scancel", "--user", "root"], check=False)
    deadline = time.monotonic() + timeout
    while cluster.run(["squeue", "-h", "-t", "RUNNING,COMPLETING,CONFIGURING,PENDING", "-o", "%i"]).stdout.strip():
        assert time.monotonic() < deadline, "jobs of other tests did not go away"
        time.sleep(0.3)


# -- helpers -----------------------------------------------------------------------------
def plan(number: int, start=(), keep=(), preempt=()) -> RoundPlan:
    return RoundPlan(number, tuple(keep) + tuple(start), tuple(keep), tuple(start), tuple(preempt))


def ids(obs: Observation) -> list[str]:
    return [j.id for j in obs.jobs]


def used(obs: Observation, job: str, worker_type: str | None = None) -> float:
    return sum(u.seconds for u in obs.usage
               if job in u.assignment.jobs and worker_type in (None, u.assignment.worker_type))


def is_running(job: str, worker_type: str):
    """Really running there: it held GPUs of that type since the previous observation."""
    return lambda obs: used(obs, job, worker_type) > 0


def free(obs: Observation) -> dict[str, int]:
    """GPUs of each server not held by a running assignment."""
    out = {s.name: s.gpus for s in obs.servers}
    for a in obs.running:
        for name, count in a.servers:
            out[name] -= count
    return out


def server_of(obs: Observation, worker_type: str, index: int = 0) -> Server:
    return sorted((s for s in obs.servers if s.worker_type == worker_type), key=lambda s: s.name)[index]


def on(obs: Observation, job: str, worker_type: str, gpus: int, index: int = 0) -> Assignment:
    return Assignment((job,), worker_type, ((server_of(obs, worker_type, index).name, gpus),))


def submitted(h: Harness, job: str) -> Observation:
    return h.observe_until(lambda o: job in ids(o), f"job {job} in observe().jobs")

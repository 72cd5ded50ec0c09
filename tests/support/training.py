"""A framework's example job (Lightning, Hugging Face, Accelerate) on the local cluster, run as
the daemon runs it: submitted held (job_submit.lua holds gavel jobs), released on one GPU type,
preempted with the daemon's own call, requeued held by its exit 85, moved to the next type and
released again, to the end; and what its output is compared with: the same script run once
without Slurm."""
from __future__ import annotations

import os
from pathlib import Path

from slurm_gavel.job.progress import read_progress
from slurm_gavel.slurm.commands import SlurmCLI
from tests.support.slurm import move_job
from tests.support.waiting import job_info, wait_for

ROOT = Path(__file__).resolve().parents[2]
ENDED = ("COMPLETED", "FAILED", "CANCELLED")


def plain_env(*strip: str, **extra: str) -> dict:
    """This environment for the run without Slurm: no SLURM_ or GAVEL_ variable (nor any that
    starts with one of `strip`), the repository on PYTHONPATH, one thread, and `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "GAVEL_", *strip))}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **extra)
    return env


def submit(cluster, script: Path, exports: dict, *args: str, options=()) -> str:
    """sbatch `script` from its folder (--chdir too) with `exports` added to the environment,
    `args` to the script; the job id."""
    export = ",".join(["ALL", *(f"{k}={v}" for k, v in exports.items())])
    out = cluster.run(["sbatch", "--parsable", *options, f"--chdir={script.parent}", f"--export={export}",
                       str(script), *args], cwd=script.parent).stdout
    return out.strip().split(";")[0]


def reported_step(progress: Path) -> int:
    """The highest step the job's progress records reported (0 before the first)."""
    return max((r["step"] for r in read_progress(progress) if r["event"] == "progress"), default=0)


def two_past_the_last_stop(run: int, stops: list[int]) -> int:
    """A `stop_at` for `run_moved`: two steps past the last checkpoint (the first run: step 2)."""
    return (stops[-1] if stops else 0) + 2


def run_moved(cluster, job: str, partitions, progress: Path, log: Path, stop_at, *,
              after_stop=lambda: None, timeout: float = 240, kill=()) -> tuple[dict, list[int]]:
    """Run the held `job` on `partitions` in turn, as the daemon would. In each run but the
    last: once it reported step `stop_at(run, stops)` (`stops`: the steps checkpointed so far),
    signal it USR2 (SlurmCLI.signal: scancel --batch, the daemon's call), check its held requeue
    (exit 85), call `after_stop()`, note the step its checkpoint holds, move it on and release it.
    Returns its scontrol record once it ended, and the checkpointed steps. On any failure the
    job is cancelled and the processes in `kill` are killed."""
    cli = SlurmCLI(env=cluster.env)
    stops: list[int] = []
    try:
        assert job_info(cluster, job)["Reason"] == "JobHeldUser"        # job_submit.lua holds it
        for run, partition in enumerate(partitions):
            if job_info(cluster, job)["Partition"] != partition:
                move_job(cluster.run, job, partition)
            if run:          # a requeued job waits for a begin time Slurm sets: not here
                cluster.run(["scontrol", "update", f"jobid={job}", "StartTime=now"])
            cli.release([job])
            if run == len(partitions) - 1:
                break
            step = stop_at(run, stops)
            wait_for(lambda: reported_step(progress) >= step, timeout, f"run {run} to pass step {step}")
            cli.signal([job], "USR2")                      # as the daemon preempts
            info = wait_for(lambda: (i := job_info(cluster, job))["JobState"] in ("SPECIAL_EXIT", "PENDING")
                            and i["Restarts"] == str(run + 1) and i, timeout, f"the held requeue of run {run}")
            assert info["ExitCode"] == "85:0", (info, log.read_text()[-3000:] if log.exists() else "")
            after_stop()
            [checkpoint] = [r for r in read_progress(progress) if r["event"] == "checkpoint"][-1:]
            stops.append(checkpoint["step"])
        info = wait_for(lambda: (i := job_info(cluster, job))["JobState"] in ENDED and i, timeout, "the end")
    except BaseException:
        cluster.run(["scancel", job], check=False)
        for proc in kill:
            proc.kill()
        raise
    return info, stops


def assert_stopped_and_resumed(progress: Path, partitions, stops: list[int], steps: int, epoch: int,
                               log: str):
    """The progress records and log of a job `run_moved` ran on `partitions` and stopped at
    `stops`: a start on each partition in turn (its restart count) at the step the checkpoint
    before it holds, a checkpoint at each stop (steps in order, one at least mid-epoch) on the
    partition it stopped on, said in the log; done at `steps`."""
    records = read_progress(progress)
    starts = [r for r in records if r["event"] == "start"]
    checkpoints = [r for r in records if r["event"] == "checkpoint"]
    assert [(r["partition"], r["restart"]) for r in starts] == [(p, i) for i, p in enumerate(partitions)]
    assert [r["step"] for r in starts] == [0] + stops
    assert [r["step"] for r in checkpoints] == stops and stops == sorted(set(stops))
    assert [r["partition"] for r in checkpoints] == list(partitions[:-1])
    assert any(step % epoch for step in stops), stops                  # one at least mid-epoch
    assert records[-1]["event"] == "done" and records[-1]["step"] == steps
    for step in stops:
        assert f"checkpoint of step {step} saved" in log


def step_lines(text: str) -> list[str]:
    """The lines a training script printed for its steps (loss and learning rate, in float.hex)."""
    return [line for line in text.splitlines() if line.startswith("step ")]


def assert_same_tensors(final: dict, expected: dict):
    """The same names, and every tensor equal to the bit."""
    import torch
    assert final.keys() == expected.keys()
    for name, value in final.items():
        assert torch.equal(value, expected[name]), name

"""The Accelerate example on the real local cluster: `python -m slurm_gavel.job.accelerate
launch` around `accelerate launch`, preempted three times with the daemon's own signal call,
moved between GPU types, bitwise the uninterrupted result.

examples/accelerate/train.sbatch (a 2-layer GPT-2 from a config, dropout, a shuffled loader
with Accelerate's seedable sampler, a warmup + linear LR schedule; on the CPU, slowed a
little so that signals land mid-run) is submitted as a gavel job, released on v100,
preempted with `SlurmCLI.signal` (scancel --batch --signal=USR2: the wrapper gets it and
passes it to the rank), requeued held by the wrapper's exit 85, moved to k80, p100, v100
and released each time. Every loss the loop printed (in float.hex) and the final
parameters equal those of an uninterrupted run of the same script without Slurm, and no
process of the job is left after each run.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support.slurm import move_job
from tests.support.torch_import import import_torch

from slurm_gavel.job.progress import read_progress
from slurm_gavel.slurm.commands import SlurmCLI

torch = import_torch()
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "accelerate"
STEPS = 40            # 96 samples / batch 8 = 12 steps an epoch
MOVES = ("k80", "p100", "v100")
PASSED = ("PYTHONPATH", "OMP_NUM_THREADS", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def plain_env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "GAVEL_", "RANK", "WORLD_SIZE", "MASTER_", "LOCAL_"))}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1")
    return env


def job_state(cluster, job) -> dict:
    out = cluster.run(["scontrol", "-o", "show", "job", job]).stdout
    return dict(part.split("=", 1) for part in out.split() if "=" in part)


def wait_for(what, check, timeout=180):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)
    return value


def processes_of(job: str, submit_dir: Path) -> list[int]:
    """Live processes of job `job` submitted from `submit_dir` (other clusters on this host
    have jobs with the same ids)."""
    needles = (f"\0SLURM_JOB_ID={job}\0".encode(), f"\0SLURM_SUBMIT_DIR={submit_dir}\0".encode())
    alive = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                environ = b"\0" + Path(f"/proc/{entry}/environ").read_bytes()
                if all(n in environ for n in needles) and \
                        "State:\tZ" not in Path(f"/proc/{entry}/status").read_text():
                    alive.append(int(entry))
            except OSError:
                pass
    return alive


def submit(cluster, tmp_path, script_args: str) -> str:
    text = (EXAMPLE / "train.sbatch").read_text()
    text = text.replace("exec python -m", f"exec {sys.executable} -m")
    text = text.replace(" examples/accelerate/train.py", f" {EXAMPLE / 'train.py'}")
    assert text.rstrip().endswith('"$@"')
    script = tmp_path / "job.sbatch"
    script.write_text(text.rstrip().removesuffix('"$@"') + script_args + "\n")
    env = ",".join(f"{k}={v}" for k, v in plain_env().items() if k in PASSED)
    out = cluster.run(["sbatch", "--parsable", "-p", "v100", f"--chdir={tmp_path}",
                       f"--export=ALL,{env},GAVEL_PROGRESS_INTERVAL=0", str(script)], cwd=tmp_path)
    return out.stdout.strip().split(";")[0]


def preempt_move_release(cluster, cli, job, progress, partition, after_step):
    """Wait until the job trained past `after_step`, preempt it as the daemon does, check the
    held requeue and that nothing of the job is left, move it to `partition`, release it.
    Returns the step it stopped at."""
    wait_for(f"step {after_step + 2}", lambda: any(
        r["event"] == "progress" and r["step"] >= after_step + 2 for r in read_progress(progress)))
    cli.signal([job], "USR2")
    info = wait_for("the held requeue", lambda: (s := job_state(cluster, job))["JobState"]
                    in ("SPECIAL_EXIT", "PENDING") and s)
    assert info["ExitCode"] == "85:0", info
    assert processes_of(job, progress.parent.parent) == []
    [checkpoint] = [r for r in read_progress(progress) if r["event"] == "checkpoint"][-1:]
    move_job(cluster.run, job, partition)
    cluster.run(["scontrol", "update", f"jobid={job}", "StartTime=now"])
    cluster.run(["scontrol", "release", job])
    return checkpoint["step"]


def test_accelerate_job_preempted_three_times_and_moved_resumes_bitwise(slurm_cluster, tmp_path):
    cluster = slurm_cluster
    ref = subprocess.run([sys.executable, str(EXAMPLE / "train.py"), "--cpu", "--steps", str(STEPS),
                          "--save-final", str(tmp_path / "ref.pt")], env=plain_env(), cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert ref.returncode == 0, ref.stderr[-3000:]
    job = submit(cluster, tmp_path, f" --cpu --slow 0.15 --save-final {tmp_path / 'final.pt'}")
    cli = SlurmCLI(env=cluster.env)
    progress = tmp_path / ".gavel" / f"{job}.jsonl"
    try:
        assert job_state(cluster, job)["Reason"] == "JobHeldUser"     # job_submit.lua holds it
        cluster.run(["scontrol", "release", job])
        stops = []
        for partition in MOVES:
            stops.append(preempt_move_release(cluster, cli, job, progress, partition,
                                              stops[-1] if stops else 0))
        info = wait_for("the end", lambda: (s := job_state(cluster, job))["JobState"]
                        in ("COMPLETED", "FAILED", "CANCELLED") and s, timeout=240)
    except BaseException:
        cluster.run(["scancel", job], check=False)
        raise
    log = (tmp_path / f"gavel-accelerate-{job}.out").read_text()
    assert info["JobState"] == "COMPLETED", log[-4000:]
    assert processes_of(job, tmp_path) == []

    records = read_progress(progress)
    starts = [r for r in records if r["event"] == "start"]
    checkpoints = [r for r in records if r["event"] == "checkpoint"]
    assert [(r["partition"], r["restart"]) for r in starts] == \
        [("v100", 0), ("k80", 1), ("p100", 2), ("v100", 3)]
    assert [r["step"] for r in starts] == [0] + stops
    assert [r["step"] for r in checkpoints] == stops and stops == sorted(set(stops))
    assert [r["partition"] for r in checkpoints] == ["v100", "k80", "p100"]
    assert any(step % 12 for step in stops), stops                  # one at least mid-epoch
    assert records[-1]["event"] == "done" and records[-1]["step"] == STEPS
    for step in stops:
        assert f"checkpoint of step {step} saved" in log
    assert log.count("a rank saved its checkpoint: exiting 85") == len(stops)     # the wrapper
    assert not list((tmp_path / ".gavel" / f"{job}.ckpt").glob("step-*"))   # removed when done

    losses = [line for line in log.splitlines() if line.startswith("step ")]
    assert len(losses) == STEPS
    assert losses == [line for line in ref.stdout.splitlines() if line.startswith("step ")]
    final = torch.load(tmp_path / "final.pt")
    reference = torch.load(tmp_path / "ref.pt")
    assert final.keys() == reference.keys()
    for name, value in final.items():
        assert torch.equal(value, reference[name]), name

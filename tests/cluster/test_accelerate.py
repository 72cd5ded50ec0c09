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
from pathlib import Path

from tests.support.torch_import import import_torch
from tests.support.training import (ROOT, assert_same_tensors, assert_stopped_and_resumed, plain_env,
                                    run_moved, step_lines, submit, two_past_the_last_stop)

torch = import_torch()
EXAMPLE = ROOT / "examples" / "accelerate"
STEPS = 40            # 96 samples / batch 8 = 12 steps an epoch
PARTITIONS = ("v100", "k80", "p100", "v100")     # submitted to v100, then moved
OFFLINE = dict(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


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


def job_script(tmp_path, script_args: str):
    text = (EXAMPLE / "train.sbatch").read_text()
    text = text.replace("exec python -m", f"exec {sys.executable} -m")
    text = text.replace(" examples/accelerate/train.py", f" {EXAMPLE / 'train.py'}")
    assert text.rstrip().endswith('"$@"')
    script = tmp_path / "job.sbatch"
    script.write_text(text.rstrip().removesuffix('"$@"') + script_args + "\n")
    return script


def test_accelerate_job_preempted_three_times_and_moved_resumes_bitwise(slurm_cluster, tmp_path):
    cluster = slurm_cluster
    ref = subprocess.run([sys.executable, str(EXAMPLE / "train.py"), "--cpu", "--steps", str(STEPS),
                          "--save-final", str(tmp_path / "ref.pt")],
                         env=plain_env("RANK", "WORLD_SIZE", "MASTER_", "LOCAL_", **OFFLINE), cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert ref.returncode == 0, ref.stderr[-3000:]
    script = job_script(tmp_path, f" --cpu --slow 0.15 --save-final {tmp_path / 'final.pt'}")
    job = submit(cluster, script, dict(PYTHONPATH=ROOT, OMP_NUM_THREADS=1, **OFFLINE, GAVEL_PROGRESS_INTERVAL=0),
                 options=["-p", "v100"])
    progress = tmp_path / ".gavel" / f"{job}.jsonl"
    log_path = tmp_path / f"gavel-accelerate-{job}.out"

    def nothing_left():
        assert processes_of(job, tmp_path) == []

    info, stops = run_moved(cluster, job, PARTITIONS, progress, log_path,
                            two_past_the_last_stop, after_stop=nothing_left)
    log = log_path.read_text()
    assert info["JobState"] == "COMPLETED", log[-4000:]
    assert processes_of(job, tmp_path) == []

    assert_stopped_and_resumed(progress, PARTITIONS, stops, STEPS, 12, log)
    assert log.count("a rank saved its checkpoint: exiting 85") == len(stops)     # the wrapper
    assert not list((tmp_path / ".gavel" / f"{job}.ckpt").glob("step-*"))   # removed when done

    losses = step_lines(log)
    assert len(losses) == STEPS
    assert losses == step_lines(ref.stdout)
    assert_same_tensors(torch.load(tmp_path / "final.pt"), torch.load(tmp_path / "ref.pt"))

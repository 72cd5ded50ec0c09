"""The Hugging Face Trainer example on the real local cluster: preempted three times with the
daemon's own signal call, moved between GPU types, bitwise the uninterrupted result.

examples/hf/train.sbatch (a 2-layer BERT from a config, dropout, shuffling, a linear LR
schedule; slowed a little so that signals land mid-run) is submitted as a gavel job
(held by job_submit.lua), released on v100, preempted with `SlurmCLI.signal` (scancel
--batch --signal=USR2), requeued held by exit 85, moved to k80, p100, v100 and released
again each time; every logged loss and the final parameters equal those of an
uninterrupted run of the same script without Slurm.
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
EXAMPLE = ROOT / "examples" / "hf"
STEPS = 40            # 12 steps an epoch
MOVES = ("k80", "p100", "v100")


def plain_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "GAVEL_"))}
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


def submit(cluster, tmp_path, script_args: str) -> str:
    text = (EXAMPLE / "train.sbatch").read_text()
    text = text.replace("exec python examples/hf/train.py",
                        f"exec {sys.executable} {EXAMPLE / 'train.py'}")
    assert script_args and text.rstrip().endswith('"$@"')
    script = tmp_path / "job.sbatch"
    script.write_text(text.rstrip().removesuffix('"$@"') + script_args + "\n")
    env = ",".join(f"{k}={v}" for k, v in plain_env().items()
                   if k in ("PYTHONPATH", "OMP_NUM_THREADS", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    out = cluster.run(["sbatch", "--parsable", "-p", "v100", f"--chdir={tmp_path}",
                       f"--export=ALL,{env},GAVEL_PROGRESS_INTERVAL=0", str(script)], cwd=tmp_path)
    return out.stdout.strip().split(";")[0]


def preempt_move_release(cluster, cli, job, progress, partition, after_step):
    """Wait until the job trained past `after_step`, preempt it as the daemon does, check the
    held requeue, move it to `partition` and release it. Returns the step it stopped at."""
    wait_for(f"step {after_step + 2}", lambda: any(
        r["event"] == "progress" and r["step"] >= after_step + 2 for r in read_progress(progress)))
    cli.signal([job], "USR2")
    info = wait_for("the held requeue", lambda: (s := job_state(cluster, job))["JobState"]
                    in ("SPECIAL_EXIT", "PENDING") and s)
    assert info["ExitCode"] == "85:0", info
    [checkpoint] = [r for r in read_progress(progress) if r["event"] == "checkpoint"][-1:]
    move_job(cluster.run, job, partition)
    cluster.run(["scontrol", "update", f"jobid={job}", "StartTime=now"])
    cluster.run(["scontrol", "release", job])
    return checkpoint["step"]


def test_trainer_job_preempted_three_times_and_moved_resumes_bitwise(slurm_cluster, tmp_path):
    cluster = slurm_cluster
    ref = subprocess.Popen([sys.executable, str(EXAMPLE / "train.py"), "--output-dir",
                            str(tmp_path / "ref-out"), "--steps", str(STEPS), "--save-final",
                            str(tmp_path / "ref.pt")], env=plain_env(), cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    job = submit(cluster, tmp_path, f" --slow 0.15 --save-final {tmp_path / 'final.pt'}")
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
        ref.kill()
        raise
    log = (tmp_path / f"gavel-hf-{job}.out").read_text()
    assert info["JobState"] == "COMPLETED", log[-4000:]
    ref_out, _ = ref.communicate(timeout=300)
    assert ref.returncode == 0, ref_out[-3000:]

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
    assert not list((tmp_path / ".gavel" / f"{job}.ckpt").glob("checkpoint-*"))   # removed when done

    final = torch.load(tmp_path / "final.pt", weights_only=False)
    reference = torch.load(tmp_path / "ref.pt", weights_only=False)
    assert [e["step"] for e in final["log"]] == list(range(1, STEPS + 1))
    assert final["log"] == reference["log"], "logged losses differ from the uninterrupted run"
    assert final["params"].keys() == reference["params"].keys()
    for name, value in final["params"].items():
        assert torch.equal(value, reference["params"][name]), name

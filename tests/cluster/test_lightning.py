"""A PyTorch Lightning job under the real local Slurm: preempted three times, moved between
GPU types, finished bit for bit as an uninterrupted run.

examples/lightning/train.sbatch (examples/lightning/train.py: a small MLP with dropout on
random data made from a seed, a shuffling StatefulDataLoader, a per-epoch LR schedule,
GavelCallback) is submitted as a gavel job; job_submit.lua holds it. The test then does
what the daemon does: moves it to a partition (= GPU type), releases it, preempts it with
the daemon's own call (`SlurmCLI.signal`: scancel --batch --signal=USR2), waits for the
exit 85 that RequeueExitHold=85 turns into "requeued held", and moves it on: v100, k80,
p100, then v100 to finish. Every loss and learning rate the job printed (hex floats) and
its final parameters equal those of the same script run once without Slurm.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.slurm import move_job
from tests.support.torch_import import import_torch

from slurm_gavel.job.progress import read_progress
from slurm_gavel.slurm.commands import SlurmCLI

torch = import_torch()
pytest.importorskip("lightning")
pytest.importorskip("torchdata")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "lightning"
STEPS, PER_EPOCH = 80, 20
PARTITIONS = ("v100", "k80", "p100", "v100")
STOP_AFTER = (4, 26, 47)        # preempt once the job reports this step: epochs 0, 1 and 2


def _job_info(cluster, job) -> dict:
    out = cluster.run(["scontrol", "-o", "show", "job", job]).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def _wait(what, check, timeout=240):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return value


def _steps(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("step ")]


def _params(path):
    return torch.load(path, weights_only=True)


@pytest.fixture
def clean(slurm_cluster):
    slurm_cluster.run(["scancel", "--user", "root"], check=False)
    yield slurm_cluster
    slurm_cluster.run(["scancel", "--user", "root"], check=False)


def test_lightning_job_preempted_moved_and_finished_bit_for_bit(clean, tmp_path):
    cluster = clean
    t0 = time.monotonic()
    # the uninterrupted reference, without Slurm, while the cluster runs the job
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "GAVEL_"))}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    reference = subprocess.Popen([sys.executable, str(EXAMPLE / "train.py"), "--save-final",
                                  str(ref_dir / "final.pt")], cwd=ref_dir, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    script = tmp_path / "train.sbatch"
    text = (EXAMPLE / "train.sbatch").read_text()
    assert "\nexec python examples/lightning/train.py " in text
    script.write_text(text.replace("exec python examples/lightning/train.py ",
                                   f"exec {sys.executable} {EXAMPLE / 'train.py'} "))
    out = cluster.run(["sbatch", "--parsable", f"--chdir={tmp_path}",
                       f"--export=ALL,PYTHONPATH={ROOT},OMP_NUM_THREADS=1,GAVEL_PROGRESS_INTERVAL=0.2",
                       str(script), "--save-final", str(tmp_path / "final.pt"), "--step-seconds", "0.1"],
                      cwd=tmp_path).stdout
    job = out.strip().split(";")[0]
    cli = SlurmCLI(env=cluster.env)
    progress = tmp_path / ".gavel" / f"{job}.jsonl"
    log = tmp_path / f"gavel-lightning-{job}.out"

    def steps_done() -> int:
        return max((r.get("step") or 0 for r in read_progress(progress)), default=0)

    try:
        assert _job_info(cluster, job)["Reason"] == "JobHeldUser"       # job_submit.lua holds it
        for run, partition in enumerate(PARTITIONS):
            move_job(cluster.run, job, partition)
            if run:          # a requeued job waits for a begin time Slurm sets: not here
                cluster.run(["scontrol", "update", f"jobid={job}", "StartTime=now"])
            cli.release([job])
            if run == len(PARTITIONS) - 1:
                break
            _wait(f"run {run} to pass step {STOP_AFTER[run]}", lambda: steps_done() >= STOP_AFTER[run])
            cli.signal([job], "USR2")                      # as the daemon preempts
            info = _wait(f"the held requeue of run {run}",
                         lambda: (i := _job_info(cluster, job))["JobState"] in ("SPECIAL_EXIT", "PENDING")
                         and i["Restarts"] == str(run + 1) and i)
            assert info["ExitCode"] == "85:0", info
        info = _wait("the end", lambda: (i := _job_info(cluster, job))["JobState"]
                     in ("COMPLETED", "FAILED", "CANCELLED") and i)
    except BaseException:
        cluster.run(["scancel", job], check=False)
        reference.kill()
        raise
    output = log.read_text()
    assert info["JobState"] == "COMPLETED", output[-3000:]
    ref_out, ref_err = reference.communicate(timeout=300)
    assert reference.returncode == 0, ref_err[-3000:]

    records = read_progress(progress)
    starts = [r for r in records if r["event"] == "start"]
    checkpoints = [r for r in records if r["event"] == "checkpoint"]
    assert [(r["partition"], r["restart"]) for r in starts] == [(p, i) for i, p in enumerate(PARTITIONS)]
    assert [r["step"] for r in starts] == [0] + [c["step"] for c in checkpoints]
    assert [c["partition"] for c in checkpoints] == list(PARTITIONS[:3])
    assert all(s >= after for s, after in zip([c["step"] for c in checkpoints], STOP_AFTER))
    assert all(c["step"] % PER_EPOCH for c in checkpoints)            # all three mid-epoch
    assert len({c["step"] // PER_EPOCH for c in checkpoints}) >= 2     # in different epochs
    assert records[-1]["event"] == "done" and records[-1]["step"] == STEPS
    assert all(r["total_steps"] == STEPS for r in records)
    assert output.count("exiting 85 (requeue held)") == 3

    assert len(_steps(ref_out)) == STEPS
    assert _steps(output) == _steps(ref_out)                 # every loss and LR, bit for bit
    final, expected = _params(tmp_path / "final.pt"), _params(ref_dir / "final.pt")
    assert final.keys() == expected.keys() and all(torch.equal(final[k], expected[k]) for k in final)
    assert not (tmp_path / ".gavel" / f"{job}.ckpt").exists()          # removed when done
    print(f"lightning on Slurm: {time.monotonic() - t0:.1f} s, stops at "
          f"{[c['step'] for c in checkpoints]}")

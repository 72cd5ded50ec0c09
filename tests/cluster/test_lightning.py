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

import subprocess
import sys
import time

import pytest
from tests.support.torch_import import import_torch
from tests.support.training import (ROOT, assert_same_tensors, plain_env, run_moved, step_lines,
                                    submit)

from slurm_gavel.job.progress import read_progress

torch = import_torch()
pytest.importorskip("lightning")
pytest.importorskip("torchdata")

EXAMPLE = ROOT / "examples" / "lightning"
STEPS, PER_EPOCH = 80, 20
PARTITIONS = ("v100", "k80", "p100", "v100")
STOP_AFTER = (4, 26, 47)        # preempt once the job reports this step: epochs 0, 1 and 2


def _params(path):
    return torch.load(path, weights_only=True)


def test_lightning_job_preempted_moved_and_finished_bit_for_bit(clean, tmp_path):
    cluster = clean
    t0 = time.monotonic()
    # the uninterrupted reference, without Slurm, while the cluster runs the job
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    reference = subprocess.Popen([sys.executable, str(EXAMPLE / "train.py"), "--save-final",
                                  str(ref_dir / "final.pt")], cwd=ref_dir, env=plain_env(),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    script = tmp_path / "train.sbatch"
    text = (EXAMPLE / "train.sbatch").read_text()
    assert "\nexec python examples/lightning/train.py " in text
    script.write_text(text.replace("exec python examples/lightning/train.py ",
                                   f"exec {sys.executable} {EXAMPLE / 'train.py'} "))
    job = submit(cluster, script, dict(PYTHONPATH=ROOT, OMP_NUM_THREADS=1, GAVEL_PROGRESS_INTERVAL=0.2),
                 "--save-final", str(tmp_path / "final.pt"), "--step-seconds", "0.1")
    progress = tmp_path / ".gavel" / f"{job}.jsonl"
    log = tmp_path / f"gavel-lightning-{job}.out"
    info, _ = run_moved(cluster, job, PARTITIONS, progress, log, lambda run, _: STOP_AFTER[run],
                        kill=[reference])
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

    assert len(step_lines(ref_out)) == STEPS
    assert step_lines(output) == step_lines(ref_out)                 # every loss and LR, bit for bit
    assert_same_tensors(_params(tmp_path / "final.pt"), _params(ref_dir / "final.pt"))
    assert not (tmp_path / ".gavel" / f"{job}.ckpt").exists()          # removed when done
    print(f"lightning on Slurm: {time.monotonic() - t0:.1f} s, stops at "
          f"{[c['step'] for c in checkpoints]}")

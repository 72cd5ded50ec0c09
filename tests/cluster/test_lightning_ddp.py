"""A Lightning DDP job (two ranks started by srun) under the real local Slurm: preempted twice
through `slurm-gavel run`, moved between GPU types, finished bit for bit as the same two-rank
run without Slurm, with no rank left alive after a stop.

examples/lightning/train-ddp.sbatch runs `slurm-gavel run -- srun python train.py --devices 2`.
The daemon's USR2 (`SlurmCLI.signal`: scancel --batch) reaches the batch process only; the
launcher passes it to srun, srun to both ranks; the callback's flag is reduced over the ranks,
both save together (rank 0 writes the checkpoint) and exit 85, which the launcher and then
RequeueExitHold=85 turn into "requeued held". The reference is the same script with
``--devices 2`` off Slurm (Lightning's own subprocess launcher): the same two ranks, the same
gloo reductions, so every loss rank 0 printed and the final parameters must be equal.
"""
from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest
from tests.support.procs import MARKER, marked
from tests.support.torch_import import import_torch
from tests.support.training import (ROOT, assert_same_tensors, plain_env, run_moved, step_lines,
                                    submit)
from tests.support.waiting import wait_for

from slurm_gavel.job.progress import read_progress

torch = import_torch()
pytest.importorskip("lightning")
pytest.importorskip("torchdata")

EXAMPLE = ROOT / "examples" / "lightning"
STEPS, PER_EPOCH = 40, 10
PARTITIONS = ("v100", "p100", "v100")
STOP_AFTER = (3, 16)            # preempt once the job reports this step: epochs 0 and 1


def test_lightning_ddp_job_preempted_through_the_launcher_bit_for_bit(clean, tmp_path):
    cluster = clean
    t0 = time.monotonic()
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    reference = subprocess.Popen([sys.executable, str(EXAMPLE / "train.py"), "--devices", "2",
                                  "--save-final", str(ref_dir / "final.pt")], cwd=ref_dir, env=plain_env(),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    script = tmp_path / "train.sbatch"
    text = (EXAMPLE / "train-ddp.sbatch").read_text()
    line = "\nexec slurm-gavel run -- srun python examples/lightning/train.py "
    assert line in text
    script.write_text(text.replace(line, f"\nexec {sys.executable} -m slurm_gavel.job.launcher --grace 5 "
                                         f"-- srun {sys.executable} {EXAMPLE / 'train.py'} "))
    marker = uuid.uuid4().hex
    # MASTER_ADDR: the dev cluster's node names do not resolve (on a real cluster they do)
    job = submit(cluster, script, dict(PYTHONPATH=ROOT, OMP_NUM_THREADS=1, GAVEL_PROGRESS_INTERVAL=0.2,
                                       MASTER_ADDR="127.0.0.1", **{MARKER: marker}),
                 "--save-final", str(tmp_path / "final.pt"), "--step-seconds", "0.2")
    progress = tmp_path / ".gavel" / f"{job}.jsonl"
    log = tmp_path / f"gavel-lightning-ddp-{job}.out"

    def no_rank_left():
        assert wait_for(lambda: not marked(marker), 30, "no rank left after the stop")

    info, _ = run_moved(cluster, job, PARTITIONS, progress, log, lambda run, _: STOP_AFTER[run],
                        after_stop=no_rank_left, timeout=300, kill=[reference])
    output = log.read_text()
    assert info["JobState"] == "COMPLETED", output[-3000:]
    assert wait_for(lambda: not marked(marker), 30, "no rank left after the end")
    ref_out, ref_err = reference.communicate(timeout=300)
    assert reference.returncode == 0, ref_err[-3000:]

    records = read_progress(progress)
    starts = [r for r in records if r["event"] == "start"]
    checkpoints = [r for r in records if r["event"] == "checkpoint"]
    assert [(r["partition"], r["restart"], r["world_size"]) for r in starts] == \
        [(p, i, 2) for i, p in enumerate(PARTITIONS)]
    assert [r["step"] for r in starts] == [0] + [c["step"] for c in checkpoints]
    assert all(s >= after for s, after in zip([c["step"] for c in checkpoints], STOP_AFTER))
    assert all(c["step"] % PER_EPOCH for c in checkpoints)            # both mid-epoch
    assert records[-1]["event"] == "done" and records[-1]["step"] == STEPS
    assert output.count("slurm-gavel run: preempted: the command checkpointed and exited 85") == 2

    assert len(step_lines(ref_out)) == STEPS
    assert step_lines(output) == step_lines(ref_out)                 # every loss and LR of rank 0, bit for bit
    assert_same_tensors(torch.load(tmp_path / "final.pt", weights_only=True),
                        torch.load(ref_dir / "final.pt", weights_only=True))
    print(f"lightning DDP on Slurm: {time.monotonic() - t0:.1f} s, stops at "
          f"{[c['step'] for c in checkpoints]}")

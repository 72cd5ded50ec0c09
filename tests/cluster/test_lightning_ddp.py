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

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from tests.support.slurm import move_job
from tests.support.procs import MARKER, marked
from tests.support.torch_import import import_torch

from slurm_gavel.job.progress import read_progress
from slurm_gavel.slurm.commands import SlurmCLI

torch = import_torch()
pytest.importorskip("lightning")
pytest.importorskip("torchdata")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "lightning"
STEPS, PER_EPOCH = 40, 10
PARTITIONS = ("v100", "p100", "v100")
STOP_AFTER = (3, 16)            # preempt once the job reports this step: epochs 0 and 1


def _job_info(cluster, job) -> dict:
    out = cluster.run(["scontrol", "-o", "show", "job", job]).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def _wait(what, check, timeout=300):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return value


def _steps(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("step ")]


@pytest.fixture
def clean(slurm_cluster):
    slurm_cluster.run(["scancel", "--user", "root"], check=False)
    yield slurm_cluster
    slurm_cluster.run(["scancel", "--user", "root"], check=False)


def test_lightning_ddp_job_preempted_through_the_launcher_bit_for_bit(clean, tmp_path):
    cluster = clean
    t0 = time.monotonic()
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "GAVEL_"))}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    reference = subprocess.Popen([sys.executable, str(EXAMPLE / "train.py"), "--devices", "2",
                                  "--save-final", str(ref_dir / "final.pt")], cwd=ref_dir, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    script = tmp_path / "train.sbatch"
    text = (EXAMPLE / "train-ddp.sbatch").read_text()
    line = "\nexec slurm-gavel run -- srun python examples/lightning/train.py "
    assert line in text
    script.write_text(text.replace(line, f"\nexec {sys.executable} -m slurm_gavel.job.launcher --grace 5 "
                                         f"-- srun {sys.executable} {EXAMPLE / 'train.py'} "))
    marker = uuid.uuid4().hex
    # MASTER_ADDR: the dev cluster's node names do not resolve (on a real cluster they do)
    out = cluster.run(["sbatch", "--parsable", f"--chdir={tmp_path}",
                       f"--export=ALL,PYTHONPATH={ROOT},OMP_NUM_THREADS=1,GAVEL_PROGRESS_INTERVAL=0.2,"
                       f"MASTER_ADDR=127.0.0.1,{MARKER}={marker}",
                       str(script), "--save-final", str(tmp_path / "final.pt"), "--step-seconds", "0.2"],
                      cwd=tmp_path).stdout
    job = out.strip().split(";")[0]
    cli = SlurmCLI(env=cluster.env)
    progress = tmp_path / ".gavel" / f"{job}.jsonl"
    log = tmp_path / f"gavel-lightning-ddp-{job}.out"

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
            assert info["ExitCode"] == "85:0", (info, log.read_text()[-3000:])
            assert _wait("no rank left after the stop", lambda: not marked(marker), timeout=30)
        info = _wait("the end", lambda: (i := _job_info(cluster, job))["JobState"]
                     in ("COMPLETED", "FAILED", "CANCELLED") and i)
    except BaseException:
        cluster.run(["scancel", job], check=False)
        reference.kill()
        raise
    output = log.read_text()
    assert info["JobState"] == "COMPLETED", output[-3000:]
    assert _wait("no rank left after the end", lambda: not marked(marker), timeout=30)
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

    assert len(_steps(ref_out)) == STEPS
    assert _steps(output) == _steps(ref_out)                 # every loss and LR of rank 0, bit for bit
    final = torch.load(tmp_path / "final.pt", weights_only=True)
    expected = torch.load(ref_dir / "final.pt", weights_only=True)
    assert final.keys() == expected.keys() and all(torch.equal(final[k], expected[k]) for k in final)
    print(f"lightning DDP on Slurm: {time.monotonic() - t0:.1f} s, stops at "
          f"{[c['step'] for c in checkpoints]}")

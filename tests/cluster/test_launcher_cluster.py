"""torchrun under sbatch on the local Slurm cluster, with and without `slurm-gavel run`.

With the launcher (`exec python -m slurm_gavel.job.launcher -- torchrun ...`): a 2-rank
gloo job is preempted three times with the daemon's signal (scancel --batch
--signal=USR2), each time requeued held by exit 85 (RequeueExitHold), moved to another
partition (= GPU type), released and resumed; it ends bitwise equal to an
uninterrupted run, and after every stop no process of the job is left.

Without it (`exec torchrun ...`): the same signal ends torchrun, the job ends, and both
ranks are left orphaned, still training, on a cluster whose process tracking is
proctrack/linuxproc (the local cluster's; slurm_gavel.slurm.proctrack warns about it).
The test measures that, then kills the orphans by pid.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from tests.support.slurm import move_job
from tests.support.procs import MARKER, marked
from tests.support.torch_import import import_torch
from tests.support.waiting import job_info, wait_for

from slurm_gavel.slurm.backend import RESTART_GUARD_SECONDS
from slurm_gavel.slurm.commands import SlurmCLI
from slurm_gavel.slurm.proctrack import check_proctrack

torch = import_torch()
ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "jobs" / "tiny_train.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")
STEPS = 60
TORCHRUN_ARGS = f"{TORCHRUN} --standalone --nproc-per-node 2 {TINY}"
SCRIPT = """#!/bin/bash
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=job-%j.out
exec {launch} {out} {steps}
"""


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _submit(cluster, tmp: Path, launch: str, partition: str, marker: str, steps=STEPS) -> str:
    out = tmp / "out"
    out.mkdir(exist_ok=True)
    script = tmp / "job.sbatch"
    script.write_text(SCRIPT.format(launch=launch, out=out, steps=steps))
    exports = (f"ALL,PYTHONPATH={ROOT},OMP_NUM_THREADS=1,TINY_SLEEP=0.05,"
               f"GAVEL_PROGRESS_INTERVAL=0.2,{MARKER}={marker}")
    result = cluster.run(["sbatch", "--parsable", "-p", partition, "--gres=gpu:2", "--ntasks=2",
                          f"--export={exports}", str(script)], cwd=tmp)
    return result.stdout.strip().split(";")[0]


def _reference(tmp: Path) -> list[dict]:
    out = tmp / "reference"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "GAVEL_"))}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", TINY_SLEEP="0")
    result = subprocess.run([*TORCHRUN_ARGS.split(), str(out), str(STEPS)], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return [torch.load(out / f"final-{r}.pt", weights_only=False) for r in range(2)]


def test_torchrun_through_the_launcher_is_preempted_moved_and_resumed_exactly(clean, tmp_path):
    cluster = clean
    reference = _reference(tmp_path)
    marker = uuid.uuid4().hex
    launch = f"{sys.executable} -m slurm_gavel.job.launcher --grace 5 -- {TORCHRUN_ARGS}"
    types = ["k80", "p100", "v100", "k80"]
    job = _submit(cluster, tmp_path, launch, types[0], marker)
    cli = SlurmCLI(env=cluster.env)
    batches = tmp_path / "out" / "batches-0.log"
    log = tmp_path / f"job-{job}.out"
    for stop, partition in enumerate(types[1:], start=1):
        wait_for(lambda: job_info(cluster, job)["JobState"] == "RUNNING", 240, "running")
        before = _lines(batches)
        wait_for(lambda: _lines(batches) >= before + 8, 240, "steps")
        cli.signal([job], "USR2")                       # as the daemon preempts
        info = wait_for(lambda: (i := job_info(cluster, job))["JobState"] in
                        ("SPECIAL_EXIT", "PENDING") and i, 240, "the held requeue")
        assert info["Reason"] == "JobHeldUser" and info["ExitCode"] == "85:0", (info, log.read_text()[-3000:])
        assert wait_for(lambda: not marked(marker), 30, "no process of the job left")
        assert before + 8 <= _lines(batches) < STEPS
        move_job(cluster.run, job, partition)
        time.sleep(RESTART_GUARD_SECONDS)
        cluster.run(["scontrol", "update", f"jobid={job}", "StartTime=now"])
        cli.release([job])
    info = wait_for(lambda: (i := job_info(cluster, job))["JobState"] in
                    ("COMPLETED", "FAILED", "CANCELLED") and i, 400, "the end")
    assert info["JobState"] == "COMPLETED", log.read_text()[-3000:]
    assert info["Restarts"] == "3"
    assert wait_for(lambda: not marked(marker), 30, "no process of the job left")

    text = log.read_text()
    assert text.count("slurm-gavel run: preempted: its 2 rank(s) checkpointed and exited 85") == 3, text[-3000:]
    progress = tmp_path / ".gavel" / f"{job}.jsonl"
    starts = [json.loads(line) for line in progress.read_text().splitlines() if '"start"' in line]
    assert [s["partition"] for s in starts] == types and [s["world_size"] for s in starts] == [2] * 4
    for rank in range(2):
        final = torch.load(tmp_path / "out" / f"final-{rank}.pt", weights_only=False)
        assert final["step"] == STEPS and final["start"] > 0
        for name, value in final["params"].items():
            assert torch.equal(value, reference[rank]["params"][name]), (rank, name)
        steps = [int(line.split(":")[0].split()[1])
                 for line in (tmp_path / "out" / f"batches-{rank}.log").read_text().splitlines()]
        assert sorted(steps) == list(range(1, STEPS + 1))      # each step trained once


def test_plain_exec_torchrun_leaves_its_ranks_orphaned_on_this_proctrack(clean, tmp_path):
    cluster = clean
    assert check_proctrack(SlurmCLI(env=cluster.env).config()) is not None   # linuxproc here
    marker = uuid.uuid4().hex
    # steps enough to be training still when looked at (at the end, with torchrun's store gone,
    # destroy_process_group would block them instead)
    job = _submit(cluster, tmp_path, TORCHRUN_ARGS, "v100", marker, steps=100_000)
    batches = tmp_path / "out" / "batches-0.log"
    orphans: dict[int, int] = {}
    try:
        wait_for(lambda: _lines(batches) >= 5, 240, "steps")
        SlurmCLI(env=cluster.env).signal([job], "USR2")
        info = wait_for(lambda: (i := job_info(cluster, job))["JobState"] in
                        ("FAILED", "COMPLETED", "CANCELLED", "SPECIAL_EXIT") and i, 240, "the job's end")
        # torchrun died of the signal (no handler for USR2): not 85, not requeued held
        assert info["JobState"] == "FAILED" and info["ExitCode"] == "0:12", info
        time.sleep(3)                 # slurmstepd has ended what it tracks by now
        orphans = marked(marker)
        assert len(orphans) == 2, orphans                # the two ranks, nothing else
        assert not set(orphans.values()) & set(orphans), orphans     # neither's parent is in the job
        done = _lines(batches)
        wait_for(lambda: _lines(batches) > done, 30, "the orphans training on")
    finally:
        for pid in orphans:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert wait_for(lambda: not marked(marker), 30, "the orphans killed")


# srun's tasks take their place from Slurm's variables (slurm_gavel.job.distributed)
SRUN_TASK = ("import os, runpy, sys; from slurm_gavel.job.distributed import torch_env; "
             "os.environ.update(torch_env(os.environ)); sys.argv = sys.argv[1:]; "
             "runpy.run_path(sys.argv[0], run_name='__main__')")


def test_srun_through_the_launcher_is_preempted_and_resumed_exactly(clean, tmp_path):
    cluster = clean
    reference = _reference(tmp_path)
    marker = uuid.uuid4().hex
    (tmp_path / "task.py").write_text(SRUN_TASK + "\n")
    launch = (f"{sys.executable} -m slurm_gavel.job.launcher --grace 5 -- srun "
              f"{sys.executable} {tmp_path / 'task.py'} {TINY}")
    job = _submit(cluster, tmp_path, launch, "p100", marker)
    cli = SlurmCLI(env=cluster.env)
    batches = tmp_path / "out" / "batches-0.log"
    log = tmp_path / f"job-{job}.out"
    wait_for(lambda: _lines(batches) >= 8, 240, "steps")
    cli.signal([job], "USR2")
    info = wait_for(lambda: (i := job_info(cluster, job))["JobState"] in
                    ("SPECIAL_EXIT", "PENDING") and i, 240, "the held requeue")
    assert info["Reason"] == "JobHeldUser" and info["ExitCode"] == "85:0", (info, log.read_text()[-3000:])
    assert wait_for(lambda: not marked(marker), 30, "no process of the job left")
    assert 8 <= _lines(batches) < STEPS
    move_job(cluster.run, job, "v100")
    time.sleep(RESTART_GUARD_SECONDS)
    cluster.run(["scontrol", "update", f"jobid={job}", "StartTime=now"])
    cli.release([job])
    info = wait_for(lambda: (i := job_info(cluster, job))["JobState"] in
                    ("COMPLETED", "FAILED", "CANCELLED") and i, 400, "the end")
    assert info["JobState"] == "COMPLETED", log.read_text()[-3000:]
    assert wait_for(lambda: not marked(marker), 30, "no process of the job left")
    assert "slurm-gavel run: preempted: the command checkpointed and exited 85" in log.read_text()
    for rank in range(2):
        final = torch.load(tmp_path / "out" / f"final-{rank}.pt", weights_only=False)
        assert final["step"] == STEPS and final["start"] > 0
        for name, value in final["params"].items():
            assert torch.equal(value, reference[rank]["params"][name]), (rank, name)

"""The distributed PyTorch template on the real cluster: 2x2 GPUs one run, 1x4 the next (issue 13).

job_templates/distributed/resnet18.sbatch (with the small a3c model, for time) is
submitted as a gavel job (--gpus=4 --ntasks-per-gpu=1), started by the backend's own
`SlurmCLI.reshape` on two k80 nodes (2 GPUs each), preempted with the daemon's
signal (scancel --batch --signal=USR2: the batch shell passes it to srun, srun to
every rank), requeued held by exit 85, reshaped onto one v100 node (4 GPUs) and
resumed there.  Four gloo ranks on the CPU both times; the final state is bitwise
the one of an uninterrupted 4-rank run, and Slurm shows the shapes chosen.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.torch_import import import_torch
from tests.support.waiting import wait_for

from slurm_gavel.slurm.commands import SlurmCLI
from slurm_gavel.slurm.records import parse_jobs

# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24

torch = import_torch()
ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "job_templates" / "distributed" / "resnet18.sbatch"
STEPS = 80


def _equal(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    return a == b


def _state(cluster, job) -> str:
    return cluster.run(["squeue", "-h", "-j", job, "-t", "all", "-o", "%T"]).stdout.strip()


def _steps(progress: Path) -> int:
    if not progress.exists():
        return 0
    steps = [json.loads(line).get("step") or 0 for line in progress.read_text().splitlines()
             if line.strip().endswith("}")]
    return max(steps, default=0)


def test_the_distributed_template_resumes_on_another_shape_with_the_same_result(clean, tmp_path):
    cluster = clean
    # the uninterrupted reference: 4 ranks on this host, no Slurm
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "GAVEL_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    ref = subprocess.run([sys.executable, "-m", "slurm_gavel.job.templates", "a3c", "--steps", str(STEPS),
                          "--gpus", "4", "--threads", "1", "--save-final", str(tmp_path / "ref.pt")],
                         env=env, capture_output=True, text=True, timeout=400)
    assert ref.returncode == 0, ref.stderr[-2000:]

    text = TEMPLATE.read_text().replace("resnet18", "a3c")
    text = text.replace("{python}", sys.executable).replace("{steps}", str(STEPS)).replace("{gpus}", "4")
    text = text.replace("{flags}", "").replace(f"--steps {STEPS} &",
                                               f"--steps {STEPS} --save-final {tmp_path / 'final.pt'} &")
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    out = cluster.run(["sbatch", "--parsable", f"--chdir={tmp_path}",
                       f"--export=ALL,PYTHONPATH={ROOT},OMP_NUM_THREADS=1,GAVEL_PROGRESS_INTERVAL=0.2",
                       str(script)], cwd=tmp_path).stdout      # SLURM_SUBMIT_DIR: .gavel/ there
    job = out.strip().split(";")[0]
    cli = SlurmCLI(env=cluster.env)
    progress = tmp_path / ".gavel" / f"{job}.jsonl"

    # as the backend does: TasksPerNode too when Slurm says the job runs a task per GPU
    record = next(j for j in parse_jobs(cli.squeue()) if j.job_id == job)
    assert record.tasks_per_gpu in (0, 1), record       # 22.05's JSON does not say (0)
    cli.reshape(job, "k80", ["k80-0", "k80-1"], 2, record.tasks_per_node(2))   # run 1: 2 nodes x 2 GPUs
    cli.release([job])
    shape1 = wait_for(lambda: cluster.run(["squeue", "-h", "-j", job, "-t", "R",
                                           "-o", "%P %D %N %b"]).stdout.strip(), 240, "run 1")
    wait_for(lambda: _steps(progress) >= 5, 240, "steps of run 1")
    cluster.run(["scancel", "--batch", "--signal=USR2", job])
    wait_for(lambda: _state(cluster, job) in ("SPECIAL_EXIT", "PENDING"), 240, "the held requeue")
    stopped = _steps(progress)
    assert 5 <= stopped < STEPS

    cli.reshape(job, "v100", ["v100-1"], 4, record.tasks_per_node(4))           # run 2: 1 node x 4 GPUs
    cli.release([job])
    shape2 = wait_for(lambda: cluster.run(["squeue", "-h", "-j", job, "-t", "R",
                                           "-o", "%P %D %N %b"]).stdout.strip()
                      or (_state(cluster, job) == "COMPLETED" and "done"), 240, "run 2")
    wait_for(lambda: _state(cluster, job) in ("COMPLETED", "FAILED", "CANCELLED"), 400, "the end")
    log = (tmp_path / f"gavel-dist-a3c-{job}.out").read_text()
    assert _state(cluster, job) == "COMPLETED", log[-3000:]

    assert shape1.split()[:2] == ["k80", "2"] and shape1.split()[3].endswith("gpu:2"), shape1
    if shape2 != "done":
        assert shape2.split() == ["v100", "1", "v100-1", shape2.split()[3]] and shape2.endswith("gpu:4"), shape2
    starts = [line for line in log.splitlines() if line.startswith("gavel template a3c: step")]
    assert len(starts) == 2 and "world 4" in starts[0] and "world 4" in starts[1], log[-3000:]
    assert "partition k80" in starts[0] and "partition v100" in starts[1] and "node v100-1" in starts[1]
    assert f"step {stopped}/{STEPS}" in starts[1], starts                   # resumed where it stopped
    assert f"done, {STEPS} steps" in log
    assert _equal(torch.load(tmp_path / "final.pt", weights_only=False),
                  torch.load(tmp_path / "ref.pt", weights_only=False)), "not the uninterrupted result"

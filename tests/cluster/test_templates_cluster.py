"""Job templates: golden renderings, `submit`, every template training 3 steps on the
CPU, and one template preempted and moved between GPU types on a real local Slurm.

The cases of tests/unit/test_templates.py that need a real Slurm cluster.
"""
from __future__ import annotations

from pathlib import Path

from slurm_gavel.job.progress import read_progress
from slurm_gavel.slurm import jobscript as templates
from slurm_gavel.slurm.commands import SlurmCLI
from slurm_gavel.cli.submit import cmd_submit

from tests.support.cli import parse
from tests.support.slurm import require_slurm
from tests.support.torch_import import import_torch
from tests.support.waiting import job_info, wait_for, wait_job


ROOT = Path(__file__).resolve().parents[2]


def test_template_job_preempted_moved_and_finished_on_slurm(slurm_cluster, tmp_path, monkeypatch):
    """submit -> held by job_submit.lua -> released on v100 -> SIGUSR2 -> exit 85, requeued
    held -> moved to k80 -> resumes from its checkpoint -> exactly its steps."""
    require_slurm()
    import_torch()
    monkeypatch.chdir(tmp_path)
    cli = SlurmCLI(env=dict(slurm_cluster.env, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1"))
    args = parse(["submit", "a3c", "--steps", "300", "--", "-p", "v100", "-o", "a3c.out"])
    job = None

    class Capture(SlurmCLI):
        def run(self, argv, **kw):
            nonlocal job
            done = cli.run(argv, **kw)
            job = done.stdout.strip().split(";")[0]
            return done
    assert cmd_submit(args, cli=Capture()) == 0
    try:
        info = job_info(slurm_cluster, job)
        assert info["Reason"] == "JobHeldUser"               # job_submit.lua holds gavel jobs
        shown = slurm_cluster.run(["scontrol", "-o", "show", "job", job]).stdout
        assert "AdminComment=gavel:v1 model=a3c" in shown and "steps=300" in shown
        slurm_cluster.run(["scontrol", "release", job])
        progress = tmp_path / ".gavel" / f"{job}.jsonl"
        wait_for(lambda: any(r["event"] == "start" for r in read_progress(progress)), timeout=120,
                 what="the job's start record")
        slurm_cluster.run(["scancel", "--batch", "--signal=USR2", job])
        info = wait_job(slurm_cluster, job, {"SPECIAL_EXIT", "PENDING"}, timeout=120)
        assert info["ExitCode"] == "85:0" and info["Restarts"] == "1"
        slurm_cluster.run(["scontrol", "update", f"jobid={job}", "partition=k80"])
        slurm_cluster.run(["scontrol", "update", f"jobid={job}", "StartTime=now"])
        slurm_cluster.run(["scontrol", "release", job])
        info = wait_job(slurm_cluster, job, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=180)
    except BaseException:
        slurm_cluster.run(["scancel", job], check=False)
        raise
    out = (tmp_path / "a3c.out").read_text()
    assert info["JobState"] == "COMPLETED", out
    records = read_progress(progress)
    starts = [r for r in records if r["event"] == "start"]
    [checkpoint] = [r for r in records if r["event"] == "checkpoint"]
    assert [(r["partition"], r["restart"], r["step"]) for r in starts] == \
        [("v100", 0, 0), ("k80", 1, checkpoint["step"])]
    assert starts[0]["node"].startswith("v100-") and starts[1]["node"].startswith("k80-")
    assert records[-1]["event"] == "done" and records[-1]["step"] == 300
    assert checkpoint["step"] < 300 and checkpoint["partition"] == "v100"
    assert "gavel template a3c: done, 300 steps" in out
    assert f"checkpoint of step {checkpoint['step']} saved" in out

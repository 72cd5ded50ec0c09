"""Job templates: golden renderings, `submit`, every template training 3 steps on the
CPU, and one template preempted and moved between GPU types on a real local Slurm."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.slurm import require_slurm
from tests.support.waiting import job_info, wait_for, wait_job
from tests.support.torch_import import import_torch

from slurm_gavel.slurm import jobscript as templates
from slurm_gavel.core.errors import InputError
from slurm_gavel.job.progress import read_progress
from slurm_gavel.slurm.commands import SlurmCLI
from slurm_gavel.slurm.submit import cmd_submit, register

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parents[1] / "golden"


# -- rendering (pure) -------------------------------------------------------------
def test_every_template_is_there():
    assert templates.available() == sorted(templates.NAMES)
    assert set(templates.TABLE_JOB_TYPES) == set(templates.NAMES)


@pytest.mark.parametrize("name", templates.NAMES)
def test_render_golden(name):
    rendered = templates.render(name, steps=100, gpus=1, python="python3")
    assert rendered.encode() == (GOLDEN / f"{name}.sbatch").read_bytes()
    for line in ("#SBATCH --requeue", "#SBATCH --open-mode=append", "#SBATCH --gres=gpu:1",
                 f'#SBATCH --comment "gavel model={name} steps=100"'):
        assert line in rendered.splitlines()
    assert rendered.splitlines()[-1] == f"exec python3 -m slurm_gavel.job.templates {name} --steps 100 --gpus 1"


def test_render_golden_with_flags():
    rendered = templates.render("resnet50", steps=5000, gpus=4, weight=2, slo="36h",
                                python="/opt/venv/bin/python")
    assert rendered.encode() == (GOLDEN / "resnet50-weight2-slo36h-gpus4.sbatch").read_bytes()
    assert templates.render("resnet50", steps=5000, gpus=4, weight="2", slo="36h",
                            python="/opt/venv/bin/python") == rendered


@pytest.mark.parametrize("kwargs, field", [
    ({"steps": 0}, "steps"), ({"steps": "10"}, "steps"), ({"gpus": 0}, "gpus"),
    ({"weight": -1}, "flags"), ({"weight": "x"}, "flags"), ({"slo": "36"}, "flags"),
    ({"speeds": "v100"}, "flags"), ({"speeds": "v100:0"}, "flags"), ({"speeds": ""}, "flags"),
    ({"speeds": "v100:1 model=x"}, "flags"), ({"speeds": {"v100": 1, "k80": -1}}, "flags"),
    ({"python": ""}, "python"), ({"color": "red"}, "options")])
def test_render_rejects_bad_values(kwargs, field):
    with pytest.raises(InputError) as e:
        templates.render("a3c", **kwargs)
    assert e.value.field == field


def test_render_speeds_hint():
    rendered = templates.render("resnet50", steps=100, speeds="v100:4.2,p100:2.1", python="py")
    assert '#SBATCH --comment "gavel model=resnet50 steps=100 speeds=v100:4.2,p100:2.1"' \
        in rendered.splitlines()
    assert templates.render("resnet50", steps=100, speeds={"v100": 4.2, "p100": 2.1},
                            python="py") == rendered


def test_render_text_leaves_other_braces_and_needs_one_comment():
    text = '#SBATCH --comment "gavel steps={steps}"\necho ${HOME} {unknown} {gpus}\n'
    assert templates.render_text(text, steps=3, gpus=2) == \
        '#SBATCH --comment "gavel steps=3"\necho ${HOME} {unknown} 2\n'
    with pytest.raises(InputError):
        templates.render_text("echo no comment {steps}\n", steps=3)
    with pytest.raises(InputError):
        templates.render("no-such-template")


# -- submit ------------------------------------------------------------------------
def parse(argv):
    parser = argparse.ArgumentParser(prog="slurm-gavel")
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


class RecordingCLI:
    """Stands in for Slurm's sbatch: records the argument list and the script."""

    def __init__(self):
        self.calls = []

    def run(self, args, input=None):
        self.calls.append((list(args), input))
        return subprocess.CompletedProcess(args, 0, stdout="4242;cluster\n", stderr="")


def test_submit_dry_run_prints_the_script(capsys):
    args = parse(["submit", "lstm", "--steps", "7", "--gpus", "2", "--dry-run", "--python", "py"])
    assert args.handler(args) == 0
    assert capsys.readouterr().out == templates.render("lstm", steps=7, gpus=2, python="py")


@pytest.mark.parametrize("argv", [
    ["submit", "a3c", "--steps", "5", "--weight", "2", "--", "-p", "v100", "--hold"],
    ["submit", "--steps", "5", "a3c", "--weight", "2", "--", "-p", "v100", "--hold"],
])
def test_submit_passes_the_script_on_stdin_and_the_rest_to_sbatch(argv, capsys):
    args = parse(argv)
    cli = RecordingCLI()
    assert cmd_submit(args, cli=cli) == 0
    assert capsys.readouterr().out == "4242\n"
    [(call, script)] = cli.calls
    assert call == ["sbatch", "--parsable", "-p", "v100", "--hold"]
    assert script == templates.render("a3c", steps=5, weight=2, python=sys.executable)


def test_submit_speeds_goes_into_the_comment(capsys):
    args = parse(["submit", "a3c", "--steps", "5", "--speeds", "v100:4.2,k80:0.9", "--",
                  "-p", "v100"])
    assert args.speeds == "v100:4.2,k80:0.9"
    cli = RecordingCLI()
    assert cmd_submit(args, cli=cli) == 0
    [(call, script)] = cli.calls
    assert call == ["sbatch", "--parsable", "-p", "v100"]
    assert '#SBATCH --comment "gavel model=a3c steps=5 speeds=v100:4.2,k80:0.9"' in script.splitlines()
    args = parse(["submit", "a3c", "--speeds", "v100:1,"])
    with pytest.raises(InputError) as e:
        cmd_submit(args, cli=RecordingCLI())
    assert str(e.value).endswith("gavel flags: speeds=v100:1,: empty entry (a stray comma), "
                                 "e.g. speeds=v100:4.2,p100:2.1")


def test_submit_types_goes_into_the_comment():
    args = parse(["submit", "a3c", "--steps", "5", "--types", "v100,k80"])
    cli = RecordingCLI()
    assert cmd_submit(args, cli=cli) == 0
    [(call, script)] = cli.calls
    assert '#SBATCH --comment "gavel model=a3c steps=5 types=v100,k80"' in script.splitlines()
    for bad, message in (("v100,v100", "types=v100,v100: GPU type v100 is given twice"),
                         ("v100 k80", "types: not a TYPE,... list")):
        with pytest.raises(InputError) as e:
            cmd_submit(parse(["submit", "a3c", "--types", bad]), cli=RecordingCLI())
        assert message in str(e.value)


def test_submit_options_after_the_template_are_ours():
    args = parse(["submit", "a3c", "--slo", "2h", "--python", "p"])
    assert (args.template, args.slo, args.sbatch_args, args.steps) == ("a3c", "2h", [], 100)
    with pytest.raises(SystemExit):
        parse(["submit", "a3c", "--partition", "v100"])      # sbatch's options go after --


# -- training --------------------------------------------------------------------------
def plain_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "GAVEL_", "RANK", "WORLD_SIZE", "MASTER_", "LOCAL_RANK"))}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **extra)
    return env


@pytest.mark.parametrize("name, gpus", [(n, 1) for n in templates.NAMES] + [("a3c", 2)])
def test_template_trains_three_steps_on_the_cpu(name, gpus, tmp_path):
    import_torch()
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "slurm_gavel.job.templates", name, "--steps", "3",
                           "--gpus", str(gpus), "--threads", "1", "--log-every", "1"],
                          cwd=tmp_path, env=plain_env(), capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"gavel template {name}: step 0/3 on cpu (world {gpus}")
    assert [line.split(" loss ")[0] for line in lines[1:4]] == ["step 1/3", "step 2/3", "step 3/3"]
    assert lines[-1] == f"gavel template {name}: done, 3 steps"
    assert os.listdir(tmp_path) == []          # not under Slurm: no checkpoint, no progress
    print(f"{name} x{gpus}: {time.perf_counter() - t0:.1f} s")


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

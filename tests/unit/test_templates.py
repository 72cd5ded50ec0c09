"""Job templates: golden renderings, `submit`, every template training 3 steps on the
CPU, and one template preempted and moved between GPU types on a real local Slurm."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.torch_import import import_torch

from slurm_gavel.slurm import jobscript as templates
from slurm_gavel.core.errors import InputError
from slurm_gavel.cli.submit import cmd_submit
from tests.support.cli import parse


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
    # --steps unset: a template's default (100) applies, a --script job gets no steps= flag
    assert (args.template, args.slo, args.sbatch_args, args.steps) == ("a3c", "2h", [], None)
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

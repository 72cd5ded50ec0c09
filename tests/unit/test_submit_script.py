"""`slurm-gavel submit --script`: the user's own script in a gavel job's header, built by a
pure function (golden text below), hostile arguments quoted, bad flags refused."""
from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from slurm_gavel.cli import main
from slurm_gavel.core.errors import InputError
from slurm_gavel.slurm.jobscript import render_script
from slurm_gavel.slurm.scriptcheck import warnings

GOLDEN = """\
#!/bin/bash
#SBATCH --job-name=gavel-train
#SBATCH --comment "gavel model=mynet steps=500 weight=2 slo=36h"
#SBATCH --gres=gpu:1
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=gavel-train-%j.out
#
# Written by `slurm-gavel submit --script`. The training runs with exec, so that the
# preemption signal reaches it (a shell would not pass it on): one process.
# The script must make itself preemptible (GavelIterator or a framework callback).
exec /opt/venv/bin/python /work/train.py --lr 0.1
"""


def test_golden():
    assert render_script("/work/train.py", ["--lr", "0.1"], steps=500, model="mynet", weight=2,
                         slo="36h", python="/opt/venv/bin/python") == GOLDEN


def test_torchrun_runs_under_the_launcher_and_the_plugin_has_nothing_to_say():
    text = render_script("/work/train.py", gpus=4, torchrun=True, python="/p/python")
    assert "#SBATCH --gres=gpu:4" in text
    assert text.endswith("exec /p/python -m slurm_gavel run -- /p/python -m torch.distributed.run "
                         "--standalone --nproc-per-node 4 /work/train.py\n")
    assert warnings(text) == []
    assert warnings(render_script("/work/train.py")) == []


def test_hostile_arguments_reach_the_script_as_they_were(tmp_path):
    args = ["$(touch pwned)", "a b", "'\"", "`id`", "x\ny", ";rm -rf /"]
    text = render_script("/work/train.py", args, python="/p/python")
    line = text.splitlines()[-1] if "\n" not in "".join(args) else text.split("exec ", 1)[1]
    assert shlex.split(text.split("exec ", 1)[1]) == ["/p/python", "/work/train.py", *args]
    # and bash itself, run on the rendered line with echo in place of the interpreter
    out = subprocess.run(["bash", "-c", text.split("exec ", 1)[1].replace(
        "/p/python /work/train.py", f"{shlex.quote(sys.executable)} -c 'import sys, json; "
        "print(json.dumps(sys.argv[1:]))'")], capture_output=True, text=True, cwd=tmp_path)
    import json
    assert json.loads(out.stdout) == args
    assert not (tmp_path / "pwned").exists()
    assert line


def test_an_odd_script_name_gives_a_safe_job_name():
    text = render_script('/tmp/my "job"\n#SBATCH --x.py')
    assert "#SBATCH --job-name=gavel-job\n" in text
    assert text.count("#SBATCH") == 7


@pytest.mark.parametrize("kwargs,field", [
    ({"gpus": 0}, "gpus"), ({"steps": 0}, "steps"), ({"weight": "-1"}, "flags"),
    ({"model": "a b"}, "flags"), ({"slo": '36h"'}, "flags"), ({"types": "v100 p100"}, "flags"),
    ({"python": "py\nthon"}, "python"),
])
def test_bad_values_are_refused(kwargs, field):
    with pytest.raises(InputError) as e:
        render_script("/work/train.py", **kwargs)
    assert e.value.field == field


def test_the_command(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    assert main(["submit", "--script", str(script), "--steps", "20", "--dry-run", "--",
                 "--epochs", "3"]) == 0
    out = capsys.readouterr().out
    assert '#SBATCH --comment "gavel model=train steps=20"' in out
    assert out.endswith(f"{script} --epochs 3\n")
    assert main(["submit", "--script", str(tmp_path / "missing.py"), "--dry-run"]) == 2
    assert main(["submit", "resnet18", "--script", str(script), "--dry-run"]) == 2
    assert main(["submit", "resnet18", "--torchrun", "--dry-run"]) == 2
    assert main(["submit", "--dry-run"]) == 2
    capsys.readouterr()
    assert main(["submit", "a3c", "--dry-run"]) == 0          # a template's default steps
    assert '#SBATCH --comment "gavel model=a3c steps=100"' in capsys.readouterr().out

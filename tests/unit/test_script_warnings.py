"""The job script warnings: slurm_conf/job_submit.lua (in a standalone Lua 5.1, as
tests/lua/driver.lua runs it) and slurm_gavel.slurm.scriptcheck say the same for
every script of one table, and a job is accepted whatever they say."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from slurm_gavel.slurm.scriptcheck import ACCELERATE, NO_EXEC, TORCHRUN, warnings

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "slurm_conf" / "job_submit.lua"
DRIVER = ROOT / "tests" / "lua" / "driver.lua"

NOEXEC = "no-exec"
TORCH = "torchrun"
ACCEL = "accelerate"
# (script, [(kind, line), ...])
CASES = [
    ("#!/bin/bash\npython train.py\n", [(NOEXEC, 2)]),
    ("#!/bin/bash\nexec python train.py\n", []),
    ("#!/bin/bash\nexec /opt/venv/bin/python3.11 train.py --steps 10", []),
    ("#!/bin/bash\n/opt/venv/bin/python3.11 train.py --steps 10", [(NOEXEC, 2)]),
    ("#!/bin/bash\nexec torchrun --nproc-per-node 2 train.py\n", [(TORCH, 2)]),
    ("#!/bin/bash\ntorchrun --nproc-per-node 2 train.py\n", [(TORCH, 2), (NOEXEC, 2)]),
    ("#!/bin/bash\nexec slurm-gavel run -- torchrun --nproc-per-node 2 train.py\n", []),
    ("#!/bin/bash\nslurm-gavel run -- torchrun train.py\n", [(NOEXEC, 2)]),
    ("#!/bin/sh\nFOO=1 env BAR=2 python -m torch.distributed.run \\\n  --nproc-per-node 2 \\\n"
     "  train.py\n", [(TORCH, 2), (NOEXEC, 2)]),
    ("#!/bin/sh\nexec python3 -m torch.distributed.launch train.py\n", [(TORCH, 2)]),
    ("#!/bin/sh\nexec python -m torch.distributed.elastic train.py\n", []),
    ("#!/bin/bash\n#SBATCH --requeue\n# python train.py\n\n  \texec srun python x.py  \n", []),
    ("#!/bin/bash\nsrun python x.py\necho finished\n", []),          # last command: echo
    ("#!/bin/bash\ntrap 'kill -USR2 $p' USR2\nsrun python x.py & p=$!\nwait $p\n", []),
    ("#!/bin/bash\naccelerate launch train.py\n", [(ACCEL, 2), (NOEXEC, 2)]),
    ("#!/bin/bash\nexec accelerate launch --num_processes 2 train.py\n", [(ACCEL, 2)]),
    ("#!/bin/bash\nexec python -m slurm_gavel.job.accelerate launch train.py\n", []),
    ("#!/bin/bash\nexec accelerate config\n", []),
    ("#!/bin/sh\n# This script was created by sbatch --wrap.\n\nsleep 300\n", []),
    ("#!/bin/sh\n# This script was created by sbatch --wrap.\n\npython3 -u t.py\n", [(NOEXEC, 4)]),
    ("", []),
    ("\n\n\n", []),
    ("python\n", [(NOEXEC, 1)]),
    ("#!/bin/bash\npythonic train.py\n", []),
    ("#!/bin/bash\n" + "echo x\n" * 6000 + "python late.py\n", []),    # past the scanned lines
    ("#!/bin/bash\r\npython train.py\r\n", [(NOEXEC, 2)]),
    ("#!/bin/bash\nexec python '%s%n' \"$(rm -rf /)\" train.py\n", []),
]


def expected(found):
    text = {TORCH: TORCHRUN, ACCEL: ACCELERATE, NOEXEC: NO_EXEC}
    return [text[kind].format(line=line) for kind, line in found]


@pytest.mark.parametrize("script,found", CASES)
def test_python_warnings(script, found):
    assert warnings(script) == expected(found)


def lua_messages(script: str) -> list[str]:
    result = subprocess.run(["lua5.1", str(DRIVER), str(PLUGIN), "set:tres_per_node=gres:gpu:1",
                             f"set:script={script}", "submit:gavel"],
                            capture_output=True, text=True, check=True, timeout=60)
    out = json.loads(result.stdout.splitlines()[-1])
    assert out["rc"] == "SUCCESS", out          # a warning never refuses the job
    assert out["writes"]["priority"] == 0
    return out["messages"]


@pytest.mark.skipif(shutil.which("lua5.1") is None, reason="needs lua5.1 (tools/setup-env.sh)")
# An empty script is an interactive job, which the plugin refuses before reading it.
@pytest.mark.parametrize("script,found", [case for case in CASES if case[0]])
def test_the_plugin_says_the_same(script, found):
    assert lua_messages(script) == expected(found)


def test_the_messages_echo_no_script_text():
    evil = "#!/bin/bash\n\x1b[31mpython $(reboot) `id`\n"
    for message in warnings(evil):
        assert "\x1b" not in message and "reboot" not in message and "`id`" not in message


def test_every_shipped_job_script_keeps_the_protocol():
    scripts = sorted([*ROOT.glob("examples/*/*.sbatch"), *ROOT.glob("job_templates/*.sbatch"),
                      *ROOT.glob("job_templates/*/*.sbatch"), *ROOT.glob("examples/jobs/*.sh")])
    assert len(scripts) >= 10
    assert {str(p.relative_to(ROOT)): warnings(p.read_text()) for p in scripts} == \
        {str(p.relative_to(ROOT)): [] for p in scripts}

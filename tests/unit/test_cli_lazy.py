"""A command imports only what it runs: `slurm-gavel simulate` (the simulator's whole-command
time is what issue 26 compares with Gavel's) does not load the database layer, the Slurm
driver or the other commands' modules; `--help` still lists every command."""
from __future__ import annotations

import json
import subprocess
import sys

import importlib

cli_main = importlib.import_module("slurm_gavel.cli.main")

PROBE = """
import contextlib, io, json, sys
from slurm_gavel.cli.main import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def loaded(*argv: str) -> tuple[int, set[str]]:
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return got["code"], set(got["modules"])


def test_the_command_map_names_every_command_of_the_full_parser():
    parser = cli_main.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    registered = {name for name, module in cli_main.COMMAND_MODULES.items()}
    assert registered | set(cli_main.BUILTIN_COMMANDS) == set(sub.choices)


def test_simulate_loads_neither_the_database_layer_nor_other_commands():
    code, modules = loaded("simulate", "--help")
    assert code == 0
    assert "sqlite_utils" not in modules and "slurm_gavel.daemon.store" not in modules
    assert not {m for m in modules if m.startswith("slurm_gavel.slurm.")}
    assert not {"slurm_gavel.cli.doctor", "slurm_gavel.cli.replay", "slurm_gavel.cli.billing",
                "slurm_gavel.cli.checkjob"} & modules


def test_help_and_an_unknown_command_still_see_every_command(capsys):
    assert cli_main.main(["--help"]) == 0
    shown = capsys.readouterr().out
    for name in [*cli_main.COMMAND_MODULES, *cli_main.BUILTIN_COMMANDS]:
        assert name in shown
    assert cli_main.main(["no-such-command"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_each_command_alone_parses_as_in_the_full_parser():
    for name in [*cli_main.COMMAND_MODULES, *cli_main.BUILTIN_COMMANDS]:
        alone = cli_main.build_parser(only=name)
        sub = next(a for a in alone._actions if a.__class__.__name__ == "_SubParsersAction")
        assert list(sub.choices) == [name] or name in sub.choices

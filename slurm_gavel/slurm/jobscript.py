"""Job templates: sbatch scripts of real PyTorch training that slurm-gavel can preempt.

The scripts are the ``*.sbatch`` files in the repository's ``job_templates/``
directory (found next to this package in a source checkout or an editable
install; ``GAVEL_TEMPLATES_DIR`` points elsewhere). Their training code is this
package: ``python -m slurm_gavel.job.templates NAME --steps N --gpus G`` (train.py,
models.py; those need torch, this module does not).

A template is an sbatch script with placeholders, replaced by `render_text`:

    {steps}   total training steps (also in the gavel comment)
    {gpus}    GPUs (``--gres=gpu:{gpus}``) and training processes
    {flags}   further gavel flags: "" or " weight=2 slo=36h speeds=v100:4.2,p100:2.1"
    {python}  the interpreter that runs the training (shell-quoted)

Other braces are left alone (the scripts may use ``${VAR}``).
"""
from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Sequence

from ..core.errors import InputError

NAMES = ("resnet18", "resnet50", "transformer", "lstm", "recommendation", "cyclegan", "a3c")
TEMPLATES_DIR_ENV = "GAVEL_TEMPLATES_DIR"
SUFFIX = ".sbatch"
DEFAULT_STEPS = 100
MAX_GPUS = 1024

# The throughput-table job type each template stands for (Gavel's Table 2 names;
# the templates' own batch sizes are smaller).
TABLE_JOB_TYPES = {
    "resnet18": "ResNet-18 (batch size 32)",
    "resnet50": "ResNet-50 (batch size 32)",
    "transformer": "Transformer (batch size 32)",
    "lstm": "LM (batch size 20)",
    "recommendation": "Recommendation (batch size 512)",
    "cyclegan": "CycleGAN",
    "a3c": "A3C",
}

_PLACEHOLDER = re.compile(r"\{(steps|gpus|flags|python)\}")
_COMMENT = re.compile(r'^#SBATCH\s+--comment[= ]"([^"]*)"\s*$', re.MULTILINE)


def templates_dir() -> Path:
    """Where the ``*.sbatch`` templates are."""
    env = os.environ.get(TEMPLATES_DIR_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "job_templates"


def available(directory: Path | None = None) -> list[str]:
    d = Path(directory) if directory else templates_dir()
    try:
        return sorted(p.name[:-len(SUFFIX)] for p in d.iterdir() if p.name.endswith(SUFFIX))
    except FileNotFoundError:
        return []


def template_path(name: str, directory: Path | None = None) -> Path:
    """The file of template `name` (a name from `available()`, or a path to a file)."""
    if os.sep in name or name.endswith(SUFFIX):
        path = Path(name)
    else:
        d = Path(directory) if directory else templates_dir()
        path = d / f"{name}{SUFFIX}"
    if not path.is_file():
        known = available(directory)
        raise InputError("template", f"no template {name!r} (known: {', '.join(known) or 'none'}"
                                     f"; looked in {path.parent})")
    return path


def _format_weight(weight) -> str:
    if isinstance(weight, str):
        return weight.strip()
    text = f"{float(weight):.6f}".rstrip("0").rstrip(".")
    return text or "0"


def _format_speeds(speeds) -> str:
    """The speeds= value: a string as the user wrote it, or a mapping / pairs."""
    if isinstance(speeds, str):
        text = speeds.strip()
        if text == "" or any(c.isspace() or c == '"' for c in text):
            raise InputError("flags", f"speeds: not a TYPE:NUMBER,... list: {speeds!r}")
        return text
    pairs = speeds.items() if hasattr(speeds, "items") else speeds
    return ",".join(f"{t}:{_format_weight(v)}" for t, v in pairs)


def render_text(text: str, steps: int = DEFAULT_STEPS, gpus: int = 1, weight=None,
                slo: str | None = None, python: str = "python3", speeds=None, types=None) -> str:
    """Fill in a template's placeholders; pure. Raises InputError on bad values.

    `speeds` is the throughput hint (``"v100:4.2,p100:2.1"``, or a mapping such as
    ``{"v100": 4.2}``); `types` the GPU types the job accepts (``"v100,p100"`` or a
    list). The rendered ``#SBATCH --comment "gavel ..."`` line is
    checked with the flag parser the scheduler uses, so a bad weight, SLO or speeds
    is caught here, not at sbatch.
    """
    from .flags import FlagError, parse_comment

    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InputError("steps", f"must be a whole number >= 1, got {steps!r}")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= MAX_GPUS:
        raise InputError("gpus", f"must be a whole number in 1-{MAX_GPUS}, got {gpus!r}")
    flags = ""
    if weight is not None:
        flags += f" weight={_format_weight(weight)}"
    if slo is not None:
        flags += f" slo={str(slo).strip()}"
    if speeds is not None:
        flags += f" speeds={_format_speeds(speeds)}"
    if types is not None:
        listed = types if isinstance(types, str) else ",".join(types)
        if listed == "" or any(c.isspace() or c == '"' for c in listed):
            raise InputError("flags", f"types: not a TYPE,... list: {types!r}")
        flags += f" types={listed}"
    if not python or "\n" in python:
        raise InputError("python", f"not an interpreter path: {python!r}")
    values = {"steps": str(steps), "gpus": str(gpus), "flags": flags,
              "python": shlex.quote(python)}
    out = _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)
    comments = _COMMENT.findall(out)
    if len(comments) != 1:
        raise InputError("template", 'needs exactly one line `#SBATCH --comment "gavel ..."`')
    try:
        parsed = parse_comment(comments[0])
    except FlagError as e:
        raise InputError("flags", str(e)) from None
    if parsed.steps != steps:
        raise InputError("template", f"its comment says steps={parsed.steps}, not {steps}")
    return out


def render(template_name: str, steps: int = DEFAULT_STEPS, gpus: int = 1, **options) -> str:
    """The sbatch script of template `template_name` (see `render_text` for options)."""
    unknown = set(options) - {"weight", "slo", "speeds", "types", "python", "directory"}
    if unknown:
        raise InputError("options", f"unknown: {', '.join(sorted(unknown))}")
    directory = options.pop("directory", None)
    text = template_path(template_name, directory).read_text()
    return render_text(text, steps=steps, gpus=gpus, **options)


_NAME = re.compile(r"[A-Za-z0-9._+-]{1,64}\Z")

SCRIPT_HEADER = """\
#!/bin/bash
#SBATCH --job-name=gavel-{name}
#SBATCH --comment "gavel {comment}"
#SBATCH --gres=gpu:{gpus}
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=gavel-{name}-%j.out
#
# Written by `slurm-gavel submit --script`. The training runs with exec, so that the
# preemption signal reaches it (a shell would not pass it on): {how}.
# The script must make itself preemptible (GavelIterator or a framework callback).
"""


def render_script(script, args: Sequence[str] = (), *, gpus: int = 1, steps: int | None = None,
                  model: str | None = None, weight=None, slo: str | None = None, speeds=None,
                  types=None, python: str = "python3", torchrun: bool = False) -> str:
    """The sbatch script that runs the user's own training `script` with `args` as a gavel
    job; pure. `torchrun`: one process per GPU, started by torchrun under the launcher that
    passes the preemption on to every rank (`slurm-gavel run`). Raises InputError on bad
    values; the gavel comment is checked with the scheduler's flag parser."""
    from .flags import FlagError, parse_comment

    path = Path(script)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= MAX_GPUS:
        raise InputError("gpus", f"must be a whole number in 1-{MAX_GPUS}, got {gpus!r}")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise InputError("steps", f"must be a whole number >= 1, got {steps!r}")
    if not python or "\n" in python:
        raise InputError("python", f"not an interpreter path: {python!r}")
    if any("\0" in a for a in [str(path), *args]):
        raise InputError("args", "a NUL byte cannot be passed to a program")
    name = path.stem if _NAME.match(path.stem) else "job"
    model = name if model is None else model
    comment = f"model={model}" + (f" steps={steps}" if steps is not None else "")
    if weight is not None:
        comment += f" weight={_format_weight(weight)}"
    if slo is not None:
        comment += f" slo={str(slo).strip()}"
    if speeds is not None:
        comment += f" speeds={_format_speeds(speeds)}"
    if types is not None:
        listed = types if isinstance(types, str) else ",".join(types)
        if listed == "" or any(c.isspace() or c == '"' for c in listed):
            raise InputError("flags", f"types: not a TYPE,... list: {types!r}")
        comment += f" types={listed}"
    if any(c.isspace() and c != " " or c == '"' for c in comment):
        raise InputError("flags", "a flag value holds a quote or a line break")
    try:
        parse_comment("gavel " + comment)
    except FlagError as e:
        raise InputError("flags", str(e)) from None
    target = [shlex.quote(str(path.resolve())), *(shlex.quote(a) for a in args)]
    py = shlex.quote(python)
    if torchrun:
        how = (f"torchrun starts {gpus} processes,\n# one per GPU, under `slurm-gavel run`, which "
               "passes the signal to every rank and ends them\n# all with the job")
        command = (f"exec {py} -m slurm_gavel run -- {py} -m torch.distributed.run --standalone "
                   f"--nproc-per-node {gpus} {' '.join(target)}")
    else:
        how = "one process"
        command = f"exec {py} {' '.join(target)}"
    header = SCRIPT_HEADER.format(name=name, comment=comment, gpus=gpus, how=how)
    return header + command + "\n"


def submit(cli, script: str, sbatch_args: Sequence[str] = ()) -> str:
    """Submit a rendered script with `sbatch --parsable` (the script on standard input, an
    argument list, no shell; `sbatch_args` unchanged); returns the job id (`--parsable`
    prints "ID" or "ID;CLUSTER").  `cli` is a `commands.SlurmCLI`."""
    done = cli.run(["sbatch", "--parsable", *sbatch_args], input=script)
    return done.stdout.strip().split(";")[0]

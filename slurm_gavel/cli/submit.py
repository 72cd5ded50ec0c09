"""`slurm-gavel submit TEMPLATE`: render a job template and submit it with sbatch;
`slurm-gavel submit --script train.py -- ARGS`: the same for the user's own script.

    slurm-gavel submit resnet50 --steps 2000 --gpus 1 --weight 2 --slo 36h \
        --speeds v100:4.2,p100:2.1 -- --mail-type=END
    slurm-gavel submit --script train.py --gpus 1 --steps 5000 --sbatch=--time=2-0 -- --lr 0.1

With a template, everything after ``--`` goes to sbatch unchanged; with ``--script``
it is the script's own arguments, and ``--sbatch=OPTION`` (repeatable) goes to sbatch.
The script is wrapped in the header of a gavel job (`slurm.jobscript.render_script`:
comment, GPUs, requeue, output appended) and started with ``exec``; ``--torchrun`` starts
one process per GPU under `slurm-gavel run`. Otherwise, (a ``--partition`` list there
restricts the job to those partitions' GPU types, docs/flags.md). The script is rendered by
`slurm.jobscript.render` (a pure function) and submitted by `slurm.jobscript.submit`: ``sbatch
--parsable`` on standard input, with an argument list (no shell); the job runs
in the current directory, which also holds its checkpoints and progress
(``.gavel/``). ``--dry-run`` prints the script instead.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..core.display import clean
from ..core.errors import InputError
from ..slurm import jobscript as templates
from ..slurm.commands import SlurmCLI


class _SubmitParser(argparse.ArgumentParser):
    """Splits off everything after the first ``--`` as sbatch's arguments.

    argparse alone cannot take options after a positional and then ``--`` and more
    positionals (`submit resnet18 --steps 5 -- -p v100`) on every Python version.
    """

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        extra = []
        if "--" in args:
            cut = args.index("--")
            args, extra = args[:cut], args[cut + 1:]
        ns, rest = super().parse_known_args(args, namespace)
        ns.sbatch_args = extra
        return ns, rest


def register(commands) -> argparse.ArgumentParser:
    """Add `submit` to an argparse subparsers object (sets `handler`)."""
    names = templates.available() or list(templates.NAMES)
    p = commands.add_parser(
        "submit", help="render a PyTorch job template and submit it with sbatch",
        description="Render a job template (real PyTorch training made preemptible by "
                    "slurm-gavel's iterator) and submit it with sbatch; prints the job id. "
                    "Arguments after -- go to sbatch.",
        epilog=f"templates: {', '.join(names)} (in {templates.templates_dir()})")
    p.__class__ = _SubmitParser
    p.add_argument("template", metavar="TEMPLATE", nargs="?",
                   help="a template name, or the path of an .sbatch template")
    p.add_argument("--script", metavar="PATH",
                   help="instead of a template: your own training script, run with exec in a gavel "
                        "job's header (arguments after -- go to it)")
    p.add_argument("--model", metavar="NAME",
                   help="with --script: the model name in the gavel comment (default: the "
                        "script's name)")
    p.add_argument("--torchrun", action="store_true",
                   help="with --script: one process per GPU through torchrun, under slurm-gavel run")
    p.add_argument("--sbatch", action="append", default=[], metavar="OPTION",
                   help="with --script: an sbatch option, e.g. --sbatch=--time=1-0 (repeatable)")
    p.add_argument("--steps", type=int, default=None, metavar="N",
                   help=f"total training steps (templates: default {templates.DEFAULT_STEPS}; "
                        "--script: the steps= flag, none by default)")
    p.add_argument("--gpus", type=int, default=1, metavar="N", help="GPUs (default: %(default)s)")
    p.add_argument("--weight", metavar="W", help="gavel weight flag, e.g. 2")
    p.add_argument("--slo", metavar="DURATION", help="gavel SLO flag, e.g. 36h")
    p.add_argument("--speeds", metavar="TYPE:N,...",
                   help="gavel throughput hint: training steps per second on each GPU type "
                        "at this GPU count, e.g. v100:4.2,p100:2.1")
    p.add_argument("--types", metavar="TYPE,...",
                   help="the GPU types the job accepts (gavel types= flag), e.g. v100,p100")
    p.add_argument("--python", default=sys.executable, metavar="PATH",
                   help="interpreter that runs the training on the nodes (default: this one, "
                        "%(default)s)")
    p.add_argument("--dry-run", action="store_true", help="print the script, do not submit")
    p.set_defaults(handler=cmd_submit, sbatch_args=[])
    return p


def cmd_submit(args, cli: SlurmCLI | None = None) -> int:
    """Handler of `submit`. Errors are raised (InputError, SlurmCommandError) for the CLI."""
    if (args.template is None) == (args.script is None):
        raise InputError("TEMPLATE", "give a template name or --script PATH (one of them)")
    if args.script is None:
        if args.model or args.torchrun or args.sbatch:
            raise InputError("--model/--torchrun/--sbatch", "go with --script only")
        sbatch_args = args.sbatch_args
        script = templates.render(args.template, steps=args.steps or templates.DEFAULT_STEPS,
                                  gpus=args.gpus, weight=args.weight, slo=args.slo,
                                  speeds=args.speeds, types=args.types, python=args.python)
    else:
        if not Path(args.script).is_file():
            raise InputError("--script", f"{clean(args.script)} is not a file")
        sbatch_args = args.sbatch
        script = templates.render_script(args.script, args.sbatch_args, gpus=args.gpus,
                                         steps=args.steps, model=args.model, weight=args.weight,
                                         slo=args.slo, speeds=args.speeds, types=args.types,
                                         python=args.python, torchrun=args.torchrun)
    if args.dry_run:
        sys.stdout.write(script)
        return 0
    cli = cli or SlurmCLI()
    print(templates.submit(cli, script, sbatch_args))
    return 0

"""`slurm-gavel run -- COMMAND`: run a training command (torchrun, srun, python) so that
slurm-gavel can preempt it (`job.launcher`): the preemption signal reaches every rank, the
exit code is 85 when they all checkpointed, and no rank outlives the job."""
from __future__ import annotations

import argparse

from ..job import launcher


def register(commands) -> argparse.ArgumentParser:
    p = commands.add_parser(
        "run", help="run torchrun/srun/python in a gavel job so that every rank is preempted "
                    "and none outlives the job (docs/torchrun.md)",
        description="Run COMMAND (after --) as a preemptible gavel job's training: the "
                    "preemption signal is passed to every rank, exit 85 when they all "
                    "checkpointed (Slurm requeues the job held), the command's own code "
                    "otherwise; whatever is left of it is ended when it ends. Start it with "
                    "exec in the job script: exec slurm-gavel run -- torchrun ... train.py")
    launcher.build_parser(p)
    p.set_defaults(handler=cmd_run)
    return p


def cmd_run(args) -> int:
    # The code goes back unchanged: 85 is the protocol with Slurm, not an error to map.
    return launcher.run(args)


__all__ = ["cmd_run", "register"]

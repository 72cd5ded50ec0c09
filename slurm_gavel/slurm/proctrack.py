"""Whether Slurm's process tracking can end a preempted job's orphaned ranks (a doctor check).

A preempted job's batch process gets the signal; a launcher between it and the
ranks (torchrun starts each worker in a session of its own) may die of it and leave
the ranks orphaned, reparented to init. Slurm ends a job's processes through its
ProctrackType plugin: proctrack/cgroup finds every process of the job in its cgroup,
orphans too; proctrack/linuxproc follows parent links from the job's first process
(an orphan is no longer below it) and proctrack/pgid signals the job's process group
(torchrun's workers are in their own). With those, orphaned ranks keep training on
GPUs the job no longer holds. `slurm-gavel run` (slurm_gavel.job.launcher) keeps the
ranks below itself, but a job that runs torchrun without it is not protected.

`check_proctrack` takes `scontrol show config` as a dict and returns a doctor finding
(plain data: level, check, finding, fix) or None.
"""
from __future__ import annotations

from collections.abc import Mapping

CGROUP = "proctrack/cgroup"


def check_proctrack(conf: Mapping[str, str]) -> dict | None:
    """A warning when ProctrackType cannot end orphaned processes of a job, else None."""
    value = (conf.get("ProctrackType") or "").strip()
    if not value or value == "(null)" or value == CGROUP:
        return None          # unset: Slurm's default is proctrack/cgroup
    return {"level": "warning", "check": "proctrack",
            "finding": f"ProctrackType={value}: Slurm cannot end a job's processes that left "
                       "its process tree; torchrun's ranks orphaned by a preemption signal keep "
                       "training on GPUs given to other jobs",
            "fix": f"set ProctrackType={CGROUP} (with cgroup.conf), or start every distributed "
                   "job through `slurm-gavel run -- torchrun ...` (docs/torchrun.md)"}


__all__ = ["check_proctrack"]

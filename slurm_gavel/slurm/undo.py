"""`slurm-gavel release-all`: hand every gavel job back to Slurm's own scheduler.

What an admin runs to turn slurm-gavel off (after stopping the daemon and
removing `JobSubmitPlugins=lua`, or to let the jobs run while the daemon is
down): every pending gavel job that the plugin or the daemon holds is
released, and the node list the daemon pinned on it (``ReqNodeList``) is
cleared, so that Slurm may start it on any node of its partition instead of
waiting for one node (and going to BadConstraints when the owner moves it).
``--partitions`` also widens each job's partition to a list (the daemon
placed it on one GPU type's partition).  Running jobs are left alone; other
jobs are never touched.
"""
from __future__ import annotations


from ..core.errors import GavelError
from .commands import SlurmCLI, name
from .flags import admin_flags, admin_status, is_admin_comment
from .records import parse_jobs


def held_gavel_jobs(cli: SlurmCLI) -> list:
    """Pending gavel jobs (AdminComment written by job_submit.lua) that are held."""
    return [j for j in parse_jobs(cli.squeue())
            if is_admin_comment(j.admin_comment) and j.primary_state == "PENDING"
            and "JobHeld" in j.reason]


def release_all(cli: SlurmCLI, partitions: str | None = None, dry_run: bool = False) -> list[dict]:
    """Release every held gavel job; one row per job: {job, user, partition, actions, error}."""
    if partitions is not None:
        name(partitions, "--partitions")
    rows = []
    for j in held_gavel_jobs(cli):
        actions = ["clear node list"] + ([f"partition {partitions}"] if partitions else []) + ["release"]
        row = {"job": j.job_id, "user": j.user, "partition": j.partition, "actions": actions,
               "error": None}
        if not dry_run:
            try:
                cli.clear_node_list([j.job_id])
                if admin_status(j.admin_comment):      # no longer held by slurm-gavel
                    cli.update([j.job_id], AdminComment=admin_flags(j.admin_comment))
                if partitions:
                    cli.update([j.job_id], Partition=partitions)
                cli.release([j.job_id])
            except GavelError as e:
                row["error"] = str(e)      # one job's refusal (it just ended...) stops no other
        rows.append(row)
    return rows


__all__ = ["held_gavel_jobs", "release_all"]

"""Every Slurm action the backend logs names the job, its partition, its nodes and the
reason, on the session's real cluster (the lines an admin greps in the journal)."""
from __future__ import annotations

import logging

from tests.support.contract import SlurmHarness, is_running, on, plan, submitted, used


def lines(caplog, prefix: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "slurm_gavel.slurm" and r.getMessage().startswith(prefix)]


def test_start_release_and_preempt_lines_name_job_partition_nodes_and_reason(slurm_cluster, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="slurm_gavel.slurm")
    h = SlurmHarness(slurm_cluster, tmp_path)
    try:
        job = h.submit(2)
        a = on(submitted(h, job), job, "v100", 2)
        node = a.nodes[0]
        h.execute(plan(7, start=[a]))
        h.observe_until(is_running(job, "v100"), f"job {job} running on v100")
        where = f"job {job} on partition v100, nodes {node}"
        assert lines(caplog, "start on") == [f"start on v100 {node}: {job} -- {where}: started by round 7's plan"]
        assert lines(caplog, "release") == [f"release: {job} -- {where}: started by round 7's plan"]
        assert h.starts(job) == 1                       # its trap is set: the signal is heard
        h.execute(plan(8, preempt=[job]))
        assert lines(caplog, "signal") == [f"signal USR2: {job} -- {where}: preempted: round 8 gives "
                                           "its GPUs to another job"]
        h.observe_until(lambda o: used(o, job) == 0, f"job {job} stopped")
    finally:
        h.close()

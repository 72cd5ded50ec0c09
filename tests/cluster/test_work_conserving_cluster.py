"""Work conservation on the real local Slurm cluster (issue 12 §2).

The daemon runs in-process with a policy that gives every job a share of the
V100s only (so that the other types are nobody's share: a fake policy beside
the real Slurm, backend and store).  Three 4-GPU jobs share eight V100s: in
every round one of them has no V100 and would wait while the P100s and K80s
idle.  It must run there instead ("filling an idle GPU" in gqueue), be
preempted like any other job when a job with a share needs the GPUs, and all
three keep making progress.
"""
from __future__ import annotations

import time

import numpy as np
from tests.support.daemon import daemon_thread, queue, submit, write_config

from slurm_gavel.core.engine import FILLING
from slurm_gavel.core.model import Allocation
from slurm_gavel.core.recompute import Immediate
from slurm_gavel.cli.queue import main as gqueue


class V100Only:
    """Every job gets an equal share of the V100s and nothing of the other types."""

    name = summary = "v100 only"
    supports_space_sharing = False

    def allocate(self, inp):
        x = np.zeros((inp.n_jobs, inp.n_types))
        v100 = inp.worker_types.index("v100")
        x[:, v100] = np.minimum(1.0, inp.counts[v100] / (inp.n_jobs * inp.scale_factors))
        return Allocation(inp.job_ids, inp.worker_types, x, self.name)


def partitions(cluster, jobs) -> dict[str, str]:
    out = cluster.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i %P"]).stdout
    return {j: p for j, p in (line.split() for line in out.splitlines() if line.strip()) if j in jobs}


def test_a_waiting_job_with_no_share_fills_an_idle_gpu_type_and_yields_it(clean, tmp_path, capsys):  # noqa: F811
    cluster = clean
    config = write_config(tmp_path, cluster)        # no hysteresis: the jobs swap every round
    jobs = [submit(cluster, tmp_path, "language-model", 4, 600) for _ in range(3)]

    def v100_only(d):
        d.engine.allocator.close()
        d.engine.allocator = Immediate(V100Only())

    db = str(tmp_path / "gavel.db")
    fillers, seen_reason = [], False
    with daemon_thread(config, v100_only) as (_, runner):
        deadline = time.time() + 240
        while time.time() < deadline:
            running = partitions(cluster, jobs)
            on_v100 = [j for j, p in running.items() if p == "v100"]
            elsewhere = [j for j, p in running.items() if p != "v100"]
            if len(on_v100) == 2 and len(elsewhere) == 1:
                if not fillers or fillers[-1] != elsewhere[0]:
                    fillers.append(elsewhere[0])
                if not seen_reason:
                    capsys.readouterr()
                    if gqueue(["--db", db, "-j", elsewhere[0], "-o", "jobid,st,reason"]) == 0:
                        line = capsys.readouterr().out.splitlines()[-1]
                        seen_reason = line.split()[:2] == [elsewhere[0], "R"] and "filling an idle GPU" in line
            if seen_reason and len(fillers) >= 2:
                break
            assert runner.is_alive()
            time.sleep(1)
    # all three ran at once: the third on a type where nobody has a share, with its reason
    assert fillers, f"no job ever filled an idle type; squeue: {queue(cluster)}"
    assert seen_reason, "gqueue never said 'filling an idle GPU'"
    assert FILLING.startswith("filling an idle GPU")
    # the filler gave its GPUs back: a different job filled later (the first one was
    # preempted to the V100s it has a share of, and another took its place)
    assert len(set(fillers)) >= 2, fillers
    for job in jobs:
        out = (tmp_path / f"out-{job}.txt").read_text()
        assert out.count("start restart=") >= 1, out

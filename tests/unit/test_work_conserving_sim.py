"""Work conservation and restart costs through the engine and the simulated cluster (issue 12 §2, §3)."""
from __future__ import annotations

import json
import math

import numpy as np
from tests.support.engine import job, run_engine, small_table
from tests.support.simulate import generated, run

from slurm_gavel.core.engine import FILLING
from slurm_gavel.core.model import Allocation
from slurm_gavel.core.recompute import Immediate
from slurm_gavel.policies import make_policy
from slurm_gavel.sim.simulator import simulate


class FirstTypeOnly:
    """A policy that gives every job a share of the first worker type only."""

    name = summary = "first type only"
    supports_space_sharing = False

    def allocate(self, inp):
        x = np.zeros((inp.n_jobs, inp.n_types))
        x[:, 0] = min(1.0, inp.counts[0] / max(1, inp.n_jobs))
        return Allocation(inp.job_ids, inp.worker_types, x, self.name)


def test_a_job_with_no_share_fills_the_idle_type_and_says_so():
    jobs = [job("fast", 36000), job("mid", 36000)]
    cluster = {"v100": 1, "k80": 1}
    engine, backend, _ = run_engine(jobs, cluster, rounds=3, allocator=Immediate(FirstTypeOnly()))
    filler = next(iter(engine.last_plan.filling))
    assert {a.worker_type for a in engine.last_plan.assignments} == {"v100", "k80"}
    assert engine.explain()[filler]["reason"] == FILLING
    assert backend.busy_gpu_seconds[1] > 0                           # the K80 ran a job
    # the same without work conservation: the K80 idles while a job waits
    engine, backend, _ = run_engine(jobs, cluster, rounds=3, allocator=Immediate(FirstTypeOnly()),
                                    work_conserving=False)
    assert backend.busy_gpu_seconds[1] == 0 and not engine.last_plan.filling
    assert any("waiting" in row["reason"] for row in engine.explain().values())


def test_each_start_is_charged_the_restart_cost():
    table = small_table()             # fast: 10 steps/s on a V100
    policy = make_policy("max_min_fairness")
    plain = simulate([job("fast", 1000)], table, {"v100": 1}, policy)
    charged = simulate([job("fast", 1000)], table, {"v100": 1}, policy, restart_seconds=60)
    assert plain.results["0"].finish == 100.0
    assert charged.results["0"].finish == 160.0
    assert simulate([job("fast", 1000)], table, {"v100": 1}, policy,
                    checkpoint_seconds=60).results["0"].finish == 160.0      # the old name


def test_restart_seconds_option_and_its_old_name(capsys, table_path):  # noqa: F811
    rows = {}
    for option in ("--restart-seconds", "--checkpoint-seconds"):
        code, out, _ = run(capsys, *generated(table_path, option, "120", "--json"))
        assert code == 0
        rows[option] = json.loads(out)
    code, out, _ = run(capsys, *generated(table_path, "--json"))
    free = json.loads(out)
    a, b = rows.values()
    assert a["average_jct_hours"] == b["average_jct_hours"] > free["average_jct_hours"]
    code, out, _ = run(capsys, *generated(table_path, "--hysteresis", "3", "--json"))
    assert code == 0 and math.isfinite(json.loads(out)["average_jct_hours"])
    code, _, err = run(capsys, *generated(table_path, "--hysteresis", "-1"))
    assert code == 2 and "--hysteresis" in err

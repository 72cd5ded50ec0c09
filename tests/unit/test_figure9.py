"""The paper's Figure 9 claim at a scale the test suite can afford.

docs/simulation.md has the full run (jobs 4000-4999, rates 1-5); here jobs
200-299 at 2.5 jobs/hour, which takes a few seconds per policy.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from slurm_gavel.sim.experiments import RunConfig, run
from slurm_gavel.estimator.gavel_data import gavel_data

TABLE = gavel_data("simulation_throughputs.json")


def test_aware_max_min_fairness_beats_the_agnostic_one_on_average_jct():
    base = RunConfig(policy="max_min_fairness", throughputs=str(TABLE), rate=2.5, window=(200, 300))
    aware, agnostic = run(base), run(RunConfig(**{**base.__dict__, "agnostic": True}))
    assert aware["complete"] and agnostic["complete"]
    assert agnostic["average_jct_hours"] / aware["average_jct_hours"] >= 1.3
    # the aware policy does the same work on fewer GPU hours
    assert aware["utilization_total"] < agnostic["utilization_total"]

"""Baselines that are not optimizations: the isolated allocation."""
from __future__ import annotations

import time

import numpy as np

from ..model import Allocation, PolicyInput


class Isolated:
    """Every job gets 1/n of each type's GPUs (the sharing-incentive reference)."""

    name = "isolated"
    summary = "isolated: every job gets an equal 1/n share of every GPU type"
    supports_space_sharing = False

    def allocate(self, inp: PolicyInput) -> Allocation:
        started = time.perf_counter()
        x = inp.isolated_allocation()
        objective = float(np.min(inp.isolated_throughputs())) if inp.n_jobs else float("nan")
        return Allocation(inp.job_ids, inp.worker_types, x, self.name, objective=objective,
                          solve_seconds=time.perf_counter() - started)

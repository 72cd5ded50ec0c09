"""Where a policy's throughputs T come from, for the jobs the engine sees.

A throughput source answers one question: for these jobs and these worker
types, what does each job (and each pair of jobs sharing GPUs) run at?  The
engine asks it whenever it builds a `PolicyInput`; it does not care whether
the numbers were measured, estimated or read from a table.

This module is the interface only; the sources are in slurm_gavel.estimator
(`TableThroughputs`, the oracle of the simulator, and `EstimatingThroughputs`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np


@dataclass(frozen=True)
class JobThroughputs:
    solo: np.ndarray               # (n, k) steps/s, NaN where unknown or infeasible
    unconsolidated: np.ndarray     # (n, k) steps/s spread over servers, NaN where unknown
    pair_jobs: np.ndarray          # (P, 2) indices into the jobs
    pair_throughputs: np.ndarray   # (P, k, 2)


class ThroughputSource(Protocol):
    def lookup(self, jobs: Sequence, worker_types: Sequence[str],
               include_pairs: bool = False) -> JobThroughputs: ...


__all__ = ["JobThroughputs", "ThroughputSource"]

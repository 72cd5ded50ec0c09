"""Where a policy's throughputs T come from, for the jobs the engine sees.

A throughput source answers one question: for these jobs and these worker
types, what does each job (and each pair of jobs sharing GPUs) run at?  The
engine asks it whenever it builds a `PolicyInput`; it does not care whether
the numbers were measured, estimated or read from a table.

This module holds the data a source answers with; the interface
(`ThroughputSource`) is declared in interfaces.py and re-exported here.  The
sources are in slurm_gavel.estimator (`TableThroughputs`, the oracle of the
simulator, and `EstimatingThroughputs`, which learns from measurements).
"""
from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from .interfaces import ThroughputSource


@dataclass(frozen=True)
class JobThroughputs:
    solo: np.ndarray               # (n, k) steps/s, NaN where unknown or infeasible
    unconsolidated: np.ndarray     # (n, k) steps/s spread over servers, NaN where unknown
    pair_jobs: np.ndarray          # (P, 2) indices into the jobs
    pair_throughputs: np.ndarray   # (P, k, 2)


__all__ = ["JobThroughputs", "ThroughputSource"]

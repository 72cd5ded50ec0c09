"""Where a policy's throughputs T come from, for the jobs the engine sees.

A throughput source answers one question: for these jobs and these worker
types, what does each job (and each pair of jobs sharing GPUs) run at?  The
engine asks it whenever it builds a `PolicyInput`; it does not care whether
the numbers were measured, estimated or read from a table.

`TableThroughputs` answers from a `ThroughputTable` (an oracle: the
simulator's source, and the seed of the estimator of issue 6).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from .workloads import ThroughputTable


@dataclass(frozen=True)
class JobThroughputs:
    solo: np.ndarray               # (n, k) steps/s, NaN where unknown or infeasible
    unconsolidated: np.ndarray     # (n, k) steps/s spread over servers, NaN where unknown
    pair_jobs: np.ndarray          # (P, 2) indices into the jobs
    pair_throughputs: np.ndarray   # (P, k, 2)


class ThroughputSource(Protocol):
    def lookup(self, jobs: Sequence, worker_types: Sequence[str],
               include_pairs: bool = False) -> JobThroughputs: ...


class TableThroughputs:
    """Throughputs straight from a table, keyed by each job's (job_type, scale_factor)."""

    def __init__(self, table: ThroughputTable):
        self.table = table
        # worker types -> (job_type, scale_factor) -> (solo, unconsolidated) rows
        self._rows: dict[tuple[str, ...], dict[tuple, tuple[np.ndarray, np.ndarray]]] = {}
        self._pairs: dict[tuple, np.ndarray | None] = {}

    def row(self, job_type: str, scale_factor: int, worker_types: Sequence[str]):
        rows = self._rows.setdefault(tuple(worker_types), {})
        key = (job_type, scale_factor)
        if key not in rows:
            # an unknown (model, scale factor) gets an all-NaN row: the engine
            # reports such a job as unschedulable instead of failing the round
            solo = self.table.solo(job_type, scale_factor)
            spread = self.table.unconsolidated(job_type, scale_factor)
            rows[key] = (np.array([solo.get(wt, np.nan) for wt in worker_types], dtype=float),
                         np.array([spread.get(wt, np.nan) for wt in worker_types], dtype=float))
        return rows[key]

    def pair(self, a: str, b: str, scale_factor: int, worker_types: Sequence[str]):
        key = (a, b, scale_factor, tuple(worker_types))
        if key not in self._pairs:
            p = self.table.pair(a, b, scale_factor)
            self._pairs[key] = (np.array([p.get(wt, (np.nan, np.nan)) for wt in worker_types],
                                         dtype=float) if p else None)
        return self._pairs[key]

    def lookup(self, jobs, worker_types, include_pairs=False) -> JobThroughputs:
        n, k = len(jobs), len(worker_types)
        known = self._rows.get(tuple(worker_types), {})
        rows = [known.get((j.job_type, j.scale_factor)) or self.row(j.job_type, j.scale_factor, worker_types)
                for j in jobs]
        solo = np.array([r[0] for r in rows], dtype=float).reshape(n, k)
        spread = np.array([r[1] for r in rows], dtype=float).reshape(n, k)
        pair_jobs, pair_thr = [], []
        if include_pairs:
            for a in range(n):
                for b in range(a + 1, n):
                    if jobs[a].scale_factor != jobs[b].scale_factor:
                        continue
                    p = self.pair(jobs[a].job_type, jobs[b].job_type, jobs[a].scale_factor,
                                  worker_types)
                    if p is not None:
                        pair_jobs.append((a, b))
                        pair_thr.append(p)
        return JobThroughputs(solo, spread, np.array(pair_jobs, dtype=np.int64).reshape(-1, 2),
                              np.array(pair_thr, dtype=float).reshape(len(pair_jobs), k, 2))


__all__ = ["JobThroughputs", "TableThroughputs", "ThroughputSource"]

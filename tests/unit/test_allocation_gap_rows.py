"""allocation_gap reuses the row indices of consecutive allocations naming the same
jobs; its value is the same as indexing every allocation afresh."""
import math

import numpy as np

from slurm_gavel.core.model import Allocation
from slurm_gavel.sim.simulator import JobResult, allocation_gap


def reference_gap(allocations, results, end):
    index, parts = {}, []
    for i, (_, t0, alloc, _) in enumerate(allocations):
        t1 = allocations[i + 1][1] if i + 1 < len(allocations) else end
        span = t1 - t0
        if span <= 0 or not alloc.job_ids:
            continue
        parts.append(([index.setdefault(job, len(index)) for job in alloc.job_ids], alloc.x * span))
    target = np.zeros((len(index), parts[0][1].shape[1]))
    for rows, x in parts:
        target[rows] += x
    gaps = []
    for job, r in results.items():
        if math.isnan(r.finish) or r.jct <= 0 or job not in index:
            continue
        realized = np.array(list(r.seconds.values())) / r.jct
        computed = np.minimum(target[index[job]] / r.jct, 1.0)
        gaps.append(float(np.abs(realized - computed).sum()))
    return float(np.mean(gaps))


def test_same_gap_with_repeated_and_changing_job_lists():
    rng = np.random.default_rng(3)
    types = ("v100", "k80")
    names = [f"j{i}" for i in range(8)]
    allocations, t = [], 0.0
    ids = tuple(names[:3])
    for step in range(40):
        if step % 5 == 0:        # the job list changes now and then, equal tuples in between
            ids = tuple(rng.choice(names, size=int(rng.integers(1, 8)), replace=False).tolist())
        else:
            ids = tuple(list(ids))   # an equal tuple, not the same object
        x = rng.random((len(ids), 2)) / 2
        allocations.append((step, t, Allocation(ids, types, x, "test"), None))
        t += float(rng.choice([0.0, 60.0, 360.0]))
    results = {n: JobResult(n, "m", 1, 1.0, 0.0, finish=t + 10.0,
                            seconds={"v100": float(rng.random() * t), "k80": float(rng.random() * t)})
               for n in names}
    assert allocation_gap(allocations, results, t + 10.0) == reference_gap(allocations, results, t + 10.0)

"""Fifo.allocate's plain-Python loop gives the same X as the numpy rule it replaced.

The reference below is the earlier per-job numpy implementation (room, usable,
lexsort over fastest / most free / first listed); random inputs with ties in
throughput and free GPUs, unrunnable types and large scale factors exercise
every branch (stop the queue, skip a job, tie-breaks).
"""
import numpy as np

from slurm_gavel.core.errors import InputError
from slurm_gavel.core.model import PolicyInput
from slurm_gavel.policies.ordering import Fifo


def reference_x(inp: PolicyInput) -> np.ndarray:
    x = np.zeros((inp.n_jobs, inp.n_types))
    free = inp.counts.astype(float).copy()
    solo = inp.solo_throughputs
    columns = np.arange(inp.n_types)
    for m in np.argsort(inp.arrival_order(), kind="stable"):
        s = inp.scale_factors[m]
        room = free >= s
        if not room.any():
            break
        usable = room & (solo[m] > 0)
        if not usable.any():
            continue
        cand = columns[usable]
        j = cand[np.lexsort((cand, -free[cand], -solo[m, cand]))[0]]
        x[m, j] = 1.0
        free[j] -= s
    return x


def test_same_allocation_as_the_numpy_rule_on_random_inputs():
    rng = np.random.default_rng(26)
    checked = 0
    for trial in range(1500):
        n, k = int(rng.integers(1, 40)), int(rng.integers(1, 5))
        # few distinct values so throughputs and free counts tie often
        tput = rng.choice([0.0, np.nan, 1.0, 2.0, 2.0, 3.0], size=(n, k))
        tput[:, 0] = np.where(rng.random(n) < 0.8, 1.0, tput[:, 0])  # most jobs run somewhere
        try:
            inp = PolicyInput(
                worker_types=tuple(f"t{j}" for j in range(k)),
                counts=rng.integers(0, 12, size=k),
                job_ids=tuple(f"j{m}" for m in range(n)),
                throughputs=tput,
                scale_factors=rng.choice([1, 1, 2, 4, 8], size=n),
                weights=np.ones(n),
                time_since_arrival=rng.choice([0.0, 5.0, 10.0, 20.0], size=n))
        except InputError:
            continue                # some job fits no type: not a valid round
        checked += 1
        got = Fifo().allocate(inp)
        assert np.array_equal(got.x, reference_x(inp)), trial
    assert checked > 100

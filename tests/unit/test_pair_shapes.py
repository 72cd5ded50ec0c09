"""Which pair rows the policy is offered (issue 13 §2): only those the backend can run.

A backend states the most GPUs per job of a pair row it runs (`max_pair_gpus`,
core/backend.py; Slurm: 1), the engine drops the other pair rows from the policy input
(`runnable_pairs`), and the simulator takes the same limit (`--max-pair-gpus`; unset:
any size, as Gavel's simulator).  The contract suite (tests/cluster/test_backend_contract.py)
runs the same jobs on both backends; this file checks the pieces without a cluster.
"""
from __future__ import annotations

import numpy as np
import pytest

from slurm_gavel.cli import main
from slurm_gavel.core.backend import JobState, pair_gpu_limit
from slurm_gavel.core.engine import runnable_pairs
from slurm_gavel.core.errors import InputError
from slurm_gavel.core.interfaces import Backend
from slurm_gavel.core.clock import SimulatedClock
from slurm_gavel.core.throughputs import JobThroughputs
from slurm_gavel.estimator.table import ThroughputTable
from slurm_gavel.policies import make_policy
from slurm_gavel.sim.simulator import SimulatedCluster, simulate
from slurm_gavel.sim.workloads import TraceJob

MODEL = "convnet"


def _table() -> ThroughputTable:
    return ThroughputTable.from_gavel_dict(
        {wt: {f"('{MODEL}', {sf})": {"null": 1.0, f"('{MODEL}', {sf})": [0.9, 0.9]} for sf in (1, 2, 4, 8)}
         for wt in ("v100", "k80")})


def _jobs(*sizes):
    return [JobState(str(i), MODEL, sf, 0.0) for i, sf in enumerate(sizes)]


def test_runnable_pairs_keeps_the_pairs_of_jobs_within_the_limit():
    jobs = _jobs(1, 1, 2, 2, 4, 4)
    pairs = np.array([[0, 1], [2, 3], [4, 5]])
    thr = np.arange(3 * 2 * 2, dtype=float).reshape(3, 2, 2)
    table = JobThroughputs(np.ones((6, 2)), np.full((6, 2), np.nan), pairs, thr)
    assert runnable_pairs(jobs, table, None) is table
    assert runnable_pairs(jobs, table, 4) is table
    two = runnable_pairs(jobs, table, 2)
    assert two.pair_jobs.tolist() == [[0, 1], [2, 3]] and (two.pair_throughputs == thr[:2]).all()
    one = runnable_pairs(jobs, table, 1)
    assert one.pair_jobs.tolist() == [[0, 1]] and (one.pair_throughputs == thr[:1]).all()
    none = runnable_pairs(jobs, table, 0)
    assert none.pair_jobs.shape == (0, 2) and none.pair_throughputs.shape == (0, 2, 2)
    assert (one.solo == table.solo).all()


def test_a_backend_states_its_limit_or_any():
    class Quiet(Backend):
        worker_types = ("v100",)

        def observe(self):
            raise AssertionError("not observed")

        def execute(self, plan, round_end):
            raise AssertionError("not executed")

    assert pair_gpu_limit(Quiet()) is None
    cluster = SimulatedCluster([], _table(), {"v100": 4}, SimulatedClock(), max_pair_gpus=1)
    assert pair_gpu_limit(cluster) == 1
    assert pair_gpu_limit(SimulatedCluster([], _table(), {"v100": 4}, SimulatedClock())) is None
    for bad in (0, -1, 1.5, True):
        with pytest.raises(InputError, match="--max-pair-gpus"):
            SimulatedCluster([], _table(), {"v100": 4}, SimulatedClock(), max_pair_gpus=bad)
    Quiet.max_pair_gpus = "1"
    with pytest.raises(ValueError, match="max_pair_gpus"):
        pair_gpu_limit(Quiet())


class _Recording:
    """A policy that keeps every allocation it makes (to see which pair rows got a share)."""

    def __init__(self, policy):
        self.policy, self.allocations = policy, []

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def allocate(self, inp):
        a = self.policy.allocate(inp)
        self.allocations.append((inp, a))
        return a


def _shared_sizes(max_pair_gpus):
    """Scale factors of the pair rows offered and of those given a share, over a whole run."""
    jobs = [TraceJob(MODEL, "", "", "", False, 3600 * (1 + i % 3), sf, arrival_time=60.0 * i)
            for i, sf in enumerate((1, 1, 2, 2, 2, 2, 1, 2, 4, 4))]
    policy = _Recording(make_policy("max_min_fairness_packed"))
    sim = simulate(jobs, _table(), {"v100": 4, "k80": 4}, policy, round_seconds=360.0,
                   space_sharing=True, max_pair_gpus=max_pair_gpus)
    offered, shared = set(), set()
    for inp, a in policy.allocations:
        offered |= {int(inp.scale_factors[p]) for p, _ in inp.pair_jobs}
        index = {j: i for i, j in enumerate(inp.job_ids)}
        shared |= {int(inp.scale_factors[index[a.job_ids[p]]])
                   for r, (p, _) in enumerate(a.pair_jobs) if a.x_pairs[r].sum() > 1e-6}
    return sim, offered, shared


def test_the_simulator_mimicking_slurm_gives_no_multi_gpu_pair_a_share():
    sim, offered, shared = _shared_sizes(1)
    assert sim.complete and offered == {1} and shared <= {1}
    # Gavel's simulator (no limit, the default) does pair two- and four-GPU jobs here
    gavel, offered, shared = _shared_sizes(None)
    assert gavel.complete and offered == {1, 2, 4} and shared - {1}


def test_simulate_cli_takes_max_pair_gpus(tmp_path, capsys):
    path = tmp_path / "t.json"
    _table().to_gavel_json(path)
    base = ["simulate", "--policy", "max_min_fairness_packed", "--throughputs", str(path),
            "--cluster", "v100=4,k80=4", "--rate", "20", "--jobs", "6", "--multi-gpu",
            "--space-sharing"]
    assert main(base + ["--max-pair-gpus", "1"]) == 0
    capsys.readouterr()
    assert main(base + ["--max-pair-gpus", "0"]) == 2
    out, err = capsys.readouterr()
    assert "--max-pair-gpus" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1

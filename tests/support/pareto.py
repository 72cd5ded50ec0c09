"""Exact solves and space-sharing runs for the Pareto tests."""
from __future__ import annotations

import numpy as np

from slurm_gavel.core.model import PolicyInput
from slurm_gavel.policies import make_policy

from tests.support.inputs import random_input


TOL = 1e-6
EXACT = (("HIGHS", {"highs_options": {"solver": "simplex", "primal_feasibility_tolerance": 1e-10,
                                      "dual_feasibility_tolerance": 1e-10}}),)


def inner(policy):
    while hasattr(policy, "policy"):
        policy = policy.policy
    return policy


def idle_while_waiting(alloc, inp: PolicyInput) -> float:
    """The largest free capacity (GPUs) of a type that some job under time share 1 could use."""
    free = inp.counts - alloc.gpus_used(inp.scale_factors.astype(float))
    short = alloc.time_fractions() < 1 - TOL
    usable = (inp.solo_throughputs > 0) & short[:, None]
    return float(np.max(np.where(usable.any(axis=0), free, 0.0)))


def space_sharing_runs(name: str, seed: int, use_direct: bool = True):
    """(input, two-stage allocation, one-stage allocation) of policy `name` with pair rows
    (priced columns), on a random input of 12-19 jobs on 2 types seeded with `seed`;
    `use_direct=False`: both on the cvxpy route (lp.py's pricing)."""
    rng = np.random.default_rng(seed)
    inp = random_input(rng, int(rng.integers(12, 20)), 2, pairs=80)
    pareto, plain = make_policy(name, space_sharing=True), make_policy(name, space_sharing=True)
    inner(plain).pareto = False
    inner(pareto).use_direct = inner(plain).use_direct = use_direct
    return inp, pareto.allocate(inp), plain.allocate(inp)

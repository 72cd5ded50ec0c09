#!/usr/bin/env python3
"""A simulation whose solves with pair rows are also solved on the cvxpy route: how far apart.

Runs `slurm-gavel simulate ARGS` as usual; on each of its first LIMIT solves that have pair
rows and no classes of identical jobs (the solves direct_pairs.py takes: pair columns priced
on HiGHS' duals), the same input is solved again by a twin of the policy with
`use_direct = False` (lp.py's column generation on cvxpy; conic for FTF) that has the same
policy memory (FTF's isolated-equivalent times).  At the end it prints, on stderr, the
largest and median relative difference of the two objectives and of the Pareto stage's sum
(each policy's own weights), and how many exceed 1e-6 / 1e-5.  The run itself goes on with
the HiGHS answer, so its summary is the ordinary one.

    nice python bench/priced_routes.py 400 simulate --policy makespan --space-sharing \
        --trace $D/traces/physical_cluster/minimize_makespan.trace \
        --throughputs $D/physical_cluster_throughputs.json --cluster v100=8,p100=16,k80=24 \
        --round 360 --quiet --json
"""
from __future__ import annotations

import atexit
import sys

import numpy as np

from slurm_gavel.policies import lp

LIMIT = int(sys.argv.pop(1)) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 200
_allocate = lp.LinearPolicy.allocate
seen: list[tuple[float, float, float, float]] = []


def pareto_weights(policy, inp) -> np.ndarray:
    """(n,) the weights of the policy's Pareto-stage sum of throughputs."""
    if hasattr(policy, "pareto_weights"):
        return policy.pareto_weights(inp, policy.coefficients(inp))
    if hasattr(policy, "isolated_seconds"):             # finish-time fairness
        return policy.parameters(inp)["inv_isolated"]
    from slurm_gavel.policies.cost import second_gains
    return second_gains(inp.weights, inp.solo_throughputs, np.ones(inp.n_jobs))[1]


def allocate(self, inp):
    if getattr(self, "_shadow", False):
        return _allocate(self, inp)
    if not hasattr(self, "_twin"):
        self._twin = type(self)()
        self._twin._shadow, self._twin.use_direct, self._twin.pareto = True, False, self.pareto
    if hasattr(self, "memory"):
        self._twin.remember(self.memory())
    a = _allocate(self, inp)
    if inp.n_pairs and len(seen) < LIMIT and "job_classes" not in a.info:
        b = _allocate(self._twin, inp)
        w = pareto_weights(self, inp)
        seen.append((a.objective, b.objective, (w * a.effective_throughputs(inp)).sum(),
                     (w * b.effective_throughputs(inp)).sum()))
    return a


@atexit.register
def report():
    if not seen:
        print("checked 0 solves", file=sys.stderr)
        return
    a, b, pa, pb = np.array(seen).T
    rel = np.abs(a - b) / np.maximum(np.abs(b), 1e-300)
    prel = np.abs(pa - pb) / np.maximum(np.abs(pb), 1e-300)
    print(f"checked {len(seen)} solves with pair rows (no classes): objective HiGHS vs cvxpy "
          f"max rel diff {rel.max():.2e}, median {np.median(rel):.2e}, over 1e-6: {(rel > 1e-6).sum()}; "
          f"Pareto-stage sums max rel diff {prel.max():.2e}, over 1e-5: {(prel > 1e-5).sum()}",
          file=sys.stderr)


if __name__ == "__main__":
    lp.LinearPolicy.allocate = allocate
    from slurm_gavel.cli.main import main
    sys.argv = ["slurm-gavel", *sys.argv[1:]]
    sys.exit(main())

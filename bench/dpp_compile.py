#!/usr/bin/env python3
"""Why large problems are compiled with constants: cvxpy's DPP compile time against parameter size.

Builds the allocation program of max-min fairness for growing numbers of jobs
(3 GPU types, so 3 throughput parameters per job, plus pair rows when asked)
and times `Problem.solve` the first time with parameters kept (DPP: compiled
once, refilled later) and with `ignore_dpp=True` (values baked in as
constants), each in a fresh process so that no cache is shared.

    python bench/dpp_compile.py                    # 256 .. 2048 jobs
    python bench/dpp_compile.py --jobs 512 1024 --pairs-per-job 4
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np


def one(n_jobs: int, pairs_per_job: int, dpp: bool) -> dict:
    from slurm_gavel.core.model import PolicyInput
    from slurm_gavel.policies.fairness import MaxMinFairness
    from slurm_gavel.policies.program import AllocationProgram, Numbers
    from slurm_gavel.policies.solver import parameter_entries

    rng = np.random.default_rng(0)
    fields = {}
    if pairs_per_job:
        a = np.repeat(np.arange(n_jobs), pairs_per_job)
        b = (a + 1 + rng.integers(0, n_jobs - 1, a.size)) % n_jobs
        fields = dict(pair_jobs=np.stack([np.minimum(a, b), np.maximum(a, b)], axis=1),
                      pair_throughputs=rng.uniform(1, 50, (a.size, 3, 2)))
    inp = PolicyInput(worker_types=("v100", "p100", "k80"), counts=np.full(3, n_jobs / 4),
                      job_ids=tuple(map(str, range(n_jobs))),
                      throughputs=rng.uniform(1, 100, (n_jobs, 3)),
                      scale_factors=np.ones(n_jobs, dtype=int), weights=np.ones(n_jobs), **fields)
    policy = MaxMinFairness()
    program = AllocationProgram(inp)
    problem, params = policy.formulate(program)
    program.set_numbers(Numbers.of(inp))
    params["coef"].value = policy.coefficients(inp)
    started = time.perf_counter()
    problem.solve(solver="HIGHS", ignore_dpp=not dpp, highs_options={"solver": "ipm"})
    return {"jobs": n_jobs, "pair_rows": inp.n_pairs, "parameter_entries": parameter_entries(problem),
            "mode": "dpp" if dpp else "constants", "first_solve_s": round(time.perf_counter() - started, 3),
            "compile_s": round(problem.compilation_time, 3), "status": problem.status}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--pairs-per-job", type=int, default=0)
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        n, pairs, dpp = map(int, args.one)
        print(json.dumps(one(n, pairs, bool(dpp))))
        return 0
    print(f"{'jobs':>6}{'pair rows':>10}{'param entries':>15}{'mode':>11}{'compile s':>11}{'first solve s':>15}")
    for n in args.jobs:
        for dpp in (True, False):
            cmd = [sys.executable, __file__, "--one", str(n), str(args.pairs_per_job), str(int(dpp))]
            row = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True,
                                            timeout=1800).stdout.strip().splitlines()[-1])
            print(f"{row['jobs']:>6}{row['pair_rows']:>10}{row['parameter_entries']:>15}{row['mode']:>11}"
                  f"{row['compile_s']:>11.3f}{row['first_solve_s']:>15.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

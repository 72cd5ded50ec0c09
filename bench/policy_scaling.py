#!/usr/bin/env python3
"""Solve time and peak memory of the policies as the number of active jobs grows.

Instances as in the paper's Figure 14 (seed 5.6): N jobs drawn uniformly from
the 26 single-GPU job types of Gavel's measured throughput table, on a cluster
of N/4 GPUs of each of its three types (v100, p100, k80).  Steps remaining
follow the trace model of seed 2.2 (10^x minutes on a V100), time since
arrival is uniform over a day.  With space sharing every pair of jobs gets
its measured pair throughputs.

Each (policy, N) runs in a fresh process, so that peak RSS is that run's own.
Printed per run: seconds of the first solve (building the cvxpy problem
included), of a second solve with new numbers on the same structure (the
compiled problem is reused), peak RSS, and for space sharing the objective
against the LP with every undominated pair ("exact") where that one fits.

    python bench/policy_scaling.py                       # all, 32..8192 jobs
    python bench/policy_scaling.py --sizes 32 128 --policies max_min_fairness

Gavel's throughput table ships in the package (slurm_gavel.estimator.gavel_data);
--throughputs picks another.
"""
from __future__ import annotations

import argparse
import ast
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from slurm_gavel.estimator.gavel_data import gavel_data  # noqa: E402

DEFAULT_THROUGHPUTS = gavel_data("simulation_throughputs.json")
TYPES = ("v100", "p100", "k80")
RUNS = [("max_min_fairness", False), ("max_min_fairness", True),
        ("finish_time_fairness", False), ("makespan", False)]


def load_table(path: Path):
    """Gavel's table -> (model names, solo (26, 3), pair (26, 26, 3, 2)) for scale factor 1."""
    raw = json.loads(path.read_text())
    models = sorted(key for key in raw[TYPES[0]] if ast.literal_eval(key)[1] == 1)
    solo = np.array([[raw[t][m]["null"] for t in TYPES] for m in models])
    pair = np.zeros((len(models), len(models), len(TYPES), 2))
    for a, ma in enumerate(models):
        for b, mb in enumerate(models):
            for j, t in enumerate(TYPES):
                pair[a, b, j] = raw[t][ma].get(mb, [0.0, 0.0])
    return models, solo, pair


def instance(n: int, seed: int, table, space_sharing: bool, distinct: bool = False):
    from slurm_gavel.core.model import PolicyInput

    _, solo, pair = table
    rng = np.random.default_rng(seed)
    kind = rng.integers(0, len(solo), n)
    # --distinct: every job's throughputs off its model's by up to +-10%, as
    # when they are measured per job; then no two jobs are identical.
    noise = rng.uniform(0.9, 1.1, (n, len(TYPES))) if distinct else np.ones((n, len(TYPES)))
    minutes = np.where(rng.random(n) < 0.8, 10 ** rng.uniform(1.5, 3, n), 10 ** rng.uniform(3, 4, n))
    fields = dict(steps_remaining=solo[kind, 0] * minutes * 60,
                  time_since_arrival=rng.uniform(0, 86400, n))
    if space_sharing:
        a, b = np.triu_indices(n, k=1)
        shared = pair[kind[a], kind[b]] * np.stack([noise[a], noise[b]], axis=2)
        fields.update(pair_jobs=np.stack([a, b], axis=1), pair_throughputs=shared)
    return PolicyInput(worker_types=TYPES, counts=np.full(3, n / 4), job_ids=tuple(map(str, range(n))),
                       throughputs=solo[kind] * noise, scale_factors=np.ones(n, dtype=int),
                       weights=np.ones(n), **fields)


def run_one(policy_name: str, n: int, space_sharing: bool, exact: bool, path: Path,
            distinct: bool) -> dict:
    """One measurement, in this process."""
    from slurm_gavel.policies import make_policy
    from slurm_gavel.policies.space_sharing import prune_pairs

    class ExactPairs:
        """Every undominated pair in one LP, no pricing: the reference optimum."""

        def __init__(self, policy):
            self.policy = policy.policy if hasattr(policy, "policy") else policy

        def allocate(self, inp):
            allocation, _ = self.policy._solve_once(prune_pairs(inp, per_job=None))
            return allocation

    table = load_table(path)
    inp = instance(n, 0, table, space_sharing, distinct)
    policy = make_policy(policy_name, space_sharing=space_sharing)
    if exact:
        policy = ExactPairs(policy)
    started = time.perf_counter()
    first = policy.allocate(inp)
    first_seconds = time.perf_counter() - started
    # Same structure, new numbers: every GPU type's throughputs re-estimated
    # (5%, 2%, 3% faster), a daemon's everyday case between reset events.
    change = np.array([1.05, 1.02, 1.03])
    again = inp.with_throughputs(inp.throughputs * change,
                                 inp.pair_throughputs * change[None, :, None] if inp.n_pairs else None)
    started = time.perf_counter()
    policy.allocate(again)
    second_seconds = time.perf_counter() - started
    return {"policy": policy_name, "space_sharing": space_sharing, "exact": exact, "jobs": n,
            "distinct": distinct, "job_classes": first.info.get("job_classes"),
            "pricing_rounds": first.info.get("pricing_rounds"), "pair_rows": int(len(first.pair_jobs)), "objective": first.objective,
            "first_solve_s": round(first_seconds, 3), "resolve_s": round(second_seconds, 3),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def measure(policy_name, n, space_sharing, exact, path, timeout, distinct):
    cmd = [sys.executable, __file__, "--one", policy_name, str(n), str(int(space_sharing)),
           str(int(exact)), str(int(distinct)), "--throughputs", str(path)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True)
    except subprocess.TimeoutExpired:
        return {"policy": policy_name, "space_sharing": space_sharing, "exact": exact, "jobs": n,
                "error": f"timeout after {timeout} s"}
    except subprocess.CalledProcessError as err:
        return {"policy": policy_name, "space_sharing": space_sharing, "exact": exact, "jobs": n,
                "error": err.stderr.strip().splitlines()[-1] if err.stderr.strip() else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 128, 512, 2048, 8192])
    parser.add_argument("--policies", nargs="+", default=None,
                        help="subset of: max_min_fairness, max_min_fairness+ss, "
                             "finish_time_fairness, makespan")
    parser.add_argument("--distinct", action="store_true",
                        help="perturb every job's throughputs by up to 10%% (no identical jobs)")
    parser.add_argument("--ss-up-to", type=int, default=2048,
                        help="space sharing only up to this many jobs (the all-pairs input "
                             "grows as n^2: 8192 jobs would need ~3 GiB for the input alone)")
    parser.add_argument("--exact-up-to", type=int, default=512,
                        help="also solve the LP with every undominated pair up to this many jobs")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--throughputs", type=Path, default=DEFAULT_THROUGHPUTS)
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--one", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        name, n, ss, exact, distinct = args.one
        print(json.dumps(run_one(name, int(n), bool(int(ss)), bool(int(exact)), args.throughputs,
                                 bool(int(distinct)))))
        return 0
    if not args.throughputs.exists():
        parser.error(f"throughput table not found: {args.throughputs} (pass --throughputs)")
    wanted = args.policies
    runs = [(p, ss) for p, ss in RUNS
            if wanted is None or (p + ("+ss" if ss else "")) in wanted]
    header = (f"{'policy':<26}{'jobs':>6}{'classes':>8}{'pair rows':>10}{'first s':>9}"
              f"{'resolve s':>10}{'peak MiB':>9}  objective")
    if not args.json:
        print(header)
    for n in args.sizes:
        for name, ss in runs:
            if ss and n > args.ss_up_to:
                continue
            variants = [False] + ([True] if ss and n <= args.exact_up_to else [])
            rows = [measure(name, n, ss, exact, args.throughputs, args.timeout, args.distinct)
                    for exact in variants]
            if len(rows) == 2 and "error" not in rows[0] and "error" not in rows[1]:
                rows[0]["gap_vs_exact"] = 1 - rows[0]["objective"] / rows[1]["objective"]
            for row in rows:
                if args.json:
                    print(json.dumps(row), flush=True)
                    continue
                label = name + (" +ss" if ss else "") + (" exact" if row.get("exact") else "")
                if "error" in row:
                    print(f"{label:<26}{n:>6}  {row['error']}", flush=True)
                    continue
                gap = f"  (gap {row['gap_vs_exact']:.3%} vs exact)" if "gap_vs_exact" in row else ""
                rounds = f" [{row['pricing_rounds']} pricing rounds]" if row.get("pricing_rounds") else ""
                classes = row["job_classes"] or "-"
                print(f"{label:<26}{n:>6}{classes:>8}{row['pair_rows']:>10}{row['first_solve_s']:>9.3f}"
                      f"{row['resolve_s']:>10.3f}{row['peak_rss_mib']:>9.1f}  {row['objective']:.6g}"
                      f"{gap}{rounds}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

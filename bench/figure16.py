#!/usr/bin/env python3
"""The paper's Figure 16 in the simulator: space sharing with oracle against estimated throughputs.

Setting (seed 5.8): a heterogeneous 12-GPU cluster (4 V100, 4 P100, 4 K80,
4 GPUs per server), max-min fairness (LAS) with space sharing, Gavel's
measured throughputs (`simulation_throughputs.json`) as the truth the jobs
run at, the continuous-single workload (Gavel's generator: 26 single-GPU
models, Poisson arrivals), 6-minute rounds, average JCT over a window of job
ids (the run stops when they are done), across input rates.  Variants:

* ``no-ss``: max-min fairness without space sharing (oracle throughputs);
* ``oracle``: with space sharing, the policy sees the table (TableThroughputs);
* ``estimated``: with space sharing, the policy sees `EstimatingThroughputs`
  whose reference table never contains the job's own model (leave-one-out:
  every model is new to the estimator; the other 25 are the reference).  A
  job is explored, fingerprinted against the other models and estimated
  as in docs/estimator.md; jobs of the same model learn from each other's
  measurements (what the daemon does);
* ``estimated-per-job``: the same, but no job learns from another: every job
  starts from nothing (the hardest case: its model is new and was never seen).

The simulated cluster reports every running job's true rate each round (no
measurement noise).

    python bench/figure16.py                               # 4 rates x 3 seeds x 4 variants
    python bench/figure16.py --rates 0.6 --seeds 0 --window 50:150    # a quick look
    python bench/figure16.py --seeds 1 --csv s1.csv        # one seed at a time, then
    python bench/figure16.py --from-csv s0.csv,s1.csv,s2.csv --plot fig16.png    # the table from them

Gavel's throughput table ships in the package (slurm_gavel.estimator.gavel_data);
--throughputs picks another.
"""
from __future__ import annotations

import argparse
import csv
import itertools
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from slurm_gavel.estimator.gavel_data import gavel_data  # noqa: E402

DEFAULT_THROUGHPUTS = gavel_data("simulation_throughputs.json")

VARIANTS = ("no-ss", "oracle", "estimated", "estimated-per-job")
CLUSTER = {"v100": 4, "p100": 4, "k80": 4}


def run_one(throughputs: str, variant: str, rate: float, seed: int, window: tuple[int, int]) -> dict:
    from slurm_gavel.estimator.learning import EstimatingThroughputs
    from slurm_gavel.policies import make_policy
    from slurm_gavel.sim.simulator import simulate, summarize
    from slurm_gavel.estimator.table import TableThroughputs
    from slurm_gavel.estimator.table import ThroughputTable
    from slurm_gavel.sim.workloads import iter_trace

    table = ThroughputTable.from_gavel_json(throughputs)
    space_sharing = variant != "no-ss"
    source = {
        "no-ss": TableThroughputs(table),
        "oracle": TableThroughputs(table),
        "estimated": EstimatingThroughputs(table, leave_one_out=True),
        "estimated-per-job": EstimatingThroughputs(table, leave_one_out=True, share_across_jobs=False),
    }[variant]
    policy = make_policy("max_min_fairness", space_sharing=space_sharing)
    sim = simulate(iter_trace(table, rate, seed=seed), table, CLUSTER, policy, window=window,
                   space_sharing=space_sharing, throughputs=source)
    s = summarize(sim, table, window)
    return {"variant": variant, "rate": rate, "seed": seed, "average_jct_hours": s["average_jct_hours"],
            "complete": s["complete"], "finished": s["finished"], "jobs": s["jobs"],
            "utilization": s["utilization_total"], "solves": s["solves"],
            "solver_errors": s["solver_errors"], "fingerprints": getattr(source, "fingerprints", 0),
            "wall_seconds": s["wall_seconds"]}


def read_rows(paths: list[str]) -> list[dict]:
    """Rows of one or more --csv files (e.g. one per seed), numbers parsed."""
    rows = []
    for path in paths:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                row["rate"] = float(row["rate"])
                row["seed"] = int(row["seed"])
                row["average_jct_hours"] = float(row["average_jct_hours"])
                row["complete"] = row["complete"] == "True"
                row["solver_errors"] = int(row["solver_errors"])
                rows.append(row)
    return rows


def report(rows: list[dict], plot: str | None = None) -> None:
    """The table of average JCT (mean over seeds) per variant and rate, and the plot."""
    variants = [v for v in VARIANTS if any(r["variant"] == v for r in rows)]
    rates = sorted({r["rate"] for r in rows})
    mean = {}
    for row in rows:
        mean.setdefault((row["variant"], row["rate"]), []).append(row["average_jct_hours"])
    seeds = sorted({r["seed"] for r in rows})
    print(f"\naverage JCT (hours), mean over seeds {seeds}")
    header = f"{'rate':>6} " + " ".join(f"{v:>18}" for v in variants)
    if "oracle" in variants:
        header += "  " + " ".join(f"{v + ' / oracle':>26}" for v in variants if v != "oracle")
    print(header)
    for rate in rates:
        vals = {v: sum(mean[(v, rate)]) / len(mean[(v, rate)]) for v in variants if (v, rate) in mean}
        line = f"{rate:6g} " + " ".join(f"{vals[v]:18.2f}" if v in vals else f"{'-':>18}" for v in variants)
        if "oracle" in vals:
            line += "  " + " ".join(f"{vals[v] / vals['oracle']:26.3f}" if v in vals else f"{'-':>26}"
                                    for v in variants if v != "oracle")
        counts = {len(mean[k]) for k in mean if k[1] == rate}
        if len(counts) > 1:
            line += "  (seeds differ across variants)"
        print(line)
    print(f"\nall {len(rows)} runs complete: {all(r['complete'] for r in rows)}; "
          f"solver errors: {sum(r['solver_errors'] for r in rows)}")
    if plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 4))
        for v in variants:
            xs = [r for r in rates if (v, r) in mean]
            ax.plot(xs, [sum(mean[(v, r)]) / len(mean[(v, r)]) for r in xs], marker="o", label=v)
        ax.set_xlabel("input job rate (jobs/hour)")
        ax.set_ylabel("average JCT (hours)")
        ax.set_title(f"12 GPUs, max-min fairness: oracle vs estimated throughputs (seeds {seeds})", fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.savefig(plot, dpi=100, bbox_inches="tight")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--throughputs", default=str(DEFAULT_THROUGHPUTS))
    parser.add_argument("--rates", default="0.4,0.6,0.7,0.8", help="jobs/hour (default: %(default)s)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--window", default="100:300", help="FIRST:END job ids (default: %(default)s)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--csv", metavar="FILE", help="one line per run")
    parser.add_argument("--plot", metavar="PNG", help="average JCT against rate (needs matplotlib)")
    parser.add_argument("--from-csv", metavar="FILES", help="no runs: the table (and --plot) of --variants "
                        "from these comma-separated --csv files, e.g. one per seed")
    args = parser.parse_args()
    if args.from_csv:
        keep = set(args.variants.split(","))
        report([r for r in read_rows(args.from_csv.split(",")) if r["variant"] in keep], args.plot)
        return 0
    if not Path(args.throughputs).exists():
        print(f"throughput file not found: {args.throughputs} (pass --throughputs)", file=sys.stderr)
        return 2
    rates = [float(r) for r in args.rates.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        if v not in VARIANTS:
            print(f"unknown variant {v!r} (known: {', '.join(VARIANTS)})", file=sys.stderr)
            return 2
    first, end = map(int, args.window.split(":"))
    runs = list(itertools.product(variants, rates, seeds))
    # longest first, so that the pool is not left waiting on one slow run at the end
    slowest = {"estimated-per-job": 0, "estimated": 1, "oracle": 2, "no-ss": 3}
    runs.sort(key=lambda r: (-r[1], slowest[r[0]]))
    print(f"Figure 16: max-min fairness on {CLUSTER}, window {first}:{end}, rates {rates}, seeds {seeds}, "
          f"{args.processes} processes", flush=True)
    started = time.perf_counter()
    rows = []
    out = open(args.csv, "w", newline="") if args.csv else None
    writer = None
    with ProcessPoolExecutor(max_workers=max(1, args.processes)) as pool:
        futures = {pool.submit(run_one, args.throughputs, v, r, s, (first, end)): (v, r, s) for v, r, s in runs}
        for f in futures:
            row = f.result()
            rows.append(row)
            print(f"  {row['variant']:<18} rate {row['rate']:<4g} seed {row['seed']}  avg JCT "
                  f"{row['average_jct_hours']:7.2f} h  {'complete' if row['complete'] else 'INCOMPLETE'}  "
                  f"solver errors {row['solver_errors']}  wall {row['wall_seconds']:.0f} s", flush=True)
            if out is not None:  # written as runs end, so that a stopped run keeps what it did
                if writer is None:
                    writer = csv.DictWriter(out, fieldnames=list(row))
                    writer.writeheader()
                writer.writerow(row)
                out.flush()
    if out is not None:
        out.close()
    report(rows, args.plot)
    print(f"wall {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

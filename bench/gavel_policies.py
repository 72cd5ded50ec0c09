#!/usr/bin/env python3
"""Gavel's own simulator next to ours, on the same jobs, for every policy both have.

Each case runs Gavel's driver (`scripts/drivers/simulate_scheduler_with_generated_jobs.py`)
and `slurm-gavel simulate --generator gavel` (the very jobs Gavel draws for the
seed), each in its own `nice`d process, one after the other, and prints one
row: policy, the metric the policy is judged by (Gavel's, ours, ours / Gavel)
and the wall seconds of each.  Metrics:

    average JCT (h) of the window's jobs   fifo, LAS, FTF, max throughput, hierarchical
    makespan (h), all jobs at time 0        min_total_duration (makespan)
    total cost ($), GCP's fixed prices      min_cost, min_cost with SLOs (+ SLO violations)

The continuous cases use Gavel's generator with 1-GPU jobs at `--rate` jobs/h on
36 V100 + 36 P100 + 36 K80, 6-minute rounds, measuring jobs `--window`; the
makespan cases put `--static-jobs` jobs at time 0.  Gavel's cost policies
need a spot-price folder; the bench makes an empty one and names `gcp`, whose
prices are fixed in Gavel's code (V100 $0.74/h, P100 $0.43/h, K80 $0.135/h),
and gives ours the same prices.  For the SLO policy Gavel's generator draws an
SLO per job (a factor 1.2, 2 or 10 of its duration, from its own random
stream seeded seed + 6); ours reads the same jobs with the same SLOs from a
trace file this script writes.  Gavel's code is not part of the project:

    python bench/gavel_policies.py --gavel GAVEL/scheduler --gavel-python VENV/bin/python \
        [--rate 2.5 --window 200:300 --static-jobs 100] [--cases las,fifo] [--markdown FILE] \
        [--results FILE.jsonl]
    python bench/gavel_policies.py --render --results FILE.jsonl [--markdown FILE]

Options this script does not know go to every `slurm-gavel simulate` run.
`bash bench/gavel_env.sh GAVEL_GIT_DIR DEST` builds Gavel's scheduler/ folder (with
its gRPC stubs) and a Python for it.

A high-load case takes Gavel's simulator up to an hour, so a run can be resumed:
with `--results FILE.jsonl` each finished case appends one JSON line (both sides'
metric, wall seconds, notes, the setup and the commit of ours) and a case
already in the file for the same setup is skipped (delete its line to rerun
it); `--markdown` is then rewritten from the whole file after each case, and
`--render` writes that table without running anything.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _paths import gavel_data  # noqa: E402

GCP_PRICES = "v100=0.74,p100=0.43,k80=0.135"   # Gavel's utils.read_per_instance_type_spot_prices_json


@dataclass(frozen=True)
class Case:
    name: str            # the row's label
    gavel: str           # Gavel's policy name
    ours: str            # our policy name
    flags: tuple = ()    # our extra simulate flags (--agnostic, --space-sharing)
    metric: str = "jct"  # jct | makespan | cost
    slos: bool = False


CASES: tuple[Case, ...] = (
    Case("fifo aware", "fifo_perf", "fifo"),
    Case("fifo agnostic", "fifo", "fifo", ("--agnostic",)),
    Case("fifo packed", "fifo_packed", "fifo", ("--space-sharing",)),
    Case("las aware", "max_min_fairness_perf", "max_min_fairness"),
    Case("las agnostic", "max_min_fairness", "max_min_fairness", ("--agnostic",)),
    Case("las packed", "max_min_fairness_packed", "max_min_fairness", ("--space-sharing",)),
    Case("ftf aware", "finish_time_fairness_perf", "finish_time_fairness"),
    Case("ftf agnostic", "finish_time_fairness", "finish_time_fairness", ("--agnostic",)),
    Case("ftf packed", "finish_time_fairness_packed", "finish_time_fairness", ("--space-sharing",)),
    Case("makespan aware", "min_total_duration_perf", "makespan", metric="makespan"),
    Case("makespan agnostic", "min_total_duration", "makespan", ("--agnostic",), metric="makespan"),
    Case("makespan packed", "min_total_duration_packed", "makespan", ("--space-sharing",),
         metric="makespan"),
    Case("max_throughput aware", "max_sum_throughput_perf", "max_throughput"),
    Case("min_cost aware", "max_sum_throughput_normalized_by_cost_perf", "min_cost", metric="cost"),
    Case("min_cost_slo aware", "max_sum_throughput_normalized_by_cost_perf_SLOs", "min_cost_slo",
         metric="cost", slos=True),
    Case("min_cost_slo packed", "max_sum_throughput_normalized_by_cost_packed_SLOs", "min_cost_slo",
         ("--space-sharing",), metric="cost", slos=True),
    Case("hierarchical aware", "max_min_fairness_water_filling_perf", "hierarchical"),
    Case("hierarchical agnostic", "max_min_fairness_water_filling", "hierarchical", ("--agnostic",)),
    Case("hierarchical packed", "max_min_fairness_water_filling_packed", "hierarchical",
         ("--space-sharing",)),
)


@dataclass
class Result:
    value: float = float("nan")    # the case's metric
    wall: float = float("nan")
    note: str = ""
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Setup:
    gavel: Path
    python: str
    throughputs: Path
    rate: float
    window: tuple[int, int]
    static_jobs: int
    seed: int
    timeout: float
    passthrough: tuple = ()


def _run(command: list[str], cwd: Path, timeout: float, env=None) -> tuple[float, str, str]:
    """(wall seconds, output, "" or the last line of a failed run's output)."""
    started = time.perf_counter()
    out = subprocess.run(["nice", *command], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=timeout)
    wall = time.perf_counter() - started
    error = ""
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["(no output)"]
        error = f"exit {out.returncode}: {tail[0][:160]}"
    return wall, out.stdout + out.stderr, error


def _found(pattern: str, text: str, scale: float = 1.0) -> float:
    hit = re.findall(pattern, text)
    return float(hit[-1]) * scale if hit else float("nan")


def gavel_command(case: Case, s: Setup, prices_dir: Path) -> list[str]:
    static = case.metric == "makespan"
    first, end = (0, s.static_jobs) if static else s.window
    command = [s.python, "scripts/drivers/simulate_scheduler_with_generated_jobs.py",
               "-c", "36:36:36", "-p", case.gavel, "-l", "0" if static else repr(3600.0 / s.rate),
               "-s", str(first), "-e", str(end), "--seed", str(s.seed), "-i", "360", "-v",
               "--throughputs_file", str(s.throughputs)]
    if case.metric == "cost":
        command += ["--per_instance_type_prices_dir", str(prices_dir), "--available_clouds", "gcp"]
    if case.slos:
        command += ["--assign_SLOs"]
    return command


def run_gavel(case: Case, s: Setup, prices_dir: Path) -> Result:
    try:
        wall, out, error = _run(gavel_command(case, s, prices_dir), s.gavel, s.timeout)
    except subprocess.TimeoutExpired:
        return Result(note=f"Gavel over {s.timeout:.0f} s")
    jct = _found(r"average JCT=([0-9.]+)", out, 1 / 3600)
    if math.isnan(jct):   # the driver prints its summary line last; the scheduler's own line before
        jct = _found(r"Average job completion time: ([0-9.]+) seconds", out, 1 / 3600)
    extra = {"jct": jct, "slo_violations": _found(r"num_SLO_violations=(\d+)", out)}
    value = {"jct": jct,
             "makespan": _found(r"Total duration: ([0-9.]+) seconds", out, 1 / 3600),
             "cost": window_cost(out, s.window)}[case.metric]
    return Result(value, wall, note=f"Gavel: {error}" if error else "", extra=extra)


def window_cost(out: str, window: tuple[int, int]) -> float:
    """Gavel's cost of the window's jobs: the last "Job N cost so far: $X" of each.

    Its total (`total_cost=`) counts every job of the run, those that arrived
    after the window and are still running too; ours counts the window's.
    """
    last: dict[int, float] = {}
    for job, cost in re.findall(r"Job (\d+) cost so far: \$([0-9.]+)", out):
        last[int(job)] = float(cost)
    chosen = [last[i] for i in range(*window) if i in last]
    return sum(chosen) if chosen else float("nan")


def slo_trace(s: Setup, path: Path) -> None:
    """Gavel's generated jobs with the SLOs its generator assigns, as a trace file for ours.

    Gavel draws one uniform number per job from `random.Random(seed + 6)`:
    below 0.33 the SLO is 1.2 x the job's duration, below 0.67 2 x, else 10 x
    (utils.generate_job); its deadline is that plus the arrival time, so the
    JCT limit is the factor times the duration, the trace file's SLO field.
    """
    sys.path.insert(0, str(ROOT))
    from slurm_gavel.estimator.table import ThroughputTable
    from slurm_gavel.sim.workloads import iter_gavel_trace, write_trace
    table = ThroughputTable.from_gavel_json(s.throughputs)
    ref = table.solo_by_type["v100"]
    slo_rng = random.Random(s.seed + 6)
    jobs = []
    # Gavel goes on generating until the window is done; twice the window's end covers it
    for job, _ in zip(iter_gavel_trace(table, s.rate, seed=s.seed), range(2 * s.window[1])):
        r = slo_rng.uniform(0, 1)
        factor = 1.2 if r < 0.33 else 2.0 if r < 0.67 else 10.0
        duration = job.total_steps / ref[(job.job_type, job.scale_factor)]
        jobs.append(replace(job, slo=factor * duration))
    write_trace(path, jobs)


def ours_command(case: Case, s: Setup, trace: Path | None) -> list[str]:
    command = [sys.executable, "-m", "slurm_gavel", "simulate", "--policy", case.ours, *case.flags,
               "--throughputs", str(s.throughputs), "--gpus-per-node", "36", "--json", "--quiet"]
    if case.metric == "makespan":
        command += ["--generator", "gavel", "--jobs", str(s.static_jobs),
                    "--window", f"0:{s.static_jobs}", "--seed", str(s.seed)]
    elif trace is not None:
        command += ["--trace", str(trace), "--window", f"{s.window[0]}:{s.window[1]}"]
    else:
        command += ["--generator", "gavel", "--rate", repr(s.rate), "--seed", str(s.seed),
                    "--window", f"{s.window[0]}:{s.window[1]}"]
    if case.metric == "cost":
        command += ["--prices", GCP_PRICES]
    return command + list(s.passthrough)


def run_ours(case: Case, s: Setup, trace: Path | None) -> Result:
    try:
        wall, out, error = _run(ours_command(case, s, trace), ROOT, s.timeout,
                                dict(os.environ, PYTHONPATH=str(ROOT)))
    except subprocess.TimeoutExpired:
        return Result(note=f"ours over {s.timeout:.0f} s")
    if error:
        return Result(wall=wall, note=f"ours: {error}")
    summary = json.loads(out[out.index("{"):])
    extra = {"jct": summary.get("average_jct_hours", float("nan")),
             "slo_violations": summary.get("slo_violations", float("nan"))}
    value = {"jct": summary.get("average_jct_hours"), "makespan": summary.get("makespan_hours"),
             "cost": summary.get("cost")}[case.metric]
    return Result(float("nan") if value is None else float(value), wall, extra=extra)


UNITS = {"jct": "avg JCT (h)", "makespan": "makespan (h)", "cost": "cost ($)"}


def row(case: Case, g: Result, o: Result) -> str:
    ratio = o.value / g.value if g.value and not math.isnan(g.value) else float("nan")
    notes = [n for n in (g.note, o.note) if n]
    if case.metric == "cost":
        notes.append(f"avg JCT {g.extra.get('jct', float('nan')):.2f} / {o.extra.get('jct', float('nan')):.2f} h")
    if case.slos:
        notes.append(f"SLO violations {g.extra.get('slo_violations', float('nan')):.0f} / "
                     f"{o.extra.get('slo_violations', float('nan')):.0f}")
    return (f"| {case.name} | {case.gavel} | {UNITS[case.metric]} | {g.value:.2f} | {o.value:.2f} | "
            f"{ratio:.3f} | {g.wall:.1f} | {o.wall:.1f} | {'; '.join(notes)} |")


HEADER = ("| case | Gavel's policy | judged by | Gavel | ours | ours / Gavel | Gavel wall s | ours wall s | notes |\n"
          "|---|---|---|---:|---:|---:|---:|---:|---|")


def setup_key(s: Setup) -> dict:
    """What makes two runs of a case the same measurement (the results file's key, with the case)."""
    return {"rate": s.rate, "window": list(s.window), "static_jobs": s.static_jobs, "seed": s.seed,
            "throughputs": s.throughputs.name, "passthrough": list(s.passthrough)}


def _plain(x):
    """JSON has no NaN: a missing figure is null in the file."""
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


def _result(d: dict) -> Result:
    nan = float("nan")
    return Result(nan if d.get("value") is None else float(d["value"]),
                  nan if d.get("wall") is None else float(d["wall"]), d.get("note", ""),
                  {k: nan if v is None else v for k, v in d.get("extra", {}).items()})


def record(case: Case, s: Setup, g: Result, o: Result, commit: str) -> dict:
    """One results-file line: a finished case, both sides."""
    side = lambda r: _plain({"value": r.value, "wall": r.wall, "note": r.note, "extra": r.extra})  # noqa: E731
    return {"case": case.name, "gavel_policy": case.gavel, "ours_policy": case.ours,
            "flags": list(case.flags), "metric": case.metric, "setup": setup_key(s),
            "gavel": side(g), "ours": side(o), "commit": commit,
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def read_results(path: Path) -> list[dict]:
    """The file's records, oldest first (none if it does not exist yet)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def done(records: list[dict], case: Case, s: Setup) -> bool:
    key = setup_key(s)
    return any(r["case"] == case.name and r["setup"] == key for r in records)


def render(records: list[dict]) -> str:
    """The markdown table of the records: one row per case and setup (the latest), in CASES' order."""
    latest: dict[tuple, dict] = {}
    for r in records:
        latest[(r["case"], json.dumps(r["setup"], sort_keys=True))] = r
    order = {c.name: i for i, c in enumerate(CASES)}
    by_name = {c.name: c for c in CASES}
    lines = [HEADER]
    for (name, _), r in sorted(latest.items(), key=lambda kv: (order.get(kv[0][0], len(order)),
                                                                 kv[0][1])):
        case = by_name.get(name) or Case(name, r["gavel_policy"], r["ours_policy"],
                                          tuple(r.get("flags", ())), r["metric"])
        lines.append(row(case, _result(r["gavel"]), _result(r["ours"])))
    return "\n".join(lines) + "\n"


def our_commit() -> str:
    """HEAD of ours, "+dirty" when slurm_gavel/ or bench/ has uncommitted changes."""
    def git(*a):
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no", "--",
                                   "slurm_gavel", "bench") else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gavel", type=Path, help="Gavel's scheduler/ folder")
    parser.add_argument("--gavel-python", help="a Python with Gavel's requirements")
    parser.add_argument("--throughputs", type=Path, default=gavel_data("simulation_throughputs.json"))
    parser.add_argument("--rate", type=float, default=2.5, help="jobs per hour (default 2.5)")
    parser.add_argument("--window", default="200:300", help="job ids measured (default 200:300)")
    parser.add_argument("--static-jobs", type=int, default=100,
                        help="jobs at time 0 for the makespan cases (default 100)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", help="comma-separated case names or prefixes (default: all)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per simulator run")
    parser.add_argument("--markdown", type=Path,
                        help="append each row to FILE as it comes (with --results: rewrite it whole)")
    parser.add_argument("--results", type=Path,
                        help="JSON lines, one per finished case; cases already there are skipped")
    parser.add_argument("--render", action="store_true",
                        help="write the --results file's table (to --markdown or stdout), run nothing")
    args, passthrough = parser.parse_known_args()
    if args.render:
        if not args.results:
            parser.error("--render needs --results")
        table = render(read_results(args.results))
        if args.markdown:
            args.markdown.write_text(table)
        else:
            print(table, end="")
        return 0
    if not args.gavel or not args.gavel_python:
        parser.error("--gavel and --gavel-python are needed to run cases")
    first, end = (int(x) for x in args.window.split(":"))
    setup = Setup(args.gavel.resolve(), args.gavel_python, args.throughputs.resolve(), args.rate,
                  (first, end), args.static_jobs, args.seed, args.timeout, tuple(passthrough))
    if not setup.throughputs.exists():
        print(f"throughput file not found: {setup.throughputs} (pass --throughputs)", file=sys.stderr)
        return 2
    wanted = [c for c in CASES if not args.cases
              or any(c.name.replace(" ", "_").startswith(p.strip()) or c.name.startswith(p.strip())
                     for p in args.cases.split(","))]
    print(f"cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}; rate {setup.rate} jobs/h, "
          f"window {first}:{end}, static {setup.static_jobs} jobs, seed {setup.seed}")
    print(HEADER, flush=True)
    commit = our_commit()
    with tempfile.TemporaryDirectory(prefix="gavel-policies-") as tmp:
        prices = Path(tmp) / "prices"
        (prices / "aws" / "logs" / "us-east-1").mkdir(parents=True)
        (prices / "azure" / "logs").mkdir(parents=True)
        trace = None
        for case in wanted:
            if args.results and done(read_results(args.results), case, setup):
                print(f"| {case.name} | (in {args.results}: skipped) |", flush=True)
                continue
            if case.slos and trace is None:
                trace = Path(tmp) / "slo.trace"
                slo_trace(setup, trace)
            g = run_gavel(case, setup, prices)
            o = run_ours(case, setup, trace if case.slos else None)
            line = row(case, g, o)
            print(line, flush=True)
            if args.results:
                args.results.parent.mkdir(parents=True, exist_ok=True)
                with open(args.results, "a") as f:
                    f.write(json.dumps(record(case, setup, g, o, commit)) + "\n")
                if args.markdown:
                    args.markdown.write_text(render(read_results(args.results)))
            elif args.markdown:
                with open(args.markdown, "a") as f:
                    f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

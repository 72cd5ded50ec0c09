"""Simulation experiments: one run from plain settings, sweeps over policies x rates x seeds.

`RunConfig` is plain, picklable data, so a sweep can hand runs to worker
processes; `run()` turns one into a summary (see simulator.summarize).
Also the outputs: per-job CSV, the JCT CDF plot, and the sweep's table and
plot of average JCT against input rate (the paper's Figure 9 shape).
"""
from __future__ import annotations

import csv
import io
import itertools
import math
import os
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ..core.errors import InputError
from .simulator import JobResult, Simulation, simulate, summarize
from ..estimator.table import ThroughputTable
from .workloads import TraceJob, iter_trace, read_trace
from ..core.engine import (DEFAULT_HYSTERESIS, DEFAULT_LEASE_LOAD_EXPONENT, DEFAULT_MAX_LEASE_SCALE,
                           DEFAULT_MOVE_HYSTERESIS,
                           MEASURED_RESTART_SECONDS)
from ..core.files import atomic_write

DEFAULT_CLUSTER = {"v100": 36, "p100": 36, "k80": 36}


@dataclass(frozen=True)
class RunConfig:
    """Everything one simulation needs, as plain values."""

    policy: str
    throughputs: str                         # path of a Gavel-format throughput table
    cluster: tuple[tuple[str, int], ...] = tuple(DEFAULT_CLUSTER.items())
    agnostic: bool = False
    space_sharing: bool = False
    max_pair_gpus: int | None = None         # pairs of jobs of at most this many GPUs (1: as on Slurm; None: any)
    trace: str | None = None                 # a trace file; else a generated workload
    rate: float | None = None                # jobs per hour (None: all jobs at time 0)
    jobs: int | None = None                  # how many jobs to generate (None: as many as the window needs)
    multi_gpu: bool = False                  # continuous-multiple scale factors
    generator: str = "ours"                  # workloads.GENERATORS: ours, or exactly Gavel's jobs
    seed: int = 0
    round_seconds: float = 360.0
    window: tuple[int, int] | None = None
    gpus_per_node: int = 4
    restart_seconds: float = MEASURED_RESTART_SECONDS    # charged at each start and resume
    solver_delay: float = 0.0
    prices: tuple[tuple[str, float], ...] = ()
    max_rounds: int | None = None
    reset_seconds: float = 1920.0
    hysteresis: float = DEFAULT_HYSTERESIS    # mechanism: how clearly behind a job must be to take a GPU
    work_conserving: bool = True              # mechanism: idle GPUs go to jobs without a share there
    move_hysteresis: float = DEFAULT_MOVE_HYSTERESIS   # mechanism: how far behind a running job must be to move
    carry_owed: bool = True                   # mechanism: what jobs were owed survives a ledger reset
    max_preemptions: int = 0                  # mechanism: jobs preempted a round at most (0: no cap)
    lease_load_exponent: float = DEFAULT_LEASE_LOAD_EXPONENT   # mechanism: leases grow with the load
    max_lease_scale: float = DEFAULT_MAX_LEASE_SCALE           # mechanism: by this factor at most
    mid_round_starts: bool = True             # a job arriving while GPUs are idle starts on them at once

    @property
    def label(self) -> str:
        return self.policy + ("_agnostic" if self.agnostic else "") + ("_ss" if self.space_sharing else "")


def workload(config: RunConfig, table: ThroughputTable) -> Iterable[TraceJob]:
    """The jobs of a run: a trace file, or the generator (finite or as long as needed)."""
    if config.trace is not None:
        jobs = read_trace(config.trace)
        for i, job in enumerate(jobs):
            if not table.solo(job.job_type, job.scale_factor):
                raise InputError(f"{config.trace}: job {i}",
                                 f"{job.job_type!r} at scale factor {job.scale_factor} is not in "
                                 f"the throughput table {config.throughputs}")
        return sorted(jobs, key=lambda j: j.arrival_time) if _unsorted(jobs) else jobs
    if config.jobs is None and config.window is None:
        raise InputError("--jobs", "give --jobs, --window or --trace")
    if config.rate is None and config.jobs is None:
        raise InputError("--jobs", "a static workload (no --rate) needs --jobs")
    stream = iter_trace(table, config.rate, config.multi_gpu, config.seed, generator=config.generator)
    return itertools.islice(stream, config.jobs) if config.jobs is not None else stream


def _unsorted(jobs: Sequence[TraceJob]) -> bool:
    return any(b.arrival_time < a.arrival_time for a, b in zip(jobs, jobs[1:]))


def simulate_config(config: RunConfig, progress=None) -> tuple[Simulation, ThroughputTable]:
    from ..policies import make_policy

    table = ThroughputTable.from_gavel_json(config.throughputs)
    policy = make_policy(config.policy, agnostic=config.agnostic, space_sharing=config.space_sharing)
    if config.window is not None and config.jobs is not None and config.window[1] > config.jobs:
        raise InputError("--window", f"ends at job {config.window[1]} but only {config.jobs} jobs are generated")
    sim = simulate(workload(config, table), table, dict(config.cluster), policy,
                   round_seconds=config.round_seconds, window=config.window,
                   gpus_per_node=config.gpus_per_node, restart_seconds=config.restart_seconds,
                   solver_delay=config.solver_delay, space_sharing=config.space_sharing,
                   prices=dict(config.prices), max_rounds=config.max_rounds,
                   reset_seconds=config.reset_seconds, progress=progress,
                   hysteresis=config.hysteresis, work_conserving=config.work_conserving,
                   move_hysteresis=config.move_hysteresis, carry_owed=config.carry_owed,
                   lease_load_exponent=config.lease_load_exponent, max_lease_scale=config.max_lease_scale,
                   mid_round_starts=config.mid_round_starts, max_pair_gpus=config.max_pair_gpus,
                   max_preemptions=config.max_preemptions)
    return sim, table


def check_config(config: RunConfig) -> None:
    """Raise InputError for what would fail in every run of a sweep (table, cluster, trace)."""
    from .simulator import SimulatedCluster
    from ..core.clock import SimulatedClock

    table = ThroughputTable.from_gavel_json(config.throughputs)
    SimulatedCluster([], table, dict(config.cluster), SimulatedClock(), config.gpus_per_node,
                     max_pair_gpus=config.max_pair_gpus)
    if config.window is not None and config.jobs is not None and config.window[1] > config.jobs:
        raise InputError("--window", f"ends at job {config.window[1]} but only {config.jobs} jobs are generated")
    if config.trace is not None:
        workload(config, table)


def run(config: RunConfig, progress=None) -> dict:
    """One simulation's summary, with its settings."""
    sim, table = simulate_config(config, progress)
    summary = summarize(sim, table, config.window, dict(config.prices))
    return {"policy": config.label, "rate": config.rate, "seed": config.seed, **summary}


def sweep(base: RunConfig, policies: Sequence[tuple[str, bool]], rates: Sequence[float],
          seeds: Sequence[int], processes: int | None = None,
          on_result: Callable[[dict], None] | None = None) -> list[dict]:
    """Every (policy, agnostic) x rate x seed, in worker processes; rows in input order."""
    configs = [replace(base, policy=p, agnostic=a, rate=r, seed=s)
               for (p, a), r, s in itertools.product(policies, rates, seeds)]
    processes = processes or min(len(configs), os.cpu_count() or 1)
    if processes <= 1:
        rows = []
        for c in configs:
            rows.append(run(c))
            if on_result:
                on_result(rows[-1])
        return rows
    with ProcessPoolExecutor(max_workers=processes) as pool:
        futures = [pool.submit(run, c) for c in configs]
        rows = []
        for f in futures:
            rows.append(f.result())
            if on_result:
                on_result(rows[-1])
    return rows


# -- outputs ---------------------------------------------------------------------
JOB_FIELDS = ("id", "job_type", "scale_factor", "total_steps", "steps_done", "arrival", "first_start",
              "finish", "jct", "starts", "weight", "slo", "mean_active_jobs")


def jobs_csv(results: Iterable[JobResult], worker_types: Sequence[str]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(list(JOB_FIELDS) + [f"seconds_{wt}" for wt in worker_types])
    for r in sorted(results, key=lambda r: int(r.id) if r.id.isdigit() else r.id):
        row = []
        for name in JOB_FIELDS:
            value = getattr(r, name)
            row.append("" if value is None or (isinstance(value, float) and math.isnan(value)) else
                       (repr(value) if isinstance(value, float) else value))
        row += [repr(float(r.seconds.get(wt, 0.0))) for wt in worker_types]
        writer.writerow(row)
    return out.getvalue()


def rows_csv(rows: Sequence[dict]) -> str:
    """A sweep's table: one line per run, the headline numbers."""
    fields = ("policy", "rate", "seed", "average_jct_hours", "makespan_hours", "utilization_total",
              "allocation_gap", "finished", "jobs", "complete", "wall_seconds")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(fields)
    for row in rows:
        writer.writerow(["" if row.get(f) is None else row.get(f) for f in fields])
    return out.getvalue()


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise InputError("--plot", "needs matplotlib: pip install 'slurm-gavel[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_jct_cdf(curves: dict[str, Sequence[float]], path, title: str = "") -> None:
    """CDF of job completion times (hours), one curve per label."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, jcts in curves.items():
        values = sorted(jcts)
        if values:
            ax.plot(values, [(i + 1) / len(values) for i in range(len(values))], label=label)
    ax.set_xscale("log")
    _finish(fig, ax, plt, path, "JCT (hours)", "fraction of jobs", title)


def plot_sweep(rows: Sequence[dict], path, title: str = "") -> None:
    """Average JCT against input rate, one line per policy (mean over seeds)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    by_policy: dict[str, dict[float, list[float]]] = {}
    for row in rows:
        if row.get("average_jct_hours") is None:
            continue
        by_policy.setdefault(row["policy"], {}).setdefault(row["rate"], []).append(row["average_jct_hours"])
    for label, points in by_policy.items():
        rates = sorted(points)
        ax.plot(rates, [sum(points[r]) / len(points[r]) for r in rates], marker="o", label=label)
    _finish(fig, ax, plt, path, "input job rate (jobs/hour)", "average JCT (hours)", title)


def _finish(fig, ax, plt, path, xlabel: str, ylabel: str, title: str):
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title)
    _save(fig, plt, path)


def _save(fig, plt, path):
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.", suffix=".png")
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=100, bbox_inches="tight")
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)


__all__ = ["DEFAULT_CLUSTER", "RunConfig", "check_config", "atomic_write", "jobs_csv", "plot_jct_cdf", "plot_sweep",
           "rows_csv", "run", "simulate_config", "sweep", "workload"]

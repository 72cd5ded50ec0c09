"""Workloads: job traces and synthetic trace generation.

This module owns the simulated jobs that feed the policies: `TraceJob` with `read_trace` /
`write_trace` for Gavel's 10-field tab-separated trace format (`read_trace`
also reads the older 7-field layout of Gavel's Philly-derived traces), the synthetic
trace generators (`generate_trace`: ours, Gavel's recipe with our own random streams, and
`generator="gavel"`, which draws exactly the jobs Gavel's own simulator draws
for a seed), and `policy_input`,
which turns a trace at a moment in time into a `PolicyInput` (throughputs
from a `ThroughputTable`, slurm_gavel.estimator.table).  Plain
dataclasses and numpy only; nothing here knows about Slurm.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import numpy as np

from ..core.errors import InputError
from ..core.files import atomic_write
from ..core.model import PolicyInput
from ..estimator.table import ThroughputTable


# ---------------------------------------------------------------------------
# Traces
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class TraceJob:
    """One line of a Gavel trace."""

    job_type: str
    command: str
    working_directory: str
    num_steps_arg: str
    needs_data_dir: bool
    total_steps: float                # an integer in files; Gavel's generator keeps the exact product
    scale_factor: int
    priority_weight: float = 1.0
    slo: float | None = None          # seconds; None = no SLO (-1 in the file)
    arrival_time: float = 0.0         # seconds
    entity: str = ""                  # not in trace files: a replayed job's account (sim/replay.py)


TRACE_FIELDS = ("job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir",
                "total_steps", "scale_factor", "priority_weight", "slo", "arrival_time")
# Gavel's older layout (its 2019 Philly-derived traces, scheduler/traces/msr): no working
# directory, weight or SLO, and the arrival time before the scale factor.  A line with
# scale factor 0 asked for no GPU; Gavel's parser of that layout skipped it, and so do we.
OLD_TRACE_FIELDS = ("job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps",
                    "arrival_time", "scale_factor")


def read_trace(path) -> list[TraceJob]:
    path = Path(path)
    try:
        with open(path, newline="") as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        raise InputError(f"{path}", "file not found") from None
    except OSError as e:
        raise InputError(f"{path}", f"cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}", "not a UTF-8 text file") from None
    if lines and lines[-1] == "":
        lines.pop()
    jobs = []
    for number, line in enumerate(lines, start=1):
        if line.endswith("\r"):
            line = line[:-1]
        if not line.strip():
            continue
        job = _parse_trace_line(line, f"{path}:{number}")
        if job is not None:
            jobs.append(job)
    return jobs


def _parse_trace_line(line: str, where: str) -> TraceJob | None:
    """One line in either layout, told apart by its number of fields (None: a 0-GPU old line)."""
    parts = line.split("\t")
    if len(parts) == len(TRACE_FIELDS):
        job_type, command, wd, nsa, ndd, steps, sf, weight, slo, arrival = parts
        old = False
    elif len(parts) == len(OLD_TRACE_FIELDS):
        job_type, command, nsa, ndd, steps, arrival, sf = parts
        wd, weight, slo, old = "", "1", "-1", True
    else:
        raise InputError(where, f"expected {len(TRACE_FIELDS)} tab-separated fields "
                                f"({', '.join(TRACE_FIELDS)}) or Gavel's older {len(OLD_TRACE_FIELDS)} "
                                f"({', '.join(OLD_TRACE_FIELDS)}), got {len(parts)}")

    def integer(name, text, minimum):
        try:
            v = int(text)
        except ValueError:
            raise InputError(where, f"{name} must be an integer, got {text!r}") from None
        if v < minimum:
            raise InputError(where, f"{name} must be >= {minimum}, got {v}")
        return v

    def real(name, text):
        try:
            v = float(text)
        except ValueError:
            raise InputError(where, f"{name} must be a number, got {text!r}") from None
        if not math.isfinite(v):
            raise InputError(where, f"{name} must be finite, got {text!r}")
        return v

    if not job_type:
        raise InputError(where, "job_type is empty")
    if ndd not in ("0", "1"):
        raise InputError(where, f"needs_data_dir must be 0 or 1, got {ndd!r}")
    total_steps = integer("total_steps", steps, 0)
    scale_factor = integer("scale_factor", sf, 0 if old else 1)
    w = real("priority_weight", weight)
    if w <= 0:
        raise InputError(where, f"priority_weight must be > 0, got {weight!r}")
    s = real("slo", slo)
    if s == -1:
        s = None
    elif s <= 0:
        raise InputError(where, f"slo must be > 0 or -1 (none), got {slo!r}")
    t = real("arrival_time", arrival)
    if t < 0:
        raise InputError(where, f"arrival_time must be >= 0, got {arrival!r}")
    if scale_factor == 0:
        return None
    return TraceJob(job_type, command, wd, nsa, ndd == "1", total_steps, scale_factor, w, s, t)


def _fmt_number(v: float) -> str:
    """Integers as integers (Gavel writes weights and arrival times that way), else exact repr."""
    v = float(v)
    return str(int(v)) if v.is_integer() else repr(v)


def _fmt_slo(v: float | None) -> str:
    if v is None:
        return "%f" % -1.0
    text = "%f" % v           # Gavel's own format; exact repr if that would lose precision
    return text if float(text) == v else repr(float(v))


def format_trace_line(job: TraceJob, where: str = "job") -> str:
    for name in ("job_type", "command", "working_directory", "num_steps_arg"):
        value = getattr(job, name)
        if "\t" in value or "\n" in value or "\r" in value:
            raise InputError(f"{where}.{name}", "must not contain tabs or line breaks")
    return "\t".join((job.job_type, job.command, job.working_directory, job.num_steps_arg,
                      "1" if job.needs_data_dir else "0", str(int(job.total_steps)),
                      str(int(job.scale_factor)), _fmt_number(job.priority_weight),
                      _fmt_slo(job.slo), _fmt_number(job.arrival_time)))


def write_trace(path, jobs: Sequence[TraceJob]) -> None:
    text = "".join(format_trace_line(j, f"jobs[{i}]") + "\n" for i, j in enumerate(jobs))
    atomic_write(Path(path), text)


# ---------------------------------------------------------------------------
# Synthetic traces (Gavel's continuous workloads)
# ---------------------------------------------------------------------------
SCALE_FACTORS = (1, 2, 4, 8)
SCALE_FACTOR_PROBS = (0.7, 0.1, 0.15, 0.05)


GENERATORS = ("ours", "gavel")


def generate_trace(table: ThroughputTable, n_jobs: int | None = None,
                   rate_per_hour: float | None = None, duration_hours: float | None = None,
                   multi_gpu: bool = False, seed: int = 0,
                   reference_type: str = "v100", generator: str = "ours") -> list[TraceJob]:
    """Gavel's synthetic workload: uniform job types, heavy-tailed durations, Poisson arrivals.

    Stops after `n_jobs` jobs, or (with a rate) at the first arrival at or after
    `duration_hours`, whichever comes first.  Without a rate every job arrives
    at time 0 (a static trace) and `n_jobs` is required.  `generator` picks
    the stream: "ours" (`iter_trace`) or "gavel" (`iter_gavel_trace`).
    """
    if n_jobs is None and (duration_hours is None or rate_per_hour is None):
        raise InputError("n_jobs", "give n_jobs, or rate_per_hour together with duration_hours")
    if n_jobs is not None and n_jobs < 0:
        raise InputError("n_jobs", f"must be >= 0, got {n_jobs}")
    limit = None if duration_hours is None else duration_hours * 3600.0
    jobs: list[TraceJob] = []
    if n_jobs == 0:
        return jobs
    for job in iter_trace(table, rate_per_hour, multi_gpu, seed, reference_type, generator):
        if limit is not None and rate_per_hour is not None and job.arrival_time >= limit:
            break
        jobs.append(job)
        if n_jobs is not None and len(jobs) >= n_jobs:
            break
    return jobs


def iter_trace(table: ThroughputTable, rate_per_hour: float | None = None,
               multi_gpu: bool = False, seed: int = 0,
               reference_type: str = "v100", generator: str = "ours") -> Iterator[TraceJob]:
    """The endless stream behind `generate_trace` (a simulation takes what it needs)."""
    if generator not in GENERATORS:
        raise InputError("generator", f"must be one of {', '.join(GENERATORS)}, got {generator!r}")
    if rate_per_hour is not None and not rate_per_hour > 0:
        raise InputError("rate_per_hour", f"must be > 0, got {rate_per_hour}")
    if reference_type not in table.worker_types:
        raise InputError("reference_type", f"{reference_type!r} is not in the table "
                                           f"(types: {', '.join(table.worker_types)})")
    if generator == "gavel":
        return iter_gavel_trace(table, rate_per_hour, multi_gpu, seed, reference_type)
    ref = table.solo_by_type[reference_type]
    models = [m for m in table.models(1) if ref.get((m, 1), 0) > 0]
    if not models:
        raise InputError("table", f"no scale-factor-1 model has a throughput on {reference_type}")
    available = {sf: {m for m in models if ref.get((m, sf), 0) > 0} for sf in SCALE_FACTORS}
    if multi_gpu:
        for sf in SCALE_FACTORS:
            if not available[sf]:
                raise InputError("table", f"no model has a scale-factor-{sf} throughput on {reference_type}")
    return _trace_stream(ref, models, available, rate_per_hour, multi_gpu, seed)


def _trace_stream(ref, models, available, rate_per_hour, multi_gpu, seed):
    # four independent streams, so that e.g. changing the rate keeps job types and durations
    type_rng, dur_rng, sf_rng, arr_rng = (np.random.default_rng(s)
                                          for s in np.random.SeedSequence(seed).spawn(4))
    t = 0.0
    first = True
    while True:
        if not first and rate_per_hour is not None:
            t += float(arr_rng.exponential(3600.0 / rate_per_hour))
        first = False
        sf = 1
        if multi_gpu:
            sf = int(SCALE_FACTORS[sf_rng.choice(len(SCALE_FACTORS), p=SCALE_FACTOR_PROBS)])
        while True:
            model = models[int(type_rng.integers(len(models)))]
            if model in available[sf]:
                break
        if dur_rng.random() < 0.8:
            x = dur_rng.uniform(1.5, 3.0)
        else:
            x = dur_rng.uniform(3.0, 4.0)
        duration = 60.0 * 10.0 ** x
        steps = int(ref[(model, sf)] * duration)
        yield TraceJob(job_type=model, command="", working_directory="", num_steps_arg="",
                       needs_data_dir=False, total_steps=steps, scale_factor=sf,
                       priority_weight=1.0, slo=None, arrival_time=t)


# ---------------------------------------------------------------------------
# Gavel's own generator (--generator gavel)
# ---------------------------------------------------------------------------
# Gavel's job table, in its order (scheduler/job_table.py): the order matters,
# since a job type is drawn as an index into it.  True: the type can run on
# several GPUs ("distributed"), so only these get scale factors above 1.
def _batch_sizes(name: str, sizes: Sequence[int], distributed: bool):
    return [(f"{name} (batch size {b})", distributed) for b in sizes]


GAVEL_JOB_TYPES: tuple[tuple[str, bool], ...] = tuple(
    _batch_sizes("ResNet-18", (16, 32, 64, 128, 256), True)
    + _batch_sizes("ResNet-50", (16, 32, 64, 128), True)
    + _batch_sizes("Transformer", (16, 32, 64, 128, 256), True)
    + _batch_sizes("LM", (5, 10, 20, 40, 80), True)
    + _batch_sizes("Recommendation", (512, 1024, 2048, 4096, 8192), False)
    + [("A3C", False), ("CycleGAN", False)])


def iter_gavel_trace(table: ThroughputTable, rate_per_hour: float | None = None,
                     multi_gpu: bool = False, seed: int = 0,
                     reference_type: str = "v100") -> Iterator[TraceJob]:
    """Exactly the jobs (type, steps, scale factor, arrival) Gavel's simulator draws for `seed`.

    The facts, from Gavel's scheduler/scheduler.py and scheduler/utils.py:
    the scheduler seeds a `random.Random` with seed + 2 for jobs and another
    with seed + 3 for arrivals.  Per job, from the job generator, in this
    order: a scale factor from one uniform draw (always drawn, even for a
    1-GPU workload, which then sets it to 1); a duration (one draw: >= 0.8 ->
    60 * 10**U(3, 4) s, else 60 * 10**U(1.5, 3) s); a job type, drawn as an
    index into its job table until the type is distributed or the scale
    factor is 1.  Steps = duration * the reference type's throughput (not
    rounded).  The first job arrives at 0, each next one
    -ln(1 - u) / (1 / lam) seconds after the previous, lam = 3600 / rate.
    Without a rate every job arrives at 0 (Gavel's lam = 0).
    """
    ref = table.solo_by_type[reference_type]
    needed = [(m, 1) for m, _ in GAVEL_JOB_TYPES]
    if multi_gpu:
        needed += [(m, sf) for m, distributed in GAVEL_JOB_TYPES if distributed for sf in (2, 4, 8)]
    missing = [k for k in needed if not ref.get(k, 0) > 0]
    if missing:
        model, sf = missing[0]
        raise InputError("table", f"Gavel's generator needs every job type of its table on "
                                  f"{reference_type}; {model!r} at scale factor {sf} has no throughput "
                                  f"({len(missing)} missing)")
    return _gavel_stream(ref, rate_per_hour, multi_gpu, seed)


def _gavel_scale_factor(r: float) -> int:
    # Gavel's thresholds, boundaries included as it tests them (0.8 -> 2, 0.95 -> 4)
    if 0.7 <= r <= 0.8:
        return 2
    if 0.8 <= r <= 0.95:
        return 4
    if r >= 0.95:
        return 8
    return 1


def _gavel_stream(ref, rate_per_hour, multi_gpu, seed):
    jobs_rng = random.Random(seed + 2)
    arrivals_rng = random.Random(seed + 3)
    # the same float operations as Gavel's, so that arrival times agree to the bit
    rate_parameter = None if rate_per_hour is None else 1.0 / (3600.0 / rate_per_hour)
    arrival = 0.0
    while True:
        sf = _gavel_scale_factor(jobs_rng.uniform(0, 1))
        if jobs_rng.random() >= 0.8:
            seconds = 60 * (10 ** jobs_rng.uniform(3, 4))
        else:
            seconds = 60 * (10 ** jobs_rng.uniform(1.5, 3))
        if not multi_gpu:
            sf = 1
        while True:
            model, distributed = jobs_rng.choice(GAVEL_JOB_TYPES)
            if sf == 1 or distributed:
                break
        yield TraceJob(job_type=model, command="", working_directory="", num_steps_arg="",
                       needs_data_dir=False, total_steps=seconds * ref[(model, sf)],
                       scale_factor=sf, priority_weight=1.0, slo=None, arrival_time=arrival)
        if rate_per_hour is not None:
            arrival = -math.log(1.0 - arrivals_rng.random()) / rate_parameter + arrival


# ---------------------------------------------------------------------------
# Trace -> PolicyInput
# ---------------------------------------------------------------------------
def policy_input(jobs: Sequence[TraceJob], table: ThroughputTable, cluster: Mapping[str, float],
                 now: float, steps_done: Mapping | None = None,
                 include_pairs: bool = False) -> PolicyInput:
    """The `PolicyInput` for the jobs that have arrived by `now` and still have steps to run.

    Job ids are the jobs' indices in `jobs` (as strings); `steps_done` may be
    keyed by that id or by the integer index.  With `include_pairs`, every two
    active jobs with the same scale factor and a measured pair become a pair row.
    """
    steps_done = steps_done or {}
    types = tuple(cluster)
    for wt in types:
        if wt not in table.worker_types:
            raise InputError(f"cluster.{wt}", "worker type is not in the throughput table")
    ids, rows, urows, sfs, weights, remaining, ages, slos, keys = [], [], [], [], [], [], [], [], []
    for i, job in enumerate(jobs):
        if job.arrival_time > now:
            continue
        done = steps_done.get(str(i), steps_done.get(i, 0))
        left = job.total_steps - done
        if left <= 0:
            continue
        solo = table.solo(job.job_type, job.scale_factor)
        if not solo:
            raise InputError(f"jobs[{i}].job_type",
                             f"{job.job_type!r} at scale factor {job.scale_factor} is not in the throughput table")
        uncons = table.unconsolidated(job.job_type, job.scale_factor)
        ids.append(str(i))
        rows.append([solo.get(wt, np.nan) for wt in types])
        urows.append([uncons.get(wt, np.nan) for wt in types])
        sfs.append(job.scale_factor)
        weights.append(job.priority_weight)
        remaining.append(left)
        ages.append(now - job.arrival_time)
        slos.append(np.nan if job.slo is None else job.slo)
        keys.append((job.job_type, job.scale_factor))
    n, k = len(ids), len(types)
    pair_jobs, pair_thr = [], []
    if include_pairs:
        for a in range(n):
            for b in range(a + 1, n):
                if sfs[a] != sfs[b]:
                    continue
                p = table.pair(keys[a][0], keys[b][0], sfs[a])
                if p:
                    pair_jobs.append((a, b))
                    pair_thr.append([p.get(wt, (np.nan, np.nan)) for wt in types])
    return PolicyInput(
        worker_types=types, counts=np.array([cluster[wt] for wt in types], dtype=float),
        job_ids=tuple(ids), throughputs=np.array(rows, dtype=float).reshape(n, k),
        scale_factors=np.array(sfs, dtype=np.int64), weights=np.array(weights, dtype=float),
        steps_remaining=np.array(remaining, dtype=float),
        time_since_arrival=np.array(ages, dtype=float), slo=np.array(slos, dtype=float),
        unconsolidated_throughputs=np.array(urows, dtype=float).reshape(n, k),
        pair_jobs=np.array(pair_jobs, dtype=np.int64).reshape(-1, 2),
        pair_throughputs=np.array(pair_thr, dtype=float).reshape(len(pair_jobs), k, 2))

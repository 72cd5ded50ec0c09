"""`slurm-gavel billing`: charge an hour on a GPU type by the work it does for the site.

This module owns the suggestion of per-partition ``TRESBillingWeights`` (``GRES/gpu=W``):
the speed of each (model, GPU count) on each type, measured by the daemon where it has a
row (its database's `measured_throughputs`, alone and consolidated) and else the throughput
table's; the site's job mix (each model weighted by the GPU-seconds its jobs received in the
daemon's database; equal weights when the database has no jobs); the slowest type (lowest
geometric-mean speed over the mix) gets weight 1, every other type the mix-weighted mean of
its speedup over the slowest one, model by model.  Billing then charges an hour on a V100
that does 3.2 times a K80's work 3.2 times as much.  A partition mixing GPU types gets no
single weight (said, with each type's).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from ..core.display import printable
from ..core.errors import InputError
from ..estimator.table import ThroughputTable
from . import gputypes

Key = tuple  # (model, scale factor)


@dataclass(frozen=True)
class TypeWeight:
    worker_type: str
    weight: float | None          # None: no model of the mix has a speed on it and the base
    models: int                   # models the mean is over
    low: float | None             # smallest and largest speedup among them
    high: float | None


@dataclass(frozen=True)
class Suggestion:
    base: str                     # the slowest type: weight 1
    weights: dict[str, TypeWeight]
    partitions: dict[str, tuple[str, ...]]     # partition -> its GPU types
    mix: dict[Key, float]                      # model -> share of the mix (sums to 1)
    sources: dict[str, int]                    # speeds used: measured / table counts
    scale: float = 1.0
    mix_from: str = "models weighted by the GPU time of their jobs"

    def lines(self) -> list[str]:
        """The slurm.conf settings: one per partition with a single GPU type."""
        out = []
        for part, types in self.partitions.items():
            w = self.weights.get(types[0]) if len(types) == 1 else None
            if w is not None and w.weight is not None:
                out.append(f'PartitionName={part} TRESBillingWeights="GRES/gpu={_fmt(w.weight * self.scale)}"')
        return out


def _fmt(v: float) -> str:
    return f"{v:.3f}".rstrip("0").rstrip(".")


def speeds(table: ThroughputTable, measured: Iterable[Mapping]) -> tuple[dict[Key, dict[str, float]], dict[str, int]]:
    """{(model, sf): {type: steps/s}}: the table's solo rows, each replaced by the daemon's
    measurement where it has one (alone, consolidated); and how many of each were used."""
    out: dict[Key, dict[str, float]] = {}
    origin: dict[tuple, str] = {}
    for wt in table.worker_types:
        for key, v in table.solo_by_type.get(wt, {}).items():
            if v > 0:
                out.setdefault(key, {})[wt] = float(v)
                origin[(key, wt)] = "table"
    for r in measured:
        try:
            key, wt, v = (str(r["model"]), int(r["scale_factor"])), str(r["worker_type"]), float(r["steps_per_second"])
        except (KeyError, TypeError, ValueError):
            continue
        if r.get("partner") or r.get("spread") or not (v > 0 and math.isfinite(v)):
            continue
        out.setdefault(key, {})[wt] = v
        origin[(key, wt)] = "measured"
    counts = {"measured": 0, "table": 0}
    for o in origin.values():
        counts[o] += 1
    return out, counts


def suggest(speed: Mapping[Key, Mapping[str, float]], mix: Mapping[Key, float],
            types: Sequence[str], partitions: Mapping[str, Sequence[str]], scale: float = 1.0) -> Suggestion:
    """Weights for `types` from the speeds of the models in `mix` ({(model, sf): weight})."""
    mix = {k: w for k, w in mix.items() if w > 0 and k in speed}
    if not mix:
        raise InputError("billing", "no model of the job mix has a throughput (table or measured)")
    total = sum(mix.values())
    mix = {k: w / total for k, w in mix.items()}

    def geo(t):                    # mix-weighted geometric mean speed relative to each model's best
        parts = [(w, math.log(speed[k][t] / max(speed[k].values()))) for k, w in mix.items()
                 if speed[k].get(t, 0) > 0]
        return math.exp(sum(w * x for w, x in parts) / sum(w for w, _ in parts)) if parts else None

    means = {t: geo(t) for t in types}
    covered = [t for t in types if means[t] is not None]
    if not covered:
        raise InputError("billing", f"no model of the mix has a speed on {', '.join(types)}")
    base = min(covered, key=lambda t: means[t])
    weights = {}
    for t in types:
        ratios = [(w, speed[k][t] / speed[k][base]) for k, w in mix.items()
                  if speed[k].get(t, 0) > 0 and speed[k].get(base, 0) > 0]
        if not ratios:
            weights[t] = TypeWeight(t, None, 0, None, None)
            continue
        weight = sum(w * r for w, r in ratios) / sum(w for w, _ in ratios)
        weights[t] = TypeWeight(t, weight, len(ratios), min(r for _, r in ratios),
                                max(r for _, r in ratios))
    return Suggestion(base, weights, {p: tuple(ts) for p, ts in partitions.items()}, mix, {}, scale)


def job_mix(store) -> dict[Key, float]:
    """{(model, sf): GPU-seconds its jobs received} from the daemon's database."""
    out: dict[Key, float] = {}
    rows = store.db.query("select j.model as model, j.scale_factor as sf, "
                          "coalesce(sum(t.seconds), 0) as seconds from jobs j "
                          "left join job_time t on t.job = j.id group by j.model, j.scale_factor")
    for r in rows:
        if r["model"] and r["sf"]:
            out[(r["model"], int(r["sf"]))] = float(r["seconds"]) * int(r["sf"])
    return out


def partition_types(nodes) -> dict[str, tuple[str, ...]]:
    """partition -> the GPU types of its nodes (SlurmNode list); partitions without typed
    GPUs left out."""
    typed = {p: tuple(sorted(t for t in ts if t)) for p, ts in gputypes.partition_types(nodes).items()}
    return {p: ts for p, ts in sorted(typed.items()) if ts}


def explain(s: Suggestion) -> list[str]:
    lines = [f"# {len(s.mix)} (model, GPU count) rows in the mix; speeds: {s.sources.get('measured', 0)} measured by "
             f"the daemon, {s.sources.get('table', 0)} from the table",
             f"# {printable(s.base)} is the slowest type: weight {_fmt(s.scale)}; another type's weight "
             f"is its mean speedup over {printable(s.base)} ({s.mix_from})"]
    for t, w in s.weights.items():
        if w.weight is None:
            lines.append(f"#   {printable(t)}: no model of the mix has a speed on it and on "
                         f"{printable(s.base)}: no weight")
        else:
            lines.append(f"#   {printable(t)}: {_fmt(w.weight * s.scale)} (mean over {w.models} rows, "
                         f"speedups {_fmt(w.low)}-{_fmt(w.high)})")
    for p, types in s.partitions.items():
        if len(types) > 1:
            lines.append(f"# partition {printable(p)} mixes {', '.join(map(printable, types))}: no single "
                         f"weight (split it by type, or bill its slowest type's weight)")
    return lines


__all__ = ["Suggestion", "TypeWeight", "explain", "job_mix", "partition_types",
           "speeds", "suggest"]

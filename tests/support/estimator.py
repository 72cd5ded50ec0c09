"""Builders for the estimator tests: a throughput table of known shapes, jobs, a few rounds of
measurement."""
from __future__ import annotations

import numpy as np

from slurm_gavel.core.backend import JobState, Measurement
from slurm_gavel.estimator.table import ThroughputTable
import json
from slurm_gavel.estimator.table import ThroughputTable
from slurm_gavel.estimator.gavel_data import gavel_data


TYPES = ("v100", "p100", "k80")


# Six reference models with different shapes across types (speedup of v100 over k80
# from 1.2x to 10x) and scales; "twin" is a new model shaped like "conv" (same
# ratios between types, 3x slower), which the reference does not know.
SHAPES = {"conv": (10.0, 5.0, 1.0), "rnn": (3.0, 2.5, 1.0), "rl": (1.2, 1.1, 1.0),
          "lm": (5.0, 4.0, 1.0), "rec": (2.0, 1.0, 1.0), "gan": (7.0, 3.0, 1.0)}


SCALE = {"conv": 4.0, "rnn": 20.0, "rl": 9.0, "lm": 2.0, "rec": 30.0, "gan": 1.5}
TWIN_SCALE = SCALE["conv"] / 3.0
_ORDER = list(SHAPES)
_FRACTIONS = np.random.default_rng(42).uniform(0.3, 0.9, size=(3, len(_ORDER), len(_ORDER)))


def _fraction(a: str, b: str, t: int) -> float:
    """A model's throughput next to another as a fraction of its own, on type t."""
    return float(_FRACTIONS[t, _ORDER.index(a), _ORDER.index(b)])


def make_table(models=tuple(SHAPES), twin: bool = False) -> ThroughputTable:
    shapes = dict(SHAPES)
    scale = dict(SCALE)
    names = list(models)
    if twin:
        shapes["twin"], scale["twin"] = SHAPES["conv"], TWIN_SCALE
        names.append("twin")
    data = {}
    for t, wt in enumerate(TYPES):
        data[wt] = {}
        for a in names:
            row = {"null": shapes[a][t] * scale[a]}
            for b in names:
                pa = "conv" if a == "twin" else a       # the twin shares like conv does
                pb = "conv" if b == "twin" else b
                row[str((b, 1))] = [_fraction(pa, pb, t) * shapes[a][t] * scale[a],
                                    _fraction(pb, pa, t) * shapes[b][t] * scale[b]]
            data[wt][str((a, 1))] = row
    return ThroughputTable.from_gavel_dict(data)


def job(i, model, sf=1) -> JobState:
    return JobState(str(i), model, sf, 0.0, 1000.0)


def measure(est, jobs_types, rounds=1):
    """Record each (job, worker type, value) once per round."""
    for _ in range(rounds):
        est.record([Measurement(j, wt, v) for j, wt, v in jobs_types])


def _observation(jobs):
    from slurm_gavel.core.backend import Observation
    return Observation(0.0, tuple(jobs), ())


GAVEL_TABLE = gavel_data("simulation_throughputs.json")


def gavel_table() -> ThroughputTable:
    """Gavel's measured throughput table (the simulator's), from the package's copy."""
    return ThroughputTable.from_gavel_json(GAVEL_TABLE)

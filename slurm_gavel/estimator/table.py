"""Throughput tables: measured steps/s per model, scale factor and worker type.

This module owns `ThroughputTable` (solo, space-sharing and unconsolidated
throughputs, read from and written to Gavel's JSON layout) and
`TableThroughputs`, the throughput source that answers straight from a table
(the simulator's oracle, and the reference rows of the estimator).
"""
from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from ..core.errors import InputError
from ..core.files import atomic_write
from ..core.inputs import _number as checked_number
from ..core.interfaces import ThroughputSource
from ..core.throughputs import JobThroughputs

UNCONSOLIDATED_SUFFIX = "_unconsolidated"

JobKey = tuple  # (model name, scale factor)


# ---------------------------------------------------------------------------
# Throughput table
# ---------------------------------------------------------------------------
@dataclass
class ThroughputTable:
    """Measured throughputs (steps/s) per (model, scale factor) and worker type.

    `solo_by_type[wt][(model, sf)]` is the throughput running alone;
    `pairs_by_type[wt][(model, sf)][(model2, sf2)]` is ``(t_model, t_model2)``
    while the two share GPUs (``(0, 0)``: they cannot).  The ``unconsolidated_*``
    maps hold the same for jobs spread over several servers, keyed by the
    base worker type.
    """

    worker_types: tuple[str, ...]
    solo_by_type: dict = field(default_factory=dict)
    pairs_by_type: dict = field(default_factory=dict)
    unconsolidated_solo_by_type: dict = field(default_factory=dict)
    unconsolidated_pairs_by_type: dict = field(default_factory=dict)
    # top-level key order of the source file, for a faithful round trip
    _key_order: tuple[str, ...] = field(default=(), repr=False, compare=False)

    # -- reading ------------------------------------------------------------
    @classmethod
    def from_gavel_json(cls, path) -> "ThroughputTable":
        path = Path(path)
        where = f"{path}"
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise InputError(where, "file not found") from None
        except OSError as e:
            raise InputError(where, f"cannot read: {e.strerror or e}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(where, f"not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
        return cls.from_gavel_dict(data, source=where)

    @classmethod
    def from_gavel_dict(cls, data, source: str = "throughputs") -> "ThroughputTable":
        if not isinstance(data, dict) or not data:
            raise InputError(source, "expected a non-empty JSON object {worker_type: {job_key: {...}}}")
        base_types: list[str] = []
        solo, pairs, usolo, upairs = {}, {}, {}, {}
        for wt, jobs in data.items():
            where = f"{source}: {wt}"
            unconsolidated = wt.endswith(UNCONSOLIDATED_SUFFIX)
            base = wt[: -len(UNCONSOLIDATED_SUFFIX)] if unconsolidated else wt
            if not base:
                raise InputError(where, "worker type name is empty")
            if not isinstance(jobs, dict):
                raise InputError(where, f"expected an object of job keys, got {type(jobs).__name__}")
            s_map, p_map = {}, {}
            for job_key, others in jobs.items():
                jk = _parse_job_key(job_key, f"{source}: {wt}: {job_key}")
                kwhere = f"{source}: {wt}: {job_key}"
                if not isinstance(others, dict):
                    raise InputError(kwhere, f"expected an object, got {type(others).__name__}")
                row = {}
                for other, value in others.items():
                    owhere = f"{kwhere}: {other}"
                    if other == "null":
                        s_map[jk] = _number(value, owhere)
                    else:
                        ok = _parse_job_key(other, owhere)
                        if not isinstance(value, list) or len(value) != 2:
                            raise InputError(owhere, "expected a pair [throughput_a, throughput_b]")
                        row[ok] = (_number(value[0], owhere), _number(value[1], owhere))
                p_map[jk] = row
            if unconsolidated:
                usolo[base], upairs[base] = s_map, p_map
            else:
                base_types.append(base)
                solo[base], pairs[base] = s_map, p_map
        for base in usolo:
            if base not in solo:
                raise InputError(f"{source}: {base}{UNCONSOLIDATED_SUFFIX}",
                                 f"no consolidated table for worker type {base!r}")
        return cls(tuple(base_types), solo, pairs, usolo, upairs, _key_order=tuple(data))

    # -- queries ------------------------------------------------------------
    def models(self, scale_factor: int = 1) -> list[str]:
        """Models with a solo throughput at `scale_factor` on some type, in table order."""
        seen: dict[str, None] = {}
        for wt in self.worker_types:
            for model, sf in self.solo_by_type.get(wt, {}):
                if sf == scale_factor:
                    seen.setdefault(model)
        return list(seen)

    def scale_factors(self, model: str) -> list[int]:
        out = {sf for wt in self.worker_types for m, sf in self.solo_by_type.get(wt, {}) if m == model}
        return sorted(out)

    def solo(self, model: str, scale_factor: int = 1) -> dict[str, float]:
        key = (model, scale_factor)
        return {wt: self.solo_by_type[wt][key] for wt in self.worker_types
                if key in self.solo_by_type.get(wt, {})}

    def unconsolidated(self, model: str, scale_factor: int = 1) -> dict[str, float]:
        key = (model, scale_factor)
        return {wt: m[key] for wt, m in self.unconsolidated_solo_by_type.items() if key in m}

    def pair(self, model_a: str, model_b: str, scale_factor: int = 1) -> dict[str, tuple[float, float]]:
        a, b = (model_a, scale_factor), (model_b, scale_factor)
        out = {}
        for wt in self.worker_types:
            row = self.pairs_by_type.get(wt, {}).get(a, {})
            if b in row:
                out[wt] = row[b]
            else:   # fall back to the mirrored entry
                mirrored = self.pairs_by_type.get(wt, {}).get(b, {}).get(a)
                if mirrored is not None:
                    out[wt] = (mirrored[1], mirrored[0])
        return out

    # -- writing ------------------------------------------------------------
    def to_gavel_dict(self) -> dict:
        def table(s_map, p_map):
            out = {}
            for jk in dict.fromkeys(list(p_map) + list(s_map)):
                row = {}
                if jk in s_map:
                    row["null"] = s_map[jk]
                for ok, (ta, tb) in p_map.get(jk, {}).items():
                    row[str(tuple(ok))] = [ta, tb]
                out[str(tuple(jk))] = row
            return out

        tables = {}
        for wt in self.worker_types:
            tables[wt] = table(self.solo_by_type.get(wt, {}), self.pairs_by_type.get(wt, {}))
        for wt in self.unconsolidated_solo_by_type:
            tables[wt + UNCONSOLIDATED_SUFFIX] = table(self.unconsolidated_solo_by_type[wt],
                                                       self.unconsolidated_pairs_by_type.get(wt, {}))
        order = [k for k in self._key_order if k in tables] + [k for k in tables if k not in self._key_order]
        return {k: tables[k] for k in order}

    def to_gavel_json(self, path) -> None:
        atomic_write(Path(path), json.dumps(self.to_gavel_dict(), indent=4) + "\n")


@lru_cache(maxsize=4096)
def _literal(text: str):
    """ast.literal_eval, kept: a table names each job key once per type and per pair (a
    file of Gavel's has 10,000 of them and a few hundred different ones)."""
    return ast.literal_eval(text)


def _parse_job_key(text, where) -> JobKey:
    try:
        value = _literal(text) if isinstance(text, str) else ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise InputError(where, "job key is not a Python tuple literal like \"('ResNet-50 (batch size 64)', 4)\"") from None
    if (not isinstance(value, tuple) or len(value) != 2 or not isinstance(value[0], str)
            or not isinstance(value[1], int) or isinstance(value[1], bool) or value[1] < 1):
        raise InputError(where, "job key must be a (model name, scale factor >= 1) tuple")
    return (value[0], value[1])


def _number(value, where) -> float:
    return checked_number(value, where, ">= 0")


class TableThroughputs(ThroughputSource):
    """Throughputs straight from a table, keyed by each job's (job_type, scale_factor)."""

    def __init__(self, table: ThroughputTable):
        self.table = table
        # worker types -> (job_type, scale_factor) -> (solo, unconsolidated) rows
        self._rows: dict[tuple[str, ...], dict[tuple, tuple[np.ndarray, np.ndarray]]] = {}
        self._pairs: dict[tuple, np.ndarray | None] = {}
        # worker types -> (row number of each (job_type, scale_factor), solo rows, unconsolidated
        # rows): `lookup` picks a whole (n, k) table with one indexing
        self._stacked: dict[tuple[str, ...], tuple[dict[tuple, int], np.ndarray, np.ndarray]] = {}

    def row(self, job_type: str, scale_factor: int, worker_types: Sequence[str]):
        rows = self._rows.setdefault(tuple(worker_types), {})
        key = (job_type, scale_factor)
        if key not in rows:
            # an unknown (model, scale factor) gets an all-NaN row: the engine
            # reports such a job as unschedulable instead of failing the round
            solo = self.table.solo(job_type, scale_factor)
            spread = self.table.unconsolidated(job_type, scale_factor)
            rows[key] = (np.array([solo.get(wt, np.nan) for wt in worker_types], dtype=float),
                         np.array([spread.get(wt, np.nan) for wt in worker_types], dtype=float))
        return rows[key]

    def pair(self, a: str, b: str, scale_factor: int, worker_types: Sequence[str]):
        key = (a, b, scale_factor, tuple(worker_types))
        if key not in self._pairs:
            p = self.table.pair(a, b, scale_factor)
            self._pairs[key] = (np.array([p.get(wt, (np.nan, np.nan)) for wt in worker_types],
                                         dtype=float) if p else None)
        return self._pairs[key]

    def _rows_of(self, jobs, worker_types) -> list[int]:
        """Each job's row number in `_stacked` (rows of new (job_type, scale_factor) added)."""
        types = tuple(worker_types)
        index, solo, spread = self._stacked.get(types) or ({}, np.zeros((0, len(types))),
                                                           np.zeros((0, len(types))))
        get = index.get
        numbers = [get((j.job_type, j.scale_factor), -1) for j in jobs]
        if -1 in numbers:
            added = []
            for i, j in enumerate(jobs):
                if numbers[i] < 0:
                    key = (j.job_type, j.scale_factor)
                    if key not in index:
                        index[key] = len(index)
                        added.append(self.row(j.job_type, j.scale_factor, types))
                    numbers[i] = index[key]
            if added:
                solo = np.vstack([solo] + [r[0][None, :] for r in added])
                spread = np.vstack([spread] + [r[1][None, :] for r in added])
            self._stacked[types] = (index, solo, spread)
        return numbers

    def lookup(self, jobs, worker_types, include_pairs=False) -> JobThroughputs:
        n, k = len(jobs), len(worker_types)
        numbers = self._rows_of(jobs, worker_types)
        _, solo_rows, spread_rows = self._stacked[tuple(worker_types)]
        solo = solo_rows[numbers].reshape(n, k)          # fancy indexing: fresh copies
        spread = spread_rows[numbers].reshape(n, k)
        pair_jobs, pair_thr = [], []
        if include_pairs:
            for a in range(n):
                for b in range(a + 1, n):
                    if jobs[a].scale_factor != jobs[b].scale_factor:
                        continue
                    p = self.pair(jobs[a].job_type, jobs[b].job_type, jobs[a].scale_factor,
                                  worker_types)
                    if p is not None:
                        pair_jobs.append((a, b))
                        pair_thr.append(p)
        return JobThroughputs(solo, spread, np.array(pair_jobs, dtype=np.int64).reshape(-1, 2),
                              np.array(pair_thr, dtype=float).reshape(len(pair_jobs), k, 2))


__all__ = ["JobKey", "TableThroughputs", "ThroughputTable", "UNCONSOLIDATED_SUFFIX"]

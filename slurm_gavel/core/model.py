"""The throughput model: what a policy sees (`PolicyInput`) and what it returns (`Allocation`).

This module owns the plain data that crosses the narrow waist between the
throughput estimator, the policies and the mechanism.  Everything is numpy
arrays indexed by job (rows, in `job_ids` order) and worker type (columns, in
`worker_types` order); nothing here knows about Slurm, cvxpy or files.

Conventions
-----------
* Throughputs are in steps per second.  A missing or infeasible entry (the job
  does not fit that GPU, or it was never measured and no estimate exists) is
  NaN or 0; the policies fix the matching allocation entry at 0.
* A job whose scale factor exceeds the number of GPUs of a type cannot run on
  that type either.
* Placement: `throughputs` are for a job whose GPUs sit on as
  few servers as possible (consolidated).  Where a type's servers have fewer
  GPUs than the job's scale factor (`gpus_per_node`), the job must spread, and
  `unconsolidated_throughputs` (when given) is what it runs at there.
* Space sharing: each pair row names two jobs (indices into `job_ids`) and, per
  worker type, the two jobs' throughputs while they share one GPU each of
  `scale_factor` GPUs.  ``(0, 0)`` or NaN means the pair cannot share that type.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Mapping

import numpy as np

from .errors import InputError

ENTITY_POLICIES = ("fairness", "fifo")


_LARGEST = np.finfo(float).max


def _finite(values: np.ndarray) -> np.ndarray:
    """`np.nan_to_num(values, nan=0.0)` for float arrays (NaN -> 0, +-inf -> +-largest), in place.

    nan_to_num's own checks cost more than the arithmetic on the policies'
    small arrays.
    """
    values[np.isnan(values)] = 0.0
    np.minimum(values, _LARGEST, out=values)
    return np.maximum(values, -_LARGEST, out=values)


def _frozen_cache(method):
    """A cached, read-only array property: computed once per (immutable) input.

    The simulator builds thousands of inputs and each policy reads these views
    many times; read-only so that no caller can change them for the others.
    """
    def compute(self):
        value = method(self)
        value.flags.writeable = False
        return value
    compute.__name__ = method.__name__
    compute.__doc__ = method.__doc__
    return cached_property(compute)


@dataclass(frozen=True)
class PolicyInput:
    """Jobs x worker types, plus the per-job and per-type facts policies need."""

    worker_types: tuple[str, ...]
    counts: np.ndarray                 # (k,) GPUs of each type
    job_ids: tuple[str, ...]
    throughputs: np.ndarray            # (n, k) steps/s when running alone; NaN/0 = cannot run
    scale_factors: np.ndarray          # (n,) GPUs per job
    weights: np.ndarray                # (n,) > 0
    prices: np.ndarray = None          # (k,) $ per GPU-hour, NaN where unknown
    entities: tuple[str, ...] = None   # (n,) for hierarchical policies
    steps_remaining: np.ndarray = None     # (n,) NaN where unknown
    time_since_arrival: np.ndarray = None  # (n,) seconds
    slo: np.ndarray = None             # (n,) seconds after arrival by which the job should finish; NaN = none
    pair_jobs: np.ndarray = None       # (P, 2) job indices
    pair_throughputs: np.ndarray = None    # (P, k, 2) steps/s of each member while sharing
    entity_weights: Mapping[str, float] = field(default_factory=dict)
    entity_policies: Mapping[str, str] = field(default_factory=dict)
    unconsolidated_throughputs: np.ndarray = None  # (n, k) steps/s spread over servers; NaN = unknown
    gpus_per_node: np.ndarray = None   # (k,) GPUs per server of each type; NaN = unknown

    def __post_init__(self):
        n, k = len(self.job_ids), len(self.worker_types)
        fill = {     # made only for the fields left out
            "prices": lambda: np.full(k, np.nan),
            "entities": lambda: ("default",) * n,
            "steps_remaining": lambda: np.full(n, np.nan),
            "time_since_arrival": lambda: np.zeros(n),
            "slo": lambda: np.full(n, np.nan),
            "pair_jobs": lambda: np.zeros((0, 2), dtype=np.int64),
            "pair_throughputs": lambda: np.zeros((0, k, 2)),
            "unconsolidated_throughputs": lambda: np.full((n, k), np.nan),
            "gpus_per_node": lambda: np.full(k, np.nan),
        }
        for name, default in fill.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, default())
        as_float = ("counts", "throughputs", "weights", "prices", "steps_remaining",
                    "time_since_arrival", "slo", "pair_throughputs", "unconsolidated_throughputs",
                    "gpus_per_node")
        for name in as_float:
            object.__setattr__(self, name, np.asarray(getattr(self, name), dtype=float))
        object.__setattr__(self, "scale_factors", np.asarray(self.scale_factors, dtype=np.int64))
        object.__setattr__(self, "pair_jobs", np.asarray(self.pair_jobs, dtype=np.int64).reshape(-1, 2))
        object.__setattr__(self, "pair_throughputs",
                           self.pair_throughputs.reshape(len(self.pair_jobs), k, 2))
        self._check()

    # -- validation ---------------------------------------------------------
    def _check(self):
        """Raise InputError naming the first problem of the input, if any."""
        if self._valid():
            return
        self._find_problem()

    def _valid(self) -> bool:
        """All of `_find_problem`'s checks at once, a few array operations for all jobs.

        The engine builds an input for every solve; only when something is
        wrong does `_find_problem` go through the checks one by one to name it.
        """
        n, k = len(self.job_ids), len(self.worker_types)
        if k == 0 or len(set(self.worker_types)) != k or len(set(self.job_ids)) != n:
            return False
        if len(self.entities) != n or any(getattr(self, name).shape != shape
                                          for name, shape in self._shapes(n, k).items()):
            return False
        # (comparisons with NaN are False and raise no warning: no np.errstate needed)
        per_type = ((self.counts >= 0) & np.isfinite(self.counts) & ~(self.prices < 0)
                    & ~(self.gpus_per_node < 1))
        per_job = ((self.scale_factors >= 1) & (self.weights > 0) & np.isfinite(self.weights)
                   & ~(self.steps_remaining < 0) & (self.time_since_arrival >= 0)
                   & np.isfinite(self.time_since_arrival) & ~(self.slo <= 0))
        if not (per_type.all() and per_job.all() and not (self.throughputs < 0).any()
                and not (self.unconsolidated_throughputs < 0).any()):
            return False
        if not self.feasible.any(axis=1).all():
            return False
        if len(self.pair_jobs):
            a, b = self.pair_jobs.T
            if ((self.pair_jobs < 0).any() or (self.pair_jobs >= n).any() or (a == b).any()
                    or (self.scale_factors[a] != self.scale_factors[b]).any()
                    or (self.pair_throughputs < 0).any()):
                return False
        return all(not self.entity_weights.get(entity, 1.0) <= 0
                   and self.entity_policies.get(entity, "fairness") in ENTITY_POLICIES
                   for entity in set(self.entities))

    @staticmethod
    def _shapes(n: int, k: int) -> dict[str, tuple[int, ...]]:
        return {"counts": (k,), "throughputs": (n, k), "scale_factors": (n,),
                "weights": (n,), "prices": (k,), "steps_remaining": (n,),
                "time_since_arrival": (n,), "slo": (n,),
                "unconsolidated_throughputs": (n, k), "gpus_per_node": (k,)}

    def _find_problem(self):
        n, k = len(self.job_ids), len(self.worker_types)
        if k == 0:
            raise InputError("worker_types", "no worker types given")
        if len(set(self.worker_types)) != k:
            raise InputError("worker_types", "duplicate worker type names")
        if len(set(self.job_ids)) != n:
            dup = next(j for j in self.job_ids if self.job_ids.count(j) > 1)
            raise InputError(f"jobs[{dup}].id", "duplicate job id")
        for name, shape in self._shapes(n, k).items():
            if getattr(self, name).shape != shape:
                raise InputError(name, f"has shape {getattr(self, name).shape}, expected {shape}")
        if len(self.entities) != n:
            raise InputError("entities", f"has {len(self.entities)} entries, expected {n}")
        for j, wt in enumerate(self.worker_types):
            if not (self.counts[j] >= 0 and math.isfinite(self.counts[j])):
                raise InputError(f"worker_types.{wt}.count", "must be a number >= 0")
            if self.prices[j] < 0:
                raise InputError(f"worker_types.{wt}.price_per_hour", "must be >= 0")
        with np.errstate(invalid="ignore"):
            per_job = (("scale_factor", self.scale_factors, self.scale_factors >= 1, "must be an integer >= 1"),
                       ("weight", self.weights, (self.weights > 0) & np.isfinite(self.weights), "must be > 0"),
                       ("steps_remaining", self.steps_remaining, ~(self.steps_remaining < 0), "must be >= 0"),
                       ("time_since_arrival", self.time_since_arrival,
                        (self.time_since_arrival >= 0) & np.isfinite(self.time_since_arrival), "must be >= 0"),
                       ("slo", self.slo, ~(self.slo <= 0), "must be > 0"))
        for name, values, ok, problem in per_job:
            if not ok.all():       # checked for all jobs at once; the first bad one is named
                i = int(np.argmin(ok))
                raise InputError(f"jobs[{self.job_ids[i]}].{name}", f"{problem}, got {values[i]}")
        for name in ("throughputs", "unconsolidated_throughputs"):
            values = getattr(self, name)
            for i, j in np.argwhere(values < 0):
                raise InputError(f"jobs[{self.job_ids[i]}].{name}.{self.worker_types[j]}",
                                 f"must be >= 0, got {values[i, j]}")
        for j in np.flatnonzero(self.gpus_per_node < 1):
            raise InputError(f"worker_types.{self.worker_types[j]}.gpus_per_node",
                             f"must be >= 1, got {self.gpus_per_node[j]}")
        fits = self.feasible.any(axis=1)
        if not fits.all():
            i = int(np.argmin(fits))
            raise InputError(f"jobs[{self.job_ids[i]}]",
                             f"fits no worker type (scale factor {self.scale_factors[i]}, "
                             f"throughputs {self._row(i)})")
        if len(self.pair_jobs):
            if (self.pair_jobs < 0).any() or (self.pair_jobs >= n).any():
                raise InputError("pairs", "a pair names a job index out of range")
            a, b = self.pair_jobs.T
            if (a == b).any():
                raise InputError("pairs", "a job cannot be paired with itself")
            if (self.scale_factors[a] != self.scale_factors[b]).any():
                p = int(np.argmax(self.scale_factors[a] != self.scale_factors[b]))
                raise InputError(f"pairs[{p}]", "the two jobs must have the same scale factor")
            if (self.pair_throughputs < 0).any():
                raise InputError("pairs", "pair throughputs must be >= 0")
        for entity in set(self.entities):
            if self.entity_weights.get(entity, 1.0) <= 0:
                raise InputError(f"entities.{entity}.weight", "must be > 0")
            if self.entity_policies.get(entity, "fairness") not in ENTITY_POLICIES:
                raise InputError(f"entities.{entity}.policy", f"must be one of {ENTITY_POLICIES}")

    def _row(self, i):
        return {wt: float(self.placed_throughputs[i, j]) for j, wt in enumerate(self.worker_types)}

    # -- derived views ------------------------------------------------------
    @property
    def n_jobs(self) -> int:
        return len(self.job_ids)

    @property
    def n_types(self) -> int:
        return len(self.worker_types)

    @_frozen_cache
    def spread(self) -> np.ndarray:
        """(n, k) bool: the job needs more GPUs than one server of the type has."""
        return self.scale_factors[:, None] > self.gpus_per_node[None, :]   # False where unknown

    @_frozen_cache
    def placed_throughputs(self) -> np.ndarray:
        """(n, k) throughputs as the job will be placed: unconsolidated where it must spread."""
        use = self.spread & ~np.isnan(self.unconsolidated_throughputs)
        return np.where(use, self.unconsolidated_throughputs, self.throughputs)

    @_frozen_cache
    def feasible(self) -> np.ndarray:
        """(n, k) bool: the job can run on the type (known positive throughput, enough GPUs)."""
        return (self.placed_throughputs > 0) & (self.scale_factors[:, None] <= self.counts[None, :])

    @_frozen_cache
    def solo_throughputs(self) -> np.ndarray:
        """(n, k) throughputs (placement-aware) with every infeasible entry set to exactly 0."""
        return _finite(np.where(self.feasible, self.placed_throughputs, 0.0))

    @_frozen_cache
    def pair_feasible(self) -> np.ndarray:
        """(P, k) bool: both members of the pair make progress together on the type, and it fits."""
        sf = self.scale_factors[self.pair_jobs[:, 0]]
        return (self.pair_throughputs > 0).all(axis=2) & (sf[:, None] <= self.counts[None, :])

    @_frozen_cache
    def shared_throughputs(self) -> np.ndarray:
        """(P, k, 2) pair throughputs with infeasible entries set to 0."""
        return _finite(np.where(self.pair_feasible[:, :, None], self.pair_throughputs, 0.0))

    @property
    def n_pairs(self) -> int:
        return len(self.pair_jobs)

    def without_pairs(self) -> "PolicyInput":
        if not len(self.pair_jobs):
            return self
        return replace(self, pair_jobs=np.zeros((0, 2), dtype=np.int64),
                       pair_throughputs=np.zeros((0, self.n_types, 2)))

    def pairs_subset(self, keep: np.ndarray) -> "PolicyInput":
        """The input with only the pair rows selected by `keep` (bool or indices)."""
        return replace(self, pair_jobs=self.pair_jobs[keep], pair_throughputs=self.pair_throughputs[keep])

    def with_throughputs(self, throughputs, pair_throughputs=None) -> "PolicyInput":
        return replace(self, throughputs=throughputs,
                       pair_throughputs=self.pair_throughputs if pair_throughputs is None
                       else pair_throughputs)

    def type_blind(self) -> "PolicyInput":
        """The same input as a heterogeneity-agnostic scheduler sees it.

        Every job runs on every type it fits at its speed on one reference
        type (so that steps, times and SLOs keep their units), as Gavel's
        agnostic baselines see every type at the job's V100 speed.  The
        reference is the type the jobs run nearest their best on (largest
        sum over jobs of throughput / the job's fastest throughput): the V100
        on Gavel's clusters and jobs, and a rule that needs no type names.  A
        job that cannot run on the reference type is seen at its fastest.
        Pairs likewise (their reference speed on the same type, else their
        fastest).  Infeasible entries stay infeasible.
        """
        solo = self.solo_throughputs
        feasible = self.feasible
        fastest = solo.max(axis=1, initial=0.0)
        near_best = np.divide(solo, fastest[:, None], out=np.zeros_like(solo), where=fastest[:, None] > 0)
        ref = int(np.argmax(near_best.sum(axis=0))) if self.n_jobs else 0
        speed = np.where(solo[:, ref] > 0, solo[:, ref], fastest)
        blind = np.where(feasible, speed[:, None], 0.0)
        shared = self.shared_throughputs
        pf = self.pair_feasible
        if len(shared):
            pair_best = shared[np.arange(len(shared)), np.argmax(shared.sum(axis=2), axis=1)]
            pspeed = np.where(pf[:, ref, None], shared[:, ref, :], pair_best)      # (P, 2)
        else:
            pspeed = np.zeros((0, 2))
        pblind = np.where(pf[:, :, None], pspeed[:, None, :], 0.0)
        # Valid as it stands: every speed is one of the job's own positive
        # throughputs, so every job fits exactly the types it fitted.
        return self._derive(throughputs=blind, pair_throughputs=pblind,
                            unconsolidated_throughputs=np.full_like(blind, np.nan))

    def _derive(self, **changes) -> "PolicyInput":
        """A copy with `changes`: arrays this class derived itself from a valid input.

        Like `dataclasses.replace`, without `__post_init__`: the arrays already
        have their types and shapes, and the caller knows its change keeps the
        input valid.
        """
        out = object.__new__(PolicyInput)
        out.__dict__.update({name: self.__dict__[name] for name in self.__dataclass_fields__})
        out.__dict__.update(changes)
        return out

    def isolated_allocation(self) -> np.ndarray:
        """(n, k) the isolated allocation: every job gets 1/n of each type's GPUs.

        A job of scale factor s holding a 1/n share of a type's GPUs runs a
        fraction count/(n*s) of the time there.  Where some job's time would
        exceed 1, every row is scaled down by the same factor, so that all
        jobs keep an equal share (sharing incentive is measured against this).
        """
        n = self.n_jobs
        if n == 0:
            return np.zeros((0, self.n_types))
        x = np.where(self.feasible,
                     self.counts[None, :] / (n * self.scale_factors[:, None]), 0.0)
        return x / max(1.0, x.sum(axis=1).max())

    def isolated_throughputs(self) -> np.ndarray:
        """(n,) each job's throughput under `isolated_allocation`."""
        return (self.solo_throughputs * self.isolated_allocation()).sum(axis=1)

    def fastest_throughputs(self) -> np.ndarray:
        """(n,) each job's throughput on its fastest feasible type."""
        return self.solo_throughputs.max(axis=1)

    def arrival_order(self) -> np.ndarray:
        """(n,) rank of each job by arrival, earliest first (ties by input order)."""
        order = np.lexsort((np.arange(self.n_jobs), -self.time_since_arrival))
        rank = np.empty(self.n_jobs, dtype=np.int64)
        rank[order] = np.arange(self.n_jobs)
        return rank

    def require(self, field_name: str, policy: str):
        """Raise InputError unless every job has a value for `field_name`."""
        values = getattr(self, field_name)
        missing = np.isnan(values)
        if missing.any():
            i = int(np.argmax(missing))
            raise InputError(f"jobs[{self.job_ids[i]}].{field_name}",
                             f"is required by policy {policy}")


@dataclass(frozen=True)
class Allocation:
    """The policy's answer: the fraction of wall-clock time each job (or pair) should get on each type."""

    job_ids: tuple[str, ...]
    worker_types: tuple[str, ...]
    x: np.ndarray                      # (n, k) single-job rows
    policy: str
    objective: float = float("nan")
    solve_seconds: float = 0.0
    pair_jobs: np.ndarray = None       # (P, 2) job indices
    x_pairs: np.ndarray = None         # (P, k)
    info: Mapping[str, object] = field(default_factory=dict)
    # X's split of each row between types is arbitrary (a heterogeneity-agnostic policy's: to
    # it every type is as fast): the mechanism then fills the types one after another, in an
    # order drawn anew each round, as Gavel does, rather than follow that split (mechanism.select)
    type_blind: bool = False

    def __post_init__(self):
        if self.pair_jobs is None:
            object.__setattr__(self, "pair_jobs", np.zeros((0, 2), dtype=np.int64))
        if self.x_pairs is None:
            object.__setattr__(self, "x_pairs", np.zeros((0, len(self.worker_types))))

    # The mechanism's view, kept per allocation: the engine plans every round
    # with the allocation in force, which changes only every few rounds.
    @cached_property
    def rows(self) -> tuple[tuple[str, ...], ...]:
        """The rows of X: each job alone, then each pair, as tuples of job ids."""
        ids = self.job_ids
        return (tuple(zip(ids))                 # (job,) each
                + tuple((ids[a], ids[b]) for a, b in self.pair_jobs.tolist()))

    @_frozen_cache
    def x_rows(self) -> np.ndarray:
        """(R, k) the allocation of `rows`: `x` stacked on `x_pairs`."""
        return np.vstack([self.x, self.x_pairs])

    def time_fractions(self) -> np.ndarray:
        """(n,) total time share of each job (its rows, single and paired)."""
        total = self.x.sum(axis=1)
        if len(self.pair_jobs):
            paired = self.x_pairs.sum(axis=1)
            np.add.at(total, self.pair_jobs[:, 0], paired)
            np.add.at(total, self.pair_jobs[:, 1], paired)
        return total

    def gpus_used(self, scale_factors: np.ndarray) -> np.ndarray:
        """(k,) GPUs of each type the allocation occupies on average."""
        used = self.x.T @ scale_factors
        if len(self.pair_jobs):
            used = used + self.x_pairs.T @ scale_factors[self.pair_jobs[:, 0]]
        return used

    def pair_rows_in(self, inp: PolicyInput) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Match this allocation's pair rows to `inp`'s, whatever the order of the two jobs.

        Returns (rows, found, same): row index into inp's pairs, whether the
        pair exists there, and whether its jobs are listed in the same order.
        """
        n = inp.n_jobs
        keys = inp.pair_jobs.min(axis=1) * n + inp.pair_jobs.max(axis=1)
        order = np.argsort(keys)
        a, b = self.pair_jobs[:, 0], self.pair_jobs[:, 1]
        wanted = np.minimum(a, b) * n + np.maximum(a, b)
        pos = np.clip(np.searchsorted(keys, wanted, sorter=order), 0, max(len(keys) - 1, 0))
        rows = order[pos] if len(keys) else np.zeros(len(a), dtype=np.int64)
        found = keys[rows] == wanted if len(keys) else np.zeros(len(a), dtype=bool)
        same = inp.pair_jobs[rows, 0] == a if len(keys) else found
        return rows, found, same

    def effective_throughputs(self, inp: PolicyInput) -> np.ndarray:
        """(n,) steps/s each job makes under this allocation with the (true) throughputs of `inp`."""
        thr = (inp.solo_throughputs * self.x).sum(axis=1)
        if len(self.pair_jobs) and inp.n_pairs:
            rows, found, same = self.pair_rows_in(inp)
            shared = inp.shared_throughputs[rows]
            ta = np.where(same[:, None], shared[:, :, 0], shared[:, :, 1])
            tb = np.where(same[:, None], shared[:, :, 1], shared[:, :, 0])
            xp = np.where(found[:, None], self.x_pairs, 0.0)
            np.add.at(thr, self.pair_jobs[:, 0], (ta * xp).sum(axis=1))
            np.add.at(thr, self.pair_jobs[:, 1], (tb * xp).sum(axis=1))
        return thr

    def as_dict(self, inp: PolicyInput | None = None) -> dict:
        """Plain JSON-ready form: allocation per job (and pair) per type."""
        out = {"policy": self.policy,
               "allocation": {jid: {wt: float(self.x[i, j]) for j, wt in enumerate(self.worker_types)}
                              for i, jid in enumerate(self.job_ids)}}
        if len(self.pair_jobs):
            out["pair_allocation"] = [
                {"jobs": [self.job_ids[a], self.job_ids[b]],
                 "allocation": {wt: float(self.x_pairs[r, j]) for j, wt in enumerate(self.worker_types)}}
                for r, (a, b) in enumerate(self.pair_jobs.tolist()) if self.x_pairs[r].sum() > 0]
        if inp is not None:
            out["effective_throughput"] = dict(zip(self.job_ids,
                                                   map(float, self.effective_throughputs(inp))))
        out["objective"] = None if math.isnan(self.objective) else float(self.objective)
        out["solve_seconds"] = float(self.solve_seconds)
        if self.info:
            out["info"] = dict(self.info)
        return out

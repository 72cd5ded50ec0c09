"""The cheaper code paths of the round loop give what the plain ones gave.

Each test compares a fast path with the straightforward version it
replaced (kept here as the reference): the mechanism's selection and
placement, the input's validation and derived arrays, and the allocation
gap.  The simulation's own before/after check (byte-identical per-job CSVs)
is in docs/benchmarks.md.
"""
from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import pytest

from slurm_gavel.core.errors import InputError
from slurm_gavel.core.mechanism import place, select
from slurm_gavel.core.model import Allocation, PolicyInput, _finite
from slurm_gavel.core.plan import Assignment, Server
from slurm_gavel.sim.simulator import JobResult, allocation_gap


# -- the reference versions --------------------------------------------------------
def select_reference(rows, prio, scale_factors, free, current):
    current = current or {}
    r_idx, t_idx = np.nonzero(prio > 0)
    running_on = np.array([current.get(row, -1) for row in rows], dtype=np.int64).reshape(len(rows))
    staying = running_on[r_idx] == t_idx
    order = np.lexsort((t_idx, r_idx, ~staying, -prio[r_idx, t_idx]))
    left = [int(v) for v in free]
    room = sum(left)
    smallest = int(scale_factors.min()) if len(scale_factors) else 1
    busy: set[str] = set()
    chosen = []
    sfs = scale_factors.tolist()
    for r, t in zip(r_idx[order].tolist(), t_idx[order].tolist()):
        if room < smallest:
            break
        row = rows[r]
        if not busy.isdisjoint(row):
            continue
        need = sfs[r]
        if need > left[t]:
            continue
        chosen.append((r, t))
        busy.update(row)
        left[t] -= need
        room -= need
    return chosen


def place_reference(picks, servers, previous):
    free = {s.name: s.gpus for s in servers}
    of_type: dict[str, list[str]] = {}
    for s in servers:
        of_type.setdefault(s.worker_type, []).append(s.name)
    placed, waiting = [], []
    for row, worker_type, gpus in picks:
        before = previous.get(row)
        if (before is not None and before.worker_type == worker_type and before.gpus == gpus
                and all(free.get(name, 0) >= count for name, count in before.servers)):
            for name, count in before.servers:
                free[name] -= count
            placed.append(before)
        else:
            waiting.append((row, worker_type, gpus))
    for row, worker_type, gpus in sorted(waiting, key=lambda p: -p[2]):
        names = of_type.get(worker_type, [])
        fits = [n for n in names if free[n] >= gpus]
        if fits:
            taken = [(min(fits, key=lambda n: (free[n], names.index(n))), gpus)]
        else:
            taken, need = [], gpus
            for n in sorted(names, key=lambda n: (-free[n], names.index(n))):
                if need == 0:
                    break
                use = min(free[n], need)
                if use:
                    taken.append((n, use))
                    need -= use
            if need:
                raise ValueError("does not fit")
        for name, count in taken:
            free[name] -= count
        placed.append(Assignment(row, worker_type, tuple(taken)))
    return placed


def gap_reference(allocations, results, end):
    target = {}
    for i, (_, t0, alloc, _) in enumerate(allocations):
        t1 = allocations[i + 1][1] if i + 1 < len(allocations) else end
        span = t1 - t0
        if span <= 0 or not alloc.job_ids:
            continue
        x = alloc.x.copy()
        if len(alloc.pair_jobs):
            np.add.at(x, alloc.pair_jobs[:, 0], alloc.x_pairs)
            np.add.at(x, alloc.pair_jobs[:, 1], alloc.x_pairs)
        x *= span
        for job, row in zip(alloc.job_ids, x):
            if job in target:
                target[job] += row
            else:
                target[job] = row.copy()
    gaps = []
    for job, r in results.items():
        if math.isnan(r.finish) or r.jct <= 0 or job not in target:
            continue
        realized = np.array(list(r.seconds.values())) / r.jct
        computed = np.minimum(target[job] / r.jct, 1.0)
        gaps.append(float(np.abs(realized - computed).sum()))
    return float(np.mean(gaps)) if gaps else 0.0


# -- the mechanism -------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(300))
def test_select_picks_what_the_reference_picks(seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(1, 12)), int(rng.integers(1, 4))
    jobs = [str(i) for i in range(n)]
    rows = [(j,) for j in jobs]
    pairs = [(a, b) for a in jobs for b in jobs if a < b and rng.random() < 0.15]
    rows += pairs
    sf = rng.choice([1, 1, 2, 4], size=len(rows)).astype(np.int64)
    for p, (a, b) in enumerate(pairs):          # a pair's scale factor is its jobs'
        sf[n + p] = sf[int(a)] = sf[int(b)]
    prio = rng.choice([0.0, 0.5, 1.0, 2.0, np.inf], size=(len(rows), k))
    free = rng.integers(0, 9, size=k)
    current = {row: int(rng.integers(0, k)) for row in rows if rng.random() < 0.5}
    assert select(rows, prio, sf, free, current) == select_reference(rows, prio, sf, free, current)


@pytest.mark.parametrize("seed", range(300))
def test_place_puts_rows_where_the_reference_puts_them(seed):
    rnd = random.Random(seed)
    types = ["v100", "p100", "k80"][:rnd.randint(1, 3)]
    servers = tuple(Server(f"{wt}-{i}", wt, rnd.randint(1, 8)) for wt in types for i in range(rnd.randint(1, 4)))
    capacity = {wt: sum(s.gpus for s in servers if s.worker_type == wt) for wt in types}
    previous, picks, used = {}, [], dict.fromkeys(types, 0)
    for i in range(rnd.randint(0, 12)):
        wt = rnd.choice(types)
        gpus = rnd.choice([1, 1, 2, 4])
        if used[wt] + gpus > capacity[wt]:
            continue
        used[wt] += gpus
        row = (str(i),)
        picks.append((row, wt, gpus))
        if rnd.random() < 0.5:         # it ran last round, maybe on these very servers
            names = [s.name for s in servers if s.worker_type == (wt if rnd.random() < 0.7 else rnd.choice(types))]
            previous[row] = Assignment(row, wt, ((rnd.choice(names), gpus),) if names else ())
    try:
        want = place_reference(picks, servers, previous)
    except ValueError:           # a previous row held another type's server: nothing fits
        for layout in (servers, list(servers)):
            with pytest.raises(ValueError):
                place(picks, layout, previous)
        return
    spread = sum(len(a.servers) > 1 for a in want)
    for layout in (servers, list(servers)):       # a tuple is remembered, a list is not
        got = place(picks, layout, previous)
        if not spread:
            assert got == want
            assert [a is previous.get(a.jobs) for a in got] == [a is previous.get(a.jobs) for a in want]
            continue
        # Where the reference spreads a row, place may move smaller rows to keep it whole
        # (test_consolidation.py): the same rows on the same types, no server over its
        # GPUs, every move for a whole row, and no more rows spread.
        assert sorted((a.jobs, a.worker_type, a.gpus) for a in got) == \
            sorted((a.jobs, a.worker_type, a.gpus) for a in want)
        load = dict.fromkeys((s.name for s in servers), 0)
        for a in got:
            for name, count in a.servers:
                load[name] += count
        assert all(load[s.name] <= s.gpus for s in servers)
        assert sum(len(a.servers) > 1 for a in got) <= spread
        kept_want = {a.jobs for a in want if a is previous.get(a.jobs)}
        for a in got:
            if a.jobs in kept_want and a is not previous.get(a.jobs):
                assert len(a.servers) == 1        # a held row is moved only to another whole place


# -- the policy input --------------------------------------------------------------------
def _input(rng, n=6, k=3, **changes):
    values = dict(
        worker_types=tuple(f"t{j}" for j in range(k)), counts=rng.integers(1, 9, size=k).astype(float),
        job_ids=tuple(str(i) for i in range(n)),
        throughputs=np.where(rng.random((n, k)) < 0.2, np.nan, rng.random((n, k)) * 10),
        scale_factors=rng.choice([1, 2], size=n), weights=rng.random(n) + 0.5,
        prices=np.array([3.0, np.nan, 1.0][:k]), steps_remaining=rng.random(n) * 100,
        time_since_arrival=rng.random(n) * 1000, slo=np.where(rng.random(n) < 0.5, np.nan, 5e3),
        unconsolidated_throughputs=np.where(rng.random((n, k)) < 0.5, np.nan, rng.random((n, k))),
        gpus_per_node=np.array([4.0, np.nan, 2.0][:k]))
    values["throughputs"][:, 0] = 1.0          # every job fits a type
    values["scale_factors"][:] = 1
    values.update(changes)
    return values


PROBLEMS = [
    {"counts": np.array([1.0, np.nan, 2.0])}, {"counts": np.array([1.0, np.inf, 2.0])},
    {"counts": np.array([-1.0, 1.0, 2.0])}, {"prices": np.array([1.0, -2.0, np.nan])},
    {"gpus_per_node": np.array([0.0, 4.0, np.nan])}, {"weights": np.zeros(6)},
    {"weights": np.full(6, np.inf)}, {"steps_remaining": np.full(6, -1.0)},
    {"time_since_arrival": np.full(6, np.nan)}, {"slo": np.zeros(6)},
    {"scale_factors": np.zeros(6, dtype=np.int64)}, {"job_ids": ("a", "a", "b", "c", "d", "e")},
    {"weights": np.ones(5)}, {"entities": ("x",) * 5},
    {"throughputs": np.full((6, 3), -1.0)}, {"unconsolidated_throughputs": np.full((6, 3), -1.0)},
    {"throughputs": np.zeros((6, 3))}, {"entity_weights": {"default": 0.0}},
    {"entity_policies": {"default": "lottery"}},
    {"pair_jobs": np.array([[0, 0]]), "pair_throughputs": np.ones((1, 3, 2))},
    {"pair_jobs": np.array([[0, 9]]), "pair_throughputs": np.ones((1, 3, 2))},
    {"pair_jobs": np.array([[0, 1]]), "pair_throughputs": -np.ones((1, 3, 2))},
]


@pytest.mark.parametrize("problem", range(len(PROBLEMS)))
def test_a_bad_input_is_still_refused(problem):
    values = _input(np.random.default_rng(problem), **PROBLEMS[problem])
    with pytest.raises(InputError):
        PolicyInput(**values)


@pytest.mark.parametrize("seed", range(50))
def test_a_good_input_passes_both_ways(seed):
    values = _input(np.random.default_rng(seed),
                    pair_jobs=np.array([[0, 1]]), pair_throughputs=np.ones((1, 3, 2)))
    inp = PolicyInput(**values)
    assert inp._valid()
    inp._find_problem()          # nothing to report


@pytest.mark.parametrize("seed", range(50))
def test_derived_arrays_and_the_type_blind_input_are_unchanged(seed):
    rng = np.random.default_rng(seed)
    values = _input(rng, pair_jobs=np.array([[0, 1], [2, 3]]),
                    pair_throughputs=np.where(rng.random((2, 3, 2)) < 0.3, np.nan, rng.random((2, 3, 2))))
    values["throughputs"][1, 1] = np.inf
    inp = PolicyInput(**values)
    assert np.array_equal(inp.feasible, (np.nan_to_num(inp.placed_throughputs, nan=0.0) > 0)
                          & (inp.scale_factors[:, None] <= inp.counts[None, :]))
    assert np.array_equal(inp.solo_throughputs,
                          np.where(inp.feasible, np.nan_to_num(inp.placed_throughputs, nan=0.0), 0.0))
    assert np.array_equal(inp.shared_throughputs,
                          np.where(inp.pair_feasible[:, :, None], np.nan_to_num(inp.pair_throughputs, nan=0.0), 0.0))
    blind = inp.type_blind()
    # every job at its speed on the reference type (the one jobs run nearest their best on)
    solo = inp.solo_throughputs
    ref = max(range(inp.n_types), key=lambda j: sum(solo[m, j] / solo[m].max() for m in range(inp.n_jobs)
                                                  if solo[m].max() > 0))
    speed = [solo[m, ref] if solo[m, ref] > 0 else solo[m].max() for m in range(inp.n_jobs)]
    shared = inp.shared_throughputs
    pspeed = [shared[p, ref] if inp.pair_feasible[p, ref] else shared[p, shared[p].sum(axis=1).argmax()]
              for p in range(inp.n_pairs)]
    want = replace(inp, throughputs=np.where(inp.feasible, np.array(speed)[:, None], 0.0),
                   pair_throughputs=np.where(inp.pair_feasible[:, :, None],
                                             np.array(pspeed).reshape(-1, 2)[:, None, :], 0.0),
                   unconsolidated_throughputs=np.full((inp.n_jobs, inp.n_types), np.nan))
    for name in PolicyInput.__dataclass_fields__:
        a, b = getattr(blind, name), getattr(want, name)
        assert np.array_equal(a, b, equal_nan=True) if isinstance(a, np.ndarray) else a == b, name
    assert np.array_equal(blind.solo_throughputs, want.solo_throughputs)
    assert np.array_equal(blind.feasible, inp.feasible)


def test_finite_is_nan_to_num():
    values = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.5, 5e-324, 1e308])
    assert np.array_equal(_finite(values.copy()), np.nan_to_num(values, nan=0.0))


# -- the allocation gap ----------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(20))
def test_allocation_gap_is_unchanged(seed):
    rng = np.random.default_rng(seed)
    types = ("v100", "p100", "k80")
    allocations, t = [], 0.0
    for r in range(30):
        jobs = tuple(sorted({str(j) for j in rng.integers(0, 12, size=rng.integers(0, 8))}))
        x = rng.random((len(jobs), 3)) * (rng.random((len(jobs), 3)) < 0.7)
        pair = len(jobs) >= 2 and rng.random() < 0.3
        alloc = Allocation(jobs, types, x, "p", pair_jobs=np.array([[0, 1]]) if pair else None,
                           x_pairs=rng.random((1, 3)) if pair else None)
        allocations.append((r, t, alloc, True))
        t += float(rng.choice([0.0, 360.0, 720.0]))
    results = {}
    for j in range(12):
        arrival = float(rng.random() * 1000)
        finish = arrival + float(rng.random() * 5000) if rng.random() < 0.8 else math.nan
        results[str(j)] = JobResult(str(j), "m", 1, 10.0, arrival, finish=finish,
                                    seconds={wt: float(rng.random() * 1000) for wt in types})
    assert allocation_gap(allocations, results, t + 360.0) == gap_reference(allocations, results, t + 360.0)

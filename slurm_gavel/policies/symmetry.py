"""Identical jobs share one row of the LP: an exact reduction, and its undoing.

Jobs that look the same to a policy (same throughputs, scale factor and
policy numbers; with space sharing also the same pair throughputs with every
other kind of job) are interchangeable.  The policies' problems are convex,
so averaging an optimal X over all permutations of such jobs gives another
optimal X, in which identical jobs get identical rows.  Solving for one row
per kind of job (a *class*) is therefore exact, and much smaller: a workload
drawn from 26 model types has at most 26 classes and 351 class pairs, however
many jobs it has.  This is Gavel's job-type formulation for space sharing,
made exact and applied wherever the input allows it.

The class problem's pair row (A, B) holds the total time of all pairs between
jobs of classes A and B.  `expand` spreads it over concrete job pairs with as
few rows as possible: a north-west-corner transport between the two classes
(n_A + n_B - 1 rows), or a ring within one class, so that every job of A gets
the same share.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..core.model import PolicyInput


@dataclass(frozen=True)
class Classes:
    labels: np.ndarray          # (n,) class of each job
    representatives: np.ndarray  # (C,) one job of each class (its first)
    sizes: np.ndarray           # (C,) jobs per class
    pair_classes: np.ndarray    # (Q, 2) class pairs that may share (A <= B)
    pair_rows: np.ndarray       # (Q,) a representative row of inp's pairs for each
    pair_flipped: np.ndarray    # (Q,) that row lists the B job first

    @property
    def n_classes(self) -> int:
        return len(self.representatives)

    @cached_property
    def members(self) -> list:
        """C arrays of job indices, each in increasing order."""
        order = np.argsort(self.labels, kind="stable")
        return np.split(order, np.cumsum(self.sizes)[:-1])


def find_classes(inp: PolicyInput, per_job: list[np.ndarray]) -> Classes | None:
    """The classes of identical jobs, or None when there is nothing to gain.

    `per_job` are the policy's per-job numbers (arrays of length n, or (n, k)).
    Identical means bit for bit.  With pairs, the reduction applies only if
    pair throughputs depend on the two classes alone and every two jobs of
    those classes may pair.
    """
    n = inp.n_jobs
    # (feasible is not compared: it is solo_throughputs > 0, so it splits no
    # class and orders none; a key column fewer for every solve)
    columns = [inp.solo_throughputs, inp.scale_factors[:, None].astype(float)]
    columns += [np.asarray(a, dtype=float).reshape(n, -1) for a in per_job]
    # Rows compared as their bits (as integers): equal bits, same class.
    keys = np.ascontiguousarray(np.concatenate(columns, axis=1)).view(np.int64)
    order = np.lexsort(keys.T[::-1])           # stable: a class's jobs by index
    ordered = keys[order]
    first = np.ones(n, dtype=bool)
    first[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    starts = np.flatnonzero(first)
    if len(starts) == n:
        return None
    labels = np.empty(n, dtype=np.int64)
    labels[order] = np.cumsum(first) - 1
    representatives = order[starts]
    sizes = np.diff(np.append(starts, n))
    empty = np.zeros((0, 2), dtype=np.int64)
    if inp.n_pairs == 0:
        return Classes(labels, representatives, sizes, empty, np.zeros(0, np.int64), np.zeros(0, bool))
    return _with_pairs(inp, labels, representatives, sizes)


def _with_pairs(inp, labels, representatives, sizes) -> Classes | None:
    ca, cb = labels[inp.pair_jobs[:, 0]], labels[inp.pair_jobs[:, 1]]
    flipped = ca > cb
    lo, hi = np.minimum(ca, cb), np.maximum(ca, cb)
    shared = np.where(flipped[:, None, None], inp.shared_throughputs[:, :, ::-1],
                      inp.shared_throughputs)
    c = len(representatives)
    code = lo * c + hi
    uniq, first, inverse, counts = np.unique(code, return_index=True, return_inverse=True,
                                             return_counts=True)
    inverse = inverse.reshape(-1)
    reference = shared[first][inverse]
    same_class = lo == hi
    # Within one class the two sides may come in either order.
    consistent = np.isclose(shared, reference, rtol=1e-12, atol=0).all(axis=(1, 2))
    swapped = np.isclose(shared[:, :, ::-1], reference, rtol=1e-12, atol=0).all(axis=(1, 2))
    # A class of two jobs has one pair between them, which `expand` cannot
    # spread over both orders: its two sides must get the same numbers.
    lone = same_class & (sizes[lo] == 2) & ~swapped
    if not (consistent | (same_class & swapped)).all() or lone.any():
        return None
    qa, qb = uniq // c, uniq % c
    expected = np.where(qa == qb, sizes[qa] * (sizes[qa] - 1) // 2, sizes[qa] * sizes[qb])
    if not (counts == expected).all():
        return None
    return Classes(labels, representatives, sizes, np.stack([qa, qb], axis=1),
                   first, flipped[first])


def class_pair_numbers(inp: PolicyInput, classes: Classes, shared: np.ndarray) -> np.ndarray:
    """(Q, k, 2) pair numbers per class pair, oriented (A, B), from inp-ordered (P, k, 2)."""
    rows = shared[classes.pair_rows]
    return np.where(classes.pair_flipped[:, None, None], rows[:, :, ::-1], rows)


def _transport(n_a: int, n_b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """North-west corner: flows i -> j with row sums 1/n_a, column sums 1/n_b, total 1."""
    # Rows cover [i*n_b, (i+1)*n_b), columns [j*n_a, (j+1)*n_a) of [0, n_a*n_b).
    cuts = np.union1d(np.arange(n_a + 1) * n_b, np.arange(n_b + 1) * n_a)
    start, length = cuts[:-1], np.diff(cuts)
    return start // n_b, start // n_a, length / (n_a * n_b)


def _ring(size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs within one class: each job in pairs of total weight 2/size, sum 1."""
    if size == 2:
        return np.array([0]), np.array([1]), np.array([1.0])
    i = np.arange(size)
    return i, (i + 1) % size, np.full(size, 1.0 / size)


def expand(inp: PolicyInput, classes: Classes, y: np.ndarray, z: np.ndarray):
    """Per-job X (n, k), pair jobs (R, 2) and pair X (R, k) from the class solution."""
    x = y[classes.labels]
    pair_jobs, x_pairs = [], []
    for q in np.flatnonzero(z.sum(axis=1) > 0) if len(z) else []:
        a, b = classes.pair_classes[q]
        ma, mb = classes.members[a], classes.members[b]
        i, j, weight = _ring(len(ma)) if a == b else _transport(len(ma), len(mb))
        jobs_b = ma[j] if a == b else mb[j]
        pair_jobs.append(np.stack([ma[i], jobs_b], axis=1))
        x_pairs.append(weight[:, None] * z[q][None, :])
    if not pair_jobs:
        return x, np.zeros((0, 2), dtype=np.int64), np.zeros((0, inp.n_types))
    return x, np.concatenate(pair_jobs), np.concatenate(x_pairs)

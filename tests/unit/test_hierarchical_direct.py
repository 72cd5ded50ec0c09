"""Water filling on one HiGHS model (policies/filling.py) against the cvxpy route.

The direct route must give every job the normalized throughput the cvxpy route
gives it (within 1e-6) on small random inputs: several entities, fairness and
FIFO entity policies, entity and job weights, scale factors > 1, identical jobs
(classes), space-sharing pair rows; and compile nothing through cvxpy.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from slurm_gavel.policies import filling
from slurm_gavel.policies.hierarchical import Hierarchical

from tests.support.inputs import assert_feasible, make_input


def routes():
    fast, slow = Hierarchical(), Hierarchical()
    fast.use_direct, slow.use_direct = True, False
    return fast, slow


def hierarchical_input(rng, n, k, pairs=0, duplicates=0, tight=True):
    """Random jobs of three entities (one FIFO), `duplicates` of them copies of others."""
    t = rng.uniform(0.5, 10.0, size=(n, k))
    t[rng.random((n, k)) < 0.2] = 0.0
    t[np.arange(n), rng.integers(0, k, n)] = rng.uniform(0.5, 10.0, n)
    sf = rng.choice([1, 1, 2], size=n)
    weights = rng.choice([1.0, 1.0, 2.0], size=n)
    entities = list(rng.choice(["alice", "bob", "carol"], size=n))
    for i in range(min(duplicates, n - 1)):      # job i + 1 made a copy of job i
        t[i + 1], sf[i + 1], weights[i + 1], entities[i + 1] = t[i], sf[i], weights[i], entities[i]
    counts = rng.integers(1, 4, size=k).astype(float) if tight else np.full(k, 2.0 * n)
    counts = np.maximum(counts, 2.0)
    fields = dict(scale_factors=sf, weights=weights, entities=tuple(entities),
                  entity_weights={"alice": 1.0, "bob": float(rng.choice([0.5, 2.0])), "carol": 1.5},
                  entity_policies={"bob": "fifo"},
                  time_since_arrival=rng.permutation(n).astype(float) * 10.0)
    if pairs:
        a, b = np.triu_indices(n, k=1)
        same = np.flatnonzero(sf[a] == sf[b])
        pick = np.sort(rng.choice(same, size=min(pairs, len(same)), replace=False))
        pj = np.stack([a[pick], b[pick]], axis=1).reshape(-1, 2)
        pt = np.transpose(t[pj], (0, 2, 1)) * rng.uniform(0.6, 0.95, size=(len(pj), k, 2))
        fields.update(pair_jobs=pj, pair_throughputs=pt)
    return make_input(t, counts, **fields)


def normalized(alloc, inp):
    return alloc.effective_throughputs(inp) / inp.isolated_throughputs()


def check(inp):
    fast, slow = routes()
    a, b = fast.allocate(inp), slow.allocate(inp)
    assert not fast._cache._entries, "the direct route compiles nothing"
    assert slow._cache._entries
    assert_feasible(a, inp)
    np.testing.assert_allclose(normalized(a, inp), normalized(b, inp), atol=1e-6)
    assert a.objective == pytest.approx(b.objective, abs=1e-6)
    return a, b


@pytest.mark.parametrize("seed", range(12))
def test_same_normalized_throughputs_as_the_cvxpy_route(seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(3, 14)), int(rng.integers(1, 4))
    check(hierarchical_input(rng, n, k, duplicates=seed % 3))


@pytest.mark.parametrize("seed", range(8))
def test_same_with_pair_rows(seed):
    rng = np.random.default_rng(100 + seed)
    n, k = int(rng.integers(3, 10)), int(rng.integers(1, 4))
    k = 1 if seed % 2 else k        # (one type: sharing is the only way up, pair rows get time)
    check(hierarchical_input(rng, n, k, pairs=int(rng.integers(1, 8))))


def test_identical_jobs_share_a_row():
    """Twenty copies of two kinds of job: the model has a row per kind, the answer is the same."""
    rng = np.random.default_rng(7)
    t = np.repeat(rng.uniform(1, 5, (2, 3)), 10, axis=0)
    inp = make_input(t, [3.0, 4.0, 2.0], entities=("u",) * 10 + ("v",) * 10,
                     entity_weights={"u": 1.0, "v": 3.0})
    a, _ = check(inp)
    assert a.info["rows"] == 2


def test_identical_jobs_with_pair_rows_between_their_classes():
    """Three kinds of job, four copies each, every two jobs may share: class pair rows, same answer."""
    rng = np.random.default_rng(9)
    kinds = rng.uniform(1, 5, (3, 2))
    label = np.repeat(np.arange(3), 4)
    a, b = np.triu_indices(12, k=1)
    together = rng.uniform(0.6, 0.95, (3, 3, 2, 2))        # (kind, kind, type, side)
    together = (together + together.transpose(1, 0, 2, 3)[:, :, :, ::-1]) / 2
    pt = together[label[a], label[b]] * np.stack([kinds[label[a]], kinds[label[b]]], axis=2)
    inp = make_input(kinds[label], [2.0, 3.0], entities=tuple("uuvvuuvvuuvv"),
                     entity_weights={"u": 1.0, "v": 2.0},
                     pair_jobs=np.stack([a, b], axis=1), pair_throughputs=pt)
    fast, _ = check(inp)
    assert fast.info["rows"] == 6 and len(fast.x_pairs) and (fast.x_pairs > 0).any()


def test_every_job_on_its_fastest_type_needs_no_lp():
    """Enough GPUs of each job's best type for all: that allocation is the optimum, no LP solved."""
    rng = np.random.default_rng(3)
    inp = hierarchical_input(rng, 8, 3, tight=False)
    a, _ = check(inp)
    assert a.info["shortcut"] and a.info["lps"] == 0
    best = inp.solo_throughputs.argmax(axis=1)
    np.testing.assert_allclose(a.x[np.arange(8), best], 1.0)


def test_shortcut_with_pair_rows_slower_than_solo():
    rng = np.random.default_rng(4)
    check(hierarchical_input(rng, 6, 2, pairs=4, tight=False))


def test_duals_spare_certificate_lps():
    """Most iterations need at most one probe: the fill's duals certify the bottlenecks."""
    rng = np.random.default_rng(11)
    inp = hierarchical_input(rng, 12, 3)
    a, _ = check(inp)
    assert a.info["lps"] <= 2 * len(a.info["iterations"]) + 1


@pytest.fixture
def failing_highs(monkeypatch):
    """The direct route's HiGHS stops before optimality (an iteration limit of 0)."""
    monkeypatch.setattr(filling, "OPTIONS", {**filling.OPTIONS, "simplex_iteration_limit": 0})
    monkeypatch.setattr(filling, "_local", threading.local())


def test_a_failed_direct_solve_falls_back_to_cvxpy(failing_highs):
    rng = np.random.default_rng(5)
    inp = hierarchical_input(rng, 8, 3)
    fast, slow = routes()
    a, b = fast.allocate(inp), slow.allocate(inp)
    assert fast._cache._entries          # solved by the cvxpy route
    np.testing.assert_allclose(normalized(a, inp), normalized(b, inp), atol=1e-6)


def test_space_sharing_takes_the_shortcut_before_pruning_pairs(monkeypatch):
    """Through `WithPairs` (--space-sharing) the shortcut is tried on every pair, before pruning."""
    from slurm_gavel.policies import make_policy, space_sharing

    monkeypatch.setattr(Hierarchical, "use_direct", True)

    rng = np.random.default_rng(4)
    inp = hierarchical_input(rng, 6, 2, pairs=6, tight=False)
    pruned = []
    real = space_sharing.prune_pairs
    monkeypatch.setattr(space_sharing, "prune_pairs", lambda *a, **kw: pruned.append(1) or real(*a, **kw))
    alloc = make_policy("hierarchical", space_sharing=True).allocate(inp)
    assert alloc.info["shortcut"] and not pruned
    reference = Hierarchical()
    reference.use_direct = False
    np.testing.assert_allclose(normalized(alloc, inp), normalized(reference.allocate(inp), inp), atol=1e-6)
    # where it does not hold, pairs are pruned and filled as before
    tight = hierarchical_input(np.random.default_rng(6), 8, 1, pairs=6)
    assert not make_policy("hierarchical", space_sharing=True).allocate(tight).info["shortcut"]
    assert pruned


def test_two_identical_jobs_sharing_unequally_are_not_one_class():
    """A class of two has one pair between them: with unequal sides it cannot be one row (symmetry.py)."""
    t = np.array([[2.0], [2.0], [1.0]])
    inp = make_input(t, [1.0], pair_jobs=np.array([[0, 1]]),
                     pair_throughputs=np.array([[[1.8, 0.9]]]))
    a, _ = check(inp)
    assert a.info["rows"] == 3


def test_shortcut_spreads_jobs_over_types_they_run_as_fast_on():
    """Type-blind speeds (--agnostic): no one type has GPUs for all, but jobs fit over the tied types."""
    t = np.array([[3.0, 3.0, 1.0], [2.0, 2.0, 2.0], [5.0, 5.0, 0.0], [1.0, 1.0, 1.0], [4.0, 1.0, 1.0]])
    inp = make_input(t, [2.0, 2.0, 1.0])
    a, _ = check(inp)
    assert a.info["shortcut"]
    best = np.isclose(t, t.max(axis=1, keepdims=True))
    assert (a.x[~best] == 0).all() and np.allclose(a.x.sum(axis=1), 1.0)

"""Identical jobs solved as one row: same optimum as the full LP, every job its class's share."""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.inputs import assert_feasible, make_input
from slurm_gavel.policies import POLICIES, make_policy
from slurm_gavel.policies.lp import LinearPolicy
from slurm_gavel.policies.symmetry import _ring, _transport, find_classes

# The FIFO-ranked LP ranks every job apart, so it never has two identical jobs.
LINEAR = sorted(name for name, cls in POLICIES.items()
                if issubclass(cls, LinearPolicy) and name != "fifo_ranked")


def workload(rng, kinds=4, copies=(1, 2, 3, 5), types=2, pairs=False, prices=True):
    """Jobs of a few kinds (same numbers within a kind); all pairs between them if asked."""
    base = rng.uniform(1.0, 50.0, size=(kinds, types))
    steps = rng.uniform(1e4, 1e5, size=kinds)
    kind = np.repeat(np.arange(kinds), copies[:kinds])
    n = len(kind)
    fields = dict(steps_remaining=steps[kind], prices=rng.uniform(0.5, 3.0, types) if prices else None)
    if pairs:
        share = rng.uniform(0.4, 0.8, size=(kinds, kinds, types, 2))
        a, b = np.triu_indices(n, k=1)
        solo = base[kind]
        pt = np.stack([solo[a] * share[kind[a], kind[b], :, 0],
                       solo[b] * share[kind[a], kind[b], :, 1]], axis=2)
        same = kind[a] == kind[b]
        pt[same, :, 1] = pt[same, :, 0]        # a kind paired with itself is symmetric
        fields.update(pair_jobs=np.stack([a, b], axis=1), pair_throughputs=pt)
    return make_input(base[kind], rng.integers(2, 5, size=types), **fields), kind


@pytest.mark.parametrize("pairs", [False, True])
@pytest.mark.parametrize("name", LINEAR)
def test_classes_give_the_full_optimum(name, pairs):
    if pairs and not POLICIES[name].supports_space_sharing:
        pytest.skip("no space sharing")
    for seed in range(3):
        inp, kind = workload(np.random.default_rng(seed), pairs=pairs)
        fast = make_policy(name, space_sharing=pairs)
        full = make_policy(name, space_sharing=pairs)
        inner = getattr(full, "policy", full)
        inner.use_symmetry = False
        a, b = fast.allocate(inp), full.allocate(inp)
        assert "job_classes" in a.info and "job_classes" not in b.info
        assert a.objective == pytest.approx(b.objective, rel=1e-5, abs=1e-7)
        assert_feasible(a, inp)
        # Identical jobs get identical single rows and identical throughputs.
        got = a.effective_throughputs(inp)
        for k in np.unique(kind):
            rows = a.x[kind == k]
            assert np.allclose(rows, rows[0], atol=1e-9)
            assert np.allclose(got[kind == k], got[kind == k][0], rtol=1e-6, atol=1e-9)


def test_no_classes_when_pairs_depend_on_the_job():
    inp, _ = workload(np.random.default_rng(0), pairs=True)
    pt = inp.pair_throughputs.copy()
    pt[0] *= 0.9                                   # one pair differs from its kind
    odd = make_input(inp.throughputs, inp.counts, pair_jobs=inp.pair_jobs, pair_throughputs=pt)
    assert find_classes(odd, []) is None
    assert find_classes(inp, []) is not None


@pytest.mark.parametrize("n_a,n_b", [(1, 1), (1, 4), (3, 5), (4, 4), (7, 2)])
def test_transport_spreads_evenly(n_a, n_b):
    i, j, w = _transport(n_a, n_b)
    assert len(w) <= n_a + n_b - 1
    assert np.allclose(np.bincount(i, w, n_a), 1 / n_a)
    assert np.allclose(np.bincount(j, w, n_b), 1 / n_b)


@pytest.mark.parametrize("size", [2, 3, 6])
def test_ring_gives_every_job_the_same_share(size):
    i, j, w = _ring(size)
    assert (i != j).all()
    share = np.bincount(i, w, size) + np.bincount(j, w, size)
    assert np.allclose(share, 2 / size)
    assert w.sum() == pytest.approx(1.0)

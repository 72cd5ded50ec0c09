"""One contract for every throughput source (core/interfaces.py ThroughputSource), run on each.

The sources: `TableThroughputs` (answers straight from a table: the
simulator's oracle) and `EstimatingThroughputs` (learns from measurements,
estimates the rest; the daemon's), both given the same table, the
repository's examples/toy_throughputs.json.  The cases are the same for both;
what differs is declared by the source itself (`learns`) and checked against
what each implementation is known to do.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from slurm_gavel.core.backend import JobState, Measurement
from slurm_gavel.core.interfaces import ThroughputSource
from slurm_gavel.core.throughputs import JobThroughputs
from slurm_gavel.estimator.learning import EstimatingThroughputs
from slurm_gavel.estimator.table import TableThroughputs, ThroughputTable

TABLE = ThroughputTable.from_gavel_json(Path(__file__).resolve().parents[2] / "examples" / "toy_throughputs.json")
TYPES = ("k80", "v100", "p100")          # not the table's order: columns follow the caller's


@pytest.fixture(params=["table", "estimating"])
def source(request) -> tuple[ThroughputSource, bool]:
    """(a fresh source, whether it is meant to learn from measurements)."""
    if request.param == "table":
        return TableThroughputs(TABLE), False
    return EstimatingThroughputs(TABLE), True


def jobs(*specs) -> list[JobState]:
    return [JobState(str(i), model, sf, 0.0) for i, (model, sf) in enumerate(specs)]


def test_it_is_a_throughput_source(source):
    src, _ = source
    assert isinstance(src, ThroughputSource)


def test_known_jobs_get_the_tables_rows_in_job_and_type_order(source):
    src, _ = source
    js = jobs(("rl-agent", 1), ("convnet", 2), ("convnet", 1))
    got = src.lookup(js, TYPES)
    assert isinstance(got, JobThroughputs)
    assert got.solo.shape == got.unconsolidated.shape == (3, 3)
    for i, j in enumerate(js):
        row = TABLE.solo(j.job_type, j.scale_factor)
        assert got.solo[i].tolist() == pytest.approx([row[wt] for wt in TYPES])


def test_pairs_come_only_when_asked_and_index_the_jobs_given(source):
    src, _ = source
    js = jobs(("convnet", 1), ("translation", 1), ("rl-agent", 1))
    alone = src.lookup(js, TYPES)
    assert alone.pair_jobs.shape == (0, 2) and alone.pair_throughputs.shape == (0, 3, 2)
    both = src.lookup(js, TYPES, include_pairs=True)
    assert both.pair_jobs.shape[1] == 2 and both.pair_throughputs.shape == (len(both.pair_jobs), 3, 2)
    assert ((both.pair_jobs >= 0) & (both.pair_jobs < len(js))).all()
    pairs = {tuple(p): thr for p, thr in zip(both.pair_jobs.tolist(), both.pair_throughputs)}
    # convnet with rl-agent, as the table has it (each job's steps/s, per type)
    measured = TABLE.pair("convnet", "rl-agent", 1)
    thr = pairs[(0, 2)] if (0, 2) in pairs else pairs[(2, 0)][:, ::-1]
    np.testing.assert_allclose(thr, [measured[wt] for wt in TYPES])


def test_an_unknown_model_is_no_error_and_no_negative_speed(source):
    src, _ = source
    got = src.lookup(jobs(("convnet", 1), ("never-profiled", 1)), TYPES)
    unknown = got.solo[1]
    assert np.isnan(unknown).all() or (unknown > 0).all()
    assert got.solo[0].tolist() == pytest.approx([TABLE.solo("convnet", 1)[wt] for wt in TYPES])


def test_measurements_change_the_answers_exactly_when_the_source_learns(source):
    src, meant_to_learn = source
    assert src.learns is meant_to_learn
    js = jobs(("convnet", 1), ("rl-agent", 1))
    before = src.lookup(js, TYPES)
    assert not src.stale()
    stale = False
    for _ in range(10):          # one call per observed round, as the engine makes them
        src.record([Measurement("0", "v100", 2 * TABLE.solo("convnet", 1)["v100"])])
        stale = stale or src.stale()
    after = src.lookup(js, TYPES)
    v100 = TYPES.index("v100")
    if meant_to_learn:
        assert stale                # the policy's numbers moved: a re-solve is due
        assert after.solo[0, v100] == pytest.approx(2 * before.solo[0, v100])
    else:
        assert not stale
        assert (after.solo == before.solo).all()
    assert after.solo[1].tolist() == before.solo[1].tolist()      # the other job was not measured
    assert not src.stale()          # just looked up: nothing moved since

"""The throughput estimator (issue 6): completion, fingerprints, exploration, learning, persistence, CLI."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from slurm_gavel.core.backend import JobState, Measurement
from slurm_gavel.estimator.learning import (DEFAULT_EXPLORE_ROUNDS, DEFAULT_OPTIMISM,
                                            EstimatingThroughputs, Measured, ReferenceSet, complete)
from slurm_gavel.policies import make_policy
from slurm_gavel.sim.simulator import simulate
from slurm_gavel.daemon.store import SqliteStore
from slurm_gavel.estimator.table import TableThroughputs
from slurm_gavel.cli.throughputs import main as tp_main
from slurm_gavel.estimator.table import ThroughputTable
from slurm_gavel.sim.workloads import TraceJob
from slurm_gavel.estimator.gavel_data import gavel_data
from tests.support.estimator import (SCALE, SHAPES, TWIN_SCALE, TYPES, _fraction, _observation, job,
                                     make_table, measure)

GAVEL = gavel_data("simulation_throughputs.json")


# -- matrix completion ---------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_completion_recovers_hidden_entries_of_a_low_rank_matrix(seed):
    rng = np.random.default_rng(seed)
    n, c, r = 40, 25, 3
    x = rng.normal(size=(n, r)) @ rng.normal(size=(r, c)) + rng.normal(size=c)
    mask = rng.random((n, c)) > 0.3                       # 30% hidden
    done, mu, u, v = complete(np.where(mask, x, np.nan), rank=r, reg=1e-4)
    hidden = ~mask
    err = np.abs(done[hidden] - x[hidden])
    assert np.sqrt((err ** 2).mean()) < 0.02 * x.std()
    assert u.shape == (n, r) and v.shape == (c, r)


def test_completion_with_a_free_row_offset_on_some_columns():
    rng = np.random.default_rng(5)
    n, c, r = 30, 12, 2
    x = rng.normal(size=(n, r)) @ rng.normal(size=(r, c))
    offsets = rng.normal(scale=3.0, size=n)
    cols = np.arange(c) < 4                                 # like log throughputs: scale is free
    x = x + offsets[:, None] * cols
    mask = rng.random((n, c)) > 0.25
    mask[:, 0] = True                                       # every row keeps one offset column
    done, *_ = complete(np.where(mask, x, np.nan), rank=r, reg=1e-4, offset_columns=cols)
    assert np.abs(done[~mask] - x[~mask]).max() < 0.05 * np.abs(x).max()


def test_completion_of_a_full_matrix_keeps_it():
    x = np.outer(np.arange(1, 6), np.arange(1, 5)).astype(float)
    done, *_ = complete(x, rank=1, reg=1e-6)
    assert np.allclose(done, x, rtol=1e-4)


def test_ema_and_material_changes():
    m = Measured(alpha=0.25)
    assert m.add(("k",), 4.0, 0.0)                         # first sample: material
    assert not m.add(("k",), 4.0, 1.0)
    assert m.get(("k",)).samples == 2
    assert m.add(("k",), 0.0, 2.0)                         # 4 -> 3: a 25% move
    assert m.get(("k",)).value == pytest.approx(3.0)


# -- fingerprints --------------------------------------------------------------------------
def test_fingerprint_of_a_scaled_copy_finds_its_original():
    rs = ReferenceSet(make_table(), 1, TYPES)
    conv = np.array(SHAPES["conv"]) * SCALE["conv"]
    fp = rs.fingerprint({0: conv[0] / 3, 2: conv[2] / 3})   # measured on v100 and k80, 3x slower
    assert fp.nearest == "conv"
    assert fp.scale == pytest.approx(1 / 3)
    assert fp.solo == pytest.approx(conv / 3)
    assert fp.ranking[0] == "conv" and set(fp.ranking) == set(SHAPES)


def test_fingerprint_uses_pair_measurements_too():
    rs = ReferenceSet(make_table(), 1, TYPES)
    # one solo measurement cannot tell shapes apart; pair fractions of "rl" can
    pairs = {(t, rs.index[b]): _fraction("rl", b, t) for t in range(3) for b in SHAPES}
    fp = rs.fingerprint({2: 9.0}, pairs)
    assert fp.nearest == "rl"


# -- the throughput source -----------------------------------------------------------------
def test_a_known_model_starts_from_its_reference_row():
    table = make_table()
    est = EstimatingThroughputs(table)
    jobs = [job(0, "conv"), job(1, "rnn")]
    got = est.lookup(jobs, TYPES, include_pairs=True)
    want = TableThroughputs(table).lookup(jobs, TYPES, include_pairs=True)
    assert np.allclose(got.solo, want.solo)
    assert (got.pair_jobs == want.pair_jobs).all()
    assert np.allclose(got.pair_throughputs, want.pair_throughputs)
    row = est.estimate_job("0", TYPES)
    assert row.kinds == ("reference",) * 3 and row.phase == "known"
    assert (row.confidence > 0).all()


def test_measurements_replace_estimates_and_rescale_the_rest():
    table = make_table()
    est = EstimatingThroughputs(table)
    est.lookup([job(0, "conv")], TYPES)
    ref = np.array(SHAPES["conv"]) * SCALE["conv"]
    measure(est, [("0", "v100", ref[0] * 0.5)])            # runs at half the table's speed here
    row = est.estimate_job("0", TYPES)
    assert row.kinds == ("measured", "reference", "reference")
    assert row.solo == pytest.approx(ref * 0.5)
    assert row.confidence[0] == pytest.approx(0.5)
    measure(est, [("0", "v100", ref[0] * 0.5)], rounds=3)
    assert est.estimate_job("0", TYPES).confidence[0] == pytest.approx(1 - 0.5 ** 4)


def test_an_unknown_model_is_explored_then_fingerprinted():
    est = EstimatingThroughputs(make_table())
    twin = np.array(SHAPES["conv"]) * TWIN_SCALE
    jobs = [job(0, "twin"), job(1, "conv")]
    # nothing known: 1.0 everywhere, no pair rows for it
    t = est.lookup(jobs, TYPES, include_pairs=True)
    assert t.solo[0] == pytest.approx([1.0, 1.0, 1.0])
    assert len(t.pair_jobs) == 0
    assert est.estimate_job("0", TYPES).kinds == ("explore",) * 3       # all look alike, at 1.0
    # measured on k80: the other types look better, so the policy tries them
    measure(est, [("0", "k80", twin[2])])
    row = est.estimate_job("0", TYPES)
    assert row.phase == "explore"
    assert row.solo == pytest.approx([DEFAULT_OPTIMISM * twin[2]] * 2 + [twin[2]])
    assert row.kinds == ("explore", "explore", "measured")
    assert est.lookup(jobs, TYPES).solo[0, 2] == pytest.approx(twin[2])
    # then on v100; after the exploration budget, a fingerprint fills p100
    measure(est, [("0", "v100", twin[0])], rounds=DEFAULT_EXPLORE_ROUNDS)
    row = est.estimate_job("0", TYPES)
    assert row.phase == "fingerprint" and row.proxy == "conv"
    assert row.kinds == ("measured", "fingerprint", "measured")
    assert row.solo == pytest.approx(twin)
    assert 0 < row.confidence[1] <= 0.5
    # and its pairs come from conv's
    t = est.lookup(jobs, TYPES, include_pairs=True)
    assert [tuple(p) for p in t.pair_jobs] == [(0, 1)]
    conv = np.array(SHAPES["conv"]) * SCALE["conv"]
    want = [[_fraction("conv", "conv", i) * twin[i], _fraction("conv", "conv", i) * conv[i]]
            for i in range(3)]
    assert t.pair_throughputs[0] == pytest.approx(np.array(want))


def test_exploration_is_bounded_even_if_a_type_is_never_tried():
    est = EstimatingThroughputs(make_table(), explore_rounds=3)
    est.lookup([job(0, "twin")], TYPES)
    measure(est, [("0", "k80", 2.0)], rounds=2)
    assert est.estimate_job("0", TYPES).phase == "explore"
    measure(est, [("0", "k80", 2.0)])
    row = est.estimate_job("0", TYPES)
    assert row.phase == "fingerprint"
    assert "explore" not in row.kinds and np.isfinite(row.solo).all()


def hinted(i, model, speeds) -> JobState:
    return JobState(str(i), model, 1, 0.0, 1000.0, speeds=tuple(sorted(speeds.items())))


def test_a_full_hint_needs_no_exploration_and_is_what_the_policy_sees():
    est = EstimatingThroughputs(make_table())
    hint = {"v100": 6.0, "p100": 4.0, "k80": 0.5}
    t = est.lookup([hinted(0, "mystery", hint)], TYPES)
    assert t.solo[0] == pytest.approx([6.0, 4.0, 0.5])
    row = est.estimate_job("0", TYPES)
    assert row.kinds == ("hint",) * 3 and row.phase != "explore"
    assert (row.confidence > 0.6).all()            # above a reference row's


def test_a_hint_is_rescaled_by_measurements_and_replaced_where_measured():
    est = EstimatingThroughputs(make_table())
    est.lookup([hinted(0, "mystery", {"v100": 6.0, "p100": 4.0})], TYPES)
    row = est.estimate_job("0", TYPES)
    # k80 has no hint: explored (it looks better than the best hinted type)
    assert row.kinds == ("hint", "hint", "explore") and row.phase == "explore"
    assert row.solo[2] == pytest.approx(DEFAULT_OPTIMISM * 6.0)
    measure(est, [("0", "v100", 3.0)])             # half the hinted speed: so is p100, likely
    row = est.estimate_job("0", TYPES)
    assert row.kinds[:2] == ("measured", "hint")
    assert row.solo[:2] == pytest.approx([3.0, 2.0])


def test_a_hint_beats_the_reference_row_of_a_known_model():
    est = EstimatingThroughputs(make_table())
    est.lookup([hinted(0, "conv", {"p100": 99.0})], TYPES)
    row = est.estimate_job("0", TYPES)
    ref = np.array(SHAPES["conv"]) * SCALE["conv"]
    assert row.kinds == ("reference", "hint", "reference")
    assert row.solo[1] == 99.0
    # the reference row is scaled to agree with the hint where both say something
    assert row.solo[0] == pytest.approx(ref[0] * 99.0 / ref[1])


def test_a_changed_hint_is_taken():
    est = EstimatingThroughputs(make_table())
    est.lookup([hinted(0, "mystery", {"v100": 6.0, "p100": 4.0, "k80": 1.0})], TYPES)
    t = est.lookup([hinted(0, "mystery", {"v100": 2.0, "p100": 4.0, "k80": 1.0})], TYPES)
    assert t.solo[0] == pytest.approx([2.0, 4.0, 1.0])


def test_measured_pairs_replace_estimated_ones():
    est = EstimatingThroughputs(make_table())
    jobs = [job(0, "conv"), job(1, "rnn")]
    est.lookup(jobs, TYPES, include_pairs=True)
    est.record([Measurement("0", "p100", 0.0, partner="1"), Measurement("1", "p100", 0.0, partner="0")])
    t = est.lookup(jobs, TYPES, include_pairs=True)
    assert t.pair_throughputs[0, 1] == pytest.approx([0.0, 0.0])      # they do not fit together there
    assert (t.pair_throughputs[0, 0] > 0).all()


@pytest.mark.parametrize("reference", [None, "table"])
def test_lookup_never_gives_an_all_nan_row(reference):
    est = EstimatingThroughputs(make_table() if reference else None, explore_rounds=1)
    jobs = [job(0, "never-seen"), job(1, "zeros"), job(2, "conv", sf=4)]
    est.lookup(jobs, TYPES)
    measure(est, [("1", "v100", 0.0), ("1", "k80", 0.0)], rounds=2)     # nothing ever positive
    t = est.lookup(jobs, TYPES, include_pairs=True)
    assert np.isfinite(t.solo).all() and (t.solo > 0).any(axis=1).all()
    # measured 0 where it ran (it cannot run there); the untried type gets the default
    assert t.solo[1] == pytest.approx([0.0, 1.0, 0.0])
    measure(est, [("1", "p100", 0.0)])
    assert est.lookup(jobs, TYPES).solo[1] == pytest.approx([1.0, 1.0, 1.0])   # never stall


def test_no_reference_learns_and_fills_with_the_mean():
    est = EstimatingThroughputs(None, explore_rounds=2)
    est.lookup([job(0, "m")], TYPES)
    measure(est, [("0", "v100", 8.0)])
    measure(est, [("0", "k80", 2.0)])
    row = est.estimate_job("0", TYPES)
    assert row.kinds == ("measured", "mean", "measured")
    assert row.solo[1] == pytest.approx(4.0)               # geometric mean of 8 and 2


def test_jobs_of_a_model_learn_from_each_other_unless_told_not_to():
    for share in (True, False):
        est = EstimatingThroughputs(make_table(), share_across_jobs=share)
        est.lookup([job(0, "twin")], TYPES)
        measure(est, [("0", "v100", 5.0)])
        est.lookup([job(0, "twin"), job(1, "twin")], TYPES)
        row = est.estimate_job("1", TYPES)
        assert (row.kinds[0] == "learned") == share
        assert (row.solo[0] == pytest.approx(5.0)) == share


def test_a_new_reference_keeps_what_was_measured():
    est = EstimatingThroughputs(make_table(), stale_rounds=0)
    est.lookup([job(0, "conv")], TYPES)
    measure(est, [("0", "v100", 40.0)])
    est.set_reference(make_table(models=("rnn", "rl", "lm")))      # conv is gone from it
    assert est.stale()
    row = est.estimate_job("0", TYPES)
    assert row.kinds[0] == "measured" and row.phase != "known"


def test_leave_one_out_never_uses_the_jobs_own_model():
    est = EstimatingThroughputs(make_table(), leave_one_out=True, explore_rounds=1)
    conv = np.array(SHAPES["conv"]) * SCALE["conv"]
    est.lookup([job(0, "conv")], TYPES)
    assert est.estimate_job("0", TYPES).phase == "explore"
    measure(est, [("0", "v100", conv[0]), ("0", "k80", conv[2])])
    row = est.estimate_job("0", TYPES)
    assert row.phase == "fingerprint" and row.proxy != "conv"


def test_stale_waits_a_few_rounds_to_take_several_measurements_in_at_once():
    est = EstimatingThroughputs(make_table())                # stale_rounds=3
    est.lookup([job(0, "conv")], TYPES)
    measure(est, [("0", "v100", 10.0)])
    assert not est.stale()
    measure(est, [("0", "v100", 10.0)], rounds=2)
    assert est.stale()


def test_an_exploring_job_measured_on_a_new_type_is_stale_at_once():
    """Exploration must not wait `stale_rounds`: with explore_rounds=2 it would otherwise
    spend both rounds on its first type (seen on the real cluster)."""
    est = EstimatingThroughputs(make_table(), explore_rounds=2)        # stale_rounds=3
    est.lookup([job(0, "twin")], TYPES)
    measure(est, [("0", "v100", 5.0)])
    assert est.stale()
    est.lookup([job(0, "twin")], TYPES)
    assert not est.stale()
    measure(est, [("0", "v100", 5.2)])                   # the same type again: no news
    assert not est.stale()


def test_stale_when_a_served_estimate_moves():
    est = EstimatingThroughputs(make_table(), stale_rounds=0)
    est.lookup([job(0, "conv")], TYPES)
    assert not est.stale()
    measure(est, [("0", "v100", 40.0)])                    # the table says 40: no change
    assert not est.stale()
    measure(est, [("0", "v100", 10.0)])                    # 40 -> 32.5
    assert est.stale()
    est.lookup([job(0, "conv")], TYPES)
    assert not est.stale()
    # a pair the policy was told can share turns out not to
    jobs = [job(0, "conv"), job(1, "rnn")]
    t = est.lookup(jobs, TYPES, include_pairs=True)
    assert (t.pair_throughputs[0, 1] > 0).all()
    est.record([Measurement("1", "p100", t.pair_throughputs[0, 1, 1], partner="0")])
    assert not est.stale()
    est.record([Measurement("0", "p100", 0.0, partner="1")])
    assert est.stale()


def test_a_daemon_observing_every_few_seconds_counts_one_sample_per_round():
    now = [0.0]
    est = EstimatingThroughputs(make_table(), sample_seconds=360, explore_rounds=2, clock=lambda: now[0])
    est.lookup([job(0, "twin")], TYPES)
    for tick in range(30):                                  # one round, observed every 12 s
        now[0] = tick * 12.0
        measure(est, [("0", "k80", 2.0 + 0.01 * tick)])
    s = est.jobs_measured.get(("0", "k80", "", False))
    assert s.samples == 1 and s.value > 2.0                 # smoothed all along, counted once
    assert est.estimate_job("0", TYPES).phase == "explore"
    now[0] = 400.0
    measure(est, [("0", "k80", 2.0)])
    assert est.jobs_measured.get(("0", "k80", "", False)).samples == 2
    assert est.estimate_job("0", TYPES).phase == "fingerprint"


def test_measurements_persist_in_sqlite_and_estimates_are_written(tmp_path):
    db = tmp_path / "state.db"
    store = SqliteStore(db)
    est = EstimatingThroughputs(make_table(), store=store)
    jobs = [job(0, "twin")]
    store.observe(0.0, _observation(jobs))
    est.lookup(jobs, TYPES)
    measure(est, [("0", "k80", 2.0)], rounds=3)
    est.lookup(jobs, TYPES)
    rows = {(e["job"], e["worker_type"]): e for e in store.throughput_estimates()}
    assert rows[("0", "k80")]["kind"] == "measured" and rows[("0", "v100")]["kind"] == "explore"
    store.close()
    again = EstimatingThroughputs(make_table(), store=SqliteStore(db))
    again.lookup(jobs, TYPES)
    row = again.estimate_job("0", TYPES)
    assert row.kinds[2] == "measured" and row.samples[2] == 3
    assert again.models_measured.get(("twin", 1, "k80", "", False)).samples == 3
    again.forget(["0"])
    model_rows, job_rows = again.store.load_throughputs()
    assert job_rows == [] and len(model_rows) == 1


# -- in the simulator ------------------------------------------------------------------------
def _trace(models, n=24, gap=900.0):
    out = []
    for i in range(n):
        m = models[i % len(models)]
        steps = int(3600 * 3 * SHAPES["conv" if m == "twin" else m][0])
        out.append(TraceJob(m, "", "", "", False, steps, 1, 1.0, None, i * gap))
    return out


@pytest.mark.parametrize("space_sharing", [False, True])
def test_a_simulation_with_unknown_models_completes_every_job(space_sharing):
    truth = make_table(twin=True)
    reference = make_table()                   # does not know "twin"
    est = EstimatingThroughputs(reference)
    trace = _trace(["twin", "conv", "rnn", "twin", "rl", "gan"])
    sim = simulate(trace, truth, {"v100": 2, "p100": 2, "k80": 2},
                   make_policy("max_min_fairness", space_sharing=space_sharing),
                   space_sharing=space_sharing, throughputs=est)
    assert sim.complete and not sim.solver_errors
    assert all(math.isfinite(r.finish) and r.steps_done == r.total_steps for r in sim.results.values())
    # the twin's jobs were tried on more than one type
    twins = [r for r in sim.results.values() if r.job_type == "twin"]
    assert max(sum(1 for s in r.seconds.values() if s > 0) for r in twins) >= 2
    assert est.models_measured.get(("twin", 1, "v100", "", False)) is not None


def test_on_gavel_table_the_estimator_with_the_model_known_matches_the_oracle():
    from slurm_gavel.sim.workloads import generate_trace
    table = ThroughputTable.from_gavel_json(GAVEL)
    trace = generate_trace(table, n_jobs=30, rate_per_hour=2.0, seed=3)
    cluster = {"v100": 4, "p100": 4, "k80": 4}
    policy = make_policy("max_min_fairness", space_sharing=True)
    oracle = simulate(trace, table, cluster, policy, space_sharing=True)
    known = simulate(trace, table, cluster, policy, space_sharing=True,
                     throughputs=EstimatingThroughputs(table))
    assert known.complete and oracle.complete
    assert {k: r.finish for k, r in known.results.items()} == pytest.approx(
        {k: r.finish for k, r in oracle.results.items()})
    loo = simulate(trace, table, cluster, policy, space_sharing=True,
                   throughputs=EstimatingThroughputs(table, leave_one_out=True))
    assert loo.complete and not loo.solver_errors


# -- CLI ---------------------------------------------------------------------------------------
def _cli(*argv):
    return tp_main(["throughputs", *map(str, argv)])


def test_cli_json_round_trip(tmp_path):
    src = tmp_path / "table.json"
    make_table().to_gavel_json(src)
    db = tmp_path / "state.db"
    assert _cli("import", src, "--db", db) == 0
    out = tmp_path / "out.json"
    assert _cli("export", out, "--db", db) == 0
    a, b = ThroughputTable.from_gavel_json(src), ThroughputTable.from_gavel_json(out)
    assert a.solo_by_type == b.solo_by_type and a.pairs_by_type == b.pairs_by_type
    assert set(a.worker_types) == set(b.worker_types)


def test_cli_round_trips_gavels_table(tmp_path):
    db, out = tmp_path / "state.db", tmp_path / "out.json"
    assert _cli("import", GAVEL, "--db", db) == 0
    assert _cli("export", out, "--db", db) == 0
    a, b = ThroughputTable.from_gavel_json(GAVEL), ThroughputTable.from_gavel_json(out)
    assert a.to_gavel_dict() == b.to_gavel_dict()


def test_cli_csv_round_trip_and_show(tmp_path, capsys):
    src = tmp_path / "t.csv"
    src.write_text("model,worker_type,scale_factor,steps_per_second\n"
                   "ResNet-50,v100,1,10.5\nResNet-50,k80,1,1.25\nA3C,v100_unconsolidated,2,3\n")
    db = tmp_path / "state.db"
    assert _cli("import", src, "--db", db, "--samples", "4") == 0
    out = tmp_path / "out.csv"
    assert _cli("export", out, "--db", db) == 0
    assert sorted(out.read_text().splitlines()) == sorted(
        ["model,worker_type,scale_factor,steps_per_second", "ResNet-50,v100,1,10.5",
         "ResNet-50,k80,1,1.25", "A3C,v100_unconsolidated,2,3.0"])
    capsys.readouterr()
    assert _cli("show", "--db", db) == 0
    text = capsys.readouterr().out
    assert "MEASURED" in text and "ResNet-50" in text and "ESTIMATES" in text
    assert _cli("show", "--db", db, "--json", "--model", "A3C") == 0
    data = json.loads(capsys.readouterr().out)
    assert [(r["model"], r["spread"], r["samples"]) for r in data["measured"]] == [("A3C", 1, 4)]


def test_cli_show_lists_the_estimates_of_active_jobs(tmp_path, capsys):
    db = tmp_path / "state.db"
    store = SqliteStore(db)
    est = EstimatingThroughputs(make_table(), store=store)
    jobs = [job(7, "twin"), job(8, "conv")]
    store.observe(0.0, _observation(jobs))
    est.lookup(jobs, TYPES)
    measure(est, [("7", "k80", 2.0)])
    est.lookup(jobs, TYPES)
    store.close()
    assert _cli("show", "--db", db) == 0
    text = capsys.readouterr().out
    assert "explore" in text and "reference" in text and "measured" in text


@pytest.mark.parametrize("content,where,problem", [
    ("model,type,scale_factor,steps_per_second\n", ":1", "expected the header"),
    ("model,worker_type,scale_factor,steps_per_second\nA,v100,1,fast\n", ":2", "must be a number"),
    ("model,worker_type,scale_factor,steps_per_second\nA,v100,1,1\nA,v100,0,1\n", ":3", ">= 1"),
    ("model,worker_type,scale_factor,steps_per_second\nA,v100,1,1\nA,v100,1,2\n", ":3", "already given on line 2"),
    ("model,worker_type,scale_factor,steps_per_second\nA,v100,1\n", ":2", "expected 4 fields"),
    ("model,worker_type,scale_factor,steps_per_second\nA,v100,1,-2\n", ":2", ">= 0"),
    ("", ":1", "empty file"),
])
def test_cli_csv_errors_name_the_file_and_line(tmp_path, capsys, content, where, problem):
    src = tmp_path / "bad.csv"
    src.write_text(content)
    assert _cli("import", src, "--db", tmp_path / "db") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"{src}{where}" in err and problem in err


def test_cli_json_errors_and_other_failures(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"v100": {"(\'A\', 1)": {"null": 1.0},\n}')
    assert _cli("import", bad, "--db", tmp_path / "db") == 2
    err = capsys.readouterr().err.strip()
    assert str(bad) in err and "line 2" in err and len(err.splitlines()) == 1
    neg = tmp_path / "neg.json"
    neg.write_text(json.dumps({"v100": {"('A', 1)": {"null": -1}}}))
    assert _cli("import", neg, "--db", tmp_path / "db") == 2
    assert "('A', 1)" in capsys.readouterr().err
    assert _cli("import", tmp_path / "missing.csv", "--db", tmp_path / "db") == 2
    assert "file not found" in capsys.readouterr().err
    assert _cli("import", tmp_path / "table.txt", "--db", tmp_path / "db") == 2
    assert "--format" in capsys.readouterr().err
    assert _cli("show", "--db", tmp_path / "nothing.db") == 1
    assert "no database" in capsys.readouterr().err


def test_a_failing_fingerprint_falls_back_instead_of_stopping_the_scheduler(monkeypatch):
    from slurm_gavel.estimator import learning as mod

    def broken(self, solo, pairs=None):
        raise np.linalg.LinAlgError("Singular matrix")
    monkeypatch.setattr(mod.ReferenceSet, "fingerprint", broken)
    est = EstimatingThroughputs(make_table(), explore_rounds=1)
    est.lookup([job(0, "twin")], TYPES)
    measure(est, [("0", "v100", 5.0)])
    t = est.lookup([job(0, "twin")], TYPES)
    assert t.solo[0] == pytest.approx([5.0, 5.0, 5.0])
    assert est.estimate_job("0", TYPES).kinds == ("measured", "mean", "mean")

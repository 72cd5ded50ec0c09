"""No user can fool the daemon (issue 11, part B): lying throughputs and extreme weights.

Real parts: the estimator with a real SQLite store in tmp_path, the real
max-min fairness policy, the engine over the simulated cluster, the real
config parser.
"""
from __future__ import annotations

import logging
import math

import numpy as np
import pytest

from slurm_gavel.core.backend import JobState, Measurement
from slurm_gavel.core.clock import SimulatedClock
from slurm_gavel.core.engine import Engine, build_policy_input
from slurm_gavel.core.errors import InputError
from slurm_gavel.core.recompute import Immediate
from slurm_gavel.core.store import MemoryStore
from slurm_gavel.core.throughputs import JobThroughputs
from slurm_gavel.core.weights import WeightLimits
from slurm_gavel.estimator.learning import EstimatingThroughputs
from slurm_gavel.estimator.table import TableThroughputs, ThroughputTable
from slurm_gavel.estimator.trust import Trust
from slurm_gavel.policies import make_policy
from slurm_gavel.sim.simulator import SimulatedCluster
from slurm_gavel.sim.workloads import TraceJob
from slurm_gavel.daemon.config import Config, from_dict
from slurm_gavel.daemon.store import SqliteStore

TYPES = ("v100", "p100", "k80")
CONV = {"v100": 40.0, "p100": 20.0, "k80": 4.0}


def table() -> ThroughputTable:
    rows = {"conv": CONV, "rnn": {"v100": 60.0, "p100": 50.0, "k80": 20.0}}
    return ThroughputTable.from_gavel_dict(
        {wt: {str((m, 1)): {"null": r[wt]} for m, r in rows.items()} for wt in TYPES})


def job(i, user, model="conv", **kw) -> JobState:
    return JobState(str(i), model, 1, 0.0, 1000.0, user=user, account=kw.pop("account", ""), **kw)


def daemon_estimator(store=None, **trust) -> EstimatingThroughputs:
    """The estimator as the daemon builds it: the config's defaults (a shared cluster)."""
    rules = Config().estimator if not trust else Trust(**trust)
    return EstimatingThroughputs(table(), trust=rules, store=store)


def row(est, job_id):
    return dict(zip(TYPES, est.estimate_job(job_id, TYPES).solo))


# -- throughputs ---------------------------------------------------------------------------
def test_a_liars_999999_changes_no_other_jobs_estimate_and_is_bounded_for_itself(tmp_path):
    store = SqliteStore(tmp_path / "state.db")
    est = daemon_estimator(store)
    honest, liar = job(1, "alice"), job(2, "mallory")
    est.lookup([honest, liar], TYPES)
    for _ in range(5):
        est.record([Measurement("1", "v100", 40.0), Measurement("2", "v100", 999999.0),
                    Measurement("2", "p100", math.inf), Measurement("2", "k80", -3.0)])
    newcomer = job(3, "bob")
    est.lookup([honest, liar, newcomer], TYPES)
    assert row(est, "3") == pytest.approx(CONV)        # what the table says: the lie taught nothing
    assert row(est, "1") == pytest.approx(CONV)
    ceiling = Config().estimator.ceiling
    assert max(row(est, "2").values()) <= ceiling * 40.0
    # and nothing of it is in the database, for this daemon or the next one
    model_rows, job_rows = store.load_throughputs()
    assert all(r["steps_per_second"] <= ceiling * 40.0 for r in model_rows + job_rows), (model_rows, job_rows)
    assert all(e["steps_per_second"] <= ceiling * 40.0 for e in store.throughput_estimates())
    store.close()
    again = daemon_estimator(SqliteStore(tmp_path / "state.db"))
    again.lookup([job(4, "carol")], TYPES)
    assert row(again, "4") == pytest.approx(CONV)


def test_a_lie_within_the_ceiling_shapes_only_the_liars_own_row():
    est = daemon_estimator()
    jobs = [job(1, "alice"), job(2, "mallory")]
    est.lookup(jobs, TYPES)
    for _ in range(5):
        est.record([Measurement("1", "v100", 40.0), Measurement("2", "v100", 300.0)])
    est.lookup(jobs + [job(3, "bob")], TYPES)
    assert row(est, "2")["v100"] == pytest.approx(300.0)       # its own measurement, its own row
    assert row(est, "3") == pytest.approx(CONV)
    assert row(est, "1") == pytest.approx(CONV)


def test_an_honest_majority_of_users_still_teaches_the_model_and_the_outlier_is_rejected():
    est = daemon_estimator()
    honest = {1: ("ann", 20.0), 2: ("ben", 21.0), 3: ("cat", 19.0)}
    jobs = [job(i, u) for i, (u, _) in honest.items()] + [job(4, "mallory")]
    est.lookup(jobs, TYPES)
    for _ in range(4):
        est.record([Measurement(str(i), "v100", v) for i, (_, v) in honest.items()]
                   + [Measurement("4", "v100", 300.0)])
    est.lookup(jobs + [job(5, "dan")], TYPES)
    new = est.estimate_job("5", TYPES)
    assert new.kinds[0] == "learned"
    assert 19.0 <= new.solo[0] <= 21.0
    # the other types: the table's shape, scaled to what the majority measured
    assert new.solo[1] / new.solo[0] == pytest.approx(CONV["p100"] / CONV["v100"])


def test_one_user_with_many_jobs_is_not_a_majority():
    est = daemon_estimator()
    jobs = [job(i, "mallory") for i in range(1, 6)]
    est.lookup(jobs, TYPES)
    est.record([Measurement(str(i), "v100", 300.0) for i in range(1, 6)])
    est.lookup(jobs + [job(9, "bob")], TYPES)
    assert row(est, "9") == pytest.approx(CONV)


def test_a_trusted_users_measurements_are_shared_at_once():
    est = daemon_estimator(trusted_users=frozenset({"alice"}), shared_min_users=2)
    est.lookup([job(1, "alice")], TYPES)
    est.record([Measurement("1", "v100", 30.0)])
    est.lookup([job(1, "alice"), job(2, "bob")], TYPES)
    assert est.estimate_job("2", TYPES).kinds[0] == "learned"
    assert row(est, "2")["v100"] == pytest.approx(30.0)


def test_a_model_the_table_does_not_know_is_bounded_by_the_fastest_row_of_the_type():
    est = daemon_estimator()
    est.lookup([job(1, "mallory", model="mystery")], TYPES)
    est.record([Measurement("1", "v100", 599.0), Measurement("1", "p100", 501.0)])
    r = row(est, "1")
    assert r["v100"] == pytest.approx(599.0)                      # 10 x 60 (rnn) is the ceiling
    assert r["p100"] != pytest.approx(501.0)                      # over 10 x 50: dropped


def test_a_hint_is_bounded_like_a_measurement():
    est = daemon_estimator()
    est.lookup([job(1, "mallory", speeds=(("v100", 999999.0), ("k80", 1.0)))], TYPES)
    assert row(est, "1")["v100"] <= Config().estimator.ceiling * 40.0


def test_implausible_reports_are_logged_naming_the_job_once_in_a_while(caplog):
    est = daemon_estimator()
    est.lookup([job(7, "mallory")], TYPES)
    with caplog.at_level(logging.WARNING, logger="slurm_gavel.estimator"):
        for _ in range(20):
            est.record([Measurement("7", "v100", 999999.0), Measurement("7", "k80", math.nan)])
    lines = [r.getMessage() for r in caplog.records if "implausible" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "job 7" in lines[0]


def test_the_library_default_still_shares_between_jobs_of_one_user():
    """The simulator (every job honest, no users) learns across jobs as before."""
    est = EstimatingThroughputs(table())
    est.lookup([job(1, "")], TYPES)
    est.record([Measurement("1", "v100", 30.0)])
    est.lookup([job(1, ""), job(2, "")], TYPES)
    assert row(est, "2")["v100"] == pytest.approx(30.0)


# -- weights -------------------------------------------------------------------------------
def _two_jobs(weights, users=("alice", "bob"), accounts=("", "")):
    return [JobState(str(i), "conv", 1, 0.0, 1000.0, weight=w, user=u, account=a)
            for i, (w, u, a) in enumerate(zip(weights, users, accounts))]


def test_weights_1e6_and_1e_6_both_get_an_allocation_with_max_min_fairness():
    jobs = _two_jobs([1e6, 1e-6])
    solo = np.array([[40.0, 20.0, 4.0], [40.0, 20.0, 4.0]])
    t = JobThroughputs(solo, np.full_like(solo, np.nan), np.zeros((0, 2), dtype=np.int64), np.zeros((0, 3, 2)))
    counts = np.array([1.0, 1.0, 1.0])
    policy = make_policy("max_min_fairness")
    inp = build_policy_input(jobs, {}, t, TYPES, counts, 0.0, weight_limits=WeightLimits())
    x = policy.allocate(inp).x
    assert (x.sum(axis=1) > 0).all(), x
    assert inp.weights.max() / inp.weights.min() == pytest.approx(100.0)   # [0.1, 10]


def test_the_engine_gives_both_jobs_gpus_despite_extreme_weights():
    tbl = table()
    cluster = {"v100": 1, "k80": 1}
    trace = [TraceJob("conv", "", "", "", False, 10**6, 1, w, None, 0.0) for w in (1e6, 1e-6)]
    clock = SimulatedClock()
    backend = SimulatedCluster(trace, tbl, cluster, clock, gpus_per_node=1)
    engine = Engine(clock, backend, Immediate(make_policy("max_min_fairness")), TableThroughputs(tbl),
                    MemoryStore(), 360.0, weight_limits=WeightLimits())
    plan = engine.step()
    assert (engine.allocation.x.sum(axis=1) > 0).all(), engine.allocation.x
    assert len(plan.running_jobs) == 2


def test_per_user_and_per_account_caps_from_the_config_apply():
    cfg = from_dict({"weights": {"max": 10, "min": 0.5, "users": {"alice": 4}, "accounts": {"ml": 8}}})
    w = cfg.weights
    assert w.bounded(50, "alice", "ml") == 4          # the user's entry wins over the account's
    assert w.bounded(50, "bob", "ml") == 8
    assert w.bounded(50, "carol", "physics") == 10
    assert w.bounded(0.001, "carol", "physics") == 0.5
    jobs = _two_jobs([50, 50], users=("alice", "carol"), accounts=("ml", "physics"))
    assert list(w.apply(jobs) / w.apply(jobs)[0]) == pytest.approx([1.0, 2.5])


def test_the_defaults_are_safe_for_a_shared_cluster():
    cfg = Config()
    assert cfg.weights.max / cfg.weights.min <= 100
    assert cfg.estimator.shared_min_users >= 2 and math.isfinite(cfg.estimator.ceiling)


@pytest.mark.parametrize("data, where", [
    ({"weights": {"max": 0}}, "weights.max"),
    ({"weights": {"min": 20, "max": 10}}, "weights.min"),
    ({"weights": {"users": {"alice": "lots"}}}, "weights.users.alice"),
    ({"weights": {"heaviest": 3}}, "weights.heaviest"),
    ({"weights": 3}, "weights"),
    ({"estimator": {"ceiling": 0.5}}, "estimator.ceiling"),
    ({"estimator": {"shared_min_users": 0}}, "estimator.shared_min_users"),
    ({"estimator": {"trusted_users": "alice"}}, "estimator.trusted_users"),
    ({"estimator": {"agreement": -1}}, "estimator.agreement"),
])
def test_bad_weight_and_estimator_settings_are_refused_with_one_line(data, where):
    with pytest.raises(InputError) as e:
        from_dict(data, source="gavel.toml")
    assert e.value.field == f"gavel.toml: {where}", str(e.value)
    assert "\n" not in str(e.value)


def test_estimator_settings_reach_the_rules():
    cfg = from_dict({"estimator": {"ceiling": 4, "shared_min_users": 3, "agreement": 1.2,
                                   "trusted_users": ["ops"], "max_steps_per_second": 1000}})
    assert cfg.estimator == Trust(ceiling=4.0, shared_min_users=3, agreement=1.2,
                                  trusted_users=frozenset({"ops"}), max_steps_per_second=1000.0)


def test_a_report_from_before_the_job_was_looked_up_gets_its_models_ceiling_too():
    """A daemon restarting: a running job's report arrives before its model is known, so only
    the type's ceiling (10 x the fastest row, 600 on v100) applies then; the model's (400)
    still keeps it out of the shared row, and the job's own row is cut to it."""
    est = EstimatingThroughputs(table())                    # shares everything plausible
    est.record([Measurement("5", "v100", 500.0)])
    est.lookup([job(5, "mallory")], TYPES)
    est.lookup([job(5, "mallory"), job(6, "bob")], TYPES)
    assert row(est, "6") == pytest.approx(CONV)
    assert row(est, "5")["v100"] == pytest.approx(400.0)

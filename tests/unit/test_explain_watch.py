"""`slurm-gavel explain` for a researcher watching a job: when it arrived (by the wall
clock, not the last round), its speed per GPU type with where each number comes from
(guesses said to be guesses), its progress and estimated finish, its preemptions."""
from __future__ import annotations

import json

import numpy as np

from slurm_gavel.cli import main
from slurm_gavel.cli.explain import text
from slurm_gavel.core.backend import JobState, Observation, Server, Usage
from slurm_gavel.core.plan import Assignment
from slurm_gavel.core.model import Allocation
from slurm_gavel.daemon.store import SqliteStore
from slurm_gavel.daemon.views import explain

ARRIVED = 1000.0
LAST_ROUND = 1360.0


def database(tmp_path, steps=1000.0, done=400.0, lost=None):
    """Job 3 waits with shares 0.6 v100 / 0.4 k80, 400 of 1000 steps done, its v100 speed
    measured (2 steps/s), its k80 speed a guess (0.5); preempted twice."""
    store = SqliteStore(tmp_path / "gavel.db")
    jobs = (JobState("1", "convnet", 1, ARRIVED, name="j1", user="alice"),
            JobState("3", "convnet", 1, ARRIVED, total_steps=steps, name="j3", user="bob"))
    servers = (Server("n1", "v100", 1), Server("n2", "k80", 1))
    store.observe(ARRIVED, Observation(ARRIVED, jobs, servers))
    store.allocation(0, ARRIVED, Allocation(("1", "3"), ("v100", "k80"),
                                            np.array([[0.4, 0.0], [0.6, 0.4]]),
                                            policy="max_min_fairness"), True)
    store.usage(LAST_ROUND, Usage(Assignment(("3",), "v100", (("n1", 1),)), 120.0))
    store.observe(LAST_ROUND, Observation(LAST_ROUND, jobs, servers, steps_done={"3": done},
                                          lost_seconds={"3": lost} if lost is not None else {}))
    store.save_estimates([
        {"job": "3", "model": "convnet", "scale_factor": 1, "worker_type": "v100",
         "steps_per_second": 2.0, "kind": "measured", "confidence": 1.0, "phase": "measured",
         "proxy": None, "time": LAST_ROUND},
        {"job": "3", "model": "convnet", "scale_factor": 1, "worker_type": "k80",
         "steps_per_second": 0.5, "kind": "default", "confidence": 0.1, "phase": "measured",
         "proxy": None, "time": LAST_ROUND}])
    for t in (1100.0, 1300.0):
        store.event(t, "preempt", "3", "on v100 (partition v100, nodes n1) for job 1")
    store.status(1, LAST_ROUND, {
        "1": {"worker_type": "v100", "priority": 2.5, "reason": "", "state": "R", "gpus": 1},
        "3": {"worker_type": None, "priority": 0.9, "reason": "waiting for its round",
              "state": "PD", "gpus": 0}})
    return store


def test_arrival_is_by_the_wall_clock(tmp_path):
    store = database(tmp_path)
    e = explain(store, "3", now=ARRIVED + 3600)
    assert e["ago_seconds"] == 3600 and e["elapsed_seconds"] == LAST_ROUND - ARRIVED
    shown = text(e)
    assert "arrived 1:00:00 ago" in shown and "0:00:00 ago" not in shown
    assert "over its 0:06:00 in the system up to the last round" in shown


def test_speed_per_type_with_its_source(tmp_path):
    e = explain(database(tmp_path), "3", now=LAST_ROUND)
    speeds = {t["worker_type"]: (t["steps_per_second"], t["source"]) for t in e["types"]}
    assert speeds == {"v100": (2.0, "measured"), "k80": (0.5, "guess")}
    shown = text(e)
    assert "2 steps/s (measured)" in shown and "0.5 steps/s (guess)" in shown


def test_progress_finish_and_preemptions(tmp_path):
    e = explain(database(tmp_path), "3", now=LAST_ROUND)
    assert (e["steps_done"], e["steps"]) == (400.0, 1000.0)
    # at its shares: 0.6 x 2 + 0.4 x 0.5 = 1.4 steps/s; 600 steps left
    assert abs(e["finish_seconds"] - 600 / 1.4) < 1e-6
    assert e["finish_is_guess"] is True                  # the k80 speed in it is a guess
    assert e["preemptions"] == 2
    shown = text(e)
    assert "steps 400/1000 (40%)" in shown
    assert "estimated finish in 0:07:09 at its shares (a guess: some speeds are not measured)" \
        in shown
    assert "preempted 2 times" in shown


def test_no_steps_no_finish(tmp_path):
    e = explain(database(tmp_path, steps=float("nan"), done=400.0), "3", now=LAST_ROUND)
    assert e["finish_seconds"] is None
    assert "estimated finish" not in text(e)


def test_json_is_strict(tmp_path, capsys):
    database(tmp_path).close()
    assert main(["explain", "3", "--db", str(tmp_path / "gavel.db"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out,
                      parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    assert data["preemptions"] == 2 and data["types"][0]["source"] in ("measured", "guess")


def test_gqueue_finish_column(tmp_path, capsys):
    """gqueue -o ...,finish: the same estimate as explain's, ~ when a guess is in it."""
    from slurm_gavel.cli.queue import main as gqueue
    database(tmp_path).close()
    assert gqueue(["--db", str(tmp_path / "gavel.db"), "-o", "jobid,progress,finish"]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert lines[0] == ["JOBID", "STEPS", "FINISH"]
    assert ["3", "400/1000", "0:07:09~"] in lines           # 600 steps at 1.4 steps/s
    assert ["1", "-", "-"] in lines                          # no steps known: no estimate
    assert gqueue(["--db", str(tmp_path / "gavel.db"), "--json"]) == 0
    import json
    data = json.loads(capsys.readouterr().out)
    job3 = next(j for j in data["jobs"] if j["jobid"] == "3")
    assert abs(job3["finish_seconds"] - 600 / 1.4) < 1e-6 and job3["finish_is_guess"] is True


def test_time_lost_to_preemptions_as_the_job_reports_it(tmp_path):
    e = explain(database(tmp_path, lost=75.0), "3", now=LAST_ROUND)
    assert e["lost_seconds"] == 75.0
    assert "preempted 2 times; 0:01:15 lost to it (saving checkpoints, restarting and loading " \
        "them, as the job reports)" in text(e)
    other = tmp_path / "other"
    other.mkdir()
    e = explain(database(other), "3", now=LAST_ROUND)
    assert e["lost_seconds"] is None and "lost to it" not in text(e)

"""`gqueue`: the store written by the real engine, shown as people read it."""
from __future__ import annotations

import json

from slurm_gavel.cli.queue import main

from tests.support.store import run
from tests.support.output import strict_json


def test_gqueue_shows_each_job_and_why_it_waits(tmp_path, capsys):
    db = tmp_path / "state.db"
    run(db, rounds=20, n_jobs=6)
    assert main(["--db", str(db)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:5] == ["JOBID", "USER", "NAME", "ST", "TYPE"]
    assert "SHARE(" in out[0] and "REASON" in out[0]
    running = [line for line in out[1:] if line.split()[3] == "R"]
    waiting = [line for line in out[1:] if line.split()[3] == "PD"]
    assert running and waiting
    assert all("waiting for its round" in line or "allocation" in line or "pending" in line
               for line in waiting)


def test_gqueue_json_filters_and_columns(tmp_path, capsys):
    db = tmp_path / "state.db"
    run(db, rounds=20, n_jobs=6)
    assert main(["--db", str(db), "--json"]) == 0
    data = strict_json(capsys.readouterr().out)      # an infinite priority is not `Infinity`
    assert data["worker_types"] and data["jobs"]
    job = data["jobs"][0]["jobid"]
    assert main(["--db", str(db), "-j", job, "-o", "jobid,st,reason"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["JOBID", "ST", "REASON"] and len(lines) == 2
    assert main(["--db", str(db), "--cluster"]) == 0
    cluster = capsys.readouterr().out.splitlines()
    assert cluster[0].split() == ["TYPE", "GPUS", "BUSY", "GAVEL_SHARE", "UTIL"] and len(cluster) == 4


def test_gqueue_errors_are_one_line(tmp_path, capsys):
    assert main(["--db", str(tmp_path / "none.db")]) == 2
    assert "no database" in capsys.readouterr().err
    db = tmp_path / "state.db"
    run(db, rounds=1, n_jobs=2)
    assert main(["--db", str(db), "-o", "jobid,colour"]) == 2
    assert "colour" in capsys.readouterr().err


def test_gqueue_shows_the_throughputs_the_policy_was_told_and_where_from(tmp_path, capsys):
    """With the estimator (as in the daemon): a job of a model the table does not know
    shows its exploration; measured entries carry no mark, guesses a '?'."""
    from slurm_gavel.core.clock import SimulatedClock
    from slurm_gavel.core.engine import Engine
    from slurm_gavel.estimator.learning import EstimatingThroughputs
    from slurm_gavel.policies import make_policy
    from slurm_gavel.core.recompute import Immediate
    from slurm_gavel.sim.simulator import SimulatedCluster
    from slurm_gavel.daemon.store import SqliteStore
    from slurm_gavel.sim.workloads import generate_trace

    from tests.support.engine import small_table

    table = small_table()
    jobs = generate_trace(table, n_jobs=4, rate_per_hour=60, seed=1)
    clock = SimulatedClock()
    backend = SimulatedCluster(jobs, table, {"v100": 1, "p100": 1, "k80": 1}, clock, measure=True)
    store = SqliteStore(tmp_path / "state.db")
    # the estimator's reference lacks the first job's model: that job must explore
    hidden = jobs[0].job_type
    reference = type(table).from_gavel_dict(
        {wt: {k: v for k, v in rows.items() if hidden not in k} for wt, rows in table.to_gavel_dict().items()})
    engine = Engine(clock, backend, Immediate(make_policy("max_min_fairness")),
                    EstimatingThroughputs(reference, store=store, clock=clock.now), store)
    for _ in range(2):
        engine.step()
        store.status(engine.round - 1, clock.now(), engine.explain())
    assert main(["--db", str(tmp_path / "state.db"), "--json"]) == 0
    rows = {r["jobid"]: r for r in json.loads(capsys.readouterr().out)["jobs"]}
    first = rows["0"]
    assert first["model"] == hidden and first["estimate"] == "explore"
    assert {e["kind"] for e in first["throughput"].values()} <= {"measured", "explore"}
    others = [r for r in rows.values() if r["model"] != hidden]
    assert others and all(r["estimate"] == "known" for r in others)
    assert main(["--db", str(tmp_path / "state.db"), "-o", "jobid,throughput,estimate"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[0] == "JOBID" and lines[0].split()[1].startswith("STEPS/S(")
    assert any("?" in line and "explore" in line for line in lines[1:]), lines


def test_gqueue_shows_what_slurm_runs_not_what_was_planned(tmp_path, capsys):
    """State R only for a job Slurm runs (issue 11): a released job not started is S, one
    the daemon holds back W with its reason; --cluster counts only the R jobs' GPUs."""
    from slurm_gavel.daemon.store import SqliteStore
    db = tmp_path / "state.db"
    run(db, rounds=20, n_jobs=6)
    store = SqliteStore(db)
    jobs = [j["id"] for j in store.jobs()][:3]
    assert len(jobs) == 3
    wt = store.servers()[0]["worker_type"]
    why = "released 30 s ago, Slurm says: ReqNodeNotAvail; held again, retry in 2 rounds"
    store.status(3, 100.0, {
        jobs[0]: {"worker_type": wt, "priority": 1.0, "reason": "", "state": "R", "gpus": 1},
        jobs[1]: {"worker_type": wt, "priority": 2.0, "reason": "released 3 s ago, not started yet",
                  "state": "S", "gpus": 0},
        jobs[2]: {"worker_type": None, "priority": None, "reason": why, "state": "W", "gpus": 0}})
    store.close()
    assert main(["--db", str(db), "--json"]) == 0
    rows = {r["jobid"]: r for r in json.loads(capsys.readouterr().out)["jobs"]}
    assert [rows[j]["st"] for j in jobs] == ["R", "S", "W"]
    assert all(r["st"] == "PD" for j, r in rows.items() if j not in jobs)     # no status row: not placed
    assert rows[jobs[2]]["reason"] == why
    assert main(["--db", str(db), "--cluster", "--json"]) == 0
    per_type = {r["worker_type"]: r for r in json.loads(capsys.readouterr().out)}
    assert per_type[wt]["busy"] == 1 and sum(r["busy"] for r in per_type.values()) == 1


def test_gqueue_shows_a_spread_jobs_shape(tmp_path, capsys):
    """A distributed job's nodes x GPUs per node (SHAPE, and `shape` in --json), as the
    engine placed it: an 8-GPU job on servers of 4 GPUs runs 2x4, a 1-GPU job 1x1."""
    from slurm_gavel.core.clock import SimulatedClock
    from slurm_gavel.core.engine import Engine
    from slurm_gavel.core.recompute import Immediate
    from slurm_gavel.estimator.table import TableThroughputs, ThroughputTable
    from slurm_gavel.policies import make_policy
    from slurm_gavel.sim.simulator import SimulatedCluster
    from slurm_gavel.sim.workloads import TraceJob
    from slurm_gavel.daemon.store import SqliteStore
    table = ThroughputTable.from_gavel_dict(
        {"v100": {f"('convnet', {sf})": {"null": 1.0} for sf in (1, 8)}})
    clock = SimulatedClock(1000.0)
    trace = [TraceJob("convnet", "", "", "", False, 10 ** 6, gpus, arrival_time=1000.0) for gpus in (8, 1)]
    backend = SimulatedCluster(trace, table, {"v100": 12}, clock, gpus_per_node=4)
    db = tmp_path / "state.db"
    store = SqliteStore(db)
    engine = Engine(clock, backend, Immediate(make_policy("max_min_fairness")), TableThroughputs(table), store)
    for _ in range(3):
        engine.step()
    store.status(engine.round - 1, clock.now(), engine.explain())
    assert main(["--db", str(db), "--json"]) == 0
    jobs = {j["jobid"]: j for j in strict_json(capsys.readouterr().out)["jobs"]}
    assert jobs["0"]["shape"]["nodes"] == 2 and jobs["0"]["shape"]["gpus_per_node"] == 4, jobs["0"]
    assert jobs["0"]["shape"]["worker_type"] == "v100" and len(jobs["0"]["shape"]["node_list"]) == 2
    assert jobs["1"]["shape"]["nodes"] == 1 and jobs["1"]["shape"]["gpus_per_node"] == 1
    assert main(["--db", str(db), "-o", "jobid,type,shape"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["JOBID", "TYPE", "SHAPE"]
    assert {tuple(line.split()) for line in lines[1:]} == {("0", "v100", "2x4"), ("1", "v100", "1x1")}
    assert main(["--db", str(db)]) == 0                 # in the default columns, after TYPE
    head = capsys.readouterr().out.splitlines()[0].split()
    assert head[4:6] == ["TYPE", "SHAPE"]


def test_a_running_jobs_shape_is_where_slurm_runs_it_not_where_the_plan_moves_it(tmp_path, capsys):
    """A job the last plan moves (preempted here, started there) runs where it ran until it
    stops: gqueue's R row shows that shape (the status' nodes, from Slurm), the plan's only
    for a job not running yet.  (It showed the planned shape: tests/cluster/test_distributed.py saw
    a 1x4 on v100 that Slurm never ran.)"""
    from slurm_gavel.daemon.store import SqliteStore
    db = tmp_path / "state.db"
    run(db, rounds=20, n_jobs=6)
    store = SqliteStore(db)
    placed = store.last_placement()
    job, place = next((j, p) for j, p in placed.items() if p["nodes"])
    other = next(s for s in store.servers() if s["worker_type"] != place["worker_type"])
    store.status(3, 100.0, {job: {"worker_type": other["worker_type"], "priority": 1.0, "reason": "",
                                  "state": "R", "gpus": 2, "nodes": f"{other['name']},{other['name']}x"}})
    store.close()
    assert main(["--db", str(db), "--json", "-j", job]) == 0
    row = json.loads(capsys.readouterr().out)["jobs"][0]
    assert row["st"] == "R" and row["type"] == other["worker_type"]
    assert row["shape"] == {"worker_type": other["worker_type"], "nodes": 2,
                            "node_list": [other["name"], other["name"] + "x"], "gpus_per_node": 1}

"""Departures are read from Slurm's final state and recorded truthfully (issue 11).

sacct's output (a real 22.05 recording) parsed; then on the real clusters, with
accounting (`slurm_accounting_cluster`: sacct) and without (`slurm_cluster`: what
slurmctld still remembers), through the daemon's own objects: a job that ends while
the daemon is stopped, one cancelled, one failing, one killed by the preemption
signal for want of a handler, and one Slurm knows no more.
"""
from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import pytest
from tests.support.slurm import move_job

from slurm_gavel.core.backend import JobState, Observation
from slurm_gavel.core.plan import RoundPlan
from slurm_gavel.daemon import config as config_mod
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.cli.queue import main as gqueue
from slurm_gavel.slurm.records import final_from_job, final_from_sacct, parse_jobs, parse_sacct
from slurm_gavel.daemon.store import SqliteStore
from tests.support.daemon import write_config

# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


# -- parsing (recorded outputs) -------------------------------------------------------
def test_sacct_22_05_recording_is_parsed():
    runs = parse_sacct((FIXTURES / "sacct-22.05.txt").read_text())
    assert sorted(runs, key=int) == ["1", "2", "3", "4", "5", "6"]
    finals = {job: final_from_sacct(r) for job, r in runs.items()}
    got = {job: (f.state, f.exit_code, f.signal, f.departure) for job, f in finals.items()}
    assert got == {"1": ("COMPLETED", 0, None, "completed"), "2": ("FAILED", 1, None, "failed"),
                   "3": ("CANCELLED", 0, None, "cancelled"),       # "CANCELLED by 0"
                   "4": ("FAILED", 0, 12, "failed"),               # killed by USR2: "0:12"
                   "5": ("COMPLETED", 0, None, "completed"),
                   "6": ("RUNNING", 0, None, "lost")}              # still running: not final
    # the requeued job: two runs, the REQUEUED one first although sacct prints it first
    # among the jobs and the last run after every other job
    assert [(r.state, r.exit_code) for r in runs["5"]] == [("REQUEUED", 85), ("COMPLETED", 0)]
    first, last = runs["5"]
    assert first.end <= last.start and last.end >= last.start
    assert finals["1"].end - finals["1"].runs[0].start == 1.0
    assert finals["1"].runs[0].partition == "v100" and finals["1"].runs[0].nodes == ("v100-0",)
    assert finals["6"].end is None and not finals["6"].finished


def test_sacct_output_of_another_shape_is_skipped():
    assert parse_sacct("") == {}
    assert parse_sacct("garbage\n7.batch|COMPLETED|0:0|||v100|v100-0\n1|2\n") == {}
    runs = parse_sacct("9|NODE_FAIL|0:0|1700000000|1700000060|k80|None assigned\n")
    final = final_from_sacct(runs["9"])
    assert (final.departure, final.end, final.runs[0].nodes) == ("node_fail", 1700000060.0, ())
    assert final_from_sacct([]) is None
    for state, departure in (("TIMEOUT", "timeout"), ("PREEMPTED", "preempted"),
                             ("OUT_OF_MEMORY", "failed"), ("PENDING", "lost")):
        assert final_from_sacct(parse_sacct(f"3|{state}|0:0|Unknown|Unknown||\n")["3"]).departure == departure


def test_a_finished_job_slurmctld_lists_22_05():
    import json
    jobs = {j.name: j for j in parse_jobs(json.loads((FIXTURES / "squeue-22.05.json").read_text()))}
    done, failed = final_from_job(jobs["done"]), final_from_job(jobs["failed"])
    assert (done.state, done.exit_code, done.departure, done.source) == ("COMPLETED", 0, "completed", "slurmctld")
    assert (failed.state, failed.exit_code, failed.departure) == ("FAILED", 3, "failed")
    assert failed.end == jobs["failed"].end_time and failed.runs[-1].partition == "k80"


# -- on the real clusters ---------------------------------------------------------------
CLUSTERS = ["slurm_cluster", "slurm_accounting_cluster"]
SOURCE = {"slurm_cluster": "slurmctld", "slurm_accounting_cluster": "sacct"}


@pytest.fixture(params=CLUSTERS)
def cluster(request):
    cluster = request.getfixturevalue(request.param)
    cluster.kind = request.param
    cluster.run(["scancel", "--user", "root"], check=False)
    yield cluster
    cluster.run(["scancel", "--user", "root"], check=False)


def submit(cluster, tmp: Path, body: str) -> str:
    """A gavel job (the job_submit plugin holds it), started by hand on v100 as the daemon
    would start it."""
    script = tmp / f"job{len(list(tmp.glob('job*.sh')))}.sh"
    script.write_text("#!/bin/bash\n" + body + "\n")
    job = cluster.run(["sbatch", "--parsable", "-o", str(tmp / "out-%j.txt"), "--comment",
                       "gavel model=convnet", "--gres=gpu:1", str(script)],
                      cwd=tmp).stdout.strip().split(";")[0]
    move_job(cluster.run, job, "v100")
    cluster.run(["scontrol", "release", job])
    return job


def info(cluster, job) -> dict:
    return dict(re.findall(r"(\w+)=(\S*)", cluster.run(["scontrol", "-o", "show", "job", job]).stdout))


def wait_state(cluster, jobs, states, timeout=60):
    deadline = time.monotonic() + timeout
    while not all(info(cluster, j)["JobState"] in states for j in jobs):
        assert time.monotonic() < deadline, [info(cluster, j)["JobState"] for j in jobs]
        time.sleep(0.3)


def epoch(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def daemon(config: Path) -> Daemon:
    return Daemon(config_mod.load(config))


def close(d: Daemon):
    d.engine.allocator.close()
    d.engine.record_pending()       # what a stopping daemon writes before it goes
    d.store.close()
    d.lock.release()                # the next daemon on this database may start


def recorded(db: Path, job: str) -> dict:
    store = SqliteStore(db, readonly=True)
    try:
        row = next(r for r in store.jobs(states=("active", "completed", "failed", "cancelled", "lost",
                                                 "node_fail", "timeout", "preempted")) if r["id"] == job)
        row["time"] = sum(store.job_time([job]).get(job, {}).values())
        row["detail"] = store.departure_details().get(job)
        return row
    finally:
        store.close()


def test_a_job_that_ends_while_the_daemon_is_stopped(cluster, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="slurm_gavel")
    config = write_config(tmp_path, cluster)
    job = submit(cluster, tmp_path, "sleep 12")
    wait_state(cluster, [job], {"RUNNING"})
    first = daemon(config)
    try:
        began = time.time()
        first.engine.settle()          # sees it running: credits from here
        time.sleep(2)
        first.engine.settle()
    finally:
        close(first)                   # the daemon stops; the job runs on and ends
    db = tmp_path / "gavel.db"
    before = recorded(db, job)
    assert before["state"] == "active" and 1.5 <= before["time"] <= 4
    wait_state(cluster, [job], {"COMPLETED"})
    end = epoch(info(cluster, job)["EndTime"])
    time.sleep(2)
    second = daemon(config)
    try:
        second.engine.settle()         # the restart reconciles it with Slurm's final state
    finally:
        close(second)
    after = recorded(db, job)
    assert after["state"] == "completed" and after["finished"] == end, (after, end)
    # credited what really ran: from the first observation up to its real end
    assert abs(after["time"] - (end - began)) <= 1.5, (after["time"], end - began)
    assert f"job {job} completed: COMPLETED (from {SOURCE[cluster.kind]})" in caplog.text


def test_cancelled_failed_and_died_at_preemption(cluster, tmp_path, capsys):
    # signalled at once, a second after it runs (tests/cluster/test_min_run.py has the guard)
    config = write_config(tmp_path, cluster, min_run_seconds=0)
    cancelled = submit(cluster, tmp_path, "sleep 600")
    failed = submit(cluster, tmp_path, "sleep 3; exit 1")
    nohandler = submit(cluster, tmp_path, "echo ready; sleep 600")     # no trap for USR2
    d = daemon(config)
    try:
        wait_state(cluster, [cancelled, nohandler], {"RUNNING"})
        time.sleep(1)
        d.engine.settle()
        assert {cancelled, nohandler} <= set(d.backend._running)
        cluster.run(["scancel", cancelled])
        d.backend.execute(RoundPlan(0, (), (), (), (nohandler,)), time.time() + 60)  # preempt
        wait_state(cluster, [cancelled, failed, nohandler], {"CANCELLED", "FAILED"})
        d.engine.settle()
    finally:
        close(d)
    db = tmp_path / "gavel.db"
    rows = {job: recorded(db, job) for job in (cancelled, failed, nohandler)}
    assert {job: r["state"] for job, r in rows.items()} == {
        cancelled: "cancelled", failed: "failed", nohandler: "failed"}
    assert "exit code 1" in rows[failed]["detail"]
    assert rows[nohandler]["detail"].startswith("died at preemption: no signal handler?")
    assert "USR2" in rows[nohandler]["detail"]
    for job, r in rows.items():
        assert r["finished"] == epoch(info(cluster, job)["EndTime"]), job
    capsys.readouterr()
    assert gqueue(["--db", str(db), "-t", "all", "-j", nohandler, "-o", "jobid,st,reason"]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert line.split()[:2] == [nohandler, "F"] and "died at preemption" in line
    assert gqueue(["--db", str(db), "-j", nohandler]) == 0          # active only: gone
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_a_job_slurm_knows_no_more_is_lost(cluster, tmp_path):
    config = write_config(tmp_path, cluster)
    db = tmp_path / "gavel.db"
    store = SqliteStore(db)
    t = time.time() - 30
    ghost = "987654"                   # recorded active by an earlier run; Slurm never had it
    store.observe(t, Observation(t, (JobState(ghost, "convnet", 1, t),), ()))
    store.close()
    d = daemon(config)
    try:
        d.engine.settle()
    finally:
        close(d)
    row = recorded(db, ghost)
    assert row["state"] == "lost" and row["detail"] == "not known to Slurm any more"


@pytest.mark.parametrize("accounting", [False, True], ids=["slurmctld", "sacct"])
def test_jobs_killed_by_a_cold_slurmctld_restart_are_never_completed(accounting, tmp_path_factory,
                                                                    tmp_path):
    """`slurmctld -c` forgets every job and slurmd kills them (seen: such jobs were recorded
    completed).  Without accounting the job is lost; with it, sacct's record decides (22.05
    marks it CANCELLED; a record left RUNNING, a runaway, is lost)."""
    from tests.support.slurm import require_slurm
    from slurm_gavel.devcluster import DevCluster, default_job_submit_lua, pick_ports
    require_slurm(accounting=accounting)
    ctld_port, slurmd_port = pick_ports(1)        # its own cluster: job ids start again at 1
    cluster = DevCluster(tmp_path_factory.mktemp("cold"), {"v100": (1, 2)}, ctld_port=ctld_port,
                         slurmd_port=slurmd_port, job_submit_lua=default_job_submit_lua(),
                         accounting=accounting)
    cluster.up()
    try:
        config = write_config(tmp_path, cluster)
        job = submit(cluster, tmp_path, "sleep 600")
        wait_state(cluster, [job], {"RUNNING"})
        d = daemon(config)
        try:
            d.engine.settle()
            cluster.restart_slurmctld(clean=True)
            assert job not in cluster.run(["squeue", "-h", "-o", "%i"]).stdout.split()
            sacct = (cluster.run(["sacct", "-n", "-P", "-X", "-j", job, "-o", "State"]).stdout.split()
                     if accounting else [])
            d.engine.settle()
        finally:
            close(d)
        row = recorded(tmp_path / "gavel.db", job)
        assert row["state"] != "completed"
        if not accounting:
            assert (row["state"], row["detail"]) == ("lost", "not known to Slurm any more")
        elif sacct == ["RUNNING"]:
            assert (row["state"], row["detail"]) == ("lost", "sacct says RUNNING, but Slurm no "
                                                             "longer runs it")
        else:
            assert sacct[0].startswith("CANCELLED") and row["state"] == "cancelled", (row, sacct)
    finally:
        cluster.down()


def test_gqueue_states_option_is_checked(tmp_path, capsys):
    db = tmp_path / "gavel.db"
    SqliteStore(db).close()
    assert gqueue(["--db", str(db), "-t", "bogus"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "bogus" in err and "lost" in err
    assert gqueue(["--db", str(db), "-t", "all"]) == 0


def test_a_departure_waits_while_sacct_fails_then_is_lost(slurm_accounting_cluster):
    """sacct failing (slurmdbd down) delays a departure it would decide, backing off; after
    FINAL_STATE_PATIENCE_SECONDS it is recorded lost.  The real cluster, with a sacct that
    fails beside it."""
    from slurm_gavel.slurm.backend import FINAL_STATE_PATIENCE_SECONDS, SlurmBackend
    from slurm_gavel.slurm.commands import SlurmCLI, SlurmCommandError

    class FailingSacct(SlurmCLI):
        calls_sacct = 0

        def sacct(self, ids, *args, **kw):
            self.calls_sacct += 1
            raise SlurmCommandError(["sacct"], 1, "sacct: error: slurmdbd: Connection refused")

    class Clock:
        t = time.time()

        def now(self):
            return self.t

    clock, cli = Clock(), FailingSacct(env=slurm_accounting_cluster.env)
    backend = SlurmBackend(cli, clock, active_jobs=["987655"], credited_until=clock.t - 60)
    assert backend.accounting
    assert backend.observe().departures == () and cli.calls_sacct == 1
    clock.t += 0.5                         # backing off: no second call yet
    assert backend.observe().departures == () and cli.calls_sacct == 1
    clock.t += 2
    assert backend.observe().departures == () and cli.calls_sacct == 2
    clock.t += FINAL_STATE_PATIENCE_SECONDS
    (gone,) = backend.observe().departures
    assert (gone.id, gone.state, gone.detail) == ("987655", "lost", "not known to Slurm any more")
    assert backend.observe().departures == ()

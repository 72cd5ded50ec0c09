"""Logging as admins run it, and `slurm-gavel events`, on the real local cluster.

Four GPUs (every node but one drained) for three 2-GPU jobs: the daemon must take
turns, so it starts and preempts.  Each start and preemption line names the job, the
partition, the nodes and the reason, in the log file and in syslog (a real datagram
socket, as /dev/log is) as on stderr; `slurm-gavel events` tells the same history from
the database, as a table and as strict JSON.
"""
from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from slurm_gavel.daemon.store import SqliteStore
from tests.support.metrics import free_port, pick, scrape
from tests.support.daemon import dry_run, start_daemon, stop_daemon, submit, write_config

KEEP = "v100-0"
START = re.compile(r"round \d+: job (\d+): started on v100 \(partition v100, nodes v100-0; "
                   r"share [0-9.]+; priority [^;)]+")
PREEMPT = re.compile(r"round \d+: job (\d+): preempted on v100 \(partition v100, nodes v100-0\) "
                     r"for job (\d+) \(job \2's priority [^ ]+, job \1's [^)]+\)")


def events(db: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurm_gavel", "events", "--db", str(db), *args],
                          capture_output=True, text=True, timeout=60)


def test_action_lines_in_every_log_and_the_history_in_words(clean, tmp_path):
    cluster = clean
    nodes = cluster.run(["sinfo", "-h", "-N", "-o", "%N"]).stdout.split()
    drained = sorted(set(nodes) - {KEEP})
    sockdir = Path(tempfile.mkdtemp(prefix="gvl"))        # a short path: sun_path has 108 bytes
    syslog = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    syslog.bind(str(sockdir / "log"))
    syslog.settimeout(0.2)
    datagrams = []
    reading = threading.Event()

    def receive():              # a syslog daemon reads all the time
        while not reading.is_set():
            try:
                datagrams.append(syslog.recv(65536).decode())
            except (socket.timeout, BlockingIOError):
                pass

    reader = threading.Thread(target=receive, daemon=True)
    reader.start()
    config = write_config(tmp_path, cluster, round_seconds=6, tick_seconds=1, grace_seconds=10,
                          log_file=str(tmp_path / "gavel.log"), syslog=True,
                          syslog_address=str(sockdir / "log"), syslog_facility="local3",
                          metrics_port=(port := free_port()))
    db = tmp_path / "gavel.db"
    for n in drained:
        cluster.run(["scontrol", "update", f"nodename={n}", "state=drain", "reason=watching-test"])
    try:
        jobs = [submit(cluster, tmp_path, "convnet", 2, 120) for _ in range(3)]
        daemon = start_daemon(config)
        try:
            deadline, preempted = time.time() + 90, None
            while time.time() < deadline and preempted is None:
                time.sleep(2)
                assert daemon.poll() is None, daemon.communicate()[0][-3000:]
                if db.exists():
                    store = SqliteStore(db, readonly=True)
                    try:
                        for e in store.events(kinds=("preempt",)):
                            if "for job" in (e["detail"] or ""):
                                preempted = e["job"]
                    finally:
                        store.close()
            time.sleep(1.5)           # the metrics of the round that preempted (they follow it)
            samples = scrape(port)
        finally:
            code, stderr = stop_daemon(daemon)
        assert preempted, "no job was preempted for another in 90 s: " + stderr[-4000:]
        time.sleep(0.5)
    finally:
        reading.set()
        reader.join()
        for n in drained:
            cluster.run(["scontrol", "update", f"nodename={n}", "state=resume"], check=False)
        syslog.close()
        shutil.rmtree(sockdir, ignore_errors=True)
    assert code == 0, stderr[-3000:]

    file_log = (tmp_path / "gavel.log").read_text()
    for text in (stderr, file_log, "\n".join(datagrams)):
        starts, preempts = START.findall(text), PREEMPT.findall(text)
        assert set(starts) <= set(jobs) and len(starts) >= 3, text[-3000:]
        assert preempts and all(a in jobs and b in jobs and a != b for a, b in preempts), text[-3000:]
        assert "\x1b" not in text
    # syslog: the daemon's name and pid, facility local3 (19) at level info (6): <158>
    assert any(d.startswith("<158>slurm-gavel[") for d in datagrams), datagrams[:3]
    assert all(d.startswith("<") for d in datagrams)

    # the endpoint counted the preemptions the log names, by the type they ran on
    assert pick(samples, "slurm_gavel_preemptions_total", partition="v100", gpu_type="v100") >= 1
    assert pick(samples, "slurm_gavel_preemptions_total") <= len(PREEMPT.findall(stderr))

    # the history, in words, from the database
    shown = events(db, "-j", preempted)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split() == ["TIME", "JOB", "EVENT"]
    text = "\n".join(lines[1:])
    assert "submitted (model convnet)" in text
    assert re.search(r"started on v100 \(partition v100, nodes v100-0; share [0-9.]+; priority", text)
    assert re.search(r"preempted on v100 \(partition v100, nodes v100-0\) for job (\d+) "
                     r"\(job \1's priority [^ ]+, job \d+'s", text)
    assert lines[1].split()[2] == preempted and "submitted" in lines[1]     # oldest first
    assert all(line.split()[2] == preempted for line in lines[1:])
    data = json.loads(events(db, "--json").stdout, parse_constant=lambda c: (_ for _ in ()).throw(
        ValueError(f"not strict JSON: {c}")))
    kinds = {(e["job"], e["kind"]) for e in data["events"]}
    assert {(j, "arrival") for j in jobs} <= kinds and (preempted, "preempt") in kinds
    assert not any(e["kind"] == "action" for e in data["events"])              # --actions only
    assert any(e["kind"] == "action" for e in json.loads(events(db, "--json", "--actions").stdout)["events"])
    later = events(db, "--since", str(time.time() + 3600))
    assert later.returncode == 0 and len(later.stdout.splitlines()) == 1       # the header alone
    bad = events(db, "--since", "yesterday-ish")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "--since" in bad.stderr


def test_a_log_file_that_cannot_be_opened_is_one_line(slurm_cluster, tmp_path):
    config = write_config(tmp_path, slurm_cluster, log_file=str(tmp_path / "no" / "such" / "dir" / "x.log"))
    daemon = start_daemon(config)
    code, log = stop_daemon(daemon) if daemon.wait(timeout=60) is None else (
        daemon.returncode, daemon.stdout.read())
    assert code == 2, log
    assert len(log.strip().splitlines()) == 1 and "cannot log where gavel.toml says" in log, log
    assert not (tmp_path / "gavel.db").exists()


def test_syslog_that_stops_reading_does_not_block_the_daemon():
    """A unix datagram socket queues a few messages; the standard handler then blocks."""
    import logging

    from slurm_gavel.daemon.logs import SysLog

    sockdir = Path(tempfile.mkdtemp(prefix="gvl"))
    stuck = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stuck.bind(str(sockdir / "log"))          # bound, never read
    handler = SysLog(str(sockdir / "log"))
    logger = logging.getLogger("test.syslog.stuck")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        began = time.monotonic()
        for i in range(500):
            logger.warning("line %d", i)
        assert time.monotonic() - began < 5
        assert handler.dropped > 0
        assert stuck.recv(65536).decode().rstrip("\x00").endswith("line 0")     # the first ones got through
    finally:
        logger.removeHandler(handler)
        handler.close()
        stuck.close()
        shutil.rmtree(sockdir, ignore_errors=True)


def test_events_in_words_from_a_real_database(tmp_path):
    """Every kind the daemon records, told in words; users' text escaped; strict JSON."""
    from slurm_gavel.core.backend import Departure

    store = SqliteStore(tmp_path / "gavel.db")
    store.event(100.0, "arrival", "5", "evil\x1b[31m")
    store.event(101.0, "start", "5", "on v100 (partition v100, nodes n1; share 0.45; priority inf)")
    store.event(101.5, "action", "5", "start on v100 n1")
    store.event(102.0, "action_failed", "5", "start on v100 n1: `scontrol update jobid=5` exited 1: "
                                             "Requested node configuration is not available")
    store.event(103.0, "stuck", "5", "not started 31 s after release, Slurm says: Resources; retry in 6 s")
    store.event(104.0, "preempt", "5", "on v100 (partition v100, nodes n1) for job 6 (priority 3.2 vs 1.1)")
    store.jobs()
    store.departure(Departure("5", 105.0, "completed", "COMPLETED"))
    store.close()
    shown = events(tmp_path / "gavel.db", "-j", "5")
    assert shown.returncode == 0, shown.stderr
    said = [line.split(None, 3)[3] for line in shown.stdout.splitlines()[1:]]
    assert said == ["submitted (model evil\\x1b[31m)",
                    "started on v100 (partition v100, nodes n1; share 0.45; priority inf)",
                    "failed to start on v100 n1: `scontrol update jobid=5` exited 1: Requested node "
                    "configuration is not available",
                    "released but Slurm did not start it (not started 31 s after release, Slurm says: "
                    "Resources; retry in 6 s)",
                    "preempted on v100 (partition v100, nodes n1) for job 6 (priority 3.2 vs 1.1)",
                    "finished: COMPLETED"], shown.stdout
    assert "\x1b" not in shown.stdout
    from datetime import datetime
    for since in ("102.5", datetime.fromtimestamp(102.5).isoformat(sep=" ")):     # epoch, local ISO
        data = json.loads(events(tmp_path / "gavel.db", "--json", "--since", since).stdout)
        assert [e["kind"] for e in data["events"]] == ["stuck", "preempt", "completed"], since


def test_gqueue_marks_a_shadow_database_and_never_shows_a_plan_as_running(clean, tmp_path):
    cluster = clean
    job, code, log = dry_run(cluster, tmp_path)
    assert code == 0, log
    assert re.search(rf"round \d+: job {job}: started on \w+ .*\[dry run: planned, not done\]", log), log
    db = tmp_path / "gavel.db"
    shown = subprocess.run([sys.executable, "-m", "slurm_gavel", "queue", "--db", str(db)],
                           capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "# shadow mode (--dry-run): planned, not done"
    row = next(line.split() for line in lines if line.split()[0] == job)
    assert row[3] == "PLAN" and "R" not in row[3:4], lines
    assert cluster.run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip() == "PENDING"
    data = json.loads(subprocess.run([sys.executable, "-m", "slurm_gavel", "queue", "--db", str(db), "--json"],
                                     capture_output=True, text=True).stdout)
    assert data["shadow_mode"] == "shadow mode (--dry-run): planned, not done"
    assert [j["st"] for j in data["jobs"] if j["jobid"] == job] == ["PLAN"]
    summary = subprocess.run([sys.executable, "-m", "slurm_gavel", "queue", "--db", str(db), "--cluster"],
                             capture_output=True, text=True).stdout
    assert summary.startswith("# shadow mode")


def explain_db(tmp_path) -> Path:
    """A real database as the daemon writes it: three 1-GPU jobs on 2 v100 and 1 k80 GPUs;
    1 and 2 run on v100, 3 waits with a share on both types."""
    import numpy as np

    from slurm_gavel.core.backend import JobState, Observation, Server, Usage
    from slurm_gavel.core.model import Allocation
    from slurm_gavel.core.plan import Assignment

    store = SqliteStore(tmp_path / "gavel.db")
    jobs = tuple(JobState(str(i), "convnet", 1, 1000.0, name=f"j{i}", user="alice") for i in (1, 2, 3))
    store.observe(1000.0, Observation(1000.0, jobs, (Server("n1", "v100", 2), Server("n2", "k80", 1))))
    store.allocation(0, 1000.0, Allocation(("1", "2", "3"), ("v100", "k80"),
                                           np.array([[0.7, 0.0], [0.7, 0.0], [0.6, 0.4]]),
                                           policy="max_min_fairness"), True)
    store.usage(1360.0, Usage(Assignment(("3",), "v100", (("n1", 1),)), 120.0))
    store.observe(1360.0, Observation(1360.0, jobs, (Server("n1", "v100", 2), Server("n2", "k80", 1))))
    store.status(1, 1360.0, {
        "1": {"worker_type": "v100", "priority": 2.5, "reason": "", "state": "R", "gpus": 1},
        "2": {"worker_type": "v100", "priority": 1.5, "reason": "", "state": "R", "gpus": 1},
        "3": {"worker_type": None, "priority": 0.9, "reason": "waiting for its round", "state": "PD",
              "gpus": 0}})
    store.close()
    return tmp_path / "gavel.db"


def test_explain_one_job_share_received_and_what_it_needs(tmp_path):
    db = explain_db(tmp_path)
    run = lambda *a: subprocess.run([sys.executable, "-m", "slurm_gavel", *a], capture_output=True,
                                    text=True, timeout=60)
    shown = run("explain", "3", "--db", str(db))
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "job 3 (j3, user alice, model convnet, 1 GPU): PD" in out
    assert "v100     share 0.60  asks 0:03:36  received 0:02:00" in out          # 0.6 x 360 s
    assert "k80      share 0.40  asks 0:02:24  received 0:00:00" in out
    assert "k80: 1 GPUs free, it should start there next round" in out
    assert "v100: a priority above 1.5 (the lowest of the jobs running there; its own is 0.9; a tie " \
        "keeps the running job)" in out
    data = json.loads(run("queue", "--db", str(db), "-j", "3", "--explain", "--json").stdout)
    assert data["jobid"] == "3" and [t for t in data["types"] if t["worker_type"] == "v100"] == [{
        "worker_type": "v100", "share": 0.6, "target_seconds": 216.0, "received_seconds": 120.0,
        "steps_per_second": None, "source": None}]          # no estimate saved in this database
    running = run("explain", "1", "--db", str(db)).stdout
    assert "to run next round it needs: nothing: it runs on v100" in running
    missing = run("explain", "99", "--db", str(db))
    assert missing.returncode == 2 and "job 99 is not in the database" in missing.stderr
    two = run("queue", "--db", str(db), "-j", "1,2", "--explain")
    assert two.returncode == 2 and "give one job" in two.stderr


def test_users_text_is_escaped_in_the_log_file_and_syslog(tmp_path):
    import logging

    from slurm_gavel.daemon import config as config_mod
    from slurm_gavel.daemon.logs import log_to

    sockdir = Path(tempfile.mkdtemp(prefix="gvl"))
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(str(sockdir / "log"))
    receiver.settimeout(5)
    config = config_mod.from_dict({"log_file": str(tmp_path / "d.log"), "syslog": True,
                                   "syslog_address": str(sockdir / "log")})
    root = logging.getLogger()
    before = list(root.handlers)
    level = root.level
    root.setLevel(logging.INFO)
    try:
        log_to(config)
        logging.getLogger("slurm_gavel.test").warning("job 5: progress file %s refused",
                                                      "/home/eve/\x1b[2J\u202e.gavel/5.jsonl")
        for h in root.handlers:
            h.flush()
        got = receiver.recv(65536).decode()
    finally:
        for h in root.handlers[len(before):]:
            root.removeHandler(h)
            h.close()
        root.setLevel(level)
        receiver.close()
        shutil.rmtree(sockdir, ignore_errors=True)
    text = (tmp_path / "d.log").read_text()
    for out in (text, got):
        assert "/home/eve/\\x1b[2J\\u202e.gavel/5.jsonl" in out, out
        assert "\x1b" not in out and "\u202e" not in out

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

from slurm_gavel.slurm.store import SqliteStore
from test_metrics import free_port, pick, scrape
from test_daemon import clean, start_daemon, stop_daemon, submit, write_config  # noqa: F401 (clean: a fixture)

KEEP = "v100-0"
START = re.compile(r"round \d+: job (\d+): started on v100 \(partition v100, nodes v100-0; "
                   r"share [0-9.]+; priority [^;)]+")
PREEMPT = re.compile(r"round \d+: job (\d+): preempted on v100 \(partition v100, nodes v100-0\) "
                     r"for job (\d+) \(priority [^ ]+ vs [^)]+\)")


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
    assert re.search(r"preempted on v100 \(partition v100, nodes v100-0\) for job \d+ \(priority", text)
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

    from slurm_gavel.slurm.daemon import SysLog

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
    config = write_config(tmp_path, cluster, round_seconds=4, tick_seconds=1)
    job = submit(cluster, tmp_path, "convnet", 1, 5)
    daemon = start_daemon(config, "--dry-run", "--max-rounds", "2")
    code, log = stop_daemon(daemon) if daemon.wait(timeout=60) is None else (daemon.returncode,
                                                                             daemon.stdout.read())
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

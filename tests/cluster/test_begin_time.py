"""A user's begin time is kept on the real local cluster: a gavel job submitted with
`sbatch --begin` is neither planned nor released before that time (the daemon's starts set
StartTime=now, which would override it), gqueue says it waits for its begin time, and it
starts once the time has come."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.support.daemon import queue, start_daemon, stop_daemon, submit, write_config

# Run again on Slurm 24.11 by tools/test.sh (the eligible time of a held job is Slurm's JSON).
pytestmark = pytest.mark.slurm24

BEGIN_IN = 40          # seconds from submission: some rounds of 4 s pass before it


def _gqueue(db, job):
    r = subprocess.run([sys.executable, "-m", "slurm_gavel", "queue", "--db", str(db), "-j", job,
                        "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [row for row in json.loads(r.stdout)["jobs"] if row["jobid"] == job]


def test_a_job_waits_for_its_begin_time(clean, tmp_path):
    cluster = clean
    config = write_config(tmp_path, cluster, round_seconds=4, tick_seconds=1)
    submitted = time.time()
    later = submit(cluster, tmp_path, "convnet", 1, 3, extra=(f"--begin=now+{BEGIN_IN}",))
    now_job = submit(cluster, tmp_path, "convnet", 1, 3)
    begin = time.localtime(submitted + BEGIN_IN)
    daemon = start_daemon(config)
    try:
        # the job without a begin time runs: the daemon is planning rounds
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and queue(cluster).get(now_job) not in (
                "RUNNING", "COMPLETING", None):
            time.sleep(0.5)
        assert queue(cluster).get(now_job) in ("RUNNING", "COMPLETING", None), queue(cluster)
        rows = []
        while time.time() < submitted + BEGIN_IN - 8:
            assert queue(cluster).get(later) == "PENDING", queue(cluster)
            rows = _gqueue(tmp_path / "gavel.db", later)
            if rows and "begin time" in rows[0]["reason"]:
                break
            time.sleep(1)
        assert rows and rows[0]["st"] != "R", rows
        said = rows[0]["reason"]
        assert said.startswith("waits for its begin time "), said
        assert said.split()[-1] in (time.strftime("%H:%M", begin),
                                    time.strftime("%H:%M", time.localtime(submitted + BEGIN_IN + 1)))
        told = subprocess.run([sys.executable, "-m", "slurm_gavel", "explain", later, "--db",
                               str(tmp_path / "gavel.db")], capture_output=True, text=True, timeout=60)
        assert "waits for its begin time " in told.stdout, told.stdout + told.stderr
        while time.time() < submitted + BEGIN_IN - 2:       # still not released, round after round
            assert queue(cluster).get(later) == "PENDING", queue(cluster)
            time.sleep(1)
        # then it starts (Slurm's StartTime is never before the begin time)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and queue(cluster).get(later) == "PENDING":
            time.sleep(1)
        assert queue(cluster).get(later) in ("RUNNING", "COMPLETING", None), queue(cluster)
        started = cluster.run(["scontrol", "show", "job", later], check=False).stdout
        assert "JobState=PENDING" not in started, started
    finally:
        code, log = stop_daemon(daemon)
    assert code == 0, log
    assert "begin time" in log, log

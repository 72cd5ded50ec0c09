"""A job the daemon released that Slurm never started, taken back by the next round, on the
real local cluster: its events say what happened ("released on v100 ... but not started by
Slurm; taken back"), never that it was preempted on v100 or moved from v100.

Slurm is kept from starting the released job by a partition time limit the daemon does not
check (v100's MaxTime=1 against the job's --time=10), then the v100 nodes are drained so
that the next round moves the job elsewhere.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

from tests.support.daemon import start_daemon, stop_daemon, submit, write_config


def _events(db, job):
    r = subprocess.run([sys.executable, "-m", "slurm_gavel", "events", "--db", str(db), "-j", job,
                        "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["events"]


def _job(cluster, job):
    out = cluster.run(["squeue", "-h", "-j", job, "-o", "%T %P %r"], check=False).stdout.split()
    return out + [""] * (3 - len(out))


def test_a_released_job_slurm_never_started_is_taken_back_not_preempted(clean, tmp_path):
    cluster = clean
    v100 = cluster.run(["sinfo", "-h", "-p", "v100", "-o", "%N"]).stdout.strip()
    config = write_config(tmp_path, cluster, round_seconds=4, tick_seconds=1,
                          start_timeout_seconds=300)
    cluster.run(["scontrol", "update", "PartitionName=v100", "MaxTime=1"])
    daemon = None
    try:
        job = submit(cluster, tmp_path, "convnet", 1, 5, extra=("--time=10",))
        daemon = start_daemon(config)
        deadline = time.monotonic() + 60        # released on v100 (its fastest type), not started
        released = lambda s: s[:2] == ["PENDING", "v100"] and "JobHeld" not in s[2]
        while time.monotonic() < deadline and not released(_job(cluster, job)):
            time.sleep(0.5)
        assert released(_job(cluster, job)), _job(cluster, job)
        time.sleep(2)
        assert released(_job(cluster, job)), _job(cluster, job)        # still waiting
        cluster.run(["scontrol", "update", f"NodeName={v100}", "State=DRAIN", "Reason=test"])
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and _job(cluster, job)[0] not in ("RUNNING", "COMPLETING", ""):
            time.sleep(1)
        assert _job(cluster, job)[0] in ("RUNNING", "COMPLETING", ""), _job(cluster, job)
    finally:
        cluster.run(["scontrol", "update", "PartitionName=v100", "MaxTime=INFINITE"], check=False)
        cluster.run(["scontrol", "update", f"NodeName={v100}", "State=RESUME"], check=False)
        if daemon is not None:
            code, log = stop_daemon(daemon)
    assert code == 0, log
    said = _events(tmp_path / "gavel.db", job)
    text = "\n".join(e["event"] for e in said)
    assert not [e for e in said if e["kind"] == "preempt"], text
    assert "moved from v100" not in text and "preempted on v100" not in text, text
    assert "v100" in text and "but not started by Slurm; taken back" in text, text
    assert "preempted on v100" not in log and "moved from v100" not in log, log

"""`slurm-gavel doctor` against real clusters: the session's (configured as
slurm_conf/README.md says: no finding) and a small one of its own configured wrong
(each check fails with its line).

The cases of tests/unit/test_doctor.py that need a real Slurm cluster.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from slurm_gavel import __version__
from slurm_gavel.devcluster import node_list
from slurm_gavel.daemon.store import SqliteStore

from tests.support.daemon import write_config
from tests.support.slurm import require_slurm, running_cluster


ROOT = Path(__file__).resolve().parents[2]


def doctor(config: Path, *extra):
    return subprocess.run([sys.executable, "-m", "slurm_gavel.cli", "doctor", "--config", str(config), *extra],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def open_dir():
    """A directory users can reach (pytest's tmp dirs are 700 for root)."""
    d = Path(tempfile.mkdtemp(prefix="gavel-doctor-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d)


def test_right_cluster_has_no_finding_but_proctrack(slurm_cluster, open_dir):
    config = write_config(open_dir, slurm_cluster)
    (open_dir / "progress").chmod(0o1777)
    SqliteStore(open_dir / "gavel.db").close()          # as the daemon makes it
    done = doctor(config)
    assert done.returncode == 0, done.stdout + done.stderr
    # The one finding: the local cluster tracks processes with proctrack/linuxproc (its
    # slurmds share one host), which cannot end ranks orphaned by a bare torchrun.
    data = json.loads(doctor(config, "--json").stdout)
    assert [(f["level"], f["check"]) for f in data["findings"]] == [("warning", "proctrack")], data
    assert data["errors"] == 0
    assert "ProctrackType=proctrack/linuxproc" in done.stdout and "slurm-gavel run" in done.stdout


WRONG_TYPES = {"v100": (1, 1), "k80": (1, 1)}


@pytest.fixture
def wrong_cluster(tmp_path_factory):
    """A small cluster without the plugin, RequeueExitHold=86, a stale job_submit.lua
    beside slurm.conf, a partition mixing two GPU types and Slurm's own preemption."""
    require_slurm()
    with running_cluster(tmp_path_factory.mktemp("bad"), WRONG_TYPES, job_submit_lua=None,
                         requeue_exit_hold=86) as cluster:
        text = (ROOT / "slurm_conf" / "job_submit.lua").read_text()
        (cluster.slurm_conf.parent / "job_submit.lua").write_text(
            text.replace(f"version {__version__}", "version 0.0.1", 1))
        names = ",".join(name for name, _, _ in node_list(WRONG_TYPES))
        with open(cluster.slurm_conf, "a") as f:
            f.write("PreemptType=preempt/partition_prio\nPreemptMode=REQUEUE\n"
                    f"PartitionName=mixed Nodes={names} Default=NO MaxTime=INFINITE State=UP\n")
        cluster.restart_slurmctld()
        yield cluster


def test_wrong_cluster_each_check_has_its_line(wrong_cluster, tmp_path):
    shut = tmp_path / "db"
    shut.mkdir(mode=0o700)
    db = shut / "gavel.db"
    db.write_bytes(b"")
    db.chmod(0o600)
    config = write_config(tmp_path, wrong_cluster, database=str(db),
                          progress_dir=str(tmp_path / "no-such-dir"))
    done = doctor(config)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    data = json.loads(doctor(config, "--json").stdout)
    by_check = {}
    for f in data["findings"]:
        by_check.setdefault(f["check"], []).append(f)
        assert f["level"] == "info" or f["fix"], f            # every problem says its fix
    assert len(lines) == len(data["findings"]) + 1           # one line each, and the summary
    assert by_check["job_submit"][0]["level"] == "error"
    assert "JobSubmitPlugins" in by_check["job_submit"][0]["finding"]
    assert "86" in by_check["requeue_exit_hold"][0]["finding"]
    assert "RequeueExitHold=85" in by_check["requeue_exit_hold"][0]["fix"]
    assert "version 0.0.1" in by_check["job_submit_lua"][0]["finding"]
    assert "PreemptMode=REQUEUE" in by_check["preempt_mode"][0]["finding"]
    assert any("mixed mixes k80,v100" in f["finding"] for f in by_check["partitions"])
    db_lines = " ".join(f["finding"] for f in by_check["database"])
    assert str(shut) in db_lines and f"{db} not readable" in db_lines
    assert "no such directory" in by_check["progress_dir"][0]["finding"]
    assert "munge" not in by_check and data["errors"] == 4
    assert all(any(line.startswith(f["level"].upper()) and f["finding"] in line for line in lines)
               for f in data["findings"])

    # munge stopped (by the pid the cluster recorded): its line, and Slurm's
    pid = wrong_cluster.daemons()["munged"]["pid"]
    os.kill(pid, signal.SIGTERM)
    for _ in range(50):
        if not wrong_cluster.daemons()["munged"]["running"]:
            break
        time.sleep(0.1)
    data = json.loads(doctor(config, "--json").stdout)
    checks = {f["check"]: f for f in data["findings"]}
    assert checks["munge"]["level"] == "error" and "munge" in checks["munge"]["fix"]
    assert checks["slurm"]["level"] == "error"

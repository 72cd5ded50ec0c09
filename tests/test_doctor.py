"""`slurm-gavel doctor` against real clusters: the session's (configured as
slurm_conf/README.md says: no finding) and a small one of its own configured wrong
(each check fails with its line)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from slurm_gavel import __version__
from slurm_gavel.devcluster import node_list
from slurm_gavel.daemon.store import SqliteStore
from slurm_gavel.daemon.doctor import check_schema
from slurm_gavel.slurm.doctor import check_nodes, check_user, lua_version, shipped_file
from slurm_gavel.slurm.records import requeue_exit_codes as exit_codes
from slurm_gavel.daemon.store import MIGRATIONS

from conftest import require_slurm, running_cluster
from test_daemon import write_config

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"


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


def test_shipped_plugin_is_this_version():
    lua = shipped_file("job_submit.lua")
    assert lua is not None and lua_version(lua.read_text()) == __version__


def test_exit_codes():
    assert exit_codes("85") == {85}
    assert exit_codes("80-82,90") == {80, 81, 82, 90}
    assert exit_codes("(null)") == set()


def test_untyped_and_mixed_gres():
    """Slurm's own listing (the 22.05 fixture), with one node's GPUs made untyped and two
    types put in one partition: each is a line."""
    data = json.loads((FIXTURES / "sinfo-22.05.json").read_text())
    nodes = [n for n in data["nodes"] if "gpu" in str(n.get("gres"))]
    assert len(nodes) >= 2
    assert check_nodes(data, {}) == []
    nodes[0]["gres"] = "gpu:4"
    found = check_nodes(data, {})
    assert found[0]["check"] == "gres_type" and nodes[0]["name"] in found[0]["finding"]
    nodes[0]["gres"] = "gpu:a100:4"
    nodes[0]["partitions"] = list(nodes[1]["partitions"])
    found = check_nodes(data, {})
    assert any(f["check"] == "partitions" and "mixes" in f["finding"] for f in found)


def test_database_schema(tmp_path):
    """The daemon's own database: no line; an older one is migrated (back up first); a newer
    one or another file is an error."""
    db = tmp_path / "state.db"
    SqliteStore(db).close()
    assert check_schema(db) == []
    conn = sqlite3.connect(db)
    conn.execute("update meta set value = '1' where key = 'schema_version'")
    conn.commit()
    [old] = check_schema(db)
    assert old["level"] == "info" and "migrated" in old["finding"] and "back it up" in old["fix"]
    conn.execute("update meta set value = ? where key = 'schema_version'", (str(len(MIGRATIONS) + 1),))
    conn.commit()
    conn.close()
    [new] = check_schema(db)
    assert new["level"] == "error" and "newer" in new["finding"]
    db.write_bytes(b"not a database" * 100)
    assert check_schema(db)[0]["level"] == "error"


def test_daemon_user():
    assert check_user({"SlurmUser": "slurm(64030)"}, euid=64030) == []
    [f] = check_user({"SlurmUser": "root(0)"}, euid=1000)
    assert f["level"] == "error" and "root" in f["fix"]


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


def test_a_partition_of_typed_mixed_nodes_is_scheduled_and_a_gpu_type_matching_nothing_is_an_error():
    """Mixed partitions with typed GRES are supported (slurm/gputypes.py): doctor says how
    gavel uses one, and an entry of [gpu_types] that matches no node is an error."""
    data = {"nodes": [
        {"name": "a0", "gres": "gpu:v100:4", "partitions": ["gpu"], "state": ["IDLE"]},
        {"name": "b0", "gres": "gpu:a100:8", "partitions": ["gpu"], "state": ["IDLE"]},
    ]}
    found = check_nodes(data, {})
    assert [f["level"] for f in found] == ["info"], found
    assert "a100,v100" in found[0]["finding"]
    found = check_nodes(data, {}, {"v100": {"partition": "gpu", "gres": "v100"},
                                          "h100": {"partition": "gpu", "gres": "h100"}})
    assert [(f["level"], f["check"]) for f in found] == [("error", "gpu_types")], found
    assert "h100" in found[0]["finding"]

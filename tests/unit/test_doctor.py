"""`slurm-gavel doctor` against real clusters: the session's (configured as
slurm_conf/README.md says: no finding) and a small one of its own configured wrong
(each check fails with its line)."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from slurm_gavel import __version__
from slurm_gavel.daemon.doctor import check_schema
from slurm_gavel.daemon.store import MIGRATIONS, SqliteStore
from slurm_gavel.slurm.doctor import check_nodes, check_user, lua_version, shipped_file
from slurm_gavel.slurm.records import requeue_exit_codes as exit_codes


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


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

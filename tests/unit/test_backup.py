"""`slurm-gavel backup`: a consistent copy of a real daemon database (with its WAL), readable
by gqueue; refusals are one line and touch nothing."""
from __future__ import annotations

import sqlite3
import subprocess
import sys

from slurm_gavel.daemon.store import SqliteStore


def backup(*args):
    return subprocess.run([sys.executable, "-m", "slurm_gavel", "backup", *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def test_backup_copies_what_the_open_database_holds(tmp_path):
    db = tmp_path / "state.db"
    store = SqliteStore(db)             # open, as the daemon keeps it: rows may sit in the WAL
    store.event(100.0, "arrival", "7", "resnet18")
    copy = tmp_path / "copy.db"
    done = backup(copy, "--db", db)
    assert done.returncode == 0, done.stderr
    conn = sqlite3.connect(copy)
    assert conn.execute("select job, detail from events").fetchall() == [("7", "resnet18")]
    conn.close()
    SqliteStore(copy, readonly=True).close()          # gqueue reads it: same schema
    again = backup(copy, "--db", db)                  # exists: refused, untouched
    assert again.returncode == 2 and "--force" in again.stderr and len(again.stderr.splitlines()) == 1
    store.event(101.0, "arrival", "8", "lstm")
    assert backup(copy, "--db", db, "--force").returncode == 0
    assert sqlite3.connect(copy).execute("select count(*) from events").fetchone()[0] == 2
    store.close()
    missing = backup(tmp_path / "x.db", "--db", tmp_path / "none.db")
    assert missing.returncode == 2 and "no such file" in missing.stderr
    assert not (tmp_path / "x.db").exists() and not list(tmp_path.glob(".*.partial"))

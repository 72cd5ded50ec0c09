"""The daemon's database, damaged or behind: found at start and every round, said in words.

Real SQLite files: a -wal deleted under an open store, 4 KiB of garbage written into a
stopped database, a database that lost rounds the daemon committed (integrity.py's round
mark).  The daemon (a real `slurm-gavel daemon` process: these checks come before it
asks Slurm anything), gqueue, `slurm-gavel events` and doctor's database check must each
say what is wrong in one line, never a traceback, and the daemon must not start on it.
"""
from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_gavel.cli.main import main as cli_main
from slurm_gavel.cli.queue import main as gqueue
from slurm_gavel.daemon import integrity
from slurm_gavel.daemon.doctor import check_database
from slurm_gavel.daemon.store import SqliteStore, StoreDamaged, StoreUnwritable

ROOT = Path(__file__).resolve().parents[2]


def database(path: Path, rounds: int = 6, events: int = 300) -> Path:
    """A database as the daemon leaves it: events, jobs and `rounds` rounds (0 .. rounds-1)."""
    store = SqliteStore(path)
    for i in range(events):
        store.event(float(i), "arrival", str(i), "x" * 200)
    with store._tx():
        store.db["rounds"].insert_all([{"number": n, "started": float(n), "keep": 0, "start": 0,
                                        "preempt": 0} for n in range(rounds)])
    store.close()
    return path


def garble(path: Path, offset: int = 4096) -> None:
    """4 KiB of garbage written into the file at `offset` (a page of a 4 KiB-page database)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(random.Random(7).randbytes(4096))


def daemon(tmp_path: Path, db: Path, *args) -> subprocess.CompletedProcess:
    config = tmp_path / "gavel.toml"
    config.write_text(f'database = "{db}"\nround_seconds = 20\ntick_seconds = 2\n')
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return subprocess.run([sys.executable, "-m", "slurm_gavel", "daemon", "--config", str(config), *args],
                          capture_output=True, text=True, timeout=120, env=env)


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# -- the -wal deleted under the daemon ------------------------------------------------------
def test_a_deleted_wal_is_noticed_before_the_next_write_and_written_back(tmp_path, capsys):
    db = tmp_path / "gavel.db"
    store = SqliteStore(db)
    for i in range(40):
        store.event(float(i), "before", None, "x" * 100)
    os.unlink(f"{db}-wal")
    assert store.moved() == "wal deleted"
    with pytest.raises(StoreUnwritable, match="gavel.db-wal was deleted while open"):
        store.event(99.0, "unrecorded")
    # a reader meanwhile: one line in words, not a traceback
    assert gqueue(["--db", str(db)]) == 2
    line = one_line(capsys.readouterr().err)
    assert "gavel.db-wal is missing" in line, line
    assert "written back" in store.recover()
    assert store.moved() is None
    store.event(100.0, "after")
    store.close()
    reader = SqliteStore(db, readonly=True)
    kinds = [k for (k,) in reader.db.execute("select kind from events order by id")]
    assert kinds == ["before"] * 40 + ["after"]          # nothing lost
    assert reader.db.execute("pragma integrity_check").fetchone()[0] == "ok"


# -- garbage in a stopped database ------------------------------------------------------------
@pytest.mark.parametrize("offset", [4096, 3 * 4096, 10 * 4096])
def test_a_damaged_database_is_refused_at_start_and_said_by_gqueue_events_and_doctor(
        tmp_path, capsys, offset):
    db = database(tmp_path / "gavel.db")
    integrity.write_mark(db, 5)
    garble(db, offset)
    done = daemon(tmp_path, db)
    assert done.returncode == 4, done.stderr
    line = one_line(done.stderr)
    assert f"database {db} is damaged" in line and "restore the database from a backup" in line, line
    for command in (lambda: gqueue(["--db", str(db)]), lambda: cli_main(["events", "--db", str(db)])):
        assert command() != 0
        said = one_line(capsys.readouterr().err)
        assert "is damaged" in said or "refused by the daemon" in said, said
    errors = [f for f in check_database(str(db)) if f["level"] == "error"]
    assert errors and "is damaged" in errors[0]["finding"] and "backup" in errors[0]["fix"], errors


def test_a_sound_database_passes_every_check(tmp_path, capsys):
    db = database(tmp_path / "gavel.db")
    integrity.write_mark(db, 5)
    assert [f for f in check_database(str(db)) if f["level"] == "error"] == []
    assert gqueue(["--db", str(db)]) == 0


# -- a database behind the round the daemon committed ------------------------------------------
def test_a_database_that_lost_rounds_is_refused_and_never_resumed(tmp_path, capsys):
    """The daemon committed round 9 (its mark), the database holds rounds 0-5 (its -wal was
    lost with the daemon): starting would re-run round 5's plan."""
    db = database(tmp_path / "gavel.db", rounds=6)
    integrity.write_mark(db, 9)
    done = daemon(tmp_path, db)
    assert done.returncode == 4, done.stderr
    line = one_line(done.stderr)
    assert "lost state: it holds rounds up to 5, but the daemon committed round 9" in line, line
    assert "--accept-lost-rounds" in line
    assert gqueue(["--db", str(db)]) == 2
    assert "lost state" in one_line(capsys.readouterr().err)
    errors = [f for f in check_database(str(db)) if f["level"] == "error"]
    assert errors and "lost state" in errors[0]["finding"], errors
    # the database itself was left as it was: nothing written into it
    assert SqliteStore(db, readonly=True).next_round() == 6


def test_a_new_database_drops_the_old_mark(tmp_path):
    """Removing the database to start a new ledger is not a loss."""
    db = tmp_path / "gavel.db"
    integrity.write_mark(db, 9)
    store = SqliteStore(db)
    assert integrity.lost_rounds(db, store.db.conn) is not None   # as a daemon would see it
    store.close()
    os.unlink(db)
    done = daemon(tmp_path, db)
    assert "lost state" not in done.stderr and done.returncode != 4, done.stderr
    assert integrity.read_mark(db) is None


def test_the_mark_is_atomic_and_keeps_a_refusal(tmp_path):
    db = tmp_path / "gavel.db"
    assert integrity.read_mark(db) is None and integrity.refusal(db) is None
    integrity.write_mark(db, 3, refused="database x is damaged\n(page 7)")
    assert integrity.read_mark(db) == 3 and integrity.refusal(db) == "database x is damaged (page 7)"
    integrity.write_mark(db, 4)
    assert integrity.read_mark(db) == 4 and integrity.refusal(db) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gavel.db.round"]


def test_damage_while_running_is_told_apart_from_an_unwritable_file(tmp_path):
    import sqlite3
    from slurm_gavel.daemon.store import unwritable
    assert isinstance(unwritable(tmp_path, sqlite3.DatabaseError("database disk image is malformed")),
                      StoreDamaged)
    assert isinstance(unwritable(tmp_path, sqlite3.OperationalError("database or disk is full")),
                      StoreUnwritable)


def test_a_mark_written_before_any_round_is_no_loss(tmp_path):
    """A database refused before its first round is marked -1 (for gqueue): that is no loss."""
    db = database(tmp_path / "gavel.db", rounds=0)
    integrity.write_mark(db, -1)
    assert integrity.lost_rounds(db, SqliteStore(db).db.conn) is None

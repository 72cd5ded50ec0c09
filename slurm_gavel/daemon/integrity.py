"""Is the daemon's database whole, and is it the state the daemon last wrote?

Three checks, cheap to dear:
* the round mark: after each round is committed the daemon writes its number to a small
  file beside the database (``DATABASE.round``, atomically).  A database whose last round
  is older than the mark lost rounds (its ``-wal`` deleted and the daemon killed, a
  copy restored over it): resuming from it would re-run an old plan against a cluster
  that has moved on, so the daemon refuses it (`lost_rounds`) until an admin accepts
  the loss (`slurm-gavel daemon --accept-lost-rounds`);
* `quick_check`: SQLite's ``PRAGMA quick_check`` (pages and records well formed, not
  the indexes against their tables), run by the daemon at start;
* `integrity_check`: ``PRAGMA integrity_check``, everything, run by `slurm-gavel doctor`.

Each finding is a `store.StoreDamaged` (one line: what is wrong, what to do), so the
daemon, gqueue and doctor say it in the same words.
"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from .store import StoreDamaged

MARK_SUFFIX = ".round"


# -- the round mark ---------------------------------------------------------------------------
def mark_path(database) -> Path:
    return Path(f"{database}{MARK_SUFFIX}")


def write_mark(database, round_: int, refused: str | None = None) -> None:
    """Record that round `round_` is committed, and (`refused`) why the daemon refused the
    database, for gqueue to say (write beside, fsync, rename: never half a file)."""
    path = mark_path(database)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    text = f"{int(round_)}\n" + (f"refused: {' '.join(refused.split())}\n" if refused else "")
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_mark(database) -> int | None:
    """The last round the daemon recorded as committed; None without a (readable) mark."""
    try:
        return int(mark_path(database).read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def refusal(database) -> str | None:
    """Why the daemon last refused this database (it stopped), or None."""
    try:
        lines = mark_path(database).read_text().splitlines()
    except OSError:
        return None
    return next((line[len("refused: "):] for line in lines[1:] if line.startswith("refused: ")), None)


def last_round(conn: sqlite3.Connection) -> int | None:
    """The last round the database holds (None: none, or a database without rounds yet)."""
    try:
        row = conn.execute("select max(number) from rounds").fetchone()
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            return None
        raise
    return None if row is None or row[0] is None else int(row[0])


def lost_rounds(database, conn: sqlite3.Connection, committed: int | None = None) -> StoreDamaged | None:
    """The database holds fewer rounds than the daemon committed (`committed`, else its
    mark): what was lost, or None."""
    mark = read_mark(database) if committed is None else committed
    if mark is None or mark < 0:
        return None
    have = last_round(conn)
    if have is not None and have >= mark:
        return None
    held = "no round" if have is None else f"rounds up to {have}"
    return StoreDamaged(database, f"lost state: it holds {held}, but the daemon committed round "
                                  f"{mark} (its -wal deleted, or an older copy put in its place)",
                        "restore the latest backup, or accept the loss with `slurm-gavel daemon "
                        "--accept-lost-rounds` (it then starts afresh from the jobs Slurm has, "
                        "never from the old plan)")


# -- SQLite's own checks ----------------------------------------------------------------------
def _check(conn: sqlite3.Connection, pragma: str) -> str | None:
    try:
        rows = [r[0] for r in conn.execute(f"pragma {pragma}").fetchall()]
    except sqlite3.DatabaseError as e:
        return str(e)
    if rows == ["ok"]:
        return None
    more = f" (and {len(rows) - 1} more)" if len(rows) > 1 else ""
    first = " ".join(str(rows[0]).replace("*** in database main ***", "").split()) if rows else ""
    return f"{first}{more}" if rows else "no answer"


def quick_check(database, conn: sqlite3.Connection) -> StoreDamaged | None:
    """`PRAGMA quick_check` (linear in the file's size, read only): the damage, or None."""
    problem = _check(conn, "quick_check(5)")
    return None if problem is None else StoreDamaged(database, f"is damaged ({problem})")


def integrity_check(database, conn: sqlite3.Connection) -> StoreDamaged | None:
    """`PRAGMA integrity_check` (everything, indexes too): the damage, or None."""
    problem = _check(conn, "integrity_check(5)")
    return None if problem is None else StoreDamaged(database, f"is damaged ({problem})")


__all__ = ["MARK_SUFFIX", "integrity_check",
           "last_round", "lost_rounds", "mark_path", "quick_check", "read_mark", "refusal",
           "write_mark"]

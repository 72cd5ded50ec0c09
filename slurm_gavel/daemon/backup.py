"""`slurm-gavel backup DEST`: a consistent copy of the daemon's database, while it runs.

What an admin runs before an upgrade (docs/install.md, "Upgrading"): SQLite's online
backup (`sqlite3.Connection.backup`, the same as the `sqlite3` shell's `.backup`) from a
read-only connection, so the copy is one committed state even while the daemon writes,
and the daemon is never blocked for long.  The copy is written beside DEST and moved in
place when complete: an interrupted backup never leaves a half file at DEST.  An existing
DEST is refused unless `--force`.
"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from ..core.errors import InputError


def backup(database: str | Path, dest: str | Path, force: bool = False) -> Path:
    """Copy `database` to `dest`; returns `dest`.  InputError names what is wrong."""
    src, dest = Path(database), Path(dest)
    if not src.is_file():
        raise InputError("database", f"{src}: no such file (has the daemon run?)")
    if dest.exists() and not force:
        raise InputError("backup", f"{dest} exists (--force to replace it)")
    if dest.resolve() == src.resolve():
        raise InputError("backup", f"{dest} is the database itself")
    tmp = dest.with_name(f".{dest.name}.partial")
    try:
        source = sqlite3.connect(f"file:{src}?mode=ro", uri=True, timeout=30)
        try:
            target = sqlite3.connect(tmp)
            try:
                source.backup(target)
            finally:
                target.close()
        finally:
            source.close()
        os.replace(tmp, dest)
    except sqlite3.Error as e:
        tmp.unlink(missing_ok=True)
        raise InputError("backup", f"{src} -> {dest}: {e}") from None
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise InputError("backup", f"{dest}: {e.strerror or e}") from None
    return dest


__all__ = ["backup"]

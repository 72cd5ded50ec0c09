"""One daemon per database: an exclusive `flock` on a lock file beside it.

`DATABASE.lock` holds the pid of the daemon that owns the database.  The lock
is the kernel's (flock on the open file), so it goes away with the process
however that ends (kill -9 included): a stale pid in the file never blocks the
next daemon.  A second daemon on the same database is refused at once, naming
the first one's pid; so is a dry run (it writes its decisions to the database
it is given, which must not be the live daemon's).
"""
from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from ..core.errors import GavelError


class LockError(GavelError):
    """The database is in use by another daemon (the message names its pid)."""


class LockUnavailable(LockError):
    """The lock file cannot be created or locked (a read-only or full file system...)."""


def lock_path(database) -> Path:
    return Path(str(database) + ".lock")


class DatabaseLock:
    """Held for the life of the daemon; `acquire` raises LockError naming the holder."""

    def __init__(self, database, dry_run: bool = False):
        self.database = Path(database)
        self.path = lock_path(database)
        self.dry_run = dry_run
        self.fd: int | None = None

    def acquire(self) -> "DatabaseLock":
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise LockUnavailable(f"database {self.database} is not writable: cannot create its "
                                  f"lock file {self.path}: {e.strerror or e}; make its directory "
                                  f"writable (or free space)") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _read_pid(fd)
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise LockUnavailable(f"database {self.database}: cannot lock {self.path}: "
                                      f"{e.strerror or e}") from None
            who = f"pid {holder}" if holder else "a process (pid unknown)"
            if self.dry_run:
                raise LockError(f"database {self.database} is in use by a running daemon ({who}); "
                                f"a dry run writes its decisions to its database: give it its own "
                                f"`database =` in a copy of the config") from None
            raise LockError(f"database {self.database} is in use by another slurm-gavel daemon "
                            f"({who}, lock {self.path}); stop it first, or give this one its own "
                            f"`database =`") from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass        # the lock is what counts; the pid is for the message (full disk: no pid)
        self.fd = fd
        return self

    def intact(self) -> bool:
        """Is the lock file at its path still the one we hold (not deleted or replaced)?"""
        if self.fd is None:
            return False
        try:
            mine, there = os.fstat(self.fd), os.stat(self.path)
        except OSError:
            return False
        return mine.st_nlink > 0 and (mine.st_ino, mine.st_dev) == (there.st_ino, there.st_dev)

    def retake(self) -> None:
        """The lock file was removed (its directory deleted): lock a new one at the path.

        LockError if another daemon has locked it meanwhile (it owns the database now)."""
        old, self.fd = self.fd, None
        try:
            self.acquire()
        except LockError:
            self.fd = old             # still ours, if void: tried again next time
            raise
        if old is not None:
            os.close(old)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)         # closing the file drops the flock
            self.fd = None


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


__all__ = ["DatabaseLock", "LockError", "LockUnavailable", "lock_path"]

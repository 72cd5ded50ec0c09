"""Reading files that users control, for the daemon (which runs as root).

A job's progress file lives in a directory its user owns (``<work dir>/.gavel``)
or in a shared spool every job writes to.  Whatever is there may be hostile: a
FIFO (an open() for reading blocks until a writer comes: seen on a real cluster,
the daemon stopped scheduling), a device, a symlink to ``/etc/shadow``, a
directory symlinked to a root-only place, a file of many GiB, or a file swapped
for one of those between two looks.  `read_tail` opens such a file so that none
of this works:

- the directory is opened first (``O_NOFOLLOW`` unless it is the admin's own,
  configured spool), the file relative to it with ``O_NOFOLLOW``: no symlink is
  followed and nothing resolves outside that directory (a job id has no ``/``);
- a directory that is not the admin's spool must be owned by the job's user or root:
  another user who made ``.gavel/`` first in a shared directory could rename, replace
  or delete what is in it, so nothing there is trusted (the job side refuses to write
  there too: `slurm_gavel.job.progress`);
- ``lstat`` before opening (a device or FIFO is never even opened), then
  ``O_NONBLOCK | O_NOCTTY`` at open and ``fstat`` of what was opened: a regular
  file, owned by the job's user, or it is refused -- that closes the race with a
  swap between the two looks;
- at most the last `TAIL_BYTES` are read (enough for the newest records).

`UserFiles` adds the time bound: the reads run in a few threads of their own (`_Readers`:
``workers`` of them, not one per file, which cost ~1 s a poll at 5,000 jobs) and the
daemon waits for all of a round's reads together at most ``timeout`` seconds, so
a hung network filesystem costs those jobs their progress report, not the round
(a read still stuck is not started again until it returns; a thread stuck in one is
replaced, up to `MAX_READERS`, so hung files do not starve the others).  A refused file
costs its job its progress report and one log line per `log_every` seconds.
"""
from __future__ import annotations

import errno
import logging
import os
import pwd
import queue
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..core.display import printable

log = logging.getLogger("slurm_gavel.userfiles")

TAIL_BYTES = 64 * 1024
READERS = 4           # threads that read users' files
MAX_READERS = 32      # with the ones stuck in a hung read
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISLNK, "a symlink"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


class UnsafeFile(Exception):
    """A user's file the daemon refuses to read; the message says why, in one line."""


@dataclass(frozen=True)
class Tail:
    data: bytes          # the end of the file, at most max_bytes
    truncated: bool      # the file is longer: `data` starts in the middle of a line
    key: tuple           # (device, inode, mtime_ns, size): changes when the file does


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_tail(path, owner_uid: int | None = None, max_bytes: int = TAIL_BYTES,
              trusted_dir: bool = False) -> Tail | None:
    """The last `max_bytes` of the regular file `path`; None when it (or its directory)
    does not exist.  Raises UnsafeFile for anything else than a regular file owned by
    `owner_uid` (any owner when None) reached without a symlink.  `trusted_dir`: the
    directory is the admin's (may be reached through symlinks); the file never is."""
    path = Path(path)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        dir_fd = os.open(path.parent, flags if trusted_dir else flags | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeFile(f"{path.parent} is a symlink or not a directory") from None
        raise UnsafeFile(f"cannot open {path.parent}: {e.strerror}") from None
    try:
        owner = os.fstat(dir_fd).st_uid
        if not trusted_dir and owner_uid is not None and owner not in (owner_uid, 0):
            raise UnsafeFile(f"{path.parent} is owned by another user (uid {owner}), not by "
                             f"the job's user (uid {owner_uid})")
        try:
            st = os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(f"{path} is {_kind(st.st_mode)}, not a regular file")
        try:
            fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
                         | os.O_CLOEXEC, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise UnsafeFile(f"{path} is a symlink, not a regular file") from None
            raise UnsafeFile(f"cannot open {path}: {e.strerror}") from None
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)                # what was opened: it may have been swapped
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(f"{path} is {_kind(st.st_mode)}, not a regular file")
        if owner_uid is not None and st.st_uid != owner_uid:
            raise UnsafeFile(f"{path} is owned by uid {st.st_uid}, not by the job's user "
                             f"(uid {owner_uid})")
        start = max(0, st.st_size - max_bytes)
        chunks, got = [], 0
        while got < max_bytes:
            chunk = os.pread(fd, max_bytes - got, start + got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        return Tail(b"".join(chunks), start > 0, (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size))
    except OSError as e:
        raise UnsafeFile(f"cannot read {path}: {e.strerror}") from None
    finally:
        os.close(fd)


def user_uid(user: str) -> int | None:
    """The uid of user name `user`, None when it is unknown here."""
    try:
        return pwd.getpwnam(user).pw_uid
    except (KeyError, TypeError, ValueError):
        return None


class _Read:
    """One file to read: done once the read returned (or raised)."""

    def __init__(self, path, kwargs):
        self.path, self.kwargs = path, kwargs
        self.done = threading.Event()
        self.result: Tail | None = None
        self.error: Exception | None = None

    def is_alive(self) -> bool:
        return not self.done.is_set()

    def run(self):
        try:
            self.result = read_tail(self.path, **self.kwargs)
        except Exception as e:            # handed to the caller, who logs it
            self.error = e
        finally:
            self.done.set()


class _Readers:
    """`workers` daemon threads taking reads from a queue; one busy in a read for
    `stuck_after` s counts as stuck and another is started beside it (at most `cap` in all)."""

    def __init__(self, workers: int, stuck_after: float, cap: int = MAX_READERS):
        self.workers, self.stuck_after, self.cap = workers, stuck_after, max(cap, workers)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._busy: dict[int, float] = {}           # thread ident -> when its read began

    def submit(self, read: _Read) -> None:
        self._queue.put(read)
        self.grow()

    def grow(self) -> None:
        with self._lock:
            now = time.monotonic()
            stuck = sum(1 for began in self._busy.values() if now - began >= self.stuck_after)
            while len(self._threads) - stuck < self.workers and len(self._threads) < self.cap:
                t = threading.Thread(target=self._work, name=f"gavel-reader-{len(self._threads)}",
                                     daemon=True)          # never holds up the exit
                self._threads.append(t)
                t.start()

    def _work(self) -> None:
        me = threading.get_ident()
        while True:
            read = self._queue.get()
            with self._lock:
                self._busy[me] = time.monotonic()
            read.run()
            with self._lock:
                self._busy.pop(me, None)


class UserFiles:
    """`read_tail` for many files at once, bounded in time, with rate-limited logging."""

    def __init__(self, timeout: float = 2.0, max_bytes: int = TAIL_BYTES, log_every: float = 600.0,
                 clock=time.monotonic, workers: int = READERS):
        self.timeout, self.max_bytes, self.log_every, self.clock = timeout, max_bytes, log_every, clock
        # a read of a local or healthy NFS file takes microseconds: a quarter of the wait is stuck
        self._readers = _Readers(workers, stuck_after=timeout / 4)
        self._stuck: dict[str, _Read] = {}
        self._logged: dict[str, float] = {}
        self._uids: dict[str, tuple[int | None, float]] = {}    # user -> (uid, looked up at)
        self.refused: dict[str, str] = {}      # path -> why, of the last read_all's refusals

    def uid(self, user: str) -> int | None:
        """The uid of `user`, looked up again after `log_every` s (a user added later)."""
        now = self.clock()
        cached = self._uids.get(user)
        if cached is None or now - cached[1] >= self.log_every:
            cached = self._uids[user] = (user_uid(user), now)
        return cached[0]

    def read_all(self, requests: dict[str, dict]) -> dict[str, Tail | None]:
        """{path: read_tail keyword arguments} -> {path: Tail or None}; a path that was
        refused, failed or did not answer within `timeout` is left out (and logged)."""
        now = self.clock()
        deadline = time.monotonic() + self.timeout    # real time, whatever clock logs use
        # forget what no longer matters: finished reads of paths not asked for, old log times
        self._stuck = {p: r for p, r in self._stuck.items() if p in requests or r.is_alive()}
        self._logged = {k: t for k, t in self._logged.items() if now - t < self.log_every}
        reads = {}
        for path, kwargs in requests.items():
            r = self._stuck.get(path)
            if r is None:
                r = _Read(path, {"max_bytes": self.max_bytes, **kwargs})
                self._readers.submit(r)
            reads[path] = r
        out = {}
        self.refused = {}
        for path, r in reads.items():
            while not r.done.wait(max(0.0, min(deadline - time.monotonic(), self._readers.stuck_after))):
                if time.monotonic() >= deadline:
                    break
                self._readers.grow()          # a reader stuck in a hung file: start another
            if r.is_alive():
                self._stuck[path] = r
                self.warn(path, f"{path}: not read within {self.timeout:g} s (a hung filesystem?)")
                continue
            self._stuck.pop(path, None)
            if r.error is not None:
                why = (str(r.error) if isinstance(r.error, UnsafeFile)
                       else f"{path}: {type(r.error).__name__}: {r.error}")
                self.refused[path] = why
                self.warn(path, why)
            else:
                out[path] = r.result
        return out

    def warn(self, key: str, message: str) -> None:
        now = self.clock()
        if now - self._logged.get(key, -self.log_every) >= self.log_every:
            self._logged[key] = now
            log.warning("progress report ignored: %s", printable(message))


__all__ = ["TAIL_BYTES", "Tail", "UnsafeFile", "UserFiles", "read_tail", "user_uid"]

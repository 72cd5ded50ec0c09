"""The daemon's state in SQLite: jobs, time per GPU type, rounds, allocations, placements, events,
and (schema v3) measured and estimated throughputs (slurm_gavel.estimator.learning).

Written by the engine (through the `Store` methods) and by the daemon
(`status`: why each job waits), read by `slurm-gavel queue` while the daemon
writes: WAL mode, one short transaction per write.  The schema is versioned;
migrations run in order, each in its own transaction, so a daemon killed
during an upgrade leaves the previous version intact.

Storage failures (disk full, read-only, I/O errors, the file deleted or
replaced under the open connection) come out of every write as one
`StoreUnwritable` whose message says what to do; `recover` reopens the
database (or, deleted, writes it back from the copy still open) and `probe`
says whether it can be written again.

SIGBUS: a memory-mapped file that stops being writable kills the process
(exit 135, nothing logged).  The database file is never mapped (mmap_size=0),
but in WAL mode SQLite always maps the wal-index (DATABASE-shm); `chattr +i`
on it was exactly that crash.  So before each write the files' immutable and
append-only flags (and a read-only mount) are checked, and the write refused
as "read-only" instead.
"""
from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import sqlite3
import struct
import time
from pathlib import Path
from typing import Callable, Iterable, Mapping

import sqlite_utils

from ..core.backend import Departure, JobState, Observation, Usage
from ..core.errors import GavelError
from ..core.interfaces import MeasurementStore, Store
from ..core.plan import RoundPlan
from ..core.model import Allocation
from ..core.state import EngineState
from .migrations import MIGRATIONS


class StoreError(GavelError):
    pass


class StoreDamaged(StoreError):
    """The database is damaged or has lost state: the daemon must not act on it (integrity.py)."""

    def __init__(self, path, reason: str, fix: str | None = None):
        self.path, self.reason = str(path), reason
        self.fix = fix or FIX_DAMAGED
        super().__init__(f"database {path} {reason}; {self.fix}")


FIX_DAMAGED = ("stop the daemon, keep the file for inspection and restore the database from a "
               "backup (slurm-gavel doctor checks it)")
# what SQLite says of a file that is not (or no longer) a well-formed database
_DAMAGE = ("malformed", "not a database", "file is encrypted")


def damaged(error: BaseException) -> bool:
    """Whether SQLite's `error` says the file itself is damaged (not merely unwritable)."""
    return isinstance(error, sqlite3.DatabaseError) and any(k in str(error).lower() for k in _DAMAGE)


class StoreUnwritable(StoreError):
    """The database cannot be written now; the message names it, the cause, and the fix."""

    def __init__(self, path, reason: str, fix: str):
        self.path, self.reason, self.fix = str(path), reason, fix
        super().__init__(f"database {path} is not writable: {reason}; {fix}")


# (what SQLite or the OS says, as the admin reads it, what to do)
_CAUSES = (
    ("database or disk is full", "disk full", "free space"),
    ("readonly database", "read-only", "make the file, its directory and the file system "
                                       "writable (mount, permissions, chattr -i)"),
    ("disk i/o error", "disk I/O error", "check the disk (dmesg), free space and permissions"),
    ("unable to open database file", "cannot open it",
     "check that the file and its directory exist and are writable"),
    ("no such file or directory", "its directory is missing", "create it"),
    ("database is locked", "busy: another process holds a write lock on it",
     "end that process (`fuser` names it)"),
)
_ERRNO = {errno.ENOSPC: 0, errno.EDQUOT: 0, errno.EROFS: 1, errno.EPERM: 1, errno.EACCES: 1, errno.EIO: 2,
          errno.ENOENT: 4}


FS_IOC_GETFLAGS = 0x80086601          # linux/fs.h, _IOR('f', 1, long)
FS_IMMUTABLE_FL, FS_APPEND_FL = 0x10, 0x20


def _frozen(fd: int) -> str | None:
    """'immutable' / 'append-only' (chattr +i / +a) or 'a read-only mount' for an open file."""
    try:
        if os.fstatvfs(fd).f_flag & os.ST_RDONLY:
            return "on a read-only mount"
    except OSError:
        pass
    try:
        flags = struct.unpack("i", fcntl.ioctl(fd, FS_IOC_GETFLAGS, b"\0" * 8)[:4])[0]
    except OSError:
        return None         # a file system without these flags
    if flags & FS_IMMUTABLE_FL:
        return "immutable (chattr +i)"
    if flags & FS_APPEND_FL:
        return "append-only (chattr +a)"
    return None


def unwritable(path, error: BaseException) -> StoreUnwritable | StoreDamaged:
    """The storage error `error` (sqlite3 or OS) as the one line an admin needs; a damaged
    file is StoreDamaged (waiting does not mend it)."""
    if damaged(error):
        return StoreDamaged(path, f"is damaged ({error})")
    index = _ERRNO.get(getattr(error, "errno", None))
    if index is None:
        text = str(error).lower()
        index = next((i for i, (key, _, _) in enumerate(_CAUSES) if key in text), None)
    if index is None:
        return StoreUnwritable(path, str(error) or type(error).__name__,
                               "fix the storage; the daemon resumes by itself")
    _, reason, fix = _CAUSES[index]
    return StoreUnwritable(path, reason, f"{fix}, the daemon resumes by itself")


def _finite(v):
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v


class SqliteStore(Store, MeasurementStore):
    """The `Store` of the daemon, plus the queries `slurm-gavel queue` needs."""

    def __init__(self, path, readonly: bool = False, clock: Callable[[], float] = time.time):
        self.path = Path(path)
        self.clock = clock
        self.readonly = readonly
        self._fd: int | None = None          # the database file as opened: deleted/replaced?
        self._side: list[tuple[str, int]] = []   # its -wal and -shm files (flags checked)
        if readonly:
            try:
                if not self.path.exists():
                    raise StoreError(f"{self.path}: no database (has the daemon run?)")
                conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=10)
            except sqlite3.Error as e:
                raise StoreError(f"{self.path}: cannot open database: {e}") from None
            self.db = sqlite_utils.Database(conn)
            try:
                version = self.schema_version()
            except sqlite3.DatabaseError as e:
                conn.close()
                raise self.unreadable(e) from None
            if version != len(MIGRATIONS):
                raise StoreError(f"{self.path}: schema version {self.schema_version()}, "
                                 f"this slurm-gavel reads {len(MIGRATIONS)}")
            return
        self.db = sqlite_utils.Database(self._connect())
        self.migrate()

    def _connect(self) -> sqlite3.Connection:
        """Open the database for writing (WAL, no mmap) and remember which file it is."""
        conn = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(self.path), timeout=10, isolation_level=None)
            conn.execute("PRAGMA mmap_size=0")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("select count(*) from sqlite_master").fetchone()   # makes -wal and -shm
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except (sqlite3.Error, OSError) as e:
            if conn is not None:
                conn.close()
            raise unwritable(self.path, e) from None
        self._close_files()
        self._fd = fd
        for suffix in ("-wal", "-shm"):
            try:
                self._side.append((suffix, os.open(f"{self.path}{suffix}", os.O_RDONLY | os.O_CLOEXEC)))
            except OSError:
                pass
        return conn

    def unreadable(self, error: sqlite3.DatabaseError) -> StoreError:
        """A read of this database failed: why, in words (damaged, its -wal gone, ...)."""
        if damaged(error):
            return StoreDamaged(self.path, f"is damaged ({error})")
        if self.wal_lost_at_path() or ("i/o error" in str(error).lower() and self._wal_empty()):
            return StoreDamaged(self.path, f"cannot be read: {self.path.name}-wal is missing "
                                           f"beside its -shm ({error})",
                                "if the daemon runs it writes the database back within a tick "
                                "(then try again); if not, the writes in that file are lost: "
                                "run slurm-gavel doctor")
        return StoreError(f"database {self.path} cannot be read: {error}")

    def wal_lost_at_path(self) -> bool:
        """Its -shm is at the path but not the -wal that index points into (deleted)."""
        return Path(f"{self.path}-shm").exists() and not Path(f"{self.path}-wal").exists()

    def _wal_empty(self) -> bool:
        """An empty -wal beside a -shm: what a reader makes when the -wal was deleted."""
        try:
            return Path(f"{self.path}-shm").exists() and os.path.getsize(f"{self.path}-wal") == 0
        except OSError:
            return False

    def _close_files(self):
        for fd in [self._fd] + [fd for _, fd in self._side]:
            if fd is not None:
                os.close(fd)
        self._fd, self._side = None, []

    def frozen(self) -> str | None:
        """Why the files cannot be written though SQLite would try (and, for -shm, crash)."""
        if self._fd is None:
            return None
        for suffix, fd in [("", self._fd)] + self._side:
            why = _frozen(fd)
            if why:
                return f"{self.path.name}{suffix} is {why}" if suffix else f"the file is {why}"
        return None

    # -- storage health (the daemon) ----------------------------------------------------
    def moved(self) -> str | None:
        """'deleted' or 'replaced' when the file at the path is no longer the one open;
        'wal deleted' when its -wal is (the rows since the last checkpoint are only in the
        file still open: a reader sees an I/O error, a crash loses them)."""
        if self._fd is None:
            return None
        mine = os.fstat(self._fd)
        try:
            there = os.stat(self.path)
        except FileNotFoundError:
            return "deleted"
        except OSError:
            return None        # cannot tell (permissions): the writes will say
        if (mine.st_ino, mine.st_dev) != (there.st_ino, there.st_dev):
            return "replaced"
        if mine.st_nlink == 0:
            return "deleted"
        return "wal deleted" if self._wal_moved() else None

    def _wal_moved(self) -> bool:
        """The -wal at the path is not the one open (deleted, or another made in its place)."""
        for suffix, fd in self._side:
            if suffix == "-wal":
                mine = os.fstat(fd)
                try:
                    there = os.stat(f"{self.path}-wal")
                except FileNotFoundError:
                    return True
                except OSError:
                    return False
                return (mine.st_ino, mine.st_dev) != (there.st_ino, there.st_dev)
        return False

    def recover(self) -> str | None:
        """Reattach to the path after the file moved; what was done (for the log), or None.

        Deleted (its directory too, perhaps): the open connection still has every row,
        so the database is written back at the path from it (nothing lost).  Replaced
        (someone put another file there, e.g. a backup): that file is opened.
        Raises StoreUnwritable when that cannot be done now."""
        what = self.moved()
        if what is None:
            return None
        old = self.db.conn
        if what in ("deleted", "wal deleted"):
            # copy beside, then into place: never a half-written database at the path
            copy_path = self.path.with_name(self.path.name + ".restoring")
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                copy_path.unlink(missing_ok=True)
                copy = sqlite3.connect(str(copy_path), timeout=10, isolation_level=None)
                try:
                    old.backup(copy)
                finally:
                    copy.close()
                self._drop_side_files(every=what == "wal deleted")
                os.replace(copy_path, self.path)
            except (sqlite3.Error, OSError) as e:
                try:
                    copy_path.unlink(missing_ok=True)
                except OSError:
                    pass
                raise unwritable(self.path, e) from None
        else:
            self._drop_side_files()
        old.close()
        self.db = sqlite_utils.Database(self._connect())
        self.migrate()
        return {"deleted": "the file was deleted while open: written back from the copy the "
                           "daemon had open (nothing lost)",
                "wal deleted": f"{self.path.name}-wal was deleted while open: the database was "
                               "written back from the copy the daemon had open (nothing lost)",
                }.get(what, "the file was replaced while open: the new file is used from now on")

    def _drop_side_files(self, every: bool = False) -> None:
        """Remove the old file's -wal and -shm from the path.  SQLite neither checkpoints
        nor removes them when the database file has moved, and left there they would be
        replayed into the file that now has the name (seen: a replaced file read back
        the old rows).  `every`: whatever -wal and -shm are there (the -wal was deleted;
        a reader may have made an empty one beside the old wal-index)."""
        for suffix, fd in self._side:
            name = f"{self.path}{suffix}"
            try:
                mine, there = os.fstat(fd), os.stat(name)
                if every or (mine.st_ino, mine.st_dev) == (there.st_ino, there.st_dev):
                    os.unlink(name)
            except OSError:
                pass

    def probe(self) -> None:
        """One small write: raises StoreUnwritable while the database cannot be written."""
        with self._tx():
            self.db.execute("insert into meta (key, value) values ('alive', ?) on conflict (key) "
                            "do update set value = excluded.value", [str(self.clock())])

    # -- schema -------------------------------------------------------------------
    def schema_version(self) -> int:
        if "meta" not in self.db.table_names():
            return 0
        row = self.db.execute("select value from meta where key = 'schema_version'").fetchone()
        return int(row[0]) if row else 0

    def migrate(self):
        try:
            current = self.schema_version()
        except sqlite3.Error as e:
            raise unwritable(self.path, e) from None
        if current > len(MIGRATIONS):
            raise StoreError(f"{self.path}: schema version {current} is newer than this "
                             f"slurm-gavel ({len(MIGRATIONS)}); upgrade slurm-gavel")
        for version in range(current + 1, len(MIGRATIONS) + 1):
            with self._tx():         # one transaction per migration
                if "meta" not in self.db.table_names():
                    self.db["meta"].create({"key": str, "value": str}, pk="key")
                MIGRATIONS[version - 1](self.db)
                self.db["meta"].upsert({"key": "schema_version", "value": str(version)}, pk="key")

    def close(self):
        self.db.conn.close()
        self._close_files()

    def _tx(self):
        return _Transaction(self)

    # -- Store interface --------------------------------------------------------------
    def observe(self, time_: float, obs: Observation) -> None:
        rows = []
        for j in obs.jobs:
            rows.append({"id": j.id, "name": j.name, "user": j.user, "account": j.account,
                         "model": j.job_type, "scale_factor": j.scale_factor, "weight": j.weight,
                         "entity": j.entity, "slo": _finite(j.slo), "steps": _finite(j.total_steps),
                         "submitted": j.arrival_time, "last_seen": time_, "state": "active",
                         "steps_done": _finite(obs.steps_done.get(j.id)),
                         "lost_seconds": _finite(obs.lost_seconds.get(j.id)),
                         "types": (",".join(sorted(j.placement.worker_types))
                                   if j.placement is not None and j.placement.worker_types is not None
                                   else None)})
        with self._tx():
            known = {r[0] for r in self.db.execute("select id from jobs where state = 'active'")}
            new = [r for r in rows if r["id"] not in known
                   and not self.db.execute("select 1 from jobs where id = ?", [r["id"]]).fetchone()]
            for r in new:
                r["first_seen"] = time_
                self.db["events"].insert({"time": time_, "kind": "arrival", "job": r["id"],
                                          "detail": r["model"]})
            if rows:
                self.db["jobs"].upsert_all(rows, pk="id", alter=False)
            self.db.execute("delete from servers")
            if obs.servers:
                self.db["servers"].insert_all([{"name": sv.name, "worker_type": sv.worker_type,
                                                "gpus": sv.gpus, "time": time_} for sv in obs.servers])

    def allocation(self, round: int, time_: float, allocation: Allocation, fresh: bool) -> None:
        interim = list(allocation.info.get("interim_rows", [])) if allocation.info else []
        with self._tx():
            aid = self.db["allocations"].insert({
                "round": round, "time": time_, "policy": allocation.policy, "fresh": int(fresh),
                "objective": _finite(float(allocation.objective)),
                "interim_jobs": json.dumps(interim)}).last_pk
            rows = []
            for i, job in enumerate(allocation.job_ids):
                for j, wt in enumerate(allocation.worker_types):
                    if allocation.x[i, j] > 0:
                        rows.append({"allocation": aid, "jobs": job, "worker_type": wt,
                                     "share": float(allocation.x[i, j])})
            for r, (a, b) in enumerate(allocation.pair_jobs.tolist()):
                for j, wt in enumerate(allocation.worker_types):
                    if allocation.x_pairs[r, j] > 0:
                        rows.append({"allocation": aid, "jobs": f"{allocation.job_ids[a]}+{allocation.job_ids[b]}",
                                     "worker_type": wt, "share": float(allocation.x_pairs[r, j])})
            if rows:
                self.db["allocation_rows"].insert_all(rows)

    def round(self, time_: float, plan: RoundPlan) -> None:
        placements = []
        for action, assignments in (("keep", plan.keep), ("start", plan.start)):
            for a in assignments:
                for job in a.jobs:
                    placements.append({"round": plan.round, "job": job, "action": action,
                                       "worker_type": a.worker_type, "nodes": ",".join(a.nodes),
                                       "gpus": a.gpus})
        placements += [{"round": plan.round, "job": job, "action": "preempt", "worker_type": None,
                        "nodes": None, "gpus": 0} for job in plan.preempt]
        with self._tx():
            self.db["rounds"].upsert({"number": plan.round, "started": time_, "keep": len(plan.keep),
                                      "start": len(plan.start), "preempt": len(plan.preempt)},
                                     pk="number")
            if placements:
                self.db["placements"].upsert_all(placements, pk=("round", "job", "action"))

    def usage(self, time_: float, usage: Usage) -> None:
        a = usage.assignment
        with self._tx():
            for job in a.jobs:
                self.db.execute(
                    "insert into job_time (job, worker_type, seconds) values (?, ?, ?) "
                    "on conflict (job, worker_type) do update set seconds = seconds + excluded.seconds",
                    [job, a.worker_type, usage.seconds])

    def departure(self, departure: Departure) -> None:
        with self._tx():
            self.db.execute("update jobs set state = ?, finished = ? where id = ?",
                            [departure.state, departure.time, departure.id])
            self.db["events"].insert({"time": departure.time, "kind": departure.state,
                                      "job": departure.id,
                                      "detail": getattr(departure, "detail", "") or None})
            self.db.execute("delete from status where job = ?", [departure.id])

    def remember_request(self, job: str, gpus: int, tasks: int) -> None:
        """A paired job's request before its pair (slurm.backend.pairs.multi.StoredRequests)."""
        with self._tx():
            self.db["paired_requests"].upsert({"job": job, "gpus": int(gpus), "tasks": int(tasks)}, pk="job")

    def forget_request(self, job: str) -> None:
        with self._tx():
            self.db.execute("delete from paired_requests where job = ?", [job])

    def paired_requests(self) -> dict[str, tuple[int, int]]:
        """job -> (GPUs per node, tasks) it asked before its multi-GPU pair."""
        return {r[0]: (int(r[1]), int(r[2])) for r in
                self.db.execute("select job, gpus, tasks from paired_requests").fetchall()}

    def engine_state(self, state: EngineState) -> None:
        """Keep the engine's working state (the last one only): a restart resumes from it."""
        with self._tx():
            self.db["engine_state"].upsert({"id": 1, "time": self.clock(),
                                            "state": json.dumps(state.to_dict())}, pk="id")

    def load_engine_state(self) -> EngineState | None:
        """The state the last run kept, or None (a new database, or one it cannot read)."""
        row = self.db.execute("select state from engine_state where id = 1").fetchone()
        if row is None:
            return None
        try:
            return EngineState.from_dict(json.loads(row[0]))
        except (ValueError, GavelError) as e:
            raise StoreError(f"{self.path}: the saved engine state is unreadable ({e}); "
                             f"delete its row to start afresh: "
                             f"sqlite3 {self.path} 'delete from engine_state'") from None

    # -- daemon extras ----------------------------------------------------------------
    def status(self, round: int, time_: float, rows: Mapping[str, Mapping]) -> None:
        """Why each active job runs or waits: {job: {worker_type, priority, reason, state, gpus,
        nodes}} (state, gpus and nodes: what Slurm really does, see `_v4`, `_v7`)."""
        with self._tx():
            self.db.execute("delete from status")
            self.db["status"].insert_all(
                [{"job": job, "round": round, "time": time_, "worker_type": r.get("worker_type"),
                  "priority": r.get("priority"), "reason": r.get("reason"),
                  "state": r.get("state"), "gpus": r.get("gpus"), "nodes": r.get("nodes")}
                 for job, r in rows.items()], pk="job")

    def event(self, time_: float, kind: str, job: str | None = None, detail: str | None = None):
        with self._tx():
            self.db["events"].insert({"time": time_, "kind": kind, "job": job, "detail": detail})

    def count_start(self) -> int:
        """One more daemon start on this database; how many there have been (this one too)."""
        with self._tx():
            self.db.execute("insert into meta (key, value) values ('daemon_starts', '1') "
                            "on conflict (key) do update set value = cast(value as integer) + 1")
            return int(self.db.execute("select value from meta where key = 'daemon_starts'").fetchone()[0])

    def set_mode(self, dry_run: bool) -> None:
        """Whether the daemon writing this database acts (live) or only plans (dry_run)."""
        with self._tx():
            self.db.execute("insert into meta (key, value) values ('mode', ?) on conflict (key) "
                            "do update set value = excluded.value", ["dry_run" if dry_run else "live"])

    # -- retention --------------------------------------------------------------------------
    def prune(self, before: float) -> dict[str, int]:
        """Forget what is older than `before` (a time): jobs that ended before it with their
        time, throughputs, events and placements; rounds that started before it (but the
        last, which numbers the next) and the placements of those rounds not of an active
        job (gqueue counts an active job's rounds); allocations made before it (but the
        last) with their rows; events before it not of an active job.  One transaction;
        the rows deleted per table."""
        old_jobs = "select id from jobs where state != 'active' and finished < :t"
        active = "select id from jobs where state = 'active'"
        statements = (
            ("placements", f"delete from placements where job in ({old_jobs}) or (round < "
                           f"(select coalesce(min(number), 0) from rounds where started >= :t) "
                           f"and job not in ({active}))"),
            ("events", f"delete from events where job in ({old_jobs}) or (time < :t and "
                       f"(job is null or job not in ({active})))"),
            ("job_time", f"delete from job_time where job in ({old_jobs})"),
            ("job_throughputs", f"delete from job_throughputs where job in ({old_jobs})"),
            ("throughput_estimates", f"delete from throughput_estimates where job in ({old_jobs})"),
            ("paired_requests", f"delete from paired_requests where job in ({old_jobs})"),
            ("jobs", "delete from jobs where state != 'active' and finished < :t"),
            ("rounds", "delete from rounds where started < :t and number < (select max(number) from rounds)"),
            ("allocation_rows", "delete from allocation_rows where allocation in (select id from "
                                "allocations where time < :t and id < (select max(id) from allocations))"),
            ("allocations", "delete from allocations where time < :t and id < (select max(id) from allocations)"),
        )
        deleted: dict[str, int] = {}
        with self._tx():
            for table, sql in statements:
                deleted[table] = self.db.execute(sql, {"t": float(before)}).rowcount
        return deleted

    def size(self) -> tuple[int, dict[str, int]]:
        """(bytes of the database file and its WAL, rows per table), for the metrics."""
        files = sum(os.path.getsize(p) for p in (self.path, f"{self.path}-wal") if os.path.exists(p))
        rows = {t: int(self.db.execute(f"select count(*) from [{t}]").fetchone()[0])
                for t in self.db.table_names()}
        return files, rows

    # -- queries ----------------------------------------------------------------------------
    def shadow(self) -> bool:
        """A shadow database: its daemon ran with --dry-run (planned, not done)."""
        row = self.db.execute("select value from meta where key = 'mode'").fetchone()
        return bool(row) and row[0] == "dry_run"

    def last_types(self) -> dict[str, str]:
        """Active job -> the GPU type it was last placed on (kept or started)."""
        return {job: wt for job, wt in self.db.execute(
            "select p.job, p.worker_type from placements p join jobs j on j.id = p.job "
            "where j.state = 'active' and p.action != 'preempt' order by p.round")}

    def job_time(self, jobs: Iterable[str] | None = None) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for job, wt, seconds in self.db.execute("select job, worker_type, seconds from job_time"):
            out.setdefault(job, {})[wt] = seconds
        if jobs is not None:
            wanted = set(jobs)
            out = {k: v for k, v in out.items() if k in wanted}
        return out

    def latest_allocation(self) -> tuple[dict | None, dict[str, dict[str, float]]]:
        row = self.db.execute("select id, round, time, policy, fresh, objective, interim_jobs "
                              "from allocations order by id desc limit 1").fetchone()
        if row is None:
            return None, {}
        meta = dict(zip(("id", "round", "time", "policy", "fresh", "objective", "interim_jobs"), row))
        meta["interim_jobs"] = json.loads(meta["interim_jobs"] or "[]")
        shares: dict[str, dict[str, float]] = {}
        for jobs, wt, share in self.db.execute(
                "select jobs, worker_type, share from allocation_rows where allocation = ?", [row[0]]):
            for job in jobs.split("+"):
                shares.setdefault(job, {})
                shares[job][wt] = shares[job].get(wt, 0.0) + share
        return meta, shares

    def jobs(self, states: Iterable[str] = ("active",)) -> list[dict]:
        states = list(states)
        marks = ",".join("?" * len(states))
        return [dict(r) for r in self.db.query(f"select * from jobs where state in ({marks}) "
                                                f"order by cast(id as integer), id", states)]

    def departure_details(self) -> dict[str, str]:
        """job -> what its departure event says (its final state in words), latest first wins."""
        out: dict[str, str] = {}
        for job, detail in self.db.execute(
                "select e.job, e.detail from events e join jobs j on j.id = e.job "
                "where e.kind = j.state and j.state != 'active' and e.detail is not null "
                "order by e.id"):
            out[job] = detail
        return out

    def events(self, jobs: Iterable[str] = (), since: float | None = None,
               kinds: Iterable[str] | None = None) -> list[dict]:
        """Recorded events (oldest first): of `jobs` (all if empty), from `since` on."""
        sql, args = "select id, time, kind, job, detail from events where 1 = 1", []
        jobs = list(jobs)
        if jobs:
            sql += f" and job in ({','.join('?' * len(jobs))})"
            args += jobs
        if since is not None:
            sql += " and time >= ?"
            args.append(since)
        if kinds is not None:
            kinds = list(kinds)
            sql += f" and kind in ({','.join('?' * len(kinds))})"
            args += kinds
        return [dict(r) for r in self.db.query(sql + " order by time, id", args)]

    def status_rows(self) -> dict[str, dict]:
        return {r["job"]: r for r in self.db.query("select * from status")}

    def rounds_of(self) -> dict[str, int]:
        """Rounds each job has run in (keep or start)."""
        return {job: n for job, n in self.db.execute(
            "select job, count(distinct round) from placements where action != 'preempt' group by job")}

    def next_round(self) -> int:
        """The number of the round after the last one recorded (0 for a new database)."""
        row = self.db.execute("select max(number) from rounds").fetchone()
        return 0 if row is None or row[0] is None else int(row[0]) + 1

    def last_observed(self) -> float | None:
        """When the engine last recorded an observation (a restarted daemon credits from here)."""
        row = self.db.execute("select max(last_seen) from jobs").fetchone()
        return row[0] if row and row[0] is not None else None

    def servers(self) -> list[dict]:
        return [dict(r) for r in self.db.query("select * from servers order by worker_type, name")]

    def last_placement(self) -> dict[str, dict]:
        out = {}
        for r in self.db.query("select * from placements where round = (select max(number) from rounds)"):
            if r["action"] != "preempt":
                out[r["job"]] = r
        return out

    # -- throughputs (schema v3; slurm_gavel.estimator.learning) --------------------------------
    def load_throughputs(self) -> tuple[list[dict], list[dict]]:
        """(model-level rows, job-level rows) of measured throughputs."""
        return ([dict(r) for r in self.db.query("select * from measured_throughputs")],
                [dict(r) for r in self.db.query("select * from job_throughputs")])

    def save_throughputs(self, model_rows: Iterable[Mapping], job_rows: Iterable[Mapping] = ()) -> None:
        model_rows, job_rows = list(model_rows), list(job_rows)
        with self._tx():
            if model_rows:
                self.db["measured_throughputs"].upsert_all(
                    model_rows, pk=("model", "scale_factor", "worker_type", "partner", "spread"))
            if job_rows:
                self.db["job_throughputs"].upsert_all(job_rows, pk=("job", "worker_type", "partner", "spread"))

    def replace_measured_throughputs(self, model_rows: Iterable[Mapping]) -> None:
        """Replace every model-level row (an import with --replace)."""
        with self._tx():
            self.db.execute("delete from measured_throughputs")
            rows = list(model_rows)
            if rows:
                self.db["measured_throughputs"].insert_all(rows)

    def forget_job_throughputs(self, jobs: Iterable[str]) -> None:
        jobs = list(jobs)
        with self._tx():
            for i in range(0, len(jobs), 500):
                chunk = jobs[i:i + 500]
                marks = ",".join("?" * len(chunk))
                self.db.execute(f"delete from job_throughputs where job in ({marks})", chunk)
                self.db.execute(f"delete from throughput_estimates where job in ({marks})", chunk)

    def save_estimates(self, rows: Iterable[Mapping]) -> None:
        """The estimates the policy was given (per job and type); rows of other jobs stay."""
        rows = list(rows)
        if not rows:
            return
        with self._tx():
            self.db["throughput_estimates"].upsert_all(rows, pk=("job", "worker_type"))

    def throughput_estimates(self, active_only: bool = True) -> list[dict]:
        sql = "select e.* from throughput_estimates e"
        if active_only:
            sql += " join jobs j on j.id = e.job where j.state = 'active'"
        return [dict(r) for r in self.db.query(sql + " order by e.job, e.worker_type")]


class _Transaction:
    """`with`: BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error), so readers never see half a write.

    A write store never writes into a file that is no longer at its path (deleted or
    replaced: the rows would vanish with the last handle), and every storage error
    leaves as StoreUnwritable."""

    def __init__(self, store: "SqliteStore"):
        self.store = store
        self.conn = store.db.conn

    def __enter__(self):
        moved = None if self.store.readonly else self.store.moved()
        if moved:
            what = (f"{self.store.path.name}-wal was deleted while open" if moved == "wal deleted"
                    else f"the file was {moved} while open")
            raise StoreUnwritable(self.store.path, what,
                                  "the daemon writes it back (or opens the new file) by itself; "
                                  "make its directory writable if it does not")
        frozen = None if self.store.readonly else self.store.frozen()
        if frozen:
            raise StoreUnwritable(self.store.path, frozen,
                                  "make it writable (chattr -i, mount -o remount,rw), "
                                  "the daemon resumes by itself")
        try:
            self.conn.execute("begin immediate")
        except sqlite3.Error as e:
            raise unwritable(self.store.path, e) from None

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self.conn.execute("commit")
                return False
            if self.conn.in_transaction:     # SQLite may have rolled back already (I/O error)
                self.conn.execute("rollback")
        except sqlite3.Error as e:
            if self.conn.in_transaction:
                try:
                    self.conn.execute("rollback")
                except sqlite3.Error:
                    pass
            raise unwritable(self.store.path, e) from None
        if isinstance(exc, (sqlite3.OperationalError, sqlite3.DatabaseError, OSError)):
            raise unwritable(self.store.path, exc) from None
        return False


__all__ = ["FIX_DAMAGED", "MIGRATIONS", "SqliteStore", "StoreDamaged", "StoreError", "StoreUnwritable",
           "damaged", "unwritable"]

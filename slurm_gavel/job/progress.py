"""Progress records of gavel jobs: where they are, how to write one, how to read them.

A job that trains through `slurm_gavel.job.iterator.GavelIterator` appends one JSON
object per line to one file per job::

    {"job": "42", "time": 1718000000.5, "event": "progress", "step": 1200,
     "total_steps": 5000, "steps_per_second": 3.8, "partition": "v100",
     "node": "v100-0", "restart": 2, "world_size": 1}

``event`` is ``start`` (after the checkpoint was loaded; ``load_seconds`` is added
when one was), ``progress`` (at most every ``GAVEL_PROGRESS_INTERVAL`` seconds,
30 by default), ``checkpoint`` (preempted: saved at ``step``, ``save_seconds``
added, the job exits 85 next) or ``done`` (all steps done, the job exits 0).
``step`` is the number of steps done; ``steps_per_second`` is measured over the
interval since the previous record of the same run (``null`` in ``start``);
``restart`` is ``SLURM_RESTART_COUNT`` (0 on the first start); ``partition`` is
``SLURM_JOB_PARTITION`` (the GPU type: one type per partition); ``node`` is
``SLURMD_NODENAME`` or the host name. ``lost_seconds`` (written by `write_record`) is
the time the job has lost to being stopped over all its runs so far: every checkpoint's
``save_seconds``, and on each restart the time from the process's start to its ``start``
record (starting Python, importing, loading the checkpoint). Readers must ignore keys
they do not know.

Location (`progress_path`): ``$GAVEL_PROGRESS_DIR/<jobid>.jsonl`` when the job
sees ``GAVEL_PROGRESS_DIR``, else ``<submit dir>/.gavel/<jobid>.jsonl`` with the
submit directory from ``SLURM_SUBMIT_DIR`` (the job's working directory, which
squeue reports as ``current_working_directory``, unless it was submitted with
``--chdir``). The daemon looks in its configured progress directory first, then
in the job's working directory.

Each record is written with one ``write`` on a descriptor opened with
``O_APPEND``: records of every restart accumulate in the same file, the file works
on a shared filesystem (one writer per job: rank 0), and a crash can at worst
leave a torn last line, which `parse_records` skips.

Whose directory: in a shared submit directory another user may have made ``.gavel/``
first (writable by all, or not).  Records written there could be renamed, replaced or
deleted by that user, so `append_record` writes only into a directory owned by the job's
user or by root, or the spool ``$GAVEL_PROGRESS_DIR`` names, and only into a regular file of the job's user reached
without a symlink; anything else raises `ProgressDirRefused`, whose message says which
directory and what to do.  The job's integrations print it once on stderr and train on
without progress reports; the daemon applies the same rule when it reads
(`slurm_gavel.slurm.userfiles`) and `gqueue` says "no progress reports: ...".

This module imports nothing beyond the standard library: the daemon and the
jobs both use it.
"""
from __future__ import annotations

import errno
import json
import math
import os
import stat
import socket
import time
from collections.abc import Mapping
from pathlib import Path

EVENTS = ("start", "progress", "checkpoint", "done")
PROGRESS_DIR_ENV = "GAVEL_PROGRESS_DIR"
SUBDIR = ".gavel"
SUFFIX = ".jsonl"


def job_key(env: Mapping[str, str] | None = None) -> str | None:
    """The id the scheduler knows this job by: ``ARRAY_TASK`` for an array task
    (``35_2``: its own Slurm id changes when Slurm splits it off the array),
    else ``SLURM_JOB_ID``; None outside Slurm."""
    env = os.environ if env is None else env
    array, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    if array and task and array.isdigit() and task.isdigit():
        return f"{array}_{task}"
    return env.get("SLURM_JOB_ID") or None


def progress_path(job_id: str, env: Mapping[str, str] | None = None,
                  work_dir: str | None = None) -> Path:
    """The progress file of job `job_id`.

    Inside a job, call it with the job's environment (the default, `os.environ`).
    The daemon calls it with ``env={}`` (or its configured ``GAVEL_PROGRESS_DIR``)
    and ``work_dir`` = the job's working directory from squeue.
    """
    env = os.environ if env is None else env
    job_id = str(job_id)
    if not job_id or "/" in job_id or job_id in (".", ".."):
        raise ValueError(f"not a job id: {job_id!r}")
    spool = env.get(PROGRESS_DIR_ENV)
    if spool:
        return Path(spool) / f"{job_id}{SUFFIX}"
    base = work_dir or env.get("SLURM_SUBMIT_DIR") or os.getcwd()
    return Path(base) / SUBDIR / f"{job_id}{SUFFIX}"


def candidate_paths(job_id: str, work_dir: str | None,
                    progress_dir: str | None = None) -> list[Path]:
    """Where the daemon looks for job `job_id`'s records, in order."""
    out = []
    if progress_dir:
        out.append(Path(progress_dir) / f"{job_id}{SUFFIX}")
    if work_dir:
        out.append(progress_path(job_id, env={}, work_dir=work_dir))
    return out


def job_record(job_id, event: str, step, total_steps, world_size: int, **fields) -> dict:
    """One progress record of this process's job, with where it runs (partition, node,
    restart) read from Slurm's environment: the one format every integration writes."""
    env = os.environ
    try:
        restart = int(env.get("SLURM_RESTART_COUNT") or 0)
    except ValueError:
        restart = 0
    return {"job": job_id, "time": round(time.time(), 3), "event": event, "step": step,
            "total_steps": total_steps, **fields, "partition": env.get("SLURM_JOB_PARTITION"),
            "node": env.get("SLURMD_NODENAME") or socket.gethostname(), "restart": restart,
            "world_size": world_size}


class ProgressDirRefused(PermissionError):
    """A progress file or directory the job must not write (another user's, a symlink)."""


class CheckpointDirRefused(PermissionError):
    """A default checkpoint directory another user could write into: a job that resumed from
    it would load their file (with pickle, their code) as its own."""


CHECKPOINT_DIR_ENV = "GAVEL_CHECKPOINT_DIR"


def default_checkpoint_dir(job_id: str, env: Mapping[str, str] | None = None) -> Path:
    """Where a job keeps its checkpoints unless told: ``$GAVEL_CHECKPOINT_DIR/<jobid>`` (the
    user's choice, taken as it is), else ``<submit dir>/.gavel/<jobid>.ckpt``.

    The submit directory may be shared: there, ``.gavel`` and ``<jobid>.ckpt`` must be
    directories (not symlinks) of the job's user or root, else CheckpointDirRefused says so
    and what to do. ``.gavel`` is created here when missing, so that nobody else makes it
    between this check and the first save."""
    env = os.environ if env is None else env
    job_id = str(job_id)
    if env.get(CHECKPOINT_DIR_ENV):
        return Path(env[CHECKPOINT_DIR_ENV]) / job_id
    base = Path(env.get("SLURM_SUBMIT_DIR") or os.getcwd()) / SUBDIR
    try:
        base.mkdir(mode=0o755, exist_ok=True)
    except OSError:
        pass             # an unwritable submit directory: the first save says so
    home = base / f"{job_id}.ckpt"
    for path in (base, home):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid not in (os.geteuid(), 0):
            what = "a symlink" if stat.S_ISLNK(st.st_mode) else \
                "not a directory" if not stat.S_ISDIR(st.st_mode) else f"owned by another user (uid {st.st_uid})"
            raise CheckpointDirRefused(
                f"{path} is {what}: a checkpoint there could be replaced by someone else's, which "
                f"a resumed job would load as its own; remove it, or set {CHECKPOINT_DIR_ENV} to a "
                f"directory of yours")
    return home


def _open_dir(directory: Path) -> int:
    """The progress directory, opened (created when missing), if the job's user or root
    owns it, or it is the one $GAVEL_PROGRESS_DIR names (a spool chosen on purpose, which
    a service account may own)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    try:
        fd = os.open(directory, flags)
    except FileNotFoundError:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory, flags)
    owner = os.fstat(fd).st_uid
    spool = os.environ.get(PROGRESS_DIR_ENV)
    if owner not in (os.geteuid(), 0) and not (spool and Path(spool) == directory):
        os.close(fd)
        raise ProgressDirRefused(
            f"{directory} is owned by another user (uid {owner}): no progress reports reach "
            f"the scheduler; remove that directory, or set {PROGRESS_DIR_ENV} to a directory "
            f"of yours")
    return fd


def append_record(path, record: Mapping) -> None:
    """Append `record` as one JSON line with a single write (creates the directory).
    Raises ProgressDirRefused for a directory of another user's, a symlink or a file that is
    not the job user's own regular file (see the module's docstring)."""
    line = (json.dumps(record, separators=(", ", ": "), allow_nan=False) + "\n").encode()
    path = Path(path)
    dir_fd = _open_dir(path.parent)
    try:
        fd = os.open(path.name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                     | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ProgressDirRefused(f"{path} is a symlink: no progress reports are written "
                                     f"through it") from None
        raise
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise ProgressDirRefused(
                f"{path} is not a regular file of yours (owned by another user, uid {st.st_uid})"
                if stat.S_ISREG(st.st_mode) else f"{path} is not a regular file")
        written = os.write(fd, line)
        while written < len(line):       # only on exotic filesystems: finish the line
            written += os.write(fd, line[written:])
    finally:
        os.close(fd)


# The time this process's job lost before this run, per progress file (read once).
_lost_before: dict[str, float] = {}
_lost_here: dict[str, float] = {}
LOST_TAIL = 64 * 1024


def _process_age() -> float | None:
    """Seconds since this process started (Linux: /proc), None where that cannot be read."""
    try:
        with open("/proc/self/stat", "rb") as f:
            line = f.read()
        started = int(line[line.rfind(b")") + 2:].split()[19]) / os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime - started)


def _lost_so_far(path) -> float:
    """``lost_seconds`` of the newest record in the tail of `path` (0 when none). Only a
    regular file of this user's is read (no symlink followed, never blocked on a FIFO):
    the directory may be shared."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return 0.0
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return 0.0
        start = max(0, st.st_size - LOST_TAIL)
        data = os.pread(fd, LOST_TAIL, start)
    except OSError:
        return 0.0
    finally:
        os.close(fd)
    for record in reversed(parse_records(data, torn_start=start > 0)):
        value = _number(record.get("lost_seconds"))
        if value is not None and value >= 0:
            return value
    return 0.0


def write_record(path, record: dict) -> None:
    """`append_record` with ``lost_seconds`` added: what earlier runs lost (from the file's
    newest record that says) plus this run's restart (its ``start`` after a requeue) and
    checkpoint saves."""
    key = str(path)
    if key not in _lost_before:
        _lost_before[key] = _lost_so_far(path)
        _lost_here[key] = 0.0
    if record.get("event") == "start" and (record.get("restart") or 0) > 0:
        _lost_here[key] += _process_age() or _number(record.get("load_seconds")) or 0.0
    elif record.get("event") == "checkpoint":
        _lost_here[key] += _number(record.get("save_seconds")) or 0.0
    record["lost_seconds"] = round(_lost_before[key] + _lost_here[key], 3)
    append_record(path, record)


def read_progress(path) -> list[dict]:
    """Every record in `path`, oldest first; [] when the file does not exist.

    For the job's own side and tests: the daemon never opens users' files this way
    (it reads a bounded tail with `slurm_gavel.slurm.userfiles`, then `parse_records`).
    """
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    return parse_records(data)


def _no_constant(name):
    raise ValueError(f"{name} is not a number a record may hold")


def parse_records(data: bytes, torn_start: bool = False) -> list[dict]:
    """The records in `data` (the bytes of a progress file), oldest first.

    Lines that are not a JSON object (a torn last line after a crash, a line torn
    by a full disk, ``NaN`` or ``Infinity``, which `append_record` never writes) are
    skipped; so is a line without its newline at the end, which a writer may still
    be completing, and with `torn_start` (`data` is a file's tail) the first line.
    """
    lines = data.split(b"\n")
    lines.pop()          # after the last newline: "" or an incomplete line
    if torn_start and lines:
        lines.pop(0)
    out = []
    for line in lines:
        try:
            record = json.loads(line, parse_constant=_no_constant)
        except (ValueError, RecursionError):
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def latest(path) -> dict | None:
    """The newest complete record in `path`, or None."""
    records = read_progress(path)
    return records[-1] if records else None


def _number(value) -> float | None:
    """`value` as a finite float, None for anything else (a record is the user's)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:            # an int beyond float range
        return None
    return value if math.isfinite(value) else None


def _text(value) -> str | None:
    return value if isinstance(value, str) else None


def summary(records: list[dict]) -> dict | None:
    """What the daemon needs from one job's records: None when there are none.

    ``step`` and ``total_steps`` come from the newest record; ``steps_per_second``
    is the newest measured rate (progress, checkpoint or done records) on the
    newest record's partition and node (in a partition of mixed GPU nodes the node
    says the GPU type); ``done`` says whether the newest record is ``done``.
    Values of the wrong type (a partition that is not a string, a step that is not a
    finite number) are None.
    """
    if not records:
        return None
    last = records[-1]
    partition, node = _text(last.get("partition")), _text(last.get("node"))
    rate = None
    for r in reversed(records):
        if _text(r.get("partition")) != partition or _text(r.get("node")) != node:
            break
        if r.get("event") == "start":
            continue
        speed = _number(r.get("steps_per_second"))
        if speed is not None and speed > 0:
            rate = speed
            break
    return {"step": _number(last.get("step")), "total_steps": _number(last.get("total_steps")),
            "steps_per_second": rate, "partition": partition,
            "node": _text(last.get("node")), "restart": _number(last.get("restart")),
            "event": _text(last.get("event")), "time": _number(last.get("time")),
            "lost_seconds": _lost(records), "done": last.get("event") == "done"}


def _lost(records: list[dict]) -> float | None:
    """The newest ``lost_seconds`` in `records` that is a number >= 0, else None."""
    for r in reversed(records):
        value = _number(r.get("lost_seconds"))
        if value is not None and value >= 0:
            return value
    return None

"""The local cluster's processes, found by pid, never by name.

A daemon the cluster started is recorded with its pid and its start time (`/proc/PID/stat`),
so that a recycled pid is never signalled; the slurmstepd processes of its jobs are found by
the mark in their environment (`MARK`) and their ancestry, and only in this mount namespace.
Also the small file helpers the cluster writes its state with.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


MARK = "SLURM_GAVEL_DEVCLUSTER"          # in the daemons' environment: finds our slurmstepds


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time) of a process, None when gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()      # the name may hold spaces
    return fields[0], int(fields[1]), int(fields[19])


def alive(pid: int, start: int | None = None) -> bool:
    st = proc_stat(pid)
    return bool(st) and st[0] not in "ZX" and (start is None or st[2] == start)


def processes() -> dict[int, int]:
    """pid -> parent pid of every live process."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = proc_stat(int(entry))
            if st and st[0] not in "ZX":
                out[int(entry)] = st[1]
    return out


def same_root(pid: int) -> bool:
    """Whether `pid` has our filesystem root.  A cluster in a chroot (tools/slurm-chroot.sh:
    Slurm 24.11 next to the host's) can have the very directory name of a host's cluster,
    and its processes carry that name: neither side may stop the other's."""
    try:
        theirs, ours = os.stat(f"/proc/{pid}/root"), os.stat("/")
    except OSError:
        return False
    return (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino)


def has_mark(pid: int, mark: bytes) -> bool:
    try:
        return mark in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") and same_root(pid)
    except OSError:
        return False


def is_our_job(pid: int, conf_mark: bytes) -> bool:
    """A process of one of our jobs: our SLURM_CONF and a SLURM_JOB_ID in its environment
    (a shell that merely exported our SLURM_CONF has no job id)."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return conf_mark in env and any(e.startswith(b"SLURM_JOB_ID=") for e in env) and same_root(pid)


def ancestry() -> set[int]:
    """This process and its ancestors: never ours to stop."""
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        st = proc_stat(pid)
        pid = st[1] if st else 0
    return out


def is_our_stepd(pid: int, directory: Path) -> bool:
    """A slurmstepd of a cluster in `directory`, known by its working directory (that of
    the slurmd which forked it) or an open file there (the slurmd log).  24.11's
    slurmstepd overwrites its environment with its process title, so the mark that
    22.05's still carries is gone."""
    try:
        if not Path(f"/proc/{pid}/comm").read_text().startswith("slurmstepd"):
            return False
        places = [os.readlink(f"/proc/{pid}/cwd")]
        places += [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return False
    roots = {str(directory), os.path.realpath(directory)}
    return any(p == r or p.startswith(r + "/") for p in places for r in roots) and same_root(pid)


def descendants(roots: set[int], parents: Mapping[int, int]) -> set[int]:
    found, frontier = set(), set(roots)
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


def write_atomic(path: Path, text: str, mode: int = 0o644):
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def one_line(text: str, limit: int = 400) -> str:
    line = "; ".join(s.strip() for s in (text or "").strip().splitlines() if s.strip())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def tail(path: Path, lines: int = 3) -> str:
    try:
        return one_line("\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
    except OSError:
        return "(no log)"



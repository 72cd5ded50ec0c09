"""`slurm-gavel doctor`, the daemon's half: gavel.toml, the database and the progress directory.

`diagnose(config)` gives every finding for a configuration: the Slurm checks of
`slurm.doctor` (slurm.conf as slurmctld runs it, munge, job_submit.lua, the nodes' GRES,
the user the daemon runs as) against what this configuration asks for, then the checks
of what the daemon itself owns:
* the database: its directory exists and lets users through, the file (with its
  `-wal`/`-shm`) is readable by other users, who run `gqueue`, its schema is one
  this slurm-gavel reads (the daemon migrates an older one at start, refuses a newer one),
  and it is whole (integrity.py: SQLite's integrity_check, its -wal not deleted, every
  round the daemon committed still in it);
* `progress_dir`: exists, a directory, world-writable with the sticky bit (1777), and
  on a file system the compute nodes share when they are other hosts.
Findings are sorted errors first.  It changes nothing.
"""
from __future__ import annotations

import socket
import stat
from pathlib import Path
from typing import Iterable

from ..core.errors import GavelError
from ..slurm.proctrack import check_proctrack
from ..slurm.commands import SlurmCLI
from ..slurm.doctor import (LEVELS, check_munge, check_nodes, check_pair_gpus, check_plugin_file,
                            check_shard_sockets, check_sharing_select, check_slurm_conf, check_user,
                            finding, shipped_file)
from .store import FIX_DAMAGED, MIGRATIONS, damaged

# file systems the compute nodes can share with the daemon's host
SHARED_FS = {"nfs", "nfs4", "lustre", "gpfs", "ceph", "cephfs", "fuse.cephfs", "beegfs",
             "glusterfs", "fuse.glusterfs", "cifs", "smb3", "9p", "fuse.sshfs", "virtiofs",
             "orangefs", "pvfs2", "fuse.juicefs", "wekafs", "panfs"}

def check_database(path: str) -> list[dict]:
    db = Path(path)
    where = db.parent
    if not where.is_dir():
        return [finding("error", "database", f"{where}: no such directory",
                        f"mkdir -p -m 755 {where} (the unit's StateDirectory=slurm-gavel makes "
                        "/var/lib/slurm-gavel)")]
    out = []
    # every directory on the way must let users through (o+x), not only the last one
    shut = [d for d in (where.resolve(), *where.resolve().parents) if not d.stat().st_mode & stat.S_IXOTH]
    if shut:
        out.append(finding("warning", "database", f"{shut[0]} is mode {stat.S_IMODE(shut[0].stat().st_mode):o}: "
                           "users cannot reach the database, gqueue fails for them",
                           f"chmod o+x {' '.join(str(d) for d in shut)}"))
    if not db.exists():
        out.append(finding("info", "database", f"{db} does not exist yet: the daemon makes it at start"))
        return out
    schema = check_schema(db)
    out += schema
    if not schema:          # a schema this slurm-gavel reads: is the file whole?
        out += check_whole(db)
    closed = [p for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm"))
              if p.exists() and not p.stat().st_mode & stat.S_IROTH]
    if closed:
        names = " ".join(str(p) for p in closed)
        out.append(finding("warning", "database", f"{names} not readable by other users: gqueue "
                           "fails for them", f"chmod 644 {names}"))
    return out


def check_schema(db: Path) -> list[dict]:
    """The database's schema against this slurm-gavel's (the daemon migrates an older one
    at start; a newer one, from a later slurm-gavel, it refuses)."""
    import sqlite3
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            tables = {r[0] for r in conn.execute("select name from sqlite_master where type = 'table'")}
            row = (conn.execute("select value from meta where key = 'schema_version'").fetchone()
                   if "meta" in tables else None)
        finally:
            conn.close()
        have = int(row[0]) if row else 0
    except (sqlite3.Error, ValueError) as e:
        if damaged(e):      # the daemon's and gqueue's words
            return [finding("error", "database", f"database {db} is damaged ({e})", FIX_DAMAGED)]
        return [finding("error", "database", f"{db}: cannot be read as the daemon's database ({e})",
                        "restore it from a backup, or move it away (the daemon then starts a new ledger)")]
    if have > len(MIGRATIONS):
        return [finding("error", "database", f"{db}: schema version {have} is newer than this "
                        f"slurm-gavel's ({len(MIGRATIONS)})", "install the slurm-gavel that wrote it")]
    if have < len(MIGRATIONS):
        return [finding("info", "database", f"{db}: schema version {have}, migrated to "
                        f"{len(MIGRATIONS)} at the daemon's next start",
                        "back it up first (docs/install.md, \"Upgrading\")")]
    return []


def check_whole(db: Path) -> list[dict]:
    """The database is whole: SQLite's full integrity_check, its -wal where its -shm says
    there is one, and every round the daemon committed (integrity.py) still in it.  The
    same words as the daemon's and gqueue's (`StoreDamaged`)."""
    import sqlite3
    from .integrity import integrity_check, lost_rounds
    from .store import StoreDamaged
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error as e:
        return [finding("error", "database", f"database {db} cannot be opened: {e}")]
    try:
        problem = integrity_check(db, conn) or lost_rounds(db, conn)
    except sqlite3.DatabaseError as e:
        problem = StoreDamaged(db, f"is damaged ({e})") if damaged(e) else StoreDamaged(
            db, f"cannot be read ({e})", "check its -wal and -shm files beside it")
    finally:
        conn.close()
    if problem is None and Path(f"{db}-shm").exists() and not Path(f"{db}-wal").exists():
        problem = StoreDamaged(db, f"has lost its -wal ({db.name}-shm is there without it)",
                               "if the daemon runs it writes the database back within a tick; "
                               "if not, the writes since its last checkpoint are lost")
    if problem is None:
        return []
    return [finding("error", "database", f"database {db} {problem.reason}", problem.fix)]


def _local_node(raw: dict) -> bool:
    here = {socket.gethostname(), socket.gethostname().split(".")[0], "localhost"}
    host = str(raw.get("hostname") or raw.get("name") or "")
    addr = str(raw.get("address") or "")
    return host in here or addr.startswith("127.") or addr == "::1"


def _fs_type(path: Path) -> str | None:
    """The file system type of `path`, from the longest mount point above it."""
    best, kind = "", None
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    target = str(path.resolve())
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mount = parts[1].replace("\\040", " ")
        if (target == mount or target.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best):
            best, kind = mount, parts[2]
    return kind


def check_progress_dir(path: str | None, raw_nodes: Iterable[dict]) -> list[dict]:
    if not path:
        return [finding("info", "progress_dir", "progress_dir unset: the daemon reads each job's "
                        "<working directory>/.gavel/, which must be visible here")]
    p = Path(path)
    if not p.is_dir():
        return [finding("error", "progress_dir", f"{p}: {'not a directory' if p.exists() else 'no such directory'}",
                        f"mkdir -p {p} && chmod 1777 {p} (on a file system the nodes share)")]
    mode = stat.S_IMODE(p.stat().st_mode)
    out = []
    if mode & 0o1777 != 0o1777:
        out.append(finding("error" if not mode & stat.S_IWOTH else "warning", "progress_dir",
                           f"{p} is mode {mode:o}: " + ("jobs cannot write their progress" if not mode & stat.S_IWOTH
                                                        else "users can remove each other's files"),
                           f"chmod 1777 {p}"))
    remote = [str(n.get("name")) for n in raw_nodes if isinstance(n, dict) and not _local_node(n)]
    kind = _fs_type(p)
    if remote and kind is not None and kind not in SHARED_FS:
        out.append(finding("warning", "progress_dir", f"{p} is on a local {kind} file system, but nodes "
                           f"{','.join(sorted(remote)[:5])}{'...' if len(remote) > 5 else ''} are other "
                           "hosts: their jobs' progress never reaches the daemon",
                           "put progress_dir on a file system the nodes mount (NFS, Lustre, ...)"))
    return out


def diagnose(config, cli: SlurmCLI | None = None) -> list[dict]:
    """Every finding for this configuration and the cluster its Slurm commands reach."""
    from . import config as config_mod
    cli = cli or config_mod.slurm_cli(config)
    out: list[dict] = []
    try:
        conf = cli.config()
    except GavelError as e:
        conf = None
        out.append(finding("error", "slurm", f"Slurm does not answer: {e}",
                           "is slurmctld running (systemctl status slurmctld) and SLURM_CONF right?"))
    if conf is not None:
        out += check_munge(conf, cli)
        out += check_slurm_conf(conf, config.requeue_exit_code)
        sharing = bool(getattr(config, "space_sharing", False))
        wanted = int(getattr(config, "max_pair_gpus", 1) or 1)
        out += check_sharing_select(conf, sharing, wanted)
        out += check_pair_gpus(conf, sharing, wanted)
        out += check_plugin_file(conf, shipped_file("job_submit.lua"))
        out += check_user(conf)
        orphans = check_proctrack(conf)
        if orphans is not None:
            out.append(orphans)
    else:
        out += check_munge({}, cli)
    raw_nodes: list = []
    if conf is not None:
        try:
            data = cli.nodes()
            raw_nodes = [n for n in data.get("nodes") or [] if isinstance(n, dict)]
            out += check_nodes(data, dict(config.partitions), dict(config.gpu_types))
            out += check_shard_sockets(data, bool(getattr(config, "space_sharing", False)))
        except GavelError as e:
            out.append(finding("error", "slurm", f"cannot list the nodes: {e}", "check slurmctld's log"))
    out += check_database(config.database)
    out += check_progress_dir(config.progress_dir, raw_nodes)
    order = {lvl: i for i, lvl in enumerate(LEVELS)}
    return sorted(out, key=lambda f: order[f["level"]])


__all__ = ["check_database", "check_progress_dir", "check_schema", "check_whole", "diagnose"]

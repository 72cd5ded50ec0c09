"""`slurm-gavel doctor`: checks a live cluster's configuration against what the daemon needs.

Each check reads what Slurm says (`scontrol show config`, the nodes of `sinfo --json` /
`scontrol show nodes --json`), the daemon's gavel.toml and the files it names, and
gives findings: one line each, a level (`error`: the daemon cannot work as documented;
`warning`: it works, with a cost the line names; `info`), what was found and the fix.
No finding: the configuration is what slurm_conf/README.md asks for.  Exit code 1 when
there is an error.  It changes nothing.

What is checked, and why the daemon needs it:
* Slurm and munge answer (every command the daemon runs is an authenticated RPC);
* `JobSubmitPlugins=lua`, and the job_submit.lua next to slurm.conf is this package's
  version (its first lines say which): without it gavel jobs are neither checked nor
  held, and their flags never reach AdminComment;
* `RequeueExitHold` contains `requeue_exit_code`: else a checkpointed job ends instead
  of coming back held;
* `GresTypes=gpu`, every GPU node's GRES typed (`gpu:v100:4`), one GPU type per
  partition (or the partitions of `[partitions]` holding nodes of their type only);
* `PreemptMode`: Slurm's own preemption of gavel jobs fights the daemon's rounds;
* `SelectType=select/cons_tres` (GPUs as trackable resources; `--gpus` needs it);
* with `space_sharing = true`: no `SelectTypeParameters` flag that moves shards off the
  first GPU with room (`LL_SHARED_GRES` splits a pair's halves over two GPUs;
  `MULTIPLE_SHARING_GRES_PJ` lets a one-GPU job's shards spread over two half-used
  GPUs; both measured on 24.11.5, docs/space-sharing.md); and no node whose shards are
  bound to 2+ sockets (gres.conf `Cores=`, `(S:0-1)` in its gres): Slurm gives a shard job
  a GPU on its cores' socket first, so the daemon starts no pair there (measured on 22.05.8
  and 24.11.5);
* the daemon runs as root or SlurmUser (it holds, moves and releases others' jobs);
* the database: its directory exists, and the file (with its `-wal`/`-shm`) is readable
  by other users, who run `gqueue`;
* `progress_dir`: exists, a directory, world-writable with the sticky bit (1777), and
  on a file system the compute nodes share when they are other hosts.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Iterable

from .. import __version__
from ..core.display import clean, printable
from ..core.errors import GavelError
from .commands import SlurmCLI, parse_version
from .gputypes import discover, from_config
from .records import parse_nodes, socket_bound

LEVELS = ("error", "warning", "info")
# `-- slurm-gavel job_submit.lua version X` among the first lines of the plugin file
LUA_VERSION = re.compile(r"^--\s*slurm-gavel job_submit\.lua version\s+(\S+)\s*$", re.MULTILINE)
# file systems the compute nodes can share with the daemon's host
SHARED_FS = {"nfs", "nfs4", "lustre", "gpfs", "ceph", "cephfs", "fuse.cephfs", "beegfs",
             "glusterfs", "fuse.glusterfs", "cifs", "smb3", "9p", "fuse.sshfs", "virtiofs",
             "orangefs", "pvfs2", "fuse.juicefs", "wekafs", "panfs"}


def finding(level: str, check: str, found: str, fix: str = "") -> dict:
    return {"level": level, "check": check, "finding": found, "fix": fix}


def shipped_file(name: str) -> Path | None:
    """A file this package ships for the admin (job_submit.lua, slurm-gavel.service, the
    examples): under the install prefix's share/slurm-gavel (a wheel's data files), else
    the repository's slurm_conf/ (an editable install)."""
    for base in (Path(sys.prefix) / "share" / "slurm-gavel",
                 Path(__file__).resolve().parents[2] / "slurm_conf"):
        if (base / name).is_file():
            return base / name
    return None


def lua_version(text: str) -> str | None:
    m = LUA_VERSION.search(text[:4096])
    return m.group(1) if m else None


def exit_codes(text: str) -> set[int]:
    """RequeueExitHold's value (`85`, `85,86`, `80-90`, `(null)`) as a set of codes."""
    codes: set[int] = set()
    for part in (text or "").replace("(null)", "").split(","):
        lo, sep, hi = part.partition("-")
        if sep and lo.strip().isdigit() and hi.strip().isdigit():
            codes.update(range(int(lo), int(hi) + 1))
        elif part.strip().isdigit():
            codes.add(int(part))
    return codes


def _listed(value: str) -> list[str]:
    return [v.strip() for v in (value or "").replace("(null)", "").split(",") if v.strip()]


# -- the checks: each takes what it needs and returns findings ---------------------------
def check_slurm_conf(conf: dict[str, str], requeue_exit_code: int) -> list[dict]:
    out = []
    plugins = [p.removeprefix("job_submit/") for p in _listed(conf.get("JobSubmitPlugins", ""))]
    if "lua" not in plugins:
        out.append(finding("error", "job_submit", f"JobSubmitPlugins={conf.get('JobSubmitPlugins') or '(unset)'}: "
                           "gavel jobs are not checked, held or marked",
                           "set JobSubmitPlugins=lua in slurm.conf, job_submit.lua next to it, then "
                           "scontrol reconfigure"))
    codes = exit_codes(conf.get("RequeueExitHold", ""))
    if requeue_exit_code not in codes:
        out.append(finding("error", "requeue_exit_hold",
                           f"RequeueExitHold={conf.get('RequeueExitHold') or '(unset)'} lacks "
                           f"requeue_exit_code {requeue_exit_code}: preempted jobs end instead of "
                           "being requeued held",
                           f"add RequeueExitHold={requeue_exit_code} to slurm.conf (or set "
                           "requeue_exit_code in gavel.toml to one it lists)"))
    if "gpu" not in _listed(conf.get("GresTypes", "")):
        out.append(finding("error", "gres_types", f"GresTypes={conf.get('GresTypes') or '(unset)'}: "
                           "Slurm tracks no GPUs", "set GresTypes=gpu in slurm.conf"))
    select = conf.get("SelectType", "")
    if select and "cons_tres" not in select:
        out.append(finding("warning", "select_type", f"SelectType={select}: GPUs are not trackable "
                           "resources (--gpus and distributed jobs are refused)",
                           "set SelectType=select/cons_tres"))
    preempt_type = conf.get("PreemptType", "preempt/none")
    modes = {m.upper() for m in _listed(conf.get("PreemptMode", "OFF"))}
    if "none" not in preempt_type and preempt_type not in ("", "(null)") and not modes <= {"OFF", "GANG", "WITHIN"}:
        out.append(finding("warning", "preempt_mode",
                           f"PreemptType={preempt_type} PreemptMode={conf.get('PreemptMode')}: Slurm "
                           "also preempts gavel jobs, behind the daemon's rounds (a suspended or "
                           "requeued job keeps or loses GPUs the plan counts on)",
                           "PreemptType=preempt/none, or PreemptMode=OFF on the gavel partitions"))
    elif "GANG" in modes:
        out.append(finding("warning", "preempt_mode", "PreemptMode includes GANG: Slurm time-slices "
                           "jobs, the daemon's rounds do that for gavel jobs",
                           "remove GANG, or OverSubscribe=NO on the gavel partitions"))
    return out


def check_pair_gpus(conf: dict[str, str], space_sharing: bool, wanted: int) -> list[dict]:
    """What max_pair_gpus > 1 gives on this Slurm (multi_pairs.allowed_pair_gpus, as the
    daemon decides at start): pairs of multi-GPU jobs, or one-GPU pairs only and why."""
    from .multi_pairs import allowed_pair_gpus
    if wanted <= 1:
        return []
    if not space_sharing:
        return [finding("warning", "space_sharing", f"max_pair_gpus = {wanted} has no effect: "
                        "space_sharing is off", "space_sharing = true, or drop max_pair_gpus")]
    got, why = allowed_pair_gpus(wanted, parse_version(conf.get("SLURM_VERSION", "")), conf)
    if got > 1:
        return [finding("info", "space_sharing", f"max_pair_gpus = {wanted}: {why}; a paired job runs "
                        f"as one task per GPU (SLURM_NTASKS = its GPUs): docs/space-sharing.md")]
    return [finding("warning", "space_sharing", f"max_pair_gpus = {wanted} is not used: {why}",
                    "Slurm 23.11+ and SelectTypeParameters=...,MULTIPLE_SHARING_GRES_PJ,"
                    "ONE_TASK_PER_SHARING_GRES (restart slurmctld), or max_pair_gpus = 1")]


def check_sharing_select(conf: dict[str, str], space_sharing: bool, max_pair_gpus: int = 1) -> list[dict]:
    """SelectTypeParameters flags that break the daemon's pairs (first fit on one GPU).
    MULTIPLE_SHARING_GRES_PJ is what multi-GPU pairs need (`max_pair_gpus` > 1): then said
    as a risk the per-poll check watches, not as a mistake."""
    if not space_sharing:
        return []
    flags = {f.upper() for f in _listed(conf.get("SelectTypeParameters", ""))}
    out = []
    if "LL_SHARED_GRES" in flags:
        out.append(finding("warning", "space_sharing", "SelectTypeParameters has LL_SHARED_GRES: each "
                           "half of a pair goes to the least loaded GPU, so the two halves land on "
                           "different GPUs (the daemon logs each split pair)",
                           "remove LL_SHARED_GRES from SelectTypeParameters, or space_sharing = false"))
    if "MULTIPLE_SHARING_GRES_PJ" in flags and max_pair_gpus > 1:
        out.append(finding("info", "space_sharing", "SelectTypeParameters has MULTIPLE_SHARING_GRES_PJ "
                           "(multi-GPU pairs need it): a one-GPU gavel job that finds no GPU with all "
                           "its shards free may run on two half-used GPUs; the daemon logs any job "
                           "on a GPU the plan did not give it"))
    elif "MULTIPLE_SHARING_GRES_PJ" in flags:
        out.append(finding("warning", "space_sharing", "SelectTypeParameters has MULTIPLE_SHARING_GRES_PJ: "
                           "a one-GPU gavel job (a GPU's shards) may run on two half-used GPUs, beside "
                           "two other jobs; slurm-gavel pairs one-GPU jobs only and does not use it",
                           "remove MULTIPLE_SHARING_GRES_PJ from SelectTypeParameters"))
    return out


def check_shard_sockets(nodes_data: dict, space_sharing: bool) -> list[dict]:
    """Nodes whose shards are bound to 2+ sockets (gres.conf Cores=, `(S:0-1)` in their gres):
    Slurm gives a shard job a GPU on its cores' socket first, which the daemon's first fit
    cannot know, so it starts no pair there (docs/space-sharing.md, "Sockets")."""
    if not space_sharing:
        return []
    bound = socket_bound(parse_nodes(nodes_data), "GPUs (shards)")
    if not bound:
        return []
    return [finding("warning", "space_sharing", f"{bound}: Slurm gives a shard job a GPU on its cores' socket "
                    "first, so the two halves of a pair can land on two GPUs (measured: GPUs 0 and 2 "
                    "of an empty node); the daemon starts no pair there, its jobs run alone",
                    "jobs alone need nothing; pairs need nodes whose gres.conf GPU lines have no "
                    "Cores= (a shard line takes its GPU's), or set space_sharing = false")]


def check_plugin_file(conf: dict[str, str], shipped: Path | None) -> list[dict]:
    """The job_submit.lua slurmctld loads (next to slurm.conf) against this package's."""
    slurm_conf = conf.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    path = Path(slurm_conf).parent / "job_submit.lua"
    want = lua_version(shipped.read_text()) if shipped else __version__
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return [finding("error", "job_submit_lua", f"{path}: no such file",
                        f"cp {shipped or 'slurm_conf/job_submit.lua'} {path}; scontrol reconfigure")]
    except OSError as e:
        return [finding("error", "job_submit_lua", f"{path}: cannot read ({e.strerror})",
                        "make it readable by root and SlurmUser")]
    have = lua_version(text)
    if have != want:
        what = f"version {have}" if have else "no slurm-gavel version line (an older or another plugin)"
        return [finding("error", "job_submit_lua", f"{path}: {what}, this slurm-gavel ships {want}",
                        f"cp {shipped or 'slurm_conf/job_submit.lua'} {path} (keep your "
                        "GAVEL_ADMIN_UIDS), then scontrol reconfigure")]
    return []


def check_nodes(nodes_data: dict, partitions: dict[str, str], gpu_types: dict | None = None) -> list[dict]:
    """GPU types per partition, typed GRES, the configured [partitions] and [gpu_types]."""
    nodes = parse_nodes(nodes_data)
    out = []
    gpu_nodes = [n for n in nodes if n.gpus]
    untyped = sorted(n.name for n in gpu_nodes if n.gpu_type is None)
    if untyped:
        out.append(finding("error", "gres_type", f"nodes {','.join(untyped)} have GPUs without a type "
                           "(gpu:N): the daemon cannot tell their GPU type",
                           "give each GPU a type: Gres=gpu:TYPE:N in slurm.conf and Type=TYPE in gres.conf"))
    types: dict[str, set] = {}
    for n in nodes:
        for p in n.partitions:
            types.setdefault(p, set()).add(n.gpu_type)
    if gpu_types:
        try:
            where = from_config(partitions, gpu_types).where
        except GavelError as e:
            return out + [finding("error", "gpu_types", str(e), "fix [gpu_types] in gavel.toml")]
        for wt, w in sorted(where.items()):
            if not any(w.holds(n) for n in gpu_nodes):
                out.append(finding("error", "gpu_types", f"GPU type {wt} (partition {w.partition}"
                                   + (f", GRES type {w.gres}" if w.gres else "")
                                   + (f", {len(w.nodes)} named nodes" if w.nodes else "") + ") matches no GPU node",
                                   f"fix gpu_types.{wt} in gavel.toml, or the nodes' partitions and GRES"))
        return out
    if partitions:
        for p, wt in sorted(partitions.items()):
            have = types.get(p)
            if have is None:
                out.append(finding("error", "partitions", f"[partitions] names {p}, which Slurm does not have",
                                   f"remove {p} from gavel.toml or create it in slurm.conf"))
            elif have != {wt}:
                seen = ",".join(sorted(str(t) for t in have))
                out.append(finding("error", "partitions", f"partition {p} is {wt} in gavel.toml, but its "
                                   f"nodes hold {seen}", f"put only {wt} nodes in {p}, or fix [partitions]"))
        return out
    where = discover(nodes).where
    for p, t in sorted(types.items()):
        if len(t) == 1 or all(x is None for x in t):
            continue
        seen = ",".join(sorted(str(x) if x else "no GPU" for x in t))
        mine = sorted(wt for wt, w in where.items() if w.partition == p)
        if None in t:
            out.append(finding("warning", "partitions", f"partition {p} mixes {seen}: not scheduled by gavel",
                               "type every node's GPUs, keep nodes without GPUs out of it, or name the "
                               "types in [gpu_types] of gavel.toml"))
        elif not mine:
            out.append(finding("warning", "partitions", f"partition {p} mixes {seen}, types that have "
                               "partitions of their own: not scheduled by gavel",
                               "leave it out of gavel's use, or name the types in [gpu_types] of gavel.toml"))
        else:
            out.append(finding("info", "partitions", f"partition {p} mixes {seen}: gavel runs "
                               f"{','.join(mine)} there on the nodes of that GRES type", ""))
    if not where:
        out.append(finding("error", "partitions", "no partition holds GPUs of a typed GRES",
                           "one partition per GPU type, or typed GRES (slurm_conf/slurm.conf.example)"))
    return out


def check_user(conf: dict[str, str], euid: int | None = None) -> list[dict]:
    euid = os.geteuid() if euid is None else euid
    slurm_user = conf.get("SlurmUser", "root(0)")
    m = re.search(r"\((\d+)\)", slurm_user)
    if euid == 0 or (m and int(m.group(1)) == euid):
        return []
    return [finding("error", "daemon_user", f"running as uid {euid}, neither root nor "
                    f"SlurmUser {slurm_user}: the daemon could not hold or release others' jobs",
                    "run the daemon (and this check) as root, as the unit file does")]


def check_munge(conf: dict[str, str], cli: SlurmCLI) -> list[dict]:
    """A credential made and decoded by the munged slurmctld uses (AuthInfo socket=)."""
    if "munge" not in conf.get("AuthType", "auth/munge"):
        return []
    m = re.search(r"socket=([^,\s]+)", conf.get("AuthInfo", ""))
    sock = [f"--socket={m.group(1)}"] if m else []
    try:
        made = subprocess.run(["munge", "-n", *sock], capture_output=True, timeout=10, check=False)
        back = (subprocess.run(["unmunge", *sock], input=made.stdout, capture_output=True,
                               timeout=10, check=False) if made.returncode == 0 else made)
    except FileNotFoundError:
        return [finding("warning", "munge", "munge is not installed here: cannot check it",
                        "apt-get install munge")]
    except subprocess.TimeoutExpired:
        return [finding("error", "munge", "munge did not answer in 10 s", "systemctl restart munge")]
    if back.returncode != 0:
        said = (back.stderr or b"").decode(errors="replace").strip().splitlines()
        return [finding("error", "munge", f"munge does not answer: {said[-1] if said else 'no message'}",
                        "systemctl enable --now munge (the same /etc/munge/munge.key on every host)")]
    return []


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
    out += check_schema(db)
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
    from ..daemon.store import MIGRATIONS
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
    from ..daemon import config as config_mod
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


def table(rows: list[dict]) -> str:
    lines = [f"{r['level'].upper():<8} {r['check']:<17} {r['finding']}" + (f" -- fix: {r['fix']}" if r["fix"] else "")
             for r in rows]
    errors = sum(r["level"] == "error" for r in rows)
    warnings = sum(r["level"] == "warning" for r in rows)
    lines.append(f"{errors} error(s), {warnings} warning(s)" if rows else "no finding: the configuration "
                 "is what slurm-gavel needs")
    return "\n".join(printable(line) for line in lines)


def register(commands) -> argparse.ArgumentParser:
    from ..cli.queue import add_config_argument
    p = commands.add_parser(
        "doctor", help="check the cluster's Slurm configuration and gavel.toml against what the "
                       "daemon needs",
        description="Check slurm.conf (as slurmctld runs it), the nodes' GRES, job_submit.lua, "
                    "munge, gavel.toml, the database and the progress directory: one line per "
                    "finding with its fix. Exit code 1 when there is an error. Changes nothing.")
    add_config_argument(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_doctor)
    return p


def cmd_doctor(args) -> int:
    from ..daemon import config as config_mod
    from ..cli.queue import config_path
    rows = clean(diagnose(config_mod.load(config_path(args))))
    errors = sum(r["level"] == "error" for r in rows)
    if args.json:
        from ..cli.queue import dumps
        print(dumps({"findings": rows, "errors": errors}))
    else:
        print(table(rows))
    return 1 if errors else 0


__all__ = ["check_nodes", "check_slurm_conf", "diagnose", "exit_codes", "lua_version", "register",
           "shipped_file"]

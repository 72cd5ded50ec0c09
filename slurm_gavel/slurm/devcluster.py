"""A real Slurm cluster on this machine, in one directory: for tests, CI and the demo.

`DevCluster(directory)` owns that directory and the processes it starts, nothing else:

    slurm.conf, gres.conf, job_submit.lua (optional), cgroup.conf (Slurm >= 23.02)
    munge/        its own munged: key, socket, pid, log and seed files
    ctld/         slurmctld's state;  spool/NODE  each slurmd's spool
    gpus/NODE/    fake GPUs (empty files);  log/  every log;  run/  pid files
    state.json    the pids (and start times) of the daemons it started
    db/, slurmdbd.conf   with `accounting=True`: a private MariaDB server (its data, socket
                  and a random 127.0.0.1 port) and slurmdbd on a random port, the cluster
                  registered with two accounts (gavel-a, gavel-b) and root in both

Each GPU type gets a partition named after it with nodes TYPE-0, TYPE-1, ...
("GRES-typed partitions": jobs ask for `--gres=gpu:N`, the partition picks the
type); or, with `mixed="gpu"`, one partition of that name holds every node
(mixed GPU nodes, typed GRES: the node list picks the type, slurm/gputypes.py).  With
`sockets=2`, each node has two sockets and gres.conf binds each half of its GPUs (and their
shards) to one socket's cores (`Cores=`; slurmd takes them on this fake hardware with
SlurmdParameters=config_overrides; docs/space-sharing.md, "Sockets").  Every node is a slurmd on localhost with its own port.  `down()` stops
exactly the processes `up()` started, by pid, and the slurmstepd processes of
their jobs; never anything found by name.  Client commands need `env`
(SLURM_CONF=<directory>/slurm.conf), or use `run()`.

Verified with Slurm 22.05 (Debian 12) and 24.11 (Debian 13, see docs/slurm-versions.md):
version-specific choices branch on `slurmd -V` and are marked "24.11" below.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shlex
import shutil
import secrets
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..core.errors import GavelError, InputError
from .commands import parse_version as read_version

DEFAULT_TYPES = {"v100": (2, 4), "p100": (2, 4), "k80": (2, 4)}
DEFAULT_CTLD_PORT, DEFAULT_SLURMD_PORT = 16817, 17001
MIN_VERSION = (22, 5)
INSTALL_HINT = "install them with `apt-get install slurm-wlm munge`"
ACCOUNTING_HINT = "install them with `apt-get install mariadb-server slurmdbd`"
ACCOUNTS = ("gavel-a", "gavel-b")          # root belongs to both; gavel-a is its default
CLUSTER_NAME = "gavel-dev"
_TOOLS = ("munged", "slurmctld", "slurmd", "scontrol", "sinfo", "squeue", "sbatch", "scancel")
# Accounting: each tool under its MariaDB name, else its MySQL one (older or other packages).
_DB_TOOLS = {"mariadbd": ("mariadbd", "mysqld"), "install_db": ("mariadb-install-db", "mysql_install_db"),
             "mariadb": ("mariadb", "mysql"), "slurmdbd": ("slurmdbd",), "sacctmgr": ("sacctmgr",),
             "sacct": ("sacct",)}
_SBIN = ("/usr/sbin", "/usr/local/sbin", "/sbin")
_MARK = "SLURM_GAVEL_DEVCLUSTER"          # in the daemons' environment: finds our slurmstepds
_CLIENT_PREFIXES = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SINFO_", "SCONTROL_")
_SUN_PATH_MAX = 107                       # a UNIX socket path, without its NUL
_TYPE_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
_BAD_PATH_CHARS = set(" \t\n#,=[]\"'\\")


class DevClusterError(GavelError, RuntimeError):
    """The local test cluster could not be started, queried or stopped."""


class SlurmUnavailable(DevClusterError):
    """Slurm or MUNGE is not installed, is too old, or we are not root."""


# -- configuration (pure) -----------------------------------------------------
def node_list(types: Mapping[str, tuple[int, int]]) -> list[tuple[str, str, int]]:
    """(node name, GPU type, GPUs) for every node, in port order."""
    return [(f"{t}-{i}", t, gpus) for t, (n, gpus) in types.items() for i in range(n)]


def render_slurm_conf(directory, types: Mapping[str, tuple[int, int]], ctld_port: int,
                      slurmd_port: int, job_submit: bool = False,
                      requeue_exit_hold: int = 85, dbd_port: int | None = None,
                      mixed: str | None = None, shards: int = 0, select_parameters: str = "",
                      sockets: int = 0) -> str:
    """slurm.conf of a cluster in `directory` (an absolute path); no I/O.  With `dbd_port`,
    accounting through the slurmdbd listening there (see `render_slurmdbd_conf`); with
    `mixed`, one partition of that name with every node instead of one per GPU type.  With
    `shards` (per GPU), every node also offers gres/shard: `shards` x its GPUs
    (docs/space-sharing.md).  `select_parameters` are added to SelectTypeParameters
    (e.g. "MULTIPLE_SHARING_GRES_PJ", 23.11+).  With `sockets`, each node has that many
    sockets of equal cores, one thread per core (`socket_layout`), which gres.conf binds
    its GPUs to."""
    d = str(directory)
    nodes = node_list(types)
    lines = [
        "# A local test cluster written by slurm_gavel.slurm.devcluster: everything is under",
        f"# {d}. Regenerated by `up()`; do not edit.",
        f"ClusterName={CLUSTER_NAME}",
        "SlurmctldHost=localhost",
        f"SlurmctldPort={ctld_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "# This cluster's own munged, so that it never meets another cluster or the system's.",
        "AuthType=auth/munge",
        f"AuthInfo=socket={d}/munge/munge.socket",
        f"StateSaveLocation={d}/ctld",
        f"SlurmctldPidFile={d}/run/slurmctld.pid",
        f"SlurmctldLogFile={d}/log/slurmctld.log",
        f"SlurmdSpoolDir={d}/spool/%n",
        f"SlurmdPidFile={d}/run/slurmd-%n.pid",
        f"SlurmdLogFile={d}/log/slurmd-%n.log",
        "# Fake hardware: the node lines below win over the real CPUs; GPUs are empty files.",
        "SlurmdParameters=config_overrides",
        "GresTypes=gpu,shard" if shards else "GresTypes=gpu",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=" + ",".join(["CR_Core"] + ([select_parameters] if select_parameters else [])),
        *(["# No cgroups (23.02+, e.g. 24.11: cgroup.conf says CgroupPlugin=disabled). No accounting:",
           "# AccountingStorageType is left at its default, none, on every version."]
          if dbd_port is None else [
           "# No cgroups (23.02+, e.g. 24.11: cgroup.conf says CgroupPlugin=disabled).",
           "# Accounting through this cluster's own slurmdbd; associations and their limits",
           "# are enforced (a user needs an account); fair share from the associations.",
           "AccountingStorageType=accounting_storage/slurmdbd",
           "AccountingStorageHost=localhost",
           f"AccountingStoragePort={dbd_port}",
           "# the MUNGE socket for slurmdbd connections (AuthInfo does not reach them)",
           f"AccountingStoragePass={d}/munge/munge.socket",
           "AccountingStorageEnforce=associations,limits",
           "# GPU-seconds per job and type in sacct's AllocTRES (`slurm-gavel replay` reads them)",
           "AccountingStorageTRES=" + ",".join(["gres/gpu"] + [f"gres/gpu:{t}" for t in types]),
           "JobAcctGatherType=jobacct_gather/none",
           "PriorityType=priority/multifactor",
           "PriorityWeightFairshare=10000",
           "PriorityWeightAge=1000",
           "PriorityDecayHalfLife=1-0"]),
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        "MailProg=/bin/true",
        "# Fast for tests: schedule every 2 s, kill 5 s after SIGTERM; finished jobs",
        "# stay visible 300 s; nodes that were down come back when their slurmd registers.",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=sched_interval=2,bf_interval=2",
        "KillWait=5",
        "MinJobAge=300",
        "ReturnToService=2",
        "MessageTimeout=10",
        "InactiveLimit=0",
        "# A job that exits with this code after its checkpoint is requeued held:",
        "# the scheduler then decides when and where it runs next.",
        f"RequeueExitHold={requeue_exit_hold}",
    ]
    if job_submit:
        lines.append("JobSubmitPlugins=lua")
    lines.append("# One node per slurmd, each on its own port; " + (
        "one partition of mixed GPU nodes." if mixed else "one partition per GPU type."))
    for k, (name, gpu_type, gpus) in enumerate(nodes):
        lines.append(f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 "
                     f"Port={slurmd_port + k} CPUs={2 * gpus} {_topology(gpus, sockets)}"
                     f"RealMemory={4096 * gpus} "
                     f"Gres=gpu:{gpu_type}:{gpus}{f',shard:{shards * gpus}' if shards else ''} "
                     "State=UNKNOWN")
    if mixed:
        lines.append(f"PartitionName={mixed} Nodes={','.join(name for name, _, _ in nodes)} "
                     "Default=YES MaxTime=INFINITE State=UP")
        return "\n".join(lines) + "\n"
    for j, gpu_type in enumerate(types):
        members = ",".join(name for name, t, _ in nodes if t == gpu_type)
        default = "YES" if j == 0 else "NO"     # plain `sbatch` lands in the first type
        lines.append(f"PartitionName={gpu_type} Nodes={members} Default={default} "
                     "MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def render_slurmdbd_conf(directory, dbd_port: int, db_port: int, db_password: str) -> str:
    """slurmdbd.conf (mode 600: it holds the database password) of a cluster in `directory`,
    storing into the private MariaDB server on 127.0.0.1:`db_port`; no I/O."""
    d = str(directory)
    return "\n".join([
        "# slurmdbd of a local test cluster, written by slurm_gavel.slurm.devcluster.",
        "AuthType=auth/munge",
        f"AuthInfo=socket={d}/munge/munge.socket",
        "DbdHost=localhost",
        "DbdAddr=127.0.0.1",
        f"DbdPort={dbd_port}",
        "SlurmUser=root",
        f"PidFile={d}/run/slurmdbd.pid",
        f"LogFile={d}/log/slurmdbd.log",
        "DebugLevel=info",
        "StorageType=accounting_storage/mysql",
        "StorageHost=127.0.0.1",
        f"StoragePort={db_port}",
        "StorageUser=slurm",
        f"StoragePass={db_password}",
        "StorageLoc=slurm_acct_db",
    ]) + "\n"


def socket_layout(gpus: int, sockets: int) -> list[tuple[str, str]]:
    """A node of `gpus` GPUs (2 cores each) over `sockets` sockets: per socket, its GPUs and
    its cores as Slurm ranges ("0-1", "0-3"), GPUs split evenly in index order (GPUs 0,1 on
    socket 0's cores, 2,3 on socket 1's for 4 GPUs over 2 sockets)."""
    gpg, cps = gpus // sockets, 2 * gpus // sockets
    span = lambda lo, n: f"{lo}-{lo + n - 1}" if n > 1 else f"{lo}"
    return [(span(s * gpg, gpg), span(s * cps, cps)) for s in range(sockets)]


def _topology(gpus: int, sockets: int) -> str:
    """The node line's socket fields (ending in a space), or nothing for the default node."""
    if not sockets:
        return ""
    return f"Sockets={sockets} CoresPerSocket={2 * gpus // sockets} ThreadsPerCore=1 "


def render_gres_conf(directory, types: Mapping[str, tuple[int, int]], shards: int = 0,
                     shard_flags: str = "", sockets: int = 0, bind_shards: bool = True) -> str:
    """gres.conf: each node's GPUs are empty files (Slurm drops a GPU without File=).  With
    `shards`, each GPU also gets that many shards (one line per GPU file, so that a job's
    shards name their GPU), with `shard_flags` (e.g. "one_sharing") on every shard line.
    With `sockets`, every GPU and shard line says `Cores=` the cores of its GPU's socket
    (`socket_layout`), the shard lines only with `bind_shards`: Slurm then gives a job the
    GPUs (shards) on its cores' sockets first (docs/space-sharing.md, "Sockets")."""
    lines = ["# Fake GPUs of a local test cluster, written by slurm_gavel.slurm.devcluster.",
             "AutoDetect=off"]
    flags = f" Flags={shard_flags}" if shard_flags else ""
    for name, gpu_type, gpus in node_list(types):
        if sockets:
            cores = []
            for gpu_range, core_range in socket_layout(gpus, sockets):
                files = f"gpu[{gpu_range}]" if "-" in gpu_range else f"gpu{gpu_range}"
                lines.append(f"NodeName={name} Name=gpu Type={gpu_type} "
                             f"File={directory}/gpus/{name}/{files} Cores={core_range}")
                cores += [core_range] * (gpus // sockets)
        else:
            files = f"gpu[0-{gpus - 1}]" if gpus > 1 else "gpu0"
            lines.append(f"NodeName={name} Name=gpu Type={gpu_type} "
                         f"File={directory}/gpus/{name}/{files}")
        for k in range(gpus if shards else 0):
            bound = f" Cores={cores[k]}" if sockets and bind_shards else ""
            lines.append(f"NodeName={name} Name=shard Count={shards} "
                         f"File={directory}/gpus/{name}/gpu{k}{bound}{flags}")
    return "\n".join(lines) + "\n"


def _fake_gpu(path: Path, device: bool) -> None:
    """One fake GPU: an empty file, or (`device`, for shards) a character device with the
    numbers of /dev/null.  slurmd sets a job's CUDA_VISIBLE_DEVICES / SLURM_JOB_GPUS only
    for GPUs whose File= is a device ("is not a valid character or block device" else), and
    space sharing is checked by what both jobs of a pair see."""
    if device:
        if path.exists() and not path.is_char_device():
            path.unlink()
        if not path.exists():
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    elif not path.exists() or path.is_char_device():
        if path.exists():
            path.unlink()
        path.touch()


def render_cgroup_conf(version: tuple[int, ...]) -> str | None:
    """cgroup.conf, or None when none is needed.

    22.05 has no CgroupPlugin=disabled and needs no cgroup.conf with linuxproc and
    task/none; 23.02+ (24.11) may set cgroups up anyway unless told not to."""
    if tuple(version[:2]) < (23, 2):
        return None
    return ("# Written by slurm_gavel.slurm.devcluster: no cgroups in a local test cluster.\n"
            "CgroupPlugin=disabled\n")


def parse_types(text: str, field: str = "--types") -> dict[str, tuple[int, int]]:
    """'v100=2x4,k80=1x8' -> {'v100': (2, 4), 'k80': (1, 8)}."""
    types: dict[str, tuple[int, int]] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        m = re.fullmatch(r"([^=]+)=(\d+)x(\d+)", item)
        if not m:
            raise InputError(field, f"{item!r} is not TYPE=NODESxGPUS (e.g. v100=2x4)")
        types[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    _check_types(types, field)
    return types


def format_types(types: Mapping[str, tuple[int, int]]) -> str:
    return ",".join(f"{t}={n}x{g}" for t, (n, g) in types.items())


def _check_types(types, field="types"):
    if not types:
        raise InputError(field, "give at least one GPU type")
    for t, spec in types.items():
        if not _TYPE_NAME.match(str(t)):
            raise InputError(field, f"GPU type {t!r}: use lowercase letters, digits and _")
        if (not isinstance(spec, (tuple, list)) or len(spec) != 2
                or not all(isinstance(v, int) and 1 <= v <= 64 for v in spec)):
            raise InputError(field, f"{t}: want (nodes, GPUs per node), each 1 to 64, "
                                    f"got {spec!r}")


# -- machine checks -------------------------------------------------------------
def _which(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for d in _SBIN:                       # /usr/sbin is not on a normal user's PATH
        if os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    return None


def parse_version(text: str) -> tuple[int, int, int] | None:
    """(22, 5, 8) from 'slurm-wlm 22.05.8' (Debian) or 'slurm 24.11.5' (upstream)."""
    version = read_version(text)
    return (*version, 0)[:3] if version else None


def slurm_version(slurmd: str | None = None) -> tuple[int, int, int]:
    """The version `slurmd -V` reports."""
    slurmd = slurmd or _which("slurmd")
    if not slurmd:
        raise SlurmUnavailable(f"slurmd not found: {INSTALL_HINT}")
    out = subprocess.run([slurmd, "-V"], capture_output=True, text=True, timeout=20, check=False)
    version = parse_version(out.stdout + out.stderr)
    if not version:
        raise SlurmUnavailable("cannot read the Slurm version from `slurmd -V`: "
                               f"{out.stdout.strip()!r}")
    return version


def check_machine() -> tuple[dict[str, str], tuple[int, int, int]]:
    """Paths of the tools and the Slurm version; SlurmUnavailable says what is missing."""
    tools = {name: _which(name) for name in _TOOLS + ("mungekey",)}
    missing = [name for name in _TOOLS if not tools[name]]
    if missing:
        raise SlurmUnavailable(f"{', '.join(missing)} not found: {INSTALL_HINT}")
    version = slurm_version(tools["slurmd"])
    if version[:2] < MIN_VERSION:
        raise SlurmUnavailable(f"Slurm {'.'.join(map(str, version))} is too old: the local "
                               "cluster needs 22.05 or newer")
    if os.geteuid() != 0:
        raise SlurmUnavailable("the local Slurm cluster runs its daemons as root (SlurmUser=root, "
                               "one slurmd per node): run it as root, e.g. in a container or VM")
    return tools, version


def check_accounting() -> dict[str, str]:
    """Paths of MariaDB's and slurmdbd's tools (on top of `check_machine`'s)."""
    tools = {key: next(filter(None, map(_which, names)), None) for key, names in _DB_TOOLS.items()}
    missing = [_DB_TOOLS[key][0] for key, path in tools.items() if not path]
    if missing:
        raise SlurmUnavailable(f"{', '.join(missing)} not found (for accounting): {ACCOUNTING_HINT}")
    return tools


def accounting_unavailable_reason() -> str | None:
    """Why a local cluster with accounting cannot run here, or None when it can."""
    try:
        check_machine()
        check_accounting()
    except SlurmUnavailable as err:
        return str(err)
    return None


def unavailable_reason() -> str | None:
    """Why a local cluster cannot run here, or None when it can."""
    try:
        check_machine()
    except SlurmUnavailable as err:
        return str(err)
    return None


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as Slurm binds
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def free_port(low: int = 30000, high: int = 40000, avoid=(), tries: int = 50) -> int:
    """A free TCP port in [low, high), at random, not in `avoid`."""
    for _ in range(tries):
        port = random.randrange(low, high)
        if port not in avoid and port_free(port):
            return port
    raise DevClusterError(f"no free port in {low}-{high}")


def pick_ports(nodes: int, low: int = 20000, high: int = 30000,
               tries: int = 50) -> tuple[int, int]:
    """A free slurmctld port and `nodes` free consecutive slurmd ports after it, at random."""
    for _ in range(tries):
        base = random.randrange(low, high - nodes - 1)
        if all(port_free(p) for p in range(base, base + nodes + 1)):
            return base, base + 1
    raise DevClusterError(f"no {nodes + 1} free consecutive ports in {low}-{high}")


# -- processes, by pid, from /proc -----------------------------------------------
def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time) of a process, None when gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()      # the name may hold spaces
    return fields[0], int(fields[1]), int(fields[19])


def _alive(pid: int, start: int | None = None) -> bool:
    st = _stat(pid)
    return bool(st) and st[0] not in "ZX" and (start is None or st[2] == start)


def _processes() -> dict[int, int]:
    """pid -> parent pid of every live process."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st and st[0] not in "ZX":
                out[int(entry)] = st[1]
    return out


def _same_root(pid: int) -> bool:
    """Whether `pid` has our filesystem root.  A cluster in a chroot (tools/slurm-chroot.sh:
    Slurm 24.11 next to the host's) can have the very directory name of a host's cluster,
    and its processes carry that name: neither side may stop the other's."""
    try:
        theirs, ours = os.stat(f"/proc/{pid}/root"), os.stat("/")
    except OSError:
        return False
    return (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino)


def _has_mark(pid: int, mark: bytes) -> bool:
    try:
        return mark in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") and _same_root(pid)
    except OSError:
        return False


def _is_our_job(pid: int, conf_mark: bytes) -> bool:
    """A process of one of our jobs: our SLURM_CONF and a SLURM_JOB_ID in its environment
    (a shell that merely exported our SLURM_CONF has no job id)."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return conf_mark in env and any(e.startswith(b"SLURM_JOB_ID=") for e in env) and _same_root(pid)


def _ancestry() -> set[int]:
    """This process and its ancestors: never ours to stop."""
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        st = _stat(pid)
        pid = st[1] if st else 0
    return out


def _is_our_stepd(pid: int, directory: Path) -> bool:
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
    return any(p == r or p.startswith(r + "/") for p in places for r in roots) and _same_root(pid)


def _descendants(roots: set[int], parents: Mapping[int, int]) -> set[int]:
    found, frontier = set(), set(roots)
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


def _write_atomic(path: Path, text: str, mode: int = 0o644):
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _one_line(text: str, limit: int = 400) -> str:
    line = "; ".join(s.strip() for s in (text or "").strip().splitlines() if s.strip())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _tail(path: Path, lines: int = 3) -> str:
    try:
        return _one_line("\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
    except OSError:
        return "(no log)"


# -- the cluster ------------------------------------------------------------------
class DevCluster:
    """A local Slurm cluster under `directory`: see the module docstring."""

    def __init__(self, directory, types: Mapping[str, tuple[int, int]] | None = None,
                 ctld_port: int = DEFAULT_CTLD_PORT, slurmd_port: int = DEFAULT_SLURMD_PORT,
                 job_submit_lua=None, requeue_exit_hold: int = 85, accounting: bool = False,
                 mixed: str | None = None, shards: int = 0, shard_flags: str = "",
                 select_parameters: str = "", sockets: int = 0, bind_shards: bool = True):
        if select_parameters and not re.fullmatch(r"[A-Z_]+(,[A-Z_]+)*", str(select_parameters)):
            raise InputError("select_parameters", f"{select_parameters!r}: NAME[,NAME...] in capitals")
        self.select_parameters = str(select_parameters)
        if mixed is not None and not _TYPE_NAME.match(str(mixed)):
            raise InputError("mixed", f"partition name {mixed!r}: use lowercase letters, digits and _")
        self.mixed = mixed
        self.shards, self.shard_flags = int(shards), str(shard_flags)
        self.directory = Path(directory).expanduser().absolute()
        self.accounting = bool(accounting)
        # slurmdbd's and MariaDB's ports: chosen free at random by `up()` (or kept from the
        # running cluster's state.json)
        self.dbd_port: int | None = None
        self.db_port: int | None = None
        self.types = dict(DEFAULT_TYPES if types is None else types)
        _check_types(self.types)
        self.sockets, self.bind_shards = int(sockets), bool(bind_shards)
        if self.sockets and (self.sockets < 2 or any(gpus % self.sockets
                                                     for _, gpus in self.types.values())):
            raise InputError("sockets", f"{sockets}: 2 or more, dividing every node's GPUs")
        self.nodes = [name for name, _, _ in node_list(self.types)]
        self.ctld_port, self.slurmd_port = int(ctld_port), int(slurmd_port)
        self.job_submit_lua = Path(job_submit_lua) if job_submit_lua else None
        self.requeue_exit_hold = int(requeue_exit_hold)
        bad = _BAD_PATH_CHARS & set(str(self.directory))
        if bad:
            raise InputError("directory", f"{self.directory}: Slurm config paths cannot hold "
                                          f"{''.join(sorted(bad))!r}")
        # slurmstepd listens on spool/NODE/NODE_JOB.STEP: a UNIX socket path has a limit
        longest = max(len(f"{self.directory}/spool/{n}/{n}_99999999.4294967295")
                      for n in self.nodes)
        if self.accounting:
            longest = max(longest, len(str(self.db_socket)))
        if longest > _SUN_PATH_MAX:
            raise InputError("directory", f"{self.directory} is too long for Slurm's UNIX "
                                          f"socket paths ({longest} > {_SUN_PATH_MAX} "
                                          "characters): use a shorter one")
        ports = [self.ctld_port] + [self.slurmd_port + k for k in range(len(self.nodes))]
        if min(ports) < 1024 or max(ports) > 65535 or len(set(ports)) != len(ports):
            raise InputError("ports", f"slurmctld port {self.ctld_port} and slurmd ports "
                                      f"{self.slurmd_port}-{ports[-1]} must be distinct, "
                                      "in 1024-65535")
        if not 0 < self.requeue_exit_hold < 256:
            raise InputError("requeue_exit_hold", "an exit code, 1 to 255")
        self._procs: dict[str, subprocess.Popen] = {}   # the daemons this object started
        self._no_json: set[str] = set()                  # commands without --json here

    # paths and environment
    @property
    def slurm_conf(self) -> Path:
        return self.directory / "slurm.conf"

    @property
    def state_file(self) -> Path:
        return self.directory / "state.json"

    @property
    def munge_socket(self) -> Path:
        return self.directory / "munge" / "munge.socket"

    @property
    def db_socket(self) -> Path:
        return self.directory / "db" / "mysqld.sock"

    @property
    def slurmdbd_conf(self) -> Path:
        return self.directory / "slurmdbd.conf"    # slurmdbd looks next to SLURM_CONF

    @property
    def env(self) -> dict[str, str]:
        """Environment for client commands: this cluster's SLURM_CONF, no stray SLURM_* input."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(_CLIENT_PREFIXES)}
        env["SLURM_CONF"] = str(self.slurm_conf)
        for d in _SBIN:                      # scontrol & co. are in /usr/bin; daemons in /usr/sbin
            if d not in env.get("PATH", "").split(os.pathsep):
                env["PATH"] = env.get("PATH", "") + os.pathsep + d
        return env

    def run(self, args: Sequence, *, timeout: float = 30, check: bool = True, **kw):
        """subprocess.run(args) with this cluster's env; DevClusterError names a failure."""
        args = [str(a) for a in args]
        if "stdout" not in kw and "stderr" not in kw:
            kw["capture_output"] = True
        kw.setdefault("text", True)
        kw.setdefault("stdin", subprocess.DEVNULL)
        try:
            result = subprocess.run(args, env=kw.pop("env", self.env), timeout=timeout,
                                    check=False, **kw)
        except FileNotFoundError:
            raise DevClusterError(f"{args[0]}: command not found; {INSTALL_HINT}") from None
        except subprocess.TimeoutExpired:
            raise DevClusterError(f"`{shlex.join(args)}` timed out after {timeout:g} s") from None
        if check and result.returncode != 0:
            said = _one_line(result.stderr or result.stdout or "") or "no output"
            raise DevClusterError(f"`{shlex.join(args)}` failed (exit {result.returncode}): {said}")
        return result

    # files
    def write_config(self, version: tuple[int, ...] = MIN_VERSION):
        """Create the directory tree, the fake GPU files and the config files."""
        d = self.directory
        for sub in ("ctld", "log", "run", "spool", "gpus"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        d.chmod(0o755)                        # job scripts live under spool/: 755 (slurm.conf(5))
        (d / "munge").mkdir(exist_ok=True)
        (d / "munge").chmod(0o755)            # every user reaches the socket; the key is 0600
        for name, _, gpus in node_list(self.types):
            (d / "spool" / name).mkdir(exist_ok=True)
            (d / "gpus" / name).mkdir(exist_ok=True)
            for k in range(gpus):
                _fake_gpu(d / "gpus" / name / f"gpu{k}", device=bool(self.shards))
        lua = d / "job_submit.lua"
        if self.job_submit_lua:
            if not self.job_submit_lua.is_file():
                raise InputError("job_submit_lua", f"{self.job_submit_lua}: no such file")
            _write_atomic(lua, self.job_submit_lua.read_text())
        elif lua.exists():
            lua.unlink()
        _write_atomic(self.slurm_conf, self._render_slurm_conf())
        if self.accounting:
            (d / "db").mkdir(exist_ok=True)
            (d / "db").chmod(0o700)
            password = d / "db" / "password"          # kept: the data dir outlives a `down`
            if not password.exists():
                _write_atomic(password, secrets.token_hex(16), mode=0o600)
            _write_atomic(self.slurmdbd_conf, render_slurmdbd_conf(
                d, self.dbd_port, self.db_port, password.read_text().strip()), mode=0o600)
        _write_atomic(d / "gres.conf", render_gres_conf(d, self.types, self.shards, self.shard_flags,
                                                       self.sockets, self.bind_shards))
        cgroup = render_cgroup_conf(version)
        if cgroup:
            _write_atomic(d / "cgroup.conf", cgroup)
        elif (d / "cgroup.conf").exists():
            (d / "cgroup.conf").unlink()

    # state of the processes we started
    def _load_state(self) -> dict:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {}

    def _render_slurm_conf(self) -> str:
        return render_slurm_conf(self.directory, self.types, self.ctld_port, self.slurmd_port,
                                 bool(self.job_submit_lua), self.requeue_exit_hold,
                                 self.dbd_port if self.accounting else None, mixed=self.mixed,
                                 shards=self.shards, select_parameters=self.select_parameters,
                                 sockets=self.sockets)

    def _record(self, name: str, pid: int):
        state = self._load_state()
        state.setdefault("directory", str(self.directory))
        ports = {"slurmctld": self.ctld_port, "slurmd": self.slurmd_port}
        if self.accounting:
            ports.update(slurmdbd=self.dbd_port, mariadb=self.db_port)
        state.setdefault("ports", ports)
        st = _stat(pid)
        state.setdefault("daemons", {})[name] = {"pid": pid, "start": st[2] if st else None}
        _write_atomic(self.state_file, json.dumps(state, indent=1) + "\n")

    def daemons(self) -> dict[str, dict]:
        """Recorded daemons: name -> {'pid', 'running'}."""
        return {name: {"pid": rec["pid"], "running": _alive(rec["pid"], rec.get("start"))}
                for name, rec in self._load_state().get("daemons", {}).items()}

    # up
    def up(self, timeout: float = 60) -> DevCluster:
        """Start munged, slurmctld and one slurmd per node; wait until every node is idle.
        When this directory's cluster already runs with the same config, just check it."""
        tools, version = check_machine()
        if self.accounting:
            tools.update(check_accounting())
        self.version = version
        running = self.daemons()
        if running and all(d["running"] for d in running.values()):
            ports = self._load_state().get("ports", {})
            self.dbd_port, self.db_port = ports.get("slurmdbd"), ports.get("mariadb")
            conf = self.slurm_conf.read_text() if self.slurm_conf.exists() else ""
            if conf != self._render_slurm_conf():
                raise DevClusterError(f"a cluster with another configuration is running in "
                                      f"{self.directory}: stop it first (cluster down)")
            self._wait_ready(time.monotonic() + timeout)
            return self
        if running:
            self.down()                        # what is left of an earlier cluster
        ports = [self.ctld_port] + [self.slurmd_port + k for k in range(len(self.nodes))]
        busy = [p for p in ports if not port_free(p)]
        if busy:
            raise DevClusterError(f"port(s) {', '.join(map(str, busy))} in use: another cluster "
                                  "(`slurm-gavel cluster down`)? or choose other ports")
        if self.accounting:
            self.db_port = free_port(avoid=ports)
            self.dbd_port = free_port(avoid=ports + [self.db_port])
        self.write_config(version)
        try:
            self._start_munged(tools)
            deadline = time.monotonic() + timeout
            if self.accounting:
                # MariaDB creates its tables, slurmdbd its own: give them time of their own
                self._start_accounting(tools, deadline + 60)
                deadline = time.monotonic() + timeout
            self._spawn("slurmctld", [tools["slurmctld"], "-D", "-c", "-f", str(self.slurm_conf)])
            self._wait_ctld(deadline)
            for node in self.nodes:
                self._spawn(f"slurmd:{node}", [tools["slurmd"], "-D", "-f", str(self.slurm_conf),
                                               "-N", node])
            self._wait_ready(deadline)
        except BaseException:
            self.down()
            raise
        return self

    def restart_slurmctld(self, clean: bool = False, timeout: float = 60) -> None:
        """Stop slurmctld (by pid) and start it again; `clean`: with -c, forgetting every
        job (slurmd then kills the jobs it runs), as an admin's cold start does."""
        tools, _ = check_machine()
        rec = self._load_state().get("daemons", {}).get("slurmctld")
        if rec:
            self._stop({rec["pid"]: rec.get("start")}, 10.0)
        self._procs.pop("slurmctld", None)
        self._spawn("slurmctld", [tools["slurmctld"], "-D", *(["-c"] if clean else []),
                                  "-f", str(self.slurm_conf)])
        deadline = time.monotonic() + timeout
        self._wait_ctld(deadline)
        self._wait_ready(deadline)

    # -- failures, for tests -----------------------------------------------------------
    def kill_node(self, node: str) -> None:
        """SIGKILL one node's slurmd (a crashed slurmd: its jobs' slurmstepds go on running)."""
        rec = self.daemons().get(f"slurmd:{node}")
        if rec is None:
            raise DevClusterError(f"no slurmd of node {node!r} recorded")
        if rec["running"]:
            os.kill(rec["pid"], signal.SIGKILL)
            proc = self._procs.get(f"slurmd:{node}")
            if proc is not None:
                proc.wait(timeout=10)

    def start_node(self, node: str) -> None:
        """Start one node's slurmd again (after `kill_node`)."""
        if node not in self.nodes:
            raise DevClusterError(f"no node {node!r} in this cluster")
        tools, _ = check_machine()
        self._spawn(f"slurmd:{node}", [tools["slurmd"], "-D", "-f", str(self.slurm_conf), "-N", node])

    def _spawn(self, name: str, argv: list[str]):
        env = dict(self.env, **{_MARK: str(self.directory)})
        with open(self.directory / "log" / f"{name.replace(':', '-')}.out", "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env=env, cwd=self.directory,
                                    start_new_session=True)   # a ^C in the shell spares it
        self._procs[name] = proc
        self._record(name, proc.pid)

    def _start_munged(self, tools):
        m = self.directory / "munge"
        key = m / "munge.key"
        if not key.exists():
            if tools.get("mungekey"):
                self.run([tools["mungekey"], "--create", "--keyfile", key])
            else:                              # munge < 0.5.14 has no mungekey
                fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
                with os.fdopen(fd, "wb") as f:
                    f.write(os.urandom(1024))
        self._spawn("munged", [tools["munged"], "--foreground", "--force",
                               "--socket", str(self.munge_socket), "--key-file", str(key),
                               "--pid-file", str(m / "munged.pid"),
                               "--log-file", str(self.directory / "log" / "munged.log"),
                               # --foreground logs to stderr instead: log/munged.out
                               "--seed-file", str(m / "munged.seed")])
        deadline = time.monotonic() + 10
        while not self.munge_socket.exists():
            self._check_alive("munged", self.directory / "log" / "munged.out")
            if time.monotonic() > deadline:
                raise DevClusterError(f"munged did not create {self.munge_socket} within 10 s")
            time.sleep(0.05)

    def _start_accounting(self, tools, deadline: float):
        """MariaDB (own data dir, socket, 127.0.0.1 port), then slurmdbd, then the cluster,
        its accounts and root's associations registered with sacctmgr."""
        db = self.directory / "db"
        data = db / "data"
        if not (data / "mysql").is_dir():
            with open(self.directory / "log" / "mariadb-install.log", "ab") as out:
                self.run([tools["install_db"], "--no-defaults", f"--datadir={data}", "--user=root",
                          "--auth-root-authentication-method=socket", "--skip-test-db"],
                         timeout=max(30.0, deadline - time.monotonic()), stdout=out,
                         stderr=subprocess.STDOUT)
        self._spawn("mariadb", [tools["mariadbd"], "--no-defaults", f"--datadir={data}",
                                f"--socket={self.db_socket}", f"--pid-file={db}/mariadb.pid",
                                f"--port={self.db_port}", "--bind-address=127.0.0.1",
                                "--skip-name-resolve", "--user=root",
                                f"--log-error={self.directory}/log/mariadb.log",
                                "--innodb-buffer-pool-size=64M",
                                "--innodb-lock-wait-timeout=900"])   # slurmdbd's advice
        password = (db / "password").read_text().strip()
        sql = (f"CREATE OR REPLACE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}'; "
               "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';")
        client = [tools["mariadb"], "--no-defaults", f"--socket={self.db_socket}", "-u", "root"]
        self._wait_for("mariadb", lambda: self.run(client + ["-e", "SELECT 1"], check=False,
                                                   timeout=15).returncode == 0, deadline)
        self.run(client + ["-e", sql])
        self._spawn("slurmdbd", [tools["slurmdbd"], "-D"])
        self._wait_for("slurmdbd", lambda: self.run(
            ["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"], check=False,
            timeout=15).returncode == 0, deadline)
        known = self.run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"]).stdout.split()
        if CLUSTER_NAME not in known:
            self.run(["sacctmgr", "-i", "add", "cluster", CLUSTER_NAME])
        for account in ACCOUNTS:
            self.add_user("root", account)

    def add_user(self, user: str, account: str):
        """Give `user` an association with `account` (created under root when missing) on
        this cluster; nothing when it exists (accounting clusters only)."""
        if not re.fullmatch(r"[a-z_][a-z0-9_-]*", user) or not re.fullmatch(r"[a-z][a-z0-9_-]*",
                                                                             account):
            raise InputError("user", f"{user!r} / {account!r}: not a user and account name")
        have = self.run(["sacctmgr", "-n", "-P", "show", "assoc", f"cluster={CLUSTER_NAME}",
                         "format=account,user"]).stdout.split()
        if f"{account}|" not in have:
            self.run(["sacctmgr", "-i", "add", "account", account, f"cluster={CLUSTER_NAME}",
                      f"description={account}", "organization=gavel"])
        if f"{account}|{user}" not in have:
            self.run(["sacctmgr", "-i", "add", "user", user, f"account={account}",
                      f"cluster={CLUSTER_NAME}"])

    def _wait_for(self, name: str, ready, deadline: float):
        log = self.directory / "log" / f"{name}.log"
        while not ready():
            self._check_alive(name, log)
            if time.monotonic() > deadline:
                raise DevClusterError(f"{name} did not answer in time: {_tail(log)}")
            time.sleep(0.3)

    def _check_alive(self, name: str, log: Path):
        proc = self._procs.get(name)
        if proc is not None and proc.poll() is not None:
            raise DevClusterError(f"{name} exited with code {proc.returncode}: {_tail(log)}")

    def _wait_ctld(self, deadline: float):
        log = self.directory / "log" / "slurmctld.log"
        while True:
            self._check_alive("slurmctld", log)
            if self.run(["scontrol", "ping"], check=False, timeout=15).returncode == 0:
                return
            if time.monotonic() > deadline:
                raise DevClusterError("slurmctld did not answer `scontrol ping` in time: "
                                      f"{_tail(log)}")
            time.sleep(0.2)

    def _wait_ready(self, deadline: float):
        """Wait until every node is up: idle (a fresh cluster has no jobs) or running jobs.
        Resume nodes that registered down or drained; fail on an invalid registration."""
        resumed: dict[str, float] = {}
        while True:
            for node in self.nodes:
                self._check_alive(f"slurmd:{node}", self.directory / "log" / f"slurmd-{node}.log")
            nodes = {n["name"]: n for n in self.nodes_info()}
            waiting = []
            for name in self.nodes:
                info = nodes.get(name, {"state": "MISSING", "flags": []})
                state = {info["state"]} | set(info["flags"])
                if state & {"INVAL", "INVALID", "INVALID_REG"}:
                    raise DevClusterError(
                        f"node {name} registered with an invalid configuration "
                        f"({info.get('reason') or 'no reason'}): see "
                        f"{self.directory}/log/slurmd-{name}.log and slurmctld.log")
                if (info["state"] in ("IDLE", "MIXED", "ALLOCATED")
                        and not state & {"DRAIN", "NOT_RESPONDING"}):
                    continue
                waiting.append(f"{name} {'+'.join(sorted(state))}")
                down = state & {"DOWN", "DRAIN", "FAIL"}
                if (down and "NOT_RESPONDING" not in state
                        and time.monotonic() - resumed.get(name, 0) > 2):
                    self.run(["scontrol", "update", f"nodename={name}", "state=resume"],
                             check=False)
                    resumed[name] = time.monotonic()
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise DevClusterError(f"nodes not up in time: {', '.join(waiting)} "
                                      f"(logs in {self.directory}/log)")
            time.sleep(0.3)

    # down
    def down(self, grace: float = 5.0) -> list[int]:
        """Stop what `up()` started (SIGTERM, SIGKILL after `grace`), the slurmstepds of
        its jobs and their children; returns the pids signalled.  Idempotent."""
        recorded = {name: rec for name, rec in self._load_state().get("daemons", {}).items()
                    if _alive(rec["pid"], rec.get("start"))}
        # after slurmctld, the slurmds and their jobs: slurmdbd, MariaDB, then munged
        last = ("slurmdbd", "mariadb", "munged")
        daemons = {rec["pid"] for name, rec in recorded.items() if name not in last}
        slurmds = {rec["pid"] for name, rec in recorded.items() if name.startswith("slurmd:")}
        parents = _processes()
        # A slurmstepd is forked by our slurmd, then reparented to init: find it by the
        # mark it inherits from slurmd's environment (22.05), by its working directory
        # or open log file (24.11), or as a child, if not reparented.
        mark = f"{_MARK}={self.directory}".encode()
        conf_mark = f"SLURM_CONF={self.slurm_conf}".encode()
        steps = {pid for pid, ppid in parents.items() if ppid in slurmds}
        steps |= {pid for pid in parents if pid not in daemons
                  and (_has_mark(pid, mark) or _is_our_stepd(pid, self.directory))}
        steps -= {rec["pid"] for rec in recorded.values()}
        doomed = {rec["pid"]: rec.get("start")
                  for name, rec in recorded.items() if name not in last}
        for pid in steps | _descendants(daemons | steps, parents):   # jobs, slurmscriptd
            st = _stat(pid)
            if st:
                doomed[pid] = st[2]
        # slurmstepd ignores SIGTERM: wait for everything else only, then SIGKILL what is left
        signalled = self._stop(doomed, grace, patient=set(doomed) - steps)
        # A job step may have forked while we were stopping the rest (a busy machine):
        # look again for processes carrying our mark until none is left.
        for _ in range(3):
            parents = _processes()
            # a job's own processes carry our SLURM_CONF (slurmd puts it in the job's
            # environment): one started as its slurmstepd was killed is an orphan now
            late = {pid for pid in parents
                    if _has_mark(pid, mark) or _is_our_job(pid, conf_mark)
                    or _is_our_stepd(pid, self.directory)} - _ancestry()
            late |= _descendants(late, parents)
            late -= {rec["pid"] for rec in recorded.values()}   # stopped in order below
            late = {pid: st[2] for pid in late if (st := _stat(pid))}
            if not late:
                break
            signalled += self._stop(late, 0.0)
        # slurmdbd before its database; munged last: everyone talks through it.  MariaDB
        # may take a while to shut InnoDB down cleanly.
        for name, wait in (("slurmdbd", grace), ("mariadb", 4 * grace), ("munged", grace)):
            if name in recorded:
                rec = recorded[name]
                signalled += self._stop({rec["pid"]: rec.get("start")}, wait)
        for proc in self._procs.values():     # reap our own children
            try:
                proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
        self._procs.clear()
        if self.state_file.exists():
            self.state_file.unlink()
        return signalled

    def _stop(self, pids: Mapping[int, int | None], grace: float, patient=None) -> list[int]:
        """SIGTERM `pids`; SIGKILL those left once the `patient` ones (default: all) have
        exited or after `grace` seconds.  Each pid is checked against its start time."""
        live = {pid: start for pid, start in pids.items() if _alive(pid, start)}
        for sig, wait, waited in ((signal.SIGTERM, grace, patient), (signal.SIGKILL, 5.0, None)):
            for pid, start in live.items():
                if _alive(pid, start):
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
            watch = {p: s for p, s in live.items() if waited is None or p in waited}
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and any(_alive(p, s) for p, s in watch.items()):
                self._reap()
                time.sleep(0.05)
        left = [pid for pid, start in live.items() if _alive(pid, start)]
        if left:
            raise DevClusterError(f"processes {left} survived SIGKILL")
        return sorted(live)

    def _reap(self):
        for proc in self._procs.values():
            proc.poll()

    # status
    def nodes_info(self) -> list[dict]:
        """Every node: name, state ('IDLE', 'MIXED', ...), flags ('DRAIN', ...), gres,
        partitions, reason.  From `scontrol show nodes --json` (23.02+, 24.11), else
        `sinfo --json` (22.05: 'nodes' at the top; 24.11 groups them), else `sinfo` text."""
        for args in (["scontrol", "show", "nodes", "--json"], ["sinfo", "--json"]):
            if args[0] in self._no_json:
                continue
            result = self.run(args, check=False)
            try:
                nodes = json.loads(result.stdout).get("nodes") if result.returncode == 0 else None
            except ValueError:
                nodes = None
            if isinstance(nodes, list) and all(isinstance(n, dict) and "name" in n for n in nodes):
                return [_node_from_json(n) for n in nodes]
            self._no_json.add(args[0])
        result = self.run(["sinfo", "-h", "-N", "-o", "%N|%T|%G|%P|%E"])
        nodes: dict[str, dict] = {}
        for line in result.stdout.splitlines():
            name, state, gres, part, reason = (line.split("|", 4) + [""] * 5)[:5]
            words = state.upper().rstrip("*~#!%$@^-").split("+")
            node = nodes.setdefault(name, {"name": name, "state": words[0], "flags": words[1:],
                                           "gres": gres, "partitions": [],
                                           "reason": "" if reason == "none" else reason})
            node["partitions"].append(part.rstrip("*"))
        return list(nodes.values())

    def status(self) -> dict:
        """{'directory', 'slurm_conf', 'running', 'daemons': {name: {pid, running}},
        'nodes': [...]} (nodes empty when slurmctld is not running)."""
        daemons = self.daemons()
        out = {"directory": str(self.directory), "slurm_conf": str(self.slurm_conf),
               "running": bool(daemons) and all(d["running"] for d in daemons.values()),
               "ports": self._load_state().get("ports", {}), "daemons": daemons, "nodes": []}
        if daemons.get("slurmctld", {}).get("running"):
            try:
                out["nodes"] = self.nodes_info()
            except DevClusterError as err:
                out["error"] = str(err)
        return out


def _node_from_json(n: dict) -> dict:
    """One node of `scontrol show nodes --json`: 22.05 gives 'state': 'idle' and
    'state_flags': [...]; 24.11 gives 'state': ['IDLE', 'DRAIN', ...]."""
    state = n.get("state")
    words = [str(s).upper() for s in (state if isinstance(state, list) else [state or "UNKNOWN"])]
    words += [str(s).upper() for s in n.get("state_flags", [])]
    base = {"IDLE", "ALLOCATED", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN"}
    main = next((w for w in words if w in base), words[0])
    return {"name": n.get("name", ""), "state": main, "flags": [w for w in words if w != main],
            "gres": n.get("gres", ""), "partitions": list(n.get("partitions", [])),
            "reason": n.get("reason", "") if isinstance(n.get("reason"), str) else ""}


def default_job_submit_lua() -> Path | None:
    """The repository's slurm_conf/job_submit.lua, when it exists."""
    path = Path(__file__).resolve().parents[2] / "slurm_conf" / "job_submit.lua"
    return path if path.is_file() else None


# -- `slurm-gavel cluster up|down|status` -------------------------------------------
def default_directory() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "slurm-gavel-cluster"
    return Path(f"/tmp/slurm-gavel-cluster-{os.getuid()}")


def register(commands) -> argparse.ArgumentParser:
    """Add `cluster up|down|status` to an argparse subparsers object."""
    p = commands.add_parser(
        "cluster", help="a real local Slurm cluster for tests and demos: up, down, status",
        description="Run a real Slurm cluster on this machine (root, Slurm and MUNGE installed): "
                    "one partition per GPU type, one slurmd per node, fake GPUs, its own munged; "
                    "everything under one directory.")
    p.add_argument("action", choices=("up", "down", "status"))
    p.add_argument("--dir", metavar="DIR",
                   help="cluster directory (default: $XDG_RUNTIME_DIR/slurm-gavel-cluster, "
                        "else /tmp/slurm-gavel-cluster-$UID)")
    p.add_argument("--types", default=format_types(DEFAULT_TYPES), metavar="TYPE=NODESxGPUS,...",
                   help="GPU types: nodes and GPUs per node (default: %(default)s)")
    p.add_argument("--port", type=int, default=DEFAULT_CTLD_PORT, metavar="N",
                   help="slurmctld port; the slurmds use N+184 onwards (default: %(default)s)")
    p.add_argument("--accounting", action="store_true",
                   help="up: with accounting (sacct, sacctmgr, fair share): a private MariaDB "
                        "server and slurmdbd on random free ports (needs mariadb-server, slurmdbd)")
    p.add_argument("--mixed", metavar="PARTITION",
                   help="up: one partition of this name holding every node (mixed GPU nodes, typed "
                        "GRES) instead of one partition per GPU type")
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.set_defaults(handler=cmd_cluster)
    return p


def cmd_cluster(args) -> int:
    """Handler of `cluster`: 0 ok, 2 bad input, 1 failure (one line on stderr)."""
    try:
        directory = Path(args.dir) if args.dir else default_directory()
        if args.action == "up":
            if not 1024 <= args.port <= 65000:
                raise InputError("--port", f"{args.port} is not in 1024-65000")
            cluster = DevCluster(directory, parse_types(args.types), ctld_port=args.port,
                                 slurmd_port=args.port + DEFAULT_SLURMD_PORT - DEFAULT_CTLD_PORT,
                                 job_submit_lua=default_job_submit_lua(),
                                 accounting=getattr(args, "accounting", False),
                                 mixed=getattr(args, "mixed", None))
            cluster.up()
            status = cluster.status()
            if args.json:
                print(json.dumps(status, indent=1))
            else:
                print(f"slurm-gavel: {len(status['nodes'])} nodes up in {cluster.directory}; "
                      f"stop with `slurm-gavel cluster down --dir {cluster.directory}`",
                      file=sys.stderr)
                print(f"export SLURM_CONF={shlex.quote(str(cluster.slurm_conf))}")
            return 0
        cluster = DevCluster(directory)
        if args.action == "down":
            pids = cluster.down()
            print(f"slurm-gavel: stopped {len(pids)} processes in {cluster.directory}",
                  file=sys.stderr)
            return 0
        status = cluster.status()
        print(json.dumps(status, indent=1) if args.json else format_status(status))
        return 0 if status["running"] else 1
    except InputError as err:
        print(f"slurm-gavel: error: {_one_line(str(err))}", file=sys.stderr)
        return 2
    except GavelError as err:
        print(f"slurm-gavel: error: {_one_line(str(err))}", file=sys.stderr)
        return 1


def format_status(status: Mapping) -> str:
    if not status["daemons"]:
        return f"no cluster running in {status['directory']}"
    state = "running" if status["running"] else "NOT running (`cluster down`, then `up`)"
    lines = [f"cluster in {status['directory']}: {state}",
             f"export SLURM_CONF={shlex.quote(status['slurm_conf'])}", ""]
    lines += [f"{'DAEMON':<16} {'PID':>8}  STATE"]
    lines += [f"{name:<16} {d['pid']:>8}  {'running' if d['running'] else 'stopped'}"
              for name, d in status["daemons"].items()]
    if status["nodes"]:
        lines += ["", f"{'NODE':<12} {'PARTITION':<10} {'STATE':<16} GRES"]
        for n in status["nodes"]:
            state = "+".join([n["state"]] + n["flags"]).lower()
            parts = ",".join(n["partitions"])
            lines.append(f"{n['name']:<12} {parts:<10} {state:<16} {n['gres']}")
    if status.get("error"):
        lines += ["", f"error: {status['error']}"]
    return "\n".join(lines)

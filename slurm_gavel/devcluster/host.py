"""What this host needs for a local cluster, checked before anything starts.

Slurm's and MUNGE's binaries (and MariaDB's and slurmdbd's for accounting), a Slurm not older
than `MIN_VERSION`, root, and free TCP ports.  Each check says what is missing and how to
install it (`SlurmUnavailable`), so a test can skip with that sentence.
"""
from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess

from ..core.errors import GavelError
from ..slurm.commands import parse_version as read_version

MIN_VERSION = (22, 5)
INSTALL_HINT = "install them with `apt-get install slurm-wlm munge`"
ACCOUNTING_HINT = "install them with `apt-get install mariadb-server slurmdbd`"
_TOOLS = ("munged", "slurmctld", "slurmd", "scontrol", "sinfo", "squeue", "sbatch", "scancel")
# Accounting: each tool under its MariaDB name, else its MySQL one (older or other packages).
_DB_TOOLS = {"mariadbd": ("mariadbd", "mysqld"), "install_db": ("mariadb-install-db", "mysql_install_db"),
             "mariadb": ("mariadb", "mysql"), "slurmdbd": ("slurmdbd",), "sacctmgr": ("sacctmgr",),
             "sacct": ("sacct",)}
SBIN = ("/usr/sbin", "/usr/local/sbin", "/sbin")


class DevClusterError(GavelError, RuntimeError):
    """The local test cluster could not be started, queried or stopped."""


class SlurmUnavailable(DevClusterError):
    """Slurm or MUNGE is not installed, is too old, or we are not root."""



def _which(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for d in SBIN:                       # /usr/sbin is not on a normal user's PATH
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

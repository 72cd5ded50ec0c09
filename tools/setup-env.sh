#!/usr/bin/env bash
# Create (or reuse) the project's virtualenv in .venv and install the package
# with its test extras.  Sourced by tools/demo.sh and tools/test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${GAVEL_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
# A fresh Debian/Ubuntu may lack python3 or its venv module (python3-venv):
# install them with apt-get (through sudo when not root).
if [ ! -x "$VENV/bin/python" ] && ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1 \
        && command -v apt-get >/dev/null 2>&1; then
    echo "setup-env: installing python3 and python3-venv with apt-get" >&2
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null
fi
# The local Slurm cluster (`slurm-gavel cluster up`, the Slurm tests) needs Slurm and
# MUNGE: install them with apt-get when missing. The daemons live in /usr/sbin, which
# is not on every PATH. A failed install only warns: those tests then skip (fail in CI).
_gavel_have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/usr/local/sbin/$1" ]; }
if { ! _gavel_have slurmctld || ! _gavel_have munged; } && command -v apt-get >/dev/null 2>&1; then
    echo "setup-env: installing slurm-wlm and munge with apt-get (for the local Slurm test cluster)" >&2
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    { $SUDO apt-get update -qq \
        && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null; } \
        || echo "setup-env: warning: could not install slurm-wlm and munge; the Slurm tests will be skipped" >&2
fi
# The job_submit.lua tests run the plugin's code in a standalone Lua 5.1 (the version Slurm's
# job_submit/lua embeds on Debian) as well as inside slurmctld.
if ! command -v lua5.1 >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    echo "setup-env: installing lua5.1 with apt-get (for the job_submit.lua tests)" >&2
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    { $SUDO apt-get update -qq \
        && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lua5.1 >/dev/null; } \
        || echo "setup-env: warning: could not install lua5.1; the Lua tests will be skipped" >&2
fi
# The local cluster with accounting (`cluster up --accounting`, the sacct tests) runs its own
# MariaDB server and slurmdbd: install them too (the Debian packages' services are not started).
if { ! _gavel_have slurmdbd || { ! _gavel_have mariadbd && ! _gavel_have mysqld; }; } \
        && command -v apt-get >/dev/null 2>&1; then
    echo "setup-env: installing mariadb-server and slurmdbd with apt-get (for the cluster with accounting)" >&2
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    { $SUDO apt-get update -qq \
        && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server slurmdbd >/dev/null; } \
        || echo "setup-env: warning: could not install mariadb-server and slurmdbd; the accounting tests will be skipped" >&2
fi
unset -f _gavel_have
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null
# The job side (slurm_gavel.job.iterator, the job templates) and its tests train real PyTorch
# models. Pin the CPU build that the package index here carries: an unpinned torch would
# pull a multi-GB CUDA build. setup.cfg's `torch` extra (torch>=2.0,<3) accepts it.
TORCH_VERSION="${GAVEL_TORCH_VERSION:-2.13.0}"
if ! "$VENV/bin/python" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" \
        >/dev/null 2>&1; then
    "$VENV/bin/python" -m pip install --quiet "torch==$TORCH_VERSION"
fi
"$VENV/bin/python" -m pip install --quiet -e "$ROOT[test]"
export PATH="$VENV/bin:$PATH"

#!/usr/bin/env bash
# Run a command inside a newer Debian root with its Slurm, for the tests that need Slurm 23.11+
# (this host's Debian 12 packages are 22.05): Debian 13 (trixie, Slurm 24.11) by default,
# GAVEL_SLURM_SUITE=sid for Debian unstable's (26.05 in December 2026).  Root only.
#
#   bash tools/slurm-chroot.sh CMD...                       # CMD runs in the repository, with .venv's python
#   GAVEL_SLURM_SUITE=sid bash tools/slurm-chroot.sh CMD...
#
# A root per suite is built once with debootstrap (about a minute) and kept in $GAVEL_SLURM_ROOT
# (default /var/tmp/slurm-gavel-SUITE); delete that folder to undo it.  Its logs are named after
# it (ROOT.debootstrap.log, ROOT.apt.log, ROOT.mariadb.log), so two roots never share one.  Every mount is made
# in a private mount namespace (unshare), so it disappears with the command: nothing is left
# mounted and the host's /dev is never bound (the root gets its own tmpfs /dev with the few
# device nodes Slurm, MUNGE and Python use).  The repository is bound at its own path and the
# venv's base Python read-only at its own, so the host's .venv (torch included) runs inside.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# GAVEL_SLURM24_* are the older names of the trixie root's settings: read only when
# GAVEL_SLURM_SUITE does not name a suite (so a moved trixie root is never taken for sid).
if [ -n "${GAVEL_SLURM_SUITE:-}" ]; then
    SUITE="$GAVEL_SLURM_SUITE"
    CHROOT="${GAVEL_SLURM_ROOT:-/var/tmp/slurm-gavel-$SUITE}"
else
    SUITE="${GAVEL_SLURM24_SUITE:-trixie}"
    CHROOT="${GAVEL_SLURM_ROOT:-${GAVEL_SLURM24_ROOT:-/var/tmp/slurm-gavel-$SUITE}}"
fi
MIRROR="${GAVEL_SLURM_MIRROR:-${GAVEL_SLURM24_MIRROR:-http://deb.debian.org/debian}}"
LOG="${CHROOT%/}"
# Slurm and MUNGE (slurmdbd for the cluster with accounting); Lua for job_submit.lua; chattr; the shared libraries the venv's Python and its
# compiled packages (numpy, scipy, HiGHS, torch) load.
PACKAGES=slurmctld,slurmd,slurm-client,munge,lua5.1,libssl3t64,libsqlite3-0,libffi8,zlib1g,libbz2-1.0,liblzma5,libreadline8t64,libncursesw6,libuuid1,libnsl2,libtirpc3t64,libcrypt1,libexpat1,libstdc++6,libgomp1,e2fsprogs,slurmdbd

if [ "$(id -u)" -ne 0 ]; then
    echo "slurm-chroot: needs root (debootstrap, chroot, mounts)" >&2
    exit 2
fi
# One build at a time per root: a second command that finds the root being built (test.sh's
# passes start side by side, two checkouts share /var/tmp) waits for it instead of building
# into the same folder.  The lock is dropped once the root is ready (fd 9 closed below).
mkdir -p "$(dirname "$CHROOT")"
exec 9>"$LOG.lock"
flock 9
# A marker written after a whole build (the sbin links point into the root's /etc/alternatives).
if [ ! -e "$CHROOT/.slurm-gavel-root" ]; then
    if ! command -v debootstrap >/dev/null 2>&1; then
        echo "slurm-chroot: installing debootstrap with apt-get" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    fi
    echo "slurm-chroot: building a $SUITE root with Slurm in $CHROOT (debootstrap)" >&2
    # Built beside its final place and renamed, so an interrupted build is never taken for one.
    rm -rf "$CHROOT.partial"
    mkdir -p "$(dirname "$CHROOT")"
    debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$CHROOT.partial" "$MIRROR" \
        > "$LOG.debootstrap.log" 2>&1 \
        || { echo "slurm-chroot: debootstrap failed; see $LOG.debootstrap.log" >&2; exit 1; }
    echo "$PACKAGES" > "$CHROOT.partial/.slurm-gavel-root"
    rm -rf "$CHROOT"
    mv "$CHROOT.partial" "$CHROOT"
elif [ "$(cat "$CHROOT/.slurm-gavel-root")" != "$PACKAGES" ]; then
    # A root built by an earlier version of this script: add what the list has gained.
    echo "slurm-chroot: adding packages to $CHROOT" >&2
    chroot "$CHROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq ${PACKAGES//,/ } > "$LOG.apt.log" 2>&1 \
        || { echo "slurm-chroot: apt-get failed; see $LOG.apt.log" >&2; exit 1; }
    echo "$PACKAGES" > "$CHROOT/.slurm-gavel-root"
fi
# slurmdbd 24.11.5 does not start against trixie's MariaDB 11.8: the root gets the host's
# (Debian 12's) MariaDB 10.11 in /opt/mariadb-10.11, run by the host's loader and libraries
# (tools/chroot-mariadb-10.11.sh), when the host has it (tools/setup-env.sh installs it).
MARIADB=/opt/mariadb-10.11
if [ -x /usr/sbin/mariadbd ]; then
    want="$(/usr/sbin/mariadbd --version)"
    if [ "$(cat "$CHROOT$MARIADB/VERSION" 2>/dev/null)" != "$want" ]; then
        echo "slurm-chroot: putting the host's MariaDB into $CHROOT$MARIADB" >&2
        bash "$ROOT/tools/chroot-mariadb-10.11.sh" "$CHROOT" > "$LOG.mariadb.log" 2>&1 \
            || { echo "slurm-chroot: see $LOG.mariadb.log" >&2; exit 1; }
        echo "$want" > "$CHROOT$MARIADB/VERSION"
    fi
fi
exec 9>&-
VENV_PY="$ROOT/.venv/bin/python"
[ -x "$VENV_PY" ] || { echo "slurm-chroot: no $VENV_PY (run tools/setup-env.sh first)" >&2; exit 2; }
BASE="$("$VENV_PY" -c 'import sys; print(sys.base_prefix)')"
# A worktree's .venv may link to another checkout's: that venv is bound read-only at its path.
VENV="$(cd "$ROOT/.venv" && pwd -P)"
case "$VENV" in "$ROOT"/*) VENV="";; esac
# Bound over the root's own files, a Python installed in /usr would replace trixie's /usr.
case "$BASE" in
    /|/usr|/usr/local|/bin|/lib*|/etc*|/var|/tmp|/opt|/root|/home)
        echo "slurm-chroot: the venv's Python lives in $BASE, which cannot be bound into the root;" \
             "make .venv from a Python in its own folder (pyenv, /opt/pythonX.Y), or set GAVEL_SLURM24=0" >&2
        exit 2;;
esac
exec unshare --mount --propagation private -- bash -euo pipefail -c '
R="$1"; ROOT="$2"; BASE="$3"; VENV="$4"; shift 4
mount -t proc proc "$R/proc"
mount -t tmpfs -o mode=755 tmpfs "$R/dev"
for d in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0; do
    IFS=: read -r name major minor <<<"$d"
    mknod -m 666 "$R/dev/$name" c "$major" "$minor"
done
mkdir -p "$R/dev/shm" "$R/dev/pts"
mount -t tmpfs -o mode=1777 tmpfs "$R/dev/shm"
mount -t tmpfs -o mode=755 tmpfs "$R/run"
mkdir -p "$R$ROOT" "$R$BASE"
mount --bind "$ROOT" "$R$ROOT"
mount --bind "$BASE" "$R$BASE"
mount -o remount,bind,ro "$R$BASE"
if [ -n "$VENV" ]; then
    mkdir -p "$R$VENV"
    mount --bind "$VENV" "$R$VENV"
    mount -o remount,bind,ro "$R$VENV"
fi
# The data beside the repository (../shared/data), read-only, for the tests that read it.
if [ -d "$ROOT/../shared" ]; then
    SHARED="$(cd "$ROOT/../shared" && pwd)"
    mkdir -p "$R$SHARED"
    mount --bind "$SHARED" "$R$SHARED"
    mount -o remount,bind,ro "$R$SHARED"
fi
# The host names, read-only: Slurm resolves its own hostname.
for f in /etc/hosts /etc/hostname; do
    [ -e "$f" ] || continue
    touch "$R$f"
    mount --bind "$f" "$R$f"
    mount -o remount,bind,ro "$R$f"
done
# A clean environment, but for CI and the GAVEL_* settings.
keep=()
for name in $(compgen -e); do
    case "$name" in CI|GAVEL_*) keep+=("$name=${!name}");; esac
done
exec chroot "$R" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb "${keep[@]}" \
    PATH="$ROOT/.venv/bin:/opt/mariadb-10.11/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    /bin/bash -c "cd \"\$0\" && exec \"\$@\"" "$ROOT" "$@"
' slurm-chroot "$CHROOT" "$ROOT" "$BASE" "$VENV" "$@"

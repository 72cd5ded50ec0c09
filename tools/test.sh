#!/usr/bin/env bash
# Install everything the tests need (a venv with the package) and run them.
#
# The tests come in three tiers, one folder each: tests/unit (no Slurm, seconds each),
# tests/integration (no Slurm; training runs and venv installs, minutes of CPU) and
# tests/cluster (real local Slurm clusters, tests/cluster/conftest.py).
#
# With no arguments: the unit and integration tiers on two processes (pytest-xdist), then the
# cluster tier on this host's Slurm, then its tests marked `slurm24` again on Slurm 24.11
# (tools/slurm-chroot.sh: a Debian 13 root, built once), so that what differs between Slurm
# versions is tested on both and what needs 23.11+ is not skipped.
# --fast: the unit tier only, on two processes: a few minutes, no Slurm needed.
# With other arguments: they go to pytest, on this host only (GAVEL_SLURM24=1 adds the 24.11
# pass with the same arguments). GAVEL_SLURM24=0 leaves the 24.11 pass out.
# GAVEL_TEST_PROCESSES sets the processes of the unit and integration tiers (default 2; 0: one
# process, no xdist). GAVEL_CLUSTER_PROCESSES those of the cluster tier and of the version passes
# (default 2; 0: one process): each process takes whole test files (--dist loadfile) and starts
# its own clusters (random ports, own state dirs) under a short --basetemp, because Slurm's UNIX
# socket paths live in the cluster's folder and may not be longer than 107 characters.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/tools/setup-env.sh"
cd "$ROOT"
procs="${GAVEL_TEST_PROCESSES:-2}"
parallel=()
[ "$procs" != 0 ] && parallel=(-n "$procs")
cluster_procs="${GAVEL_CLUSTER_PROCESSES:-2}"
# The same short folder name serves inside each chroot (its own /tmp); the pid keeps two runs of
# this script on one host apart (pytest empties --basetemp first).
# Short: a test's folder is BASETEMP/popen-gwN/<test name, 30 chars>N/..., and Slurm's socket
# paths under it must stay within 107 characters (a 7-digit pid included).
basetemp="/tmp/gv-$$"
# A cluster test that fails is run once more (pytest-rerunfailures) before it counts: they run
# real daemons and trainings on two cores, where a wait now and then outlasts its timeout; the
# summary line says "N rerun", so a test that needed it is seen (GAVEL_CLUSTER_RERUNS=0: none).
cluster_parallel=(--basetemp="$basetemp" --reruns "${GAVEL_CLUSTER_RERUNS:-1}" --reruns-delay 5)
[ "$cluster_procs" != 0 ] && cluster_parallel+=(-n "$cluster_procs" --dist loadfile)
rc=0
if [ "${1:-}" = "--fast" ]; then
    [ $# -eq 1 ] || { echo "test.sh: --fast takes no other arguments" >&2; exit 2; }
    python -m pytest "${parallel[@]}" tests/unit || rc=$?
    exit "$rc"
fi
if [ $# -gt 0 ]; then
    want24="${GAVEL_SLURM24:-0}"
    args=("$@")
    python -m pytest "$@" || rc=$?
else
    want24="${GAVEL_SLURM24:-1}"
    # The unit tier runs no Slurm: the version cannot change its results.
    args=("${cluster_parallel[@]}" -m slurm24 tests/cluster)
    # Unit and integration tests share nothing and run side by side. Cluster test files too:
    # each process has its own session clusters, and a file's tests share its process's.
    python -m pytest "${parallel[@]}" tests/unit tests/integration || rc=$?
    # Its clusters' folders (logs) stay when a test failed.
    if python -m pytest "${cluster_parallel[@]}" tests/cluster; then rm -rf "$basetemp"; else rc=$?; fi
fi
if [ "$want24" = 1 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "test.sh: the Slurm 24.11 pass needs root (a chroot); left out" >&2
        [ -n "${CI:-}" ] && rc=1
    else
        echo "test.sh: the tests again on Slurm 24.11 (tools/slurm-chroot.sh): pytest ${args[*]}" >&2
        if GAVEL_NEWER_SLURM=1 bash "$ROOT/tools/slurm-chroot.sh" python -m pytest "${args[@]}"; then
            bash "$ROOT/tools/slurm-chroot.sh" rm -rf "$basetemp"
        else
            rc=$?
        fi
    fi
fi
# The third pass: Slurm 26.05 (Debian unstable, a sid root by tools/slurm-chroot.sh), the same
# tests as the 24.11 pass. GAVEL_SLURM26=0 leaves it out; with arguments it runs only with
# GAVEL_SLURM26=1. GAVEL_SLURM26_ROOT moves its root (default /var/tmp/slurm-gavel-sid).
want26="${GAVEL_SLURM26:-$([ $# -gt 0 ] && echo 0 || echo 1)}"
if [ "$want26" = 1 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "test.sh: the Slurm 26.05 pass needs root (a chroot); left out" >&2
        [ -n "${CI:-}" ] && rc=1
    else
        echo "test.sh: the tests again on Slurm 26.05 (GAVEL_SLURM_SUITE=sid tools/slurm-chroot.sh): pytest ${args[*]}" >&2
        export GAVEL_SLURM_SUITE=sid GAVEL_SLURM_ROOT="${GAVEL_SLURM26_ROOT:-/var/tmp/slurm-gavel-sid}"
        if GAVEL_NEWER_SLURM=1 bash "$ROOT/tools/slurm-chroot.sh" python -m pytest "${args[@]}"; then
            bash "$ROOT/tools/slurm-chroot.sh" rm -rf "$basetemp"
        else
            rc=$?
        fi
    fi
fi
exit "$rc"

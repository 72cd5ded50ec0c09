#!/usr/bin/env bash
# Install everything the tests need (a venv with the package) and run them.
#
# The tests come in three tiers, one folder each: tests/unit (no Slurm, seconds each),
# tests/integration (no Slurm; training runs and venv installs, minutes of CPU) and
# tests/cluster (real local Slurm clusters, tests/cluster/conftest.py).
#
# With no arguments, four passes side by side: the cluster tier on this host's Slurm; its tests
# marked `slurm24` again on Slurm 24.11 and on Slurm 26.05 (tools/slurm-chroot.sh: a Debian 13
# and a Debian unstable root, built once), so that what differs between Slurm versions is tested
# on each and what needs 23.11+ is not skipped; and the unit and integration tiers.  Why side by
# side: a cluster test mostly waits (for slurmctld, a daemon's round, a job's signal; the cluster
# tier keeps under one core of two busy), while the unit tier only computes.  So the unit tier
# runs niced (GAVEL_UNIT_NICE, default 10): the clusters' daemons, whose timing the tests watch,
# come first and the unit tier takes the CPU they leave.  The passes beside the unit tier write
# to log files that are printed, whole, once each has ended; the exit code is the first failing
# pass's.  Interrupted (Ctrl-C, SIGTERM), every pass is interrupted and ends its clusters.
# --fast: the unit tier only, on two processes: a few minutes, no Slurm needed.
# With other arguments: they go to pytest, on this host only (GAVEL_SLURM24=1 / GAVEL_SLURM26=1
# add the version passes with the same arguments, side by side). GAVEL_SLURM24=0 / GAVEL_SLURM26=0
# leave a version pass out. GAVEL_SLURM26_ROOT moves the 26.05 root (default
# /var/tmp/slurm-gavel-sid).
# GAVEL_TEST_PROCESSES sets the processes of the unit and integration tiers (default 2; 0: one
# process, no xdist). GAVEL_CLUSTER_PROCESSES those of the cluster tier and of each version pass
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
# A cluster test that fails is run once more (pytest-rerunfailures) before it counts: they run
# real daemons and trainings on two cores, where a wait now and then outlasts its timeout; the
# summary line says "N rerun", so a test that needed it is seen (GAVEL_CLUSTER_RERUNS=0: none).
cluster_options=(--reruns "${GAVEL_CLUSTER_RERUNS:-1}" --reruns-delay 5)
[ "$cluster_procs" != 0 ] && cluster_options+=(-n "$cluster_procs" --dist loadfile)
# One short --basetemp per pass (pytest empties it first): the pid keeps two runs of this script
# apart, the prefix the passes (a version pass's root has its own /tmp, shared by every command
# run in that root, test_slurm_chroot's included).  Short: a test's folder is
# BASETEMP/popen-gwN/<test name, 30 chars>N/..., and Slurm's socket paths under it must stay
# within 107 characters (a 7-digit pid included).
host_tmp="/tmp/gv-$$" tmp24="/tmp/g4-$$" tmp26="/tmp/g6-$$"

if [ "${1:-}" = "--fast" ]; then
    [ $# -eq 1 ] || { echo "test.sh: --fast takes no other arguments" >&2; exit 2; }
    rc=0
    python -m pytest "${parallel[@]}" tests/unit || rc=$?
    exit "$rc"
fi

logs="$(mktemp -d "${TMPDIR:-/tmp}/gavel-test-logs.XXXXXX")"
names=() pids=() titles=()
# NAME TITLE CMD...: CMD runs in the background, its output in $logs/NAME.log.  `exec` makes the
# pid pytest's (tools/slurm-chroot.sh execs its way to it too), so an interrupt reaches pytest,
# which then tears its clusters down; SIGINT is restored for it (bash may ignore it in the
# background).
beside() {
    local name="$1" title="$2"; shift 2
    ( exec env --default-signal=INT "$@" ) > "$logs/$name.log" 2>&1 &
    names+=("$name") pids+=("$!") titles+=("$title")
    echo "test.sh: $title, beside the others (its output when it ends: $logs/$name.log)" >&2
}
fg_pid=""
# Ctrl-C reaches every process of the terminal's group, the passes' pytest included: they are
# only waited for.  SIGTERM (a CI's timeout) reaches this script alone: it is passed on as
# SIGINT, which pytest answers by tearing its clusters down.
interrupted() {
    trap - INT TERM
    echo "test.sh: interrupted; each pass ends its clusters (their output so far: $logs)" >&2
    if [ "$1" = TERM ]; then
        kill -INT ${fg_pid:+"$fg_pid"} "${pids[@]}" 2>/dev/null || true
    fi
    wait || true
    exit 130
}
trap 'interrupted INT' INT
trap 'interrupted TERM' TERM
# CMD...: runs with its output here; waited for in the background, so that a signal to this
# script is taken at once (bash runs a trap only once a foreground command has ended).
here() {
    ( exec env --default-signal=INT "$@" ) &
    fg_pid=$!
    local code=0
    wait "$fg_pid" || code=$?
    fg_pid=""
    return "$code"
}

rc=0
record() { [ "$rc" != 0 ] || rc="$1"; }
if [ $# -gt 0 ]; then
    want24="${GAVEL_SLURM24:-0}" want26="${GAVEL_SLURM26:-0}"
    version_args=("$@")
else
    want24="${GAVEL_SLURM24:-1}" want26="${GAVEL_SLURM26:-1}"
    # The unit tier runs no Slurm: the version cannot change its results.
    version_args=("${cluster_options[@]}" -m slurm24 tests/cluster)
fi
# version pass: WANT LABEL SUITE ROOT BASETEMP
version_pass() {
    local want="$1" label="$2" suite="$3" root="$4" tmp="$5" name="slurm${2//./}"
    [ "$want" = 1 ] || return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "test.sh: the Slurm $label pass needs root (a chroot); left out" >&2
        [ -z "${CI:-}" ] || record 1
        return 0
    fi
    beside "$name" "the tests again on Slurm $label (tools/slurm-chroot.sh, $suite root)" \
        env GAVEL_SLURM_SUITE="$suite" GAVEL_SLURM_ROOT="$root" GAVEL_NEWER_SLURM=1 \
        bash "$ROOT/tools/slurm-chroot.sh" python -m pytest --basetemp="$tmp" "${version_args[@]}"
}
# The two roots may both be built now, side by side: debootstrap is installed here, once (two
# apt-get runs at a time would fight over dpkg's lock).
if { [ "$want24" = 1 ] || [ "$want26" = 1 ]; } && [ "$(id -u)" -eq 0 ] \
        && ! command -v debootstrap >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: installing debootstrap with apt-get (for the Slurm version passes' roots)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
version_pass "$want24" 24.11 "${GAVEL_SLURM24_SUITE:-trixie}" "${GAVEL_SLURM24_ROOT:-/var/tmp/slurm-gavel-trixie}" "$tmp24"
version_pass "$want26" 26.05 sid "${GAVEL_SLURM26_ROOT:-/var/tmp/slurm-gavel-sid}" "$tmp26"

if [ $# -gt 0 ]; then
    here python -m pytest "$@" || record $?
else
    beside cluster "the cluster tier on this host's Slurm" \
        python -m pytest --basetemp="$host_tmp" "${cluster_options[@]}" tests/cluster
    # Unit and integration tests share nothing and run side by side (pytest-xdist).
    here nice -n "${GAVEL_UNIT_NICE:-10}" python -m pytest "${parallel[@]}" tests/unit tests/integration || record $?
fi

# Each background pass, in the order started: its whole output, then its folders (clusters'
# logs stay when a test failed).
for i in "${!pids[@]}"; do
    code=0
    wait "${pids[$i]}" || code=$?
    echo "===== test.sh: ${titles[$i]}: exit code $code =====" >&2
    cat "$logs/${names[$i]}.log"
    record "$code"
    [ "$code" = 0 ] || continue
    case "${names[$i]}" in
        cluster) rm -rf "$host_tmp";;
        slurm2411) GAVEL_SLURM_SUITE="${GAVEL_SLURM24_SUITE:-trixie}" GAVEL_SLURM_ROOT="${GAVEL_SLURM24_ROOT:-/var/tmp/slurm-gavel-trixie}" \
                       bash "$ROOT/tools/slurm-chroot.sh" rm -rf "$tmp24";;
        slurm2605) GAVEL_SLURM_SUITE=sid GAVEL_SLURM_ROOT="${GAVEL_SLURM26_ROOT:-/var/tmp/slurm-gavel-sid}" \
                       bash "$ROOT/tools/slurm-chroot.sh" rm -rf "$tmp26";;
    esac
done
rm -rf "$logs"
exit "$rc"

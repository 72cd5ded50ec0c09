#!/usr/bin/env bash
# Install everything the tests need (a venv with the package) and run them.
#
# With no arguments: the whole suite on this host's Slurm, then the tests marked `slurm24`
# again on Slurm 24.11 (tools/slurm-chroot.sh: a Debian 13 root, built once), so that what
# differs between Slurm versions is tested on both and what needs 23.11+ is not skipped.
# With arguments: they go to pytest, on this host only (GAVEL_SLURM24=1 adds the 24.11 pass
# with the same arguments). GAVEL_SLURM24=0 leaves the 24.11 pass out.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/tools/setup-env.sh"
cd "$ROOT"
if [ $# -gt 0 ]; then
    want24="${GAVEL_SLURM24:-0}"
    args=("$@")
else
    want24="${GAVEL_SLURM24:-1}"
    args=(-m slurm24)
fi
rc=0
python -m pytest "$@" || rc=$?
if [ "$want24" = 1 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "test.sh: the Slurm 24.11 pass needs root (a chroot); left out" >&2
        [ -n "${CI:-}" ] && rc=1
    else
        echo "test.sh: the tests again on Slurm 24.11 (tools/slurm-chroot.sh): pytest ${args[*]}" >&2
        GAVEL_NEWER_SLURM=1 bash "$ROOT/tools/slurm-chroot.sh" python -m pytest "${args[@]}" || rc=$?
    fi
fi
exit "$rc"

#!/usr/bin/env bash
# Create (or reuse) the project's virtualenv in .venv and install the package
# with its test extras.  Sourced by tools/demo.sh and tools/test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${GAVEL_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null
"$VENV/bin/python" -m pip install --quiet -e "$ROOT[test]"
export PATH="$VENV/bin:$PATH"

#!/usr/bin/env bash
# Install everything the tests need (a venv with the package) and run them.
# Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/tools/setup-env.sh"
cd "$ROOT"
exec python -m pytest "$@"

#!/usr/bin/env bash
# The main job on the embedded default: install, then solve the bundled
# example with heterogeneity-aware max-min fairness and its agnostic baseline.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/tools/setup-env.sh"
cd "$ROOT"
echo "== slurm-gavel policies"
slurm-gavel policies
echo
echo "== heterogeneity-aware max-min fairness on examples/three_jobs.json"
slurm-gavel solve --policy max_min_fairness --input examples/three_jobs.json
echo
echo "== the same, heterogeneity-agnostic"
slurm-gavel solve --policy max_min_fairness --agnostic --input examples/three_jobs.json

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
echo
echo "== simulate 300 jobs (rate 0.5/h) on 4 V100 + 4 P100 + 4 K80 with the engine the daemon will run:"
echo "   heterogeneity-aware max-min fairness, then its agnostic baseline (examples/toy_throughputs.json)"
for mode in "" "--agnostic"; do
    slurm-gavel simulate --policy max_min_fairness $mode --throughputs examples/toy_throughputs.json \
        --cluster v100=4,p100=4,k80=4 --rate 0.5 --jobs 300 --window 100:300 --quiet
    echo
done

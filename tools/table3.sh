#!/usr/bin/env bash
# Table 3 style comparison on Gavel's physical-cluster traces, in the simulator:
# heterogeneity-aware policies against their agnostic baselines on the paper's
# physical cluster (8 V100, 16 P100, 24 K80), 360 s rounds.
#
#   continuous trace (max_min_fairness.trace, Poisson arrivals): max-min fairness (LAS), average JCT
#   static trace (minimize_makespan.trace, all jobs at time 0):   makespan policy, makespan
#
# Usage: tools/table3.sh [GAVEL_DATA_DIR]      (default: the copy in the package, slurm_gavel/estimator/data/gavel)
# The Python to run is $PYTHON (default: the project's .venv, made by tools/setup-env.sh, else python3); it needs the package's
# dependencies, and this checkout's slurm_gavel is put first on PYTHONPATH.
# Prints a markdown table on stdout; ratio = agnostic / aware (> 1: aware is better).
# Exits 1 if a run did not finish every job (its cells are marked with *).
set -euo pipefail

usage() { sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

case "${1:-}" in
    -h|--help) usage; exit 0 ;;
esac
if [[ $# -gt 1 ]]; then
    usage >&2
    exit 2
fi

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="${1:-$ROOT/slurm_gavel/estimator/data/gavel}"
if [[ -z "${PYTHON:-}" && -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; fi
PYTHON="${PYTHON:-python3}"
THROUGHPUTS="$DATA/physical_cluster_throughputs.json"
TRACES="$DATA/traces/physical_cluster"
CLUSTER="v100=8,p100=16,k80=24"
ROUND=360

for f in "$THROUGHPUTS" "$TRACES/max_min_fairness.trace" "$TRACES/minimize_makespan.trace"; do
    if [[ ! -f "$f" ]]; then
        echo "table3.sh: not found: $f (give the Gavel data directory as the first argument)" >&2
        exit 2
    fi
done
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PYTHON" -c 'import slurm_gavel.sim.experiments, slurm_gavel.policies' </dev/null; then
    echo "table3.sh: $PYTHON cannot import slurm_gavel (set PYTHON to a Python with the package's dependencies)" >&2
    exit 2
fi

# simulate POLICY TRACE_FILE [--agnostic] -> the summary JSON on stdout
simulate() {
    local policy="$1" trace="$2"
    shift 2
    "$PYTHON" -m slurm_gavel simulate --policy "$policy" "$@" --trace "$trace" \
        --throughputs "$THROUGHPUTS" --cluster "$CLUSTER" --round "$ROUND" --quiet --json </dev/null
}

# row TRACE_NAME POLICY METRIC_LABEL METRIC_KEY AWARE_JSON AGNOSTIC_JSON -> one table row
# (the JSON and the key reach Python as arguments, never as code)
row() {
    "$PYTHON" - "$@" <<'PY'
import json, sys

trace, policy, label, key, aware_text, agnostic_text = sys.argv[1:7]
cells, complete = [], True
values = []
for text in (aware_text, agnostic_text):
    run = json.loads(text)
    value = run.get(key)
    ok = bool(run.get("complete")) and value is not None
    complete = complete and ok
    values.append(value)
    cells.append(("n/a" if value is None else f"{value:.2f}") + ("" if ok else "*"))
aware, agnostic = values
ratio = f"{agnostic / aware:.2f}x" if aware and agnostic is not None else "n/a"
print(f"| {trace} | {policy} | {label} | {cells[0]} | {cells[1]} | {ratio} |")
sys.exit(0 if complete else 1)
PY
}

status=0
echo "| trace | policy | metric | aware | agnostic | ratio |"
echo "|---|---|---|---:|---:|---:|"
# trace file (without .trace), policy, metric label, summary key
while IFS='|' read -r name policy label key; do
    trace="$TRACES/$name.trace"
    echo "table3.sh: $name: $policy (aware)" >&2
    aware="$(simulate "$policy" "$trace")"
    echo "table3.sh: $name: $policy (agnostic)" >&2
    agnostic="$(simulate "$policy" "$trace" --agnostic)"
    row "$name.trace" "$policy" "$label" "$key" "$aware" "$agnostic" || status=1
done <<'RUNS'
max_min_fairness|max_min_fairness|average JCT (h)|average_jct_hours
minimize_makespan|makespan|makespan (h)|makespan_hours
RUNS
if [[ $status -ne 0 ]]; then
    echo "table3.sh: * = the run did not finish every job" >&2
fi
exit "$status"

#!/usr/bin/env bash
# The main job on an embedded default: install (Python packages, and Slurm and
# MUNGE from apt when missing), start a local Slurm cluster with fake GPU types
# (2 nodes x 4 GPUs each of v100, p100, k80), submit a sample workload of
# preemptible jobs, and let the slurm-gavel daemon schedule it in 20-second
# rounds while `gqueue` shows what it does.  Then a simulation of the same
# policy against its heterogeneity-agnostic baseline.  Needs root for Slurm;
# without it only the simulation runs.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/tools/setup-env.sh"
cd "$ROOT"

simulate() {
    echo "== simulation: 300 jobs (0.5/h) on 4 V100 + 4 P100 + 4 K80, the same engine as the daemon"
    for mode in "" "--agnostic"; do
        slurm-gavel simulate --policy max_min_fairness $mode --throughputs examples/toy_throughputs.json \
            --cluster v100=4,p100=4,k80=4 --rate 0.5 --jobs 300 --window 100:300 --quiet
        echo
    done
}

if [ "$(id -u)" -ne 0 ] || ! command -v slurmctld >/dev/null 2>&1; then
    echo "demo: the local Slurm cluster needs root and Slurm; showing the simulation only" >&2
    simulate
    exit 0
fi

DEMO="$(mktemp -d /tmp/gavel-demo.XXXXXX)"
DAEMON_PID=""
cleanup() {
    [ -n "$DAEMON_PID" ] && kill "$DAEMON_PID" 2>/dev/null && wait "$DAEMON_PID" 2>/dev/null || true
    slurm-gavel cluster down --dir "$DEMO/cluster" >/dev/null 2>&1 || true
    rm -rf "$DEMO"
}
trap cleanup EXIT

echo "== a local Slurm cluster: 3 GPU types x 2 nodes x 4 fake GPUs (in $DEMO)"
slurm-gavel cluster up --dir "$DEMO/cluster" --port 16917 >/dev/null
export SLURM_CONF="$DEMO/cluster/slurm.conf"
sinfo

cat > "$DEMO/gavel.toml" <<TOML
slurm_conf = "$SLURM_CONF"
database = "$DEMO/gavel.db"
throughputs = "$ROOT/examples/toy_throughputs.json"
round_seconds = 20
tick_seconds = 2
grace_seconds = 10
TOML

echo
echo "== sample workload: 14 gavel jobs of 4 models, 2 GPUs each (28 GPUs asked of 24)"
models=(convnet rl-agent translation language-model)
for i in $(seq 0 13); do
    model=${models[$((i % 4))]}
    steps=$((25 + (i % 3) * 10))
    sbatch --parsable --export=ALL,TOTAL=$steps,STATE_DIR="$DEMO" -o "$DEMO/job-%j.out" \
        --comment "gavel model=$model steps=$steps" --gres=gpu:2 examples/jobs/sample_job.sh >/dev/null
done
echo "a bad flag is refused at sbatch:"
sbatch --comment "gavel model=convnet slo=36" --gres=gpu:1 examples/jobs/sample_job.sh 2>&1 | head -1 || true
squeue

echo
echo "== slurm-gavel daemon (rounds of 20 s), gqueue every round"
slurm-gavel daemon --config "$DEMO/gavel.toml" --log-level WARNING &
DAEMON_PID=$!
for i in $(seq 1 30); do
    sleep 20
    echo "-- gqueue after round $i"
    gqueue --db "$DEMO/gavel.db" || true
    if ! squeue -h -t PENDING,RUNNING,SUSPENDED,REQUEUED,REQUEUE_HOLD,SPECIAL_EXIT | grep -q .; then
        break
    fi
done
sleep 4
kill "$DAEMON_PID"; wait "$DAEMON_PID" || true; DAEMON_PID=""
echo
echo "== every job finished; what one of them went through:"
first=$(ls "$DEMO"/job-*.out | head -1)
cat "$first"
echo
echo "== per GPU type (gqueue --cluster), and time per type from the daemon's database"
gqueue --db "$DEMO/gavel.db" --cluster
python - "$DEMO/gavel.db" <<'PY'
import sys
from slurm_gavel.daemon.store import SqliteStore
store = SqliteStore(sys.argv[1], readonly=True)
total = {}
for job, per_type in store.job_time().items():
    for wt, s in per_type.items():
        total[wt] = total.get(wt, 0.0) + s
print("GPU-job seconds per type:", ", ".join(f"{wt} {s:.0f}" for wt, s in sorted(total.items())))
print("jobs completed:", len(store.jobs(states=("completed",))))
PY
echo
simulate

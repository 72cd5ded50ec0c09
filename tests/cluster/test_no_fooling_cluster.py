"""No user can fool the daemon, on the real local Slurm cluster (issue 11, part B).

Two jobs of one model: one writes ``steps_per_second: 999999`` into its own
progress file and asks for ``weight=1000000``; the other is honest and asks for
``weight=0.000001``.  Root is the only user here, so sharing between users'
jobs is switched on (``shared_min_users = 1``, a one-user cluster) to show that
the ceiling alone keeps the lie out of what other jobs learn.
"""
from __future__ import annotations

import json
import subprocess
import sys

from slurm_gavel.daemon.store import SqliteStore

from tests.support.daemon import queue, start_daemon, stop_daemon, write_config

# One step per second; a progress record after each with the speed it claims
# ($SPS); on USR2 exit with the requeue-hold code, like every gavel job.
REPORTING_JOB = r"""#!/bin/bash
#SBATCH --requeue
#SBATCH --open-mode=append
stop=0
trap 'stop=1' USR2
echo "start partition=$SLURM_JOB_PARTITION"
step=0
while [ "$step" -lt "$TOTAL" ]; do
  sleep 1
  step=$((step + 1))
  echo "{\"job\": \"$SLURM_JOB_ID\", \"event\": \"progress\", \"step\": $step, \"steps_per_second\": $SPS, \"partition\": \"$SLURM_JOB_PARTITION\", \"time\": $(date +%s)}" >> "$GAVEL_PROGRESS_DIR/$SLURM_JOB_ID.jsonl"
  if [ "$stop" = 1 ]; then exit 85; fi
done
echo "done at $step"
"""
TOY_CONVNET = {"v100": 9.6, "p100": 4.8, "k80": 1.2}     # examples/toy_throughputs.json, scale factor 1
CEILING = 10.0


def _submit(cluster, tmp, sps: str, weight: str, steps: int = 40) -> str:
    script = tmp / "report.sh"
    script.write_text(REPORTING_JOB)
    out = cluster.run(["sbatch", "--parsable",
                       f"--export=ALL,TOTAL={steps},SPS={sps},GAVEL_PROGRESS_DIR={tmp / 'progress'}",
                       "-o", str(tmp / "out-%j.txt"), "--comment",
                       f"gavel model=convnet steps={steps} weight={weight}", "--gres=gpu:1", str(script)]).stdout
    return out.strip().split(";")[0]


def test_a_lying_job_changes_no_other_jobs_estimate_and_extreme_weights_starve_nobody(clean, tmp_path):
    cluster = clean
    config = write_config(tmp_path, cluster, round_seconds=3, tick_seconds=1)
    with config.open("a") as f:
        f.write("[estimator]\nshared_min_users = 1\n")
    liar = _submit(cluster, tmp_path, "999999", "1000000")
    honest = _submit(cluster, tmp_path, "1.0", "0.000001")
    daemon = start_daemon(config, "--max-rounds", "6")
    try:
        daemon.wait(timeout=120)
    finally:
        code, log = stop_daemon(daemon)
    assert code == 0 and "Traceback" not in log, log[-3000:]
    assert f"job {liar}: implausible throughput report dropped" in log, log[-3000:]
    assert log.count(f"job {liar}: implausible") == 1, log[-3000:]        # rate-limited

    # both ran: the weights, bounded, gave each a share
    for job in (liar, honest):
        out = (tmp_path / f"out-{job}.txt").read_text() if (tmp_path / f"out-{job}.txt").exists() else ""
        assert "start partition=" in out, (job, out, queue(cluster), log[-3000:])
    store = SqliteStore(tmp_path / "gavel.db", readonly=True)
    _, shares = store.latest_allocation()
    assert sum(shares.get(liar, {}).values()) > 0 and sum(shares.get(honest, {}).values()) > 0, shares

    # what every job of the model learns from: the honest job's 1.0, nothing of the lie
    model_rows, job_rows = store.load_throughputs()
    convnet = [r for r in model_rows if r["model"] == "convnet" and not r["partner"]]
    assert convnet and all(0.5 <= r["steps_per_second"] <= 1.5 for r in convnet), model_rows
    assert all(r["steps_per_second"] <= 1.5 for r in job_rows), job_rows
    shown = subprocess.run([sys.executable, "-m", "slurm_gavel", "throughputs", "show", "--db",
                            str(tmp_path / "gavel.db"), "--json"], capture_output=True, text=True, check=True)
    estimates = json.loads(shown.stdout)["estimates"]
    mine = {e["worker_type"]: e for e in estimates if e["job"] == honest}
    assert mine and all(e["steps_per_second"] <= 1.5 * TOY_CONVNET[wt] for wt, e in mine.items()), mine
    assert any(e["kind"] == "measured" and abs(e["steps_per_second"] - 1.0) < 0.5 for e in mine.values()), mine
    theirs = {e["worker_type"]: e for e in estimates if e["job"] == liar}
    assert all(e["steps_per_second"] <= CEILING * TOY_CONVNET[wt] for wt, e in theirs.items()), theirs
    store.close()

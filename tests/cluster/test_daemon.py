"""The daemon on a real local Slurm cluster: jobs start, are preempted, move, resume and finish.

Jobs are plain bash scripts that honour the preemption signal the way the
iterator will: on USR2 they save their step and exit with the requeue-hold
code.  Each run segment is logged by the job itself (partition, start and
end time), which is what Slurm really ran; the daemon's SQLite ledger must
agree with it.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from slurm_gavel.daemon.store import SqliteStore

from tests.support.daemon import (MODELS, TICK, dry_run, queue, segments, start_daemon, stop_daemon,
                                  submit, write_config)


# Slurm counts a job as running from its launch; the script logs its own start later
# (about 2.5 s under load on these machines, see tests/cluster/test_backend_contract.py).
LAUNCH = 3.0


def test_jobs_are_preempted_moved_resumed_and_all_complete(clean, tmp_path):
    cluster = clean
    config = write_config(tmp_path, cluster)
    jobs = {}
    for i in range(16):      # 32 GPUs asked of 24: they must take turns
        model, steps = MODELS[i % 4], 30 + (i % 3) * 5
        jobs[submit(cluster, tmp_path, model, 2, steps)] = steps
    daemon = start_daemon(config)
    try:
        deadline = time.time() + 420
        seen_gqueue = False
        while time.time() < deadline:
            left = {j: s for j, s in queue(cluster).items() if j in jobs and s != "COMPLETED"}
            if not left:
                break
            if not seen_gqueue and (tmp_path / "gavel.db").exists():
                shown = subprocess.run([sys.executable, "-m", "slurm_gavel", "queue", "--db",
                                        str(tmp_path / "gavel.db")], capture_output=True, text=True)
                if shown.returncode == 0 and "REASON" in shown.stdout and len(shown.stdout.splitlines()) > 1:
                    seen_gqueue = True
            assert daemon.poll() is None, daemon.communicate()[0][-3000:]
            time.sleep(3)
        else:
            pytest.fail(f"jobs still queued after 420 s: {left}")
    finally:
        code, log = stop_daemon(daemon)
    assert code == 0, log[-3000:]
    assert seen_gqueue, "gqueue never showed the jobs while the daemon ran"

    moved = restarted = 0
    store = SqliteStore(tmp_path / "gavel.db", readonly=True)
    ledger = store.job_time()
    for job, steps in jobs.items():
        out = (tmp_path / f"out-{job}.txt").read_text()
        assert f"done at {steps}" in out, out                   # exactly its steps, no more
        starts = [line for line in out.splitlines() if line.startswith("start")]
        restarts = [int(line.split("restart=")[1].split()[0]) for line in starts]
        assert restarts == list(range(len(starts))), out        # SLURM_RESTART_COUNT rises
        restarted += len(starts) > 1
        parts = {line.split("partition=")[1] for line in starts}
        moved += len(parts) > 1
        # resumed from the checkpoint: each start begins where the last one stopped
        begun = [int(line.split("step=")[1].split()[0]) for line in starts]
        assert begun == sorted(begun) and begun[0] == 0
        # the ledger agrees with what Slurm ran, to within a tick per run segment
        ran: dict[str, float] = {}
        for partition, seconds in segments(tmp_path, job):
            ran[partition] = ran.get(partition, 0.0) + seconds
        n = len(segments(tmp_path, job))
        for partition, seconds in ran.items():
            recorded = ledger.get(job, {}).get(partition, 0.0)
            assert abs(recorded - seconds) <= n * (TICK + LAUNCH), (job, partition, recorded, seconds)
    assert restarted >= 2, "no job was preempted and resumed"
    assert moved >= 1, "no job moved between GPU types"
    done = {r["id"]: r for r in store.jobs(states=("completed",))}
    assert set(jobs) <= set(done)
    # the daemon read the jobs' progress reports
    assert all(done[job]["steps_done"] and done[job]["steps_done"] > 0 for job in jobs)
    # each end is one event (it was written twice: by the backend and by the store)
    ended = [e["job"] for e in store.events(jobs, kinds=("completed", "failed"))]
    assert sorted(ended) == sorted(jobs), ended


def test_dry_run_decides_but_changes_nothing(clean, tmp_path):
    cluster = clean
    job, code, log = dry_run(cluster, tmp_path)
    assert code == 0, log
    assert "DRY RUN" in log and "would start" in log
    state = cluster.run(["squeue", "-h", "-j", job, "-o", "%T %r"]).stdout.split()
    assert state[0] == "PENDING" and "JobHeld" in state[1]       # never released
    store = SqliteStore(tmp_path / "gavel.db", readonly=True)
    kinds = {r[0] for r in store.db.execute("select kind from events where job = ?", [job])}
    assert "dry_run" in kinds and "action" not in kinds


def wait_all_done(cluster, jobs, daemon, timeout=420):
    deadline = time.time() + timeout
    while time.time() < deadline:
        left = {j: s for j, s in queue(cluster).items() if j in jobs and s != "COMPLETED"}
        if not left:
            return
        assert daemon.poll() is None, daemon.communicate()[0][-3000:]
        time.sleep(3)
    pytest.fail(f"jobs still queued after {timeout} s: {left}")


def test_a_daemon_killed_mid_round_loses_nothing(clean, tmp_path):
    """kill -9, start again: every job finishes, and the ledger still matches what ran."""
    cluster = clean
    config = write_config(tmp_path, cluster)
    jobs = {submit(cluster, tmp_path, MODELS[i % 4], 2, 25 + (i % 2) * 10): 25 + (i % 2) * 10
            for i in range(14)}
    first = start_daemon(config)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and "RUNNING" not in queue(cluster).values():
            time.sleep(1)
        time.sleep(8)                          # in the middle of a round
    finally:
        first.kill()                           # SIGKILL: no clean-up at all
        first.communicate()
    time.sleep(3)
    second = start_daemon(config)
    try:
        wait_all_done(cluster, jobs, second)
        time.sleep(2 * TICK + 1)               # one more observation of the last departures
    finally:
        code, log = stop_daemon(second)
    assert code == 0, log[-3000:]
    store = SqliteStore(tmp_path / "gavel.db", readonly=True)
    ledger = store.job_time()
    for job, steps in jobs.items():
        assert f"done at {steps}" in (tmp_path / f"out-{job}.txt").read_text()
        segs = segments(tmp_path, job)
        for partition in {p for p, _ in segs}:
            ran = sum(s for p, s in segs if p == partition)
            recorded = ledger.get(job, {}).get(partition, 0.0)
            # per segment a tick, plus the tick before the kill
            assert abs(recorded - ran) <= len(segs) * (TICK + LAUNCH) + TICK, (job, partition, recorded, ran)
    assert set(jobs) <= {r["id"] for r in store.jobs(states=("completed",))}


def test_gpus_of_other_jobs_are_left_alone_and_sighup_reloads(clean, tmp_path):
    cluster = clean
    config = write_config(tmp_path, cluster, round_seconds=6, tick_seconds=1)
    # a plain (non-gavel) job takes all 4 GPUs of k80-0 for a while
    plain = cluster.run(["sbatch", "--parsable", "-p", "k80", "-w", "k80-0", "--gres=gpu:4",
                         "-o", "/dev/null", "--wrap", "sleep 40"]).stdout.strip()
    jobs = [submit(cluster, tmp_path, "convnet", 4, 30) for _ in range(6)]   # 24 GPUs asked of 20
    daemon = start_daemon(config)
    try:
        deadline = time.time() + 30
        while time.time() < deadline and queue(cluster).get(plain) != "RUNNING":
            time.sleep(1)
        time.sleep(15)
        nodes = cluster.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i %N"]).stdout.split("\n")
        on_k80_0 = [line.split()[0] for line in nodes if line.strip().endswith("k80-0")]
        assert on_k80_0 == [plain], nodes
        # SIGHUP: a new round length is read from the file
        config.write_text(config.read_text().replace("round_seconds = 6", "round_seconds = 8"))
        daemon.send_signal(signal.SIGHUP)
        time.sleep(10)
    finally:
        code, log = stop_daemon(daemon)
    assert code == 0, log[-3000:]
    assert "reloaded" in log and "rounds of 8 s" in log


def test_a_pytorch_template_job_is_moved_by_the_daemon_and_finishes_its_steps(clean, tmp_path):
    """Real training (job_templates/resnet18) among bash jobs that keep the cluster full:
    the daemon preempts it, it checkpoints, moves to another GPU type, resumes, and
    ends with exactly its steps; gqueue shows its progress meanwhile."""
    pytest.importorskip("torch")
    cluster = clean
    config = write_config(tmp_path, cluster, round_seconds=10, tick_seconds=1)
    env = dict(cluster.env, GAVEL_PROGRESS_DIR=str(tmp_path / "progress"))
    steps = 240       # several 10-s rounds even on a fast machine: it must be preempted at least once
    out = subprocess.run([sys.executable, "-m", "slurm_gavel", "submit", "resnet18", "--steps", str(steps),
                          "--", "-o", str(tmp_path / "template-%j.out"),
                          f"--export=ALL,GAVEL_PROGRESS_DIR={tmp_path / 'progress'}"],
                         capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    template = out.stdout.strip().split()[-1]
    fillers = {submit(cluster, tmp_path, MODELS[i % 4], 2, 40): 40 for i in range(12)}  # 25 GPUs asked of 24
    daemon = start_daemon(config)
    progress_seen = False
    try:
        deadline = time.time() + 420
        while time.time() < deadline:
            if queue(cluster).get(template) in (None, "COMPLETED"):
                break
            shown = subprocess.run([sys.executable, "-m", "slurm_gavel", "queue", "--db",
                                    str(tmp_path / "gavel.db"), "-j", template, "-o", "jobid,progress",
                                    "--json"], capture_output=True, text=True)
            if shown.returncode == 0:
                rows = json.loads(shown.stdout)["jobs"]
                progress_seen |= bool(rows and rows[0]["steps_done"])
            assert daemon.poll() is None, daemon.communicate()[0][-3000:]
            time.sleep(2)
        else:
            pytest.fail("the template job did not finish in 420 s")
    finally:
        code, log = stop_daemon(daemon)
    assert code == 0, log[-3000:]
    text = (tmp_path / f"template-{template}.out").read_text()
    starts = [line for line in text.splitlines() if line.startswith("gavel template resnet18: step")]
    assert f"done, {steps} steps" in text, text[-2000:]
    assert len(starts) >= 2, text[-2000:]                       # it was preempted and resumed
    partitions = {line.split("partition ")[1].rstrip(")") for line in starts}
    resumed_at = [int(line.split("step ")[1].split("/")[0]) for line in starts]
    # Each run resumes at the step the run before it saved.  A signal that comes while
    # a run still imports torch saves step 0 again (catch_signal_early), so a resume at
    # 0 is right then; what must not happen is a resume behind its checkpoint.
    saved = [int(line.split("checkpoint of step ")[1].split()[0]) for line in text.splitlines()
             if "checkpoint of step " in line]
    assert resumed_at[0] == 0 and resumed_at[1:] == saved[:len(resumed_at) - 1], (starts, saved)
    assert max(resumed_at) > 0, starts                           # from a checkpoint mid-training
    assert len(partitions) >= 2, starts                          # on another GPU type
    assert progress_seen, "gqueue never showed the job's progress"


# A job whose speed depends on the GPU type it runs on, as real training's does: a
# step takes 0.125 s on v100, 0.3125 s on p100 and 1.25 s on k80 (8, 3.2 and 0.8
# steps/s: the shape of the toy table's convnet, 9.6/4/1).  It reports the rate it
# measured itself, as the iterator does.
SPEED_JOB = r"""#!/bin/bash
#SBATCH --requeue
#SBATCH --open-mode=append
case "$SLURM_JOB_PARTITION" in v100) dt=0.125;; p100) dt=0.3125;; *) dt=1.25;; esac
stop=0
trap 'stop=1' USR2
state="$JOBDIR/$SLURM_JOB_ID.step"
step=$(cat "$state" 2>/dev/null || echo 0)
begin=$(date +%s.%N)
made=0
echo "start restart=${SLURM_RESTART_COUNT:-0} step=$step partition=$SLURM_JOB_PARTITION"
while [ "$step" -lt "$TOTAL" ]; do
  sleep $dt
  step=$((step + 1)); made=$((made + 1))
  echo "$step" > "$state.tmp" && mv "$state.tmp" "$state"
  now=$(date +%s.%N)
  rate=$(awk -v n=$made -v b=$begin -v e=$now 'BEGIN { printf "%.4f", n / (e - b) }')
  echo "{\"job\": \"$SLURM_JOB_ID\", \"event\": \"progress\", \"step\": $step, \"steps_per_second\": $rate, \"partition\": \"$SLURM_JOB_PARTITION\", \"time\": $(date +%s)}" >> "$GAVEL_PROGRESS_DIR/$SLURM_JOB_ID.jsonl"
  if [ "$stop" = 1 ]; then
    echo "segment $SLURM_JOB_PARTITION $begin $now" >> "$JOBDIR/$SLURM_JOB_ID.segments"
    exit 85
  fi
done
echo "segment $SLURM_JOB_PARTITION $begin $(date +%s.%N)" >> "$JOBDIR/$SLURM_JOB_ID.segments"
echo "done at $step"
"""


TRUE_SPEED = {"v100": 8.0, "p100": 3.2, "k80": 0.8}


def test_a_job_of_an_unseen_model_is_explored_estimated_and_scheduled(clean, tmp_path):
    """A model the throughput table does not know: the daemon tries it on GPU types
    (exploration), measures it there, fingerprints it against the table for the rest,
    and then keeps it on its fastest type; the policy never fails meanwhile."""
    cluster = clean
    config = write_config(tmp_path, cluster, round_seconds=8, tick_seconds=1, explore_rounds=2)
    (tmp_path / "speed.sh").write_text(SPEED_JOB)
    steps = 700
    job = cluster.run(["sbatch", "--parsable",
                       f"--export=ALL,TOTAL={steps},JOBDIR={tmp_path},GAVEL_PROGRESS_DIR={tmp_path / 'progress'}",
                       "-o", str(tmp_path / "out-%j.txt"), "--comment", f"gavel model=mystery-net steps={steps}",
                       "--gres=gpu:1", str(tmp_path / "speed.sh")]).stdout.strip().split(";")[0]
    daemon = start_daemon(config)
    shown = []                   # `slurm-gavel throughputs show --json` while it runs
    try:
        deadline = time.time() + 300
        while queue(cluster).get(job) not in (None, "COMPLETED"):
            if time.time() > deadline:
                pytest.fail(f"job {job} not done in 300 s")
            out = subprocess.run([sys.executable, "-m", "slurm_gavel", "throughputs", "show", "--db",
                                  str(tmp_path / "gavel.db"), "--json"], capture_output=True, text=True)
            if out.returncode == 0:
                rows = [e for e in json.loads(out.stdout)["estimates"] if e["job"] == job]
                if rows:
                    shown.append({e["worker_type"]: e for e in rows})
            assert daemon.poll() is None, daemon.communicate()[0][-3000:]
            time.sleep(2)
    finally:
        code, log = stop_daemon(daemon)
    assert code == 0, log[-3000:]
    assert "solve failed" not in log and "Traceback" not in log, log[-3000:]
    assert f"done at {steps}" in (tmp_path / f"out-{job}.txt").read_text()

    phases = [next(iter(s.values()))["phase"] for s in shown]
    assert phases[0] == "explore", phases
    # explored: it ran on at least explore_rounds types, and was measured there
    segs = segments(tmp_path, job)
    assert len({p for p, _ in segs}) >= 2, (segs, phases, log[-4000:])
    # then fingerprinted against the table: the known model of the same shape
    fingerprinted = [s for s in shown if next(iter(s.values()))["phase"] == "fingerprint"]
    assert fingerprinted, phases
    last = fingerprinted[-1]
    assert {e["proxy"] for e in last.values()} == {"convnet"}, last
    kinds = {wt: e["kind"] for wt, e in last.items()}
    assert list(kinds.values()).count("measured") >= 2, kinds
    for wt, e in last.items():
        # measured values are what the job made; the one estimated type is within
        # a factor of 2 of the truth (the reference model is only similar)
        limit = 0.25 if e["kind"] == "measured" else 1.0
        assert abs(e["steps_per_second"] - TRUE_SPEED[wt]) <= limit * TRUE_SPEED[wt], (wt, e)
    # and then scheduled where it is fastest: it finished on v100
    assert segs[-1][0] == "v100", segs


def test_a_speeds_hint_places_an_unseen_model_at_once(clean, tmp_path):
    """`speeds=` in the flags: the estimator takes the user's numbers instead of
    exploring, so the first round already puts the job on the type the hint says is
    fastest (p100 here, which no table would guess)."""
    cluster = clean
    config = write_config(tmp_path, cluster, round_seconds=4, tick_seconds=1)
    job = submit(cluster, tmp_path, "hinted-net", 1, 4, flags="speeds=v100:1,p100:8,k80:1")
    daemon = start_daemon(config, "--max-rounds", "2")
    try:
        daemon.wait(timeout=90)
    finally:
        code, log = stop_daemon(daemon)
    assert code == 0, log[-3000:]
    out = (tmp_path / f"out-{job}.txt").read_text()
    assert out.splitlines()[0].endswith("partition=p100"), out
    store = SqliteStore(tmp_path / "gavel.db", readonly=True)
    kinds = dict(store.db.execute("select worker_type, kind from throughput_estimates where job = ?", [job]))
    assert kinds == {"v100": "hint", "p100": "hint", "k80": "hint"}, kinds

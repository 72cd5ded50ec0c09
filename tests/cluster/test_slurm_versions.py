"""What changed in Slurm 26.05 (Debian unstable) and must keep working on 22.05 and 24.11.

Each test drives the driver's own calls (SlurmCLI, release-all, parse_jobs) against the real
session cluster: a reshaped `--ntasks-per-gpu` job runs a task per GPU, an `--exclusive` job
reads as exclusive, partition changes of pending jobs go through on a cluster without
accounting, and the cheap job-state poll agrees with `squeue --json`.
"""
from __future__ import annotations

import pytest

from slurm_gavel.slurm.commands import SlurmCLI
from slurm_gavel.slurm.records import parse_jobs
from slurm_gavel.slurm.undo import release_all

from tests.support.jobs import Jobs
from tests.support.waiting import wait_for

# Run again on Slurm 24.11 and 26.05 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24


@pytest.fixture
def jobs(clean):
    j = Jobs(clean)
    yield j
    j.cancel_all()


def _record(cli: SlurmCLI, job: str):
    return next(j for j in parse_jobs(cli.squeue()) if j.job_id == job)


@pytest.mark.parametrize("partition,nodes,per", [("k80", ["k80-0", "k80-1"], 2), ("v100", ["v100-1"], 4)])
def test_a_reshaped_task_per_gpu_job_runs_a_task_per_gpu(jobs, tmp_path, partition, nodes, per):
    """--gpus=4 --ntasks-per-gpu=1 reshaped onto k nodes x 4/k GPUs runs 4 tasks.  26.05 keeps
    the old task count after a NumNodes change (one task per node; or "setting num_tasks to
    1" and BadConstraints forever) unless NumTasks is set beside TasksPerNode."""
    out = tmp_path / "tasks.out"
    r = jobs.sbatch("-H", "--gpus=4", "--ntasks-per-gpu=1", f"--output={out}",
                    script="echo ntasks=$SLURM_NTASKS nodes=$SLURM_JOB_NUM_NODES; "
                           "srun bash -c 'echo rank $SLURM_PROCID'")
    assert r.returncode == 0, r.stderr
    job = jobs.ids[-1]
    cli = SlurmCLI(env=jobs.cluster.env)
    cli.reshape(job, partition, nodes, per, tasks_per_node=per)
    cli.release([job])

    def ended():
        rec = _record(cli, job)
        assert "BadConstraints" not in rec.reason, f"job {job} can never run: {rec.reason}"
        return rec.primary_state in ("COMPLETED", "FAILED", "CANCELLED") and rec
    rec = wait_for(ended, 90, f"job {job} to end")
    text = out.read_text()
    assert rec.primary_state == "COMPLETED", text
    assert f"ntasks=4 nodes={len(nodes)}" in text, text
    assert sorted(line for line in text.splitlines() if line.startswith("rank")) == \
        [f"rank {i}" for i in range(4)], text


def test_an_exclusive_job_reads_as_exclusive(jobs):
    """26.05's squeue --json no longer says --exclusive (`shared` deprecated); the driver must
    still read it, or the daemon plans an exclusive 1-GPU job as 1 GPU and preempts it."""
    ids = {}
    for what, opts in (("exclusive", ["--exclusive"]), ("shared", [])):
        r = jobs.sbatch("-H", "-p", "v100", "--gres=gpu:1", *opts)
        assert r.returncode == 0, r.stderr
        ids[what] = jobs.ids[-1]
    cli = SlurmCLI(env=jobs.cluster.env)
    records = {j.job_id: j for j in parse_jobs(cli.squeue())}
    assert records[ids["exclusive"]].exclusive is True
    assert records[ids["shared"]].exclusive is False


def test_partition_changes_of_pending_jobs_go_through(jobs):
    """Without accounting 24.11 refuses about one partition change in two at random, 26.05
    three in four: every change the driver makes (the backend's update, release-all's
    --partitions) still goes through."""
    cli = SlurmCLI(env=jobs.cluster.env)
    for _ in range(8):
        r = jobs.sbatch("-H", "-p", "v100", "--gres=gpu:1")
        assert r.returncode == 0, r.stderr
    held = list(jobs.ids)
    for partition in ("p100", "k80", "v100", "p100"):
        for job in held:
            cli.update([job], Partition=partition, NodeList=f"{partition}-0")
        assert {j.job_id: j.partition for j in parse_jobs(cli.squeue()) if j.job_id in held} == \
            {job: partition for job in held}
    # release-all widens each held job's partition too (plain held jobs are not gavel jobs:
    # its own refusals are what test_undo checks; here every call goes through update)
    for job in held:
        cli.update([job], Partition="v100,p100")
    assert all(j.partition == "v100,p100" for j in parse_jobs(cli.squeue()) if j.job_id in held)


def test_release_all_moves_every_held_gavel_job(jobs):
    cli = SlurmCLI(env=jobs.cluster.env)
    for _ in range(6):
        r = jobs.sbatch("-p", "v100", "--gres=gpu:1", "--comment=gavel model=m")
        assert r.returncode == 0, r.stderr
    held = list(jobs.ids)
    wait_for(lambda: all("JobHeld" in _record(cli, j).reason for j in held), 90, "the plugin's holds")
    rows = [r for r in release_all(cli, partitions="p100,k80") if r["job"] in held]
    assert sorted(r["job"] for r in rows) == sorted(held)
    assert [r["error"] for r in rows] == [None] * len(held), rows
    # released: a job Slurm started since reads as the one partition it runs in
    assert all(set(_record(cli, j).partition.split(",")) <= {"p100", "k80"} for j in held)


def test_job_states_agree_with_squeue_json(jobs, tmp_path):
    """The cheap poll between rounds (`squeue --only-job-state` on 23.11+) sees what
    `squeue --json` sees, named as parse_jobs names them: every job and its state, an
    array's pending tasks one by one, a heterogeneous job's components by their own ids."""
    r = jobs.sbatch("-H", "--array=0-2", "-p", "v100", "--gres=gpu:1")
    assert r.returncode == 0, r.stderr
    array = jobs.ids[-1]
    script = tmp_path / "het.sh"
    script.write_text("#!/bin/bash\nsleep 300\n")
    r = jobs.run(["sbatch", "--parsable", "-H", "--output=/dev/null", "-p", "v100", "--gres=gpu:1",
                  ":", "-p", "k80", "--gres=gpu:1", str(script)], check=False)
    assert r.returncode == 0, r.stderr
    jobs.ids.append(r.stdout.strip().split(";")[0])
    r = jobs.sbatch("-H", "-p", "v100", "--gres=gpu:1")
    assert r.returncode == 0, r.stderr
    r = jobs.sbatch("-p", "k80", "--gres=gpu:1", script="sleep 0")
    assert r.returncode == 0, r.stderr
    held, done = jobs.ids[-2:]
    jobs.wait(done, ("COMPLETED",))
    cli = SlurmCLI(env=jobs.cluster.env)
    states = cli.job_states()
    full = {j.job_id: j.primary_state for j in parse_jobs(cli.squeue())}
    assert states[held] == "PENDING" and states[done] == "COMPLETED", states
    assert all(states.get(f"{array}_{t}") == "PENDING" for t in range(3)), states
    het = jobs.ids[-3]
    assert states.get(het) == states.get(str(int(het) + 1)) == "PENDING", states
    assert {k: v for k, v in states.items() if k in full} == full
    assert set(full) <= set(states)

"""Fairness between users on the real local cluster, with the daemon's default settings: a
user's 30-task array beside two other users with 3 jobs each.  The cluster is shared between
users first, then among each user's jobs, so the two small users' jobs run from the first
rounds on (per-job LAS, the old default, gave the array 30 of 36 shares and started its
tasks first); gqueue/explain say where a share came from."""
from __future__ import annotations

import re
import shutil
import tempfile
import time
from pathlib import Path

from tests.support.daemon import JOB, start_daemon, stop_daemon, submit, write_config
from tests.support.jobs import Jobs, restore_modes

from slurm_gavel.cli.explain import text
from slurm_gavel.daemon.store import SqliteStore
from slurm_gavel.daemon.views import explain, rows

SMALL_USERS = ("nobody", "daemon")
ALL_STATES = ("active", "completed", "failed", "cancelled", "node_fail", "timeout", "preempted", "lost")


def running_per_user(cluster) -> dict[str, int]:
    out = cluster.run(["squeue", "-h", "-t", "RUNNING", "-o", "%u"]).stdout
    counts: dict[str, int] = {}
    for line in out.split():
        counts[line] = counts.get(line, 0) + 1
    return counts


def gpu_seconds(path: Path) -> dict[str, float]:
    """user -> GPU-seconds its jobs received so far (the daemon's record of what Slurm ran)."""
    store = SqliteStore(path, readonly=True)
    try:
        users = {j["id"]: (j["user"], j["scale_factor"]) for j in store.jobs(ALL_STATES)}
        out: dict[str, float] = {}
        for job, per_type in store.job_time().items():
            if job in users:
                user, gpus = users[job]
                out[user] = out.get(user, 0.0) + sum(per_type.values()) * gpus
        return out
    finally:
        store.close()


def submit_as(jobs, user: str, shared: Path) -> str:
    """A preemptible 2-GPU job of `user` (the daemon's test job: checkpoints on USR2 and is
    requeued), its files in `shared`, which every user may write."""
    r = jobs.run(["sbatch", "--parsable", f"--export=ALL,TOTAL=600,JOBDIR={shared},GAVEL_PROGRESS_DIR={shared}",
                  "-o", f"{shared}/out-%j.txt", "--comment", "gavel model=convnet steps=600",
                  "--gres=gpu:2", str(shared / "job.sh")], user=user)
    job = r.stdout.strip().split(";")[0]
    jobs.ids.append(job)
    return job


def test_a_users_array_does_not_take_the_cluster_from_two_users_with_three_jobs(clean, tmp_path):
    cluster = clean
    # the default policy and entities: nothing about them in the file
    # and the daemon's default churn (a running job keeps its GPUs 2 rounds, moves of its own
    # accord only 5 rounds behind), which the other cluster tests turn off
    config = write_config(tmp_path, cluster, round_seconds=8, tick_seconds=1, hysteresis_rounds=2.0,
                          move_hysteresis_rounds=5.0, restart_seconds=18.0)
    assert "policy" not in config.read_text() and "share_by" not in config.read_text()
    array = submit(cluster, tmp_path, "convnet", 2, 600, extra=["--array=0-29"])
    jobs = Jobs(cluster)
    shared = Path(tempfile.mkdtemp(prefix="gavel-fair-"))
    shared.chmod(0o777)
    (shared / "job.sh").write_text(JOB)
    (shared / "job.sh").chmod(0o755)
    try:
        mine = {user: [submit_as(jobs, user, shared) for _ in range(3)] for user in SMALL_USERS}
    except BaseException:
        jobs.cancel_all()
        cluster.run(["scancel", array], check=False)
        shutil.rmtree(shared, ignore_errors=True)
        raise
    daemon = start_daemon(config)
    samples, before = [], None
    try:
        # 24 GPUs: a quarter each would be 6; each small user has 3 two-GPU jobs (6 GPUs), the
        # array's user the other 12.  Sample what Slurm runs over the first rounds; the GPU
        # time each user got is read half way through (once the first moves are done) and at
        # the end.
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and len(samples) < 36:
            counts = running_per_user(cluster)
            if counts:
                samples.append(counts)
            if len(samples) == 12 and before is None:
                before = gpu_seconds(tmp_path / "gavel.db")
            time.sleep(2)
        after = gpu_seconds(tmp_path / "gavel.db")
        store = SqliteStore(tmp_path / "gavel.db", readonly=True)
        try:
            meta, shares = store.latest_allocation()
            records = {j["id"]: j for j in store.jobs(ALL_STATES)}
            speeds: dict[str, dict[str, float]] = {}
            for r in store.throughput_estimates():
                speeds.setdefault(r["job"], {})[r["worker_type"]] = r["steps_per_second"]
            shown = text(explain(store, mine["nobody"][0]))
            data, _ = rows(store)
        finally:
            store.close()
    finally:
        code, log = stop_daemon(daemon)
        jobs.cancel_all()
        cluster.run(["scancel", array], check=False)
        restore_modes()
        shutil.rmtree(shared, ignore_errors=True)
    assert code == 0, log[-3000:]
    assert meta["policy"] == "hierarchical", log[-3000:]
    gpus, fair = {}, {}
    for job, share in shares.items():
        user, size = records[job]["user"], records[job]["scale_factor"]
        gpus[user] = gpus.get(user, 0.0) + sum(share.values()) * size
        # the job's throughput under X over its throughput on an equal time share of each type
        # (the cluster has 8 GPUs of each), in GPUs: what the LP equalizes between users
        speed = speeds[job]
        mean = sum(speed.values()) / len(speed)
        fair[user] = fair.get(user, 0.0) + size * sum(x * speed[t] / mean for t, x in share.items())
    # the LP: users share first.  Equal normalized throughput, not equal GPUs: the small users'
    # jobs get more of the fast type, so fewer GPUs (which of the equally fair splits the LP picks
    # moves with the speeds the jobs report: 4.3-6 GPUs each seen).  Per-job LAS would give each
    # small user 6 of 36 shares: 2 GPUs, about 4 of the 24 GPU-equivalents
    assert set(gpus) == {"root", *SMALL_USERS}, (gpus, samples, log[-4000:])
    assert all(fair[u] > 6.5 for u in SMALL_USERS), (fair, gpus)
    assert max(fair.values()) < 1.05 * min(fair.values()), (fair, gpus)
    assert all(gpus[u] > 3.5 for u in SMALL_USERS) and gpus["root"] < 17, gpus
    # the rounds: over the second half of the run each small user had about its quarter of
    # the GPU time (moves between types cost some); per-job LAS gives it 3 of 36 equal shares
    got = {u: after.get(u, 0.0) - (before or {}).get(u, 0.0) for u in after}
    total = sum(got.values())
    assert total > 0 and all(got.get(u, 0.0) / total > 0.18 for u in SMALL_USERS), \
        (got, "\n".join(map(str, samples)))
    # where the share came from
    assert re.search(r"share: user nobody's share \S+ \([\d.]+ of 24 GPUs, 3 users sharing first\), "
                     r"split over 3 jobs", shown), shown
    levels = {r["jobid"]: r["level"] for r in data}
    assert re.fullmatch(r"user:daemon=\S+,3jobs", levels[mine["daemon"][0]]), levels

"""What Slurm's own state does to the daemon: a partition set DOWN, slurmctld gone, and a
switch by SIGHUP to finish_time_fairness with jobs that have no steps=.

Real local clusters: the session's (a partition DOWN and UP again, jobs of root's only),
and for slurmctld stopped a private one-node cluster, since stopping the session's
slurmctld would hurt the other tests.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_gavel.slurm.commands import SlurmCLI, SlurmUnreachable
from tests.support.daemon import LoggedDaemon, explain, gqueue, submit, write_config
from tests.support.metrics import free_port, pick, scrape
from tests.support.slurm import require_slurm, running_cluster


def jobs_of(cluster, ids) -> dict[str, tuple[str, str, str]]:
    """job -> (state, partition, reason) as squeue says."""
    out = cluster.run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i %T %P %r"]).stdout
    return {p[0]: (p[1], p[2], p[3]) for p in (line.split() for line in out.splitlines()) if len(p) == 4}


def gqueue_reason(tmp_path, job) -> str:
    return (gqueue(tmp_path).get(job) or {}).get("reason") or ""


# -- a partition DOWN ------------------------------------------------------------------------
def test_a_partition_set_down_contributes_no_gpus(clean, tmp_path):
    """v100 (the fastest type of the toy table) DOWN: every job runs on the other types,
    none is released into v100 to fail with PartitionDown; its GPUs are `down` in the
    metrics, and a job that accepts v100 only waits saying why; UP again, it is used again."""
    cluster = clean
    port = free_port()
    config = write_config(tmp_path, cluster, round_seconds=4, tick_seconds=1, metrics_port=port)
    cluster.run(["scontrol", "update", "partitionname=v100", "state=down"])
    daemon = LoggedDaemon(config, tmp_path / "daemon.log", timeout=90)
    try:
        daemon.wait_for("partition v100 is DOWN in Slurm")
        v100_only = submit(cluster, tmp_path, "convnet", 1, 300, flags="types=v100")
        ids = [submit(cluster, tmp_path, model, 4, 300) for model in ("convnet", "translation", "convnet")]
        deadline = time.time() + 60
        while time.time() < deadline and gqueue_reason(tmp_path, v100_only) != "partition v100 is DOWN":
            time.sleep(1)
        assert gqueue_reason(tmp_path, v100_only) == "partition v100 is DOWN", daemon.log()[-3000:]
        assert "partition v100 is DOWN" in explain(tmp_path, v100_only)
        samples = scrape(port)
        assert pick(samples, "slurm_gavel_gpus", partition="v100", state="down") == 8, samples
        assert pick(samples, "slurm_gavel_gpus", partition="v100", state="idle") == 0, samples
        deadline = time.time() + 120
        while time.time() < deadline:
            seen = jobs_of(cluster, ids)
            # (a held job waits in the partition it was submitted to: v100, the default)
            assert not any(r == "PartitionDown" or (s == "RUNNING" and p == "v100")
                           for s, p, r in seen.values()), seen
            if len(seen) == 3 and all(s == "RUNNING" for s, _, _ in seen.values()):
                break
            time.sleep(1)
        else:
            pytest.fail(f"not every job runs on the types that are UP: {jobs_of(cluster, ids)}\n"
                        f"{daemon.log()[-3000:]}")
        assert "PartitionDown" not in daemon.log()
        cluster.run(["scontrol", "update", "partitionname=v100", "state=up"])
        daemon.wait_for("partition v100 is UP again")
        # 4 more jobs of 4 GPUs: 28 GPUs asked of 24, so v100 is needed again
        more = [submit(cluster, tmp_path, "convnet", 4, 300) for _ in range(4)]
        deadline = time.time() + 120
        while time.time() < deadline:
            if any(s == "RUNNING" and p == "v100" for s, p, _ in jobs_of(cluster, ids + more).values()):
                break
            time.sleep(1)
        else:
            pytest.fail(f"nothing runs on v100 once it is UP: {jobs_of(cluster, ids + more)}")
        assert pick(scrape(port), "slurm_gavel_gpus", partition="v100", state="down") == 0
    finally:
        cluster.run(["scontrol", "update", "partitionname=v100", "state=up"], check=False)
        code = daemon.stop()
    assert code == 0, daemon.log()[-3000:]
    assert "Traceback" not in daemon.log()


# -- a policy switch that cannot solve ------------------------------------------------------
def test_a_switch_to_finish_time_fairness_with_jobs_without_steps_keeps_solving(clean, tmp_path):
    """finish_time_fairness gives a job without steps= (total work unknown) the share max-min
    fairness would (docs/policies.md): a switch to it is taken, with such a job in the queue
    and with one arriving after it, every solve succeeds, and the policy says it once a job."""
    cluster = clean
    config = write_config(tmp_path, cluster, round_seconds=4, tick_seconds=1, policy="max_min_fairness")
    daemon = LoggedDaemon(config, tmp_path / "daemon.log", timeout=90)

    def no_steps(model):
        # no steps=: finish_time_fairness cannot know when it would finish
        return cluster.run(["sbatch", "--parsable", "--gres=gpu:1", "-o", str(tmp_path / "out-%j.txt"),
                            f"--export=ALL,TOTAL=300,JOBDIR={tmp_path},GAVEL_PROGRESS_DIR={tmp_path / 'progress'}",
                            "--comment", f"gavel model={model}", str(tmp_path / "job.sh")]
                           ).stdout.strip().split(";")[0]
    try:
        daemon.wait_for(" kept, ")
        with_steps = submit(cluster, tmp_path, "convnet", 1, 300)
        without = no_steps("translation")
        daemon.wait_for(f"job {without}: started")
        daemon.wait_for(f"job {with_steps}: started")
        config.write_text(config.read_text().replace('"max_min_fairness"', '"finish_time_fairness"'))
        before = len(daemon.log())
        daemon.proc.send_signal(signal.SIGHUP)
        daemon.wait_for("policy finish_time_fairness", after=before)
        said = daemon.wait_for(f"job(s) {without} have no steps=", after=before)
        # a job without steps= arriving now is planned and started too
        later = no_steps("convnet")
        daemon.wait_for(f"job {later}: started", after=said)
        daemon.wait_for(f"job(s) {later} have no steps=", after=said)
        end = len(daemon.log())
        at = daemon.wait_for(" kept, ", after=end)
        daemon.wait_for(" kept, ", after=at + 1)          # two more rounds
        log = daemon.log()[before:]
        assert "policy solve failed" not in log and "keeping policy" not in log, log
        assert log.count("have no steps=") == 2, log          # once a job, not every round
    finally:
        code = daemon.stop()
    assert code == 0, daemon.log()[-3000:]


# -- slurmctld unreachable ------------------------------------------------------------------
@pytest.fixture
def private_cluster(tmp_path_factory):
    """A one-node cluster of its own: its slurmctld may be stopped."""
    require_slurm()
    with running_cluster(tmp_path_factory.mktemp("private"), {"v100": (1, 4)}) as cluster:
        yield cluster


def test_slurmctld_unreachable_is_said_as_such(private_cluster, tmp_path):
    cluster = private_cluster
    config = write_config(tmp_path, cluster, round_seconds=4, tick_seconds=1, command_timeout_seconds=20)
    daemon = LoggedDaemon(config, tmp_path / "daemon.log", timeout=90)
    try:
        daemon.wait_for(" kept, ")
        pid = cluster.daemons()["slurmctld"]["pid"]
        os.kill(pid, signal.SIGTERM)
        before = len(daemon.log())
        at = daemon.wait_for("slurmctld unreachable", after=before, timeout=120)
        line = daemon.log()[at:].splitlines()[0]
        assert "is slurmctld running?" in line, line
        # the same from the driver's commands, including squeue's exit 0 with an error JSON
        cli = SlurmCLI(env={"SLURM_CONF": str(cluster.slurm_conf)}, timeout=30)
        for command in (cli.squeue, lambda: cli.signal(["1"], "USR2")):
            with pytest.raises(SlurmUnreachable, match="^slurmctld unreachable: `"):
                command()
        errors = [line for line in daemon.log()[before:].splitlines() if " ERROR " in line or "failed" in line]
        assert errors and all("slurmctld unreachable" in e for e in errors), errors
        cluster.restart_slurmctld()
        daemon.wait_for(" kept, ", after=len(daemon.log()), timeout=180)
    finally:
        code = daemon.stop()
    assert code == 0, daemon.log()[-3000:]


# -- the database's -wal deleted, an older copy restored ------------------------------------------
def rounds_in(db: Path) -> list[int]:
    from slurm_gavel.daemon.store import SqliteStore
    store = SqliteStore(db, readonly=True)
    try:
        return [n for (n,) in store.db.execute("select number from rounds order by number")]
    finally:
        store.close()


def test_a_deleted_wal_loses_nothing_and_an_older_copy_is_never_resumed(clean, tmp_path):
    """The -wal deleted under the daemon: written back within a tick, gqueue reads on, and
    a kill -9 after it loses no round.  An older copy put in place of the database: the
    daemon refuses it (exit 4, one line) and, told to accept the loss, starts afresh from
    Slurm's jobs without preempting the job that runs."""
    from slurm_gavel.cli.backup import backup
    cluster = clean
    db = tmp_path / "gavel.db"
    config = write_config(tmp_path, cluster, round_seconds=3, tick_seconds=1)
    gqueue = [sys.executable, "-m", "slurm_gavel", "queue", "--db", str(db)]
    daemon = LoggedDaemon(config, tmp_path / "daemon.log", timeout=90)
    try:
        daemon.wait_for(" kept, ")
        job = submit(cluster, tmp_path, "convnet", 1, 600)
        daemon.wait_for(f"job {job}: started")
        backup(db, tmp_path / "old.db")                       # the copy restored later
        before = len(daemon.log())
        os.unlink(f"{db}-wal")
        daemon.wait_for("gavel.db-wal was deleted while open", after=before)
        daemon.wait_for(" kept, ", after=len(daemon.log()))
        shown = subprocess.run(gqueue, capture_output=True, text=True)
        assert shown.returncode == 0 and job in shown.stdout, shown.stderr
        daemon.wait_for(" kept, ", after=len(daemon.log()))
        daemon.proc.kill()                                    # kill -9: nothing flushed
        daemon.proc.wait()
        daemon.out.close()
        last = int(Path(f"{db}.round").read_text().split()[0])
        assert rounds_in(db)[-1] == last                      # every committed round is there
    finally:
        if daemon.proc.poll() is None:
            daemon.stop()
    # an older copy in its place: refused, in one line, by the daemon, gqueue and doctor
    os.replace(tmp_path / "old.db", db)
    for side in ("-wal", "-shm"):
        Path(f"{db}{side}").unlink(missing_ok=True)
    refused = subprocess.run([sys.executable, "-m", "slurm_gavel", "daemon", "--config", str(config)],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 4, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "lost state" in lines[0] and f"committed round {last}" in lines[0], lines
    shown = subprocess.run(gqueue, capture_output=True, text=True)
    assert shown.returncode != 0 and "lost state" in shown.stderr and "Traceback" not in shown.stderr
    assert jobs_of(cluster, [job])[job][0] == "RUNNING"
    # accepted: rounds go on after the last one committed, the running job is kept
    accepted = subprocess.Popen([sys.executable, "-m", "slurm_gavel", "daemon", "--config", str(config),
                                 "--accept-lost-rounds"], stdout=open(tmp_path / "accepted.log", "w"),
                                stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 90
        while time.time() < deadline and " kept, " not in (tmp_path / "accepted.log").read_text():
            assert accepted.poll() is None, (tmp_path / "accepted.log").read_text()
            time.sleep(0.5)
        log = (tmp_path / "accepted.log").read_text()
        assert "accepted (--accept-lost-rounds)" in log, log
        assert f"round {last + 1}: " in log, log
        assert f"job {job}: preempted" not in log, log
        assert jobs_of(cluster, [job])[job][0] == "RUNNING"
    finally:
        accepted.send_signal(signal.SIGTERM)
        accepted.wait(timeout=90)
    assert accepted.returncode == 0


def test_an_older_copy_put_in_place_under_a_running_daemon_stops_it(clean, tmp_path):
    """The file replaced by a copy that lacks the last rounds: the daemon sees it before
    the next round, says why in one line and stops (exit 4); the running job is left alone."""
    from slurm_gavel.cli.backup import backup
    cluster = clean
    db = tmp_path / "gavel.db"
    config = write_config(tmp_path, cluster, round_seconds=3, tick_seconds=1)
    daemon = LoggedDaemon(config, tmp_path / "daemon.log", timeout=90)
    try:
        daemon.wait_for(" kept, ")
        job = submit(cluster, tmp_path, "convnet", 1, 600)
        daemon.wait_for(f"job {job}: started")
        backup(db, tmp_path / "old.db")
        for _ in range(2):
            daemon.wait_for(" kept, ", after=len(daemon.log()))
        before = len(daemon.log())
        os.replace(tmp_path / "old.db", db)
        at = daemon.wait_for("lost state", after=before)
        daemon.proc.wait(timeout=60)
        assert daemon.proc.returncode == 4, daemon.log()[-3000:]
        line = daemon.log()[at:].splitlines()[0]
        assert "but the daemon committed round" in line and "the daemon stops" in line, line
        assert f"job {job}: preempted" not in daemon.log()[before:]
        assert "Traceback" not in daemon.log()
        assert jobs_of(cluster, [job])[job][0] == "RUNNING"
    finally:
        daemon.stop()

"""A round's Slurm work on the real local cluster: signals, holds and releases in chunks that
each finish (a failed chunk said, the rest still done), starts as a few concurrent updates,
and a count of the commands and of slurmctld's job-update RPCs (sdiag) that grows with the
round's changes, not with the queue: a round that changes nothing costs none."""
from __future__ import annotations

import re
import time

import pytest

from slurm_gavel.core.clock import WallClock
from slurm_gavel.core.plan import Assignment, RoundPlan
from slurm_gavel.slurm.backend import SlurmBackend
from slurm_gavel.slurm.commands import SlurmCLI, SlurmCommandError
from tests.support.waiting import wait_for

TRAP = "#!/bin/bash\ntrap 'echo got > \"$OUT/sig-$SLURM_JOB_ID\"; exit 0' USR2\nwhile true; do sleep 1; done\n"


@pytest.fixture
def cluster(slurm_cluster):
    slurm_cluster.run(["scancel", "--user", "root"], check=False)
    yield slurm_cluster
    slurm_cluster.run(["scancel", "--user", "root"], check=False)


def sbatch(cluster, tmp_path, *args) -> str:
    env = dict(cluster.env, OUT=str(tmp_path))
    out = cluster.run(["sbatch", "--parsable", "-o", "/dev/null", *args], env=env, cwd=tmp_path).stdout
    return out.strip().split(";")[0]


def states(cli) -> dict[str, str]:
    return {str(j["job_id"]): str(j["job_state"]) for j in cli.squeue()["jobs"]}


def update_rpcs(cluster) -> int:
    """slurmctld's REQUEST_UPDATE_JOB count so far (sdiag)."""
    out = cluster.run(["sdiag"]).stdout
    m = re.search(r"REQUEST_UPDATE_JOB\s+\(\s*\d+\)\s+count:(\d+)", out)
    return int(m.group(1)) if m else 0


def test_signals_go_in_chunks_and_a_refused_chunk_names_only_its_failed_job(cluster, tmp_path):
    (tmp_path / "trap.sh").write_text(TRAP)
    jobs = [sbatch(cluster, tmp_path, "-p", "k80", str(tmp_path / "trap.sh")) for _ in range(5)]
    gone = sbatch(cluster, tmp_path, "-p", "k80", "--wrap", "true")
    cli = SlurmCLI(env=cluster.env, chunk=2)
    wait_for(lambda: all("RUNNING" in states(cli).get(j, "") for j in jobs)
             and "COMPLETED" in states(cli).get(gone, ""), what="jobs running, one ended")
    ids = jobs[:2] + [gone] + jobs[2:]          # the ended job in the second chunk
    before = cli.commands["scancel"]
    with pytest.raises(SlurmCommandError) as e:
        cli.signal(ids, "USR2")
    assert cli.commands["scancel"] - before == 3          # 6 ids, 2 a call
    assert e.value.failed == (gone,), e.value             # its chunk's other job was signalled
    for job in jobs:                                       # every chunk was sent, the failed one too
        wait_for(lambda job=job: (tmp_path / f"sig-{job}").exists(), 30, f"job {job} signalled")


def test_a_chunk_that_times_out_is_tried_again_in_halves_and_reported(cluster, tmp_path):
    jobs = [sbatch(cluster, tmp_path, "-p", "p100", "--hold", "--wrap", "sleep 60") for _ in range(4)]
    cli = SlurmCLI(env=cluster.env, chunk=4, timeout=0.001)     # no call can answer in time
    with pytest.raises(SlurmCommandError) as e:
        cli.release(jobs)
    assert e.value.returncode is None and set(e.value.failed) == set(jobs)
    assert cli.commands["scontrol release"] == 3          # the chunk, then its two halves


def test_starts_are_lines_of_a_few_scontrols_and_a_refused_one_is_only_that_job(cluster, tmp_path):
    jobs = [sbatch(cluster, tmp_path, "-p", "p100", "--hold", "--wrap", "sleep 60") for _ in range(7)]
    cli = SlurmCLI(env=cluster.env, workers=2, chunk=3)
    # no partition change: 24.11 and 26.05 without accounting refuse those at random (then the
    # job is done again on its own, tried until it takes: more calls than here)
    updates = [(job, {"NodeList": "p100-0", "StartTime": "now"}) for job in jobs]
    updates[2] = (jobs[2], {"NodeList": "nosuchnode"})
    failures = cli.update_each(updates)
    assert set(failures) == {jobs[2]}, failures
    assert "nosuchnode" in " ".join(failures[jobs[2]].command)       # its own call, its own error
    # 7 updates in 3 scontrol processes reading 3, 3 and 1 lines; the refused one again alone
    assert cli.commands["scontrol"] == 3 and cli.commands["scontrol update"] == 1, cli.commands
    info = {j: cluster.run(["scontrol", "-o", "show", "job", j]).stdout for j in jobs}
    for job in jobs[:2] + jobs[3:]:
        assert "ReqNodeList=p100-0 " in info[job], info[job]
    assert "ReqNodeList=(null) " in info[jobs[2]], info[jobs[2]]


def test_an_update_whose_value_has_a_space_is_its_own_call(cluster, tmp_path):
    jobs = [sbatch(cluster, tmp_path, "-p", "p100", "--hold", "--wrap", "sleep 60") for _ in range(2)]
    cli = SlurmCLI(env=cluster.env)
    comment = "gavel: model=convnet | waits: its turn"
    failures = cli.update_each([(jobs[0], {"AdminComment": comment}), (jobs[1], {"NodeList": "p100-0"})])
    assert failures == {}
    assert cli.commands["scontrol update"] == 1 and cli.commands["scontrol"] == 1, cli.commands
    assert f"AdminComment={comment}" in cluster.run(["scontrol", "-o", "show", "job", jobs[0]]).stdout


def _plan(number, keep=(), start=(), preempt=()):
    return RoundPlan(number, tuple(keep) + tuple(start), tuple(keep), tuple(start), tuple(preempt))


def test_a_round_that_changes_nothing_costs_no_slurm_command_and_changes_cost_per_change(
        cluster, tmp_path):
    cli = SlurmCLI(env=cluster.env)
    backend = SlurmBackend(cli, WallClock(), grace_seconds=30.0)
    running = [sbatch(cluster, tmp_path, "-p", "v100", "--comment", "gavel model=convnet",
                      "--gres=gpu:1", "--wrap", "sleep 300") for _ in range(4)]
    # a queue that waits: it must not cost anything per job when nothing changes for it
    queue = [sbatch(cluster, tmp_path, "-p", "v100", "--comment", "gavel model=convnet",
                    "--gres=gpu:1", "--wrap", "sleep 300") for _ in range(12)]
    backend.observe()
    first = [Assignment((job,), "v100", (("v100-0", 1),)) for job in running]
    backend.execute(_plan(1, start=first), time.time() + 60)
    wait_for(lambda: (backend.observe() and False) or all(
        backend._jobs[j].running for j in running), what="started")

    def acting() -> int:
        return sum(n for c, n in cli.commands.items() if c not in ("squeue", "sinfo", "scontrol show"))

    before, rpcs = acting(), update_rpcs(cluster)
    for number in (2, 3, 4):              # nothing changes: the leases are renewed
        backend.execute(_plan(number, keep=first), time.time() + 60)
        backend.observe()
    assert acting() == before, cli.commands
    assert update_rpcs(cluster) == rpcs

    # the waiting jobs' status (AdminComment): written once, for a budget of jobs a round,
    # then nothing while it does not change
    reasons = {job: "waiting for its round (others have higher priority)" for job in queue}
    backend.show_holds(reasons, limit=8)
    assert update_rpcs(cluster) - rpcs == 8                  # one RPC per job, 8 of 12
    backend.observe()
    backend.show_holds(reasons, limit=8)
    assert update_rpcs(cluster) - rpcs == 12                 # the other 4
    backend.observe()
    before_calls = cli.commands["scontrol update"]
    backend.show_holds(reasons, limit=8)
    assert update_rpcs(cluster) - rpcs == 12 and cli.commands["scontrol update"] == before_calls
    rpcs = update_rpcs(cluster)

    # two of the queue start on v100-1: their updates as lines of one scontrol, their status
    # dropped in one call (the same flags) and one release, whatever the queue's length
    two = [Assignment((job,), "v100", (("v100-1", 1),)) for job in queue[:2]]
    before = dict(cli.commands)
    backend.execute(_plan(5, keep=first, start=two), time.time() + 60)
    assert cli.commands["scontrol update"] - before.get("scontrol update", 0) == 1, cli.commands
    assert cli.commands["scontrol"] - before.get("scontrol", 0) == 1, cli.commands
    assert update_rpcs(cluster) - rpcs == 6      # per start: its update, its comment, its release
    assert cli.commands["scontrol release"] - before.get("scontrol release", 0) == 1, cli.commands

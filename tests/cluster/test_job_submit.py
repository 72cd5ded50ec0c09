"""slurm_conf/job_submit.lua inside a real slurmctld (the session cluster of conftest.py).

What is checked here and not in test_flags.py: that Slurm hands the plugin the
fields we expect (the comment as typed, the GPU request in tres_per_node as
"gres:gpu:TYPE:N" on 22.05), that what the plugin sets sticks (held, untyped GRES,
requeue, AdminComment), that rejected submissions show our message at sbatch,
and that a job's owner cannot release or move a gavel job but can cancel it.
"""
from __future__ import annotations

import pwd
import re
import subprocess
import time

import pytest

from tests.support.slurm import move_job
from tests.support.lua import CASES, HETEROGENEOUS, INTERACTIVE, NO_GPU
from tests.support.jobs import Jobs, USER, restore_modes, _state

# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24

CANONICAL = "gavel:v1 model=resnet50 weight=2 slo=129600 steps=100000"


def _number(value):
    if isinstance(value, dict):                       # 23.02+: {"set": .., "number": ..}
        return value.get("number") if value.get("set", True) else None
    return value


@pytest.fixture
def jobs(slurm_cluster):
    j = Jobs(slurm_cluster)
    yield j
    j.cancel_all()


@pytest.fixture(scope="module")
def user(slurm_cluster):
    """A non-root user (created if missing, deleted afterwards if we created it)."""
    created = False
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                        "/usr/sbin/nologin", USER], check=True, capture_output=True)
        created = True
    try:
        yield USER
    finally:
        restore_modes()
        if created:   # its cancelled jobs may take a few seconds to exit
            deadline = time.monotonic() + 20
            while subprocess.run(["userdel", USER], capture_output=True).returncode != 0:
                if time.monotonic() > deadline:
                    pytest.fail(f"could not remove user {USER}: run `userdel {USER}`")
                time.sleep(0.5)


# -- rejected at sbatch --------------------------------------------------------------
REJECTED = [(c, a, e) for c, a, e in CASES if e is not None and not e.startswith("gavel:v1")]


def _submittable(account):
    return account is None or re.fullmatch(r"[a-z0-9._-]{1,40}", account)


def test_every_case_matches_flags_py(jobs):
    """The shared table of test_flags.py, through the real slurmctld: same verdicts,
    same messages at sbatch, same AdminComment."""
    problems = []
    for comment, account, expected in CASES:
        if not _submittable(account):
            continue
        opts = [f"--comment={comment}", "--gres=gpu:1"]
        if account is not None:
            opts.append(f"--account={account}")
        r = jobs.sbatch(*opts, check=False,
                        script="sleep 300" if expected is not None else "true")
        if expected is None or expected.startswith("gavel:v1"):
            if r.returncode != 0:
                problems.append((comment, "rejected", r.stderr.strip()))
                continue
            job = jobs.info(jobs.ids[-1])
            got = job.get("admin_comment") or None
            if got != expected:
                problems.append((comment, "admin_comment", got, expected))
            held = _number(job.get("priority")) == 0
            if held != (expected is not None):
                problems.append((comment, "held", held))
        else:
            if r.returncode == 0:
                problems.append((comment, "accepted", jobs.info(jobs.ids[-1]).get("admin_comment")))
            elif f"sbatch: error: {expected}\n" not in r.stderr:
                problems.append((comment, "message", r.stderr, expected))
    assert problems == []


@pytest.mark.parametrize("comment,message", [
    ("gavel slo=36", "gavel flags: slo=36: needs a unit (s, m, h or d), e.g. slo=36h"),
    ("gavel model=a%sb", "gavel flags: model=a%sb: may use only letters, digits and . _ + -"),
    ("gavel speeds=v100:1,v100:2",
     "gavel flags: speeds=v100:1,v100:2: GPU type v100 is given twice"),
    ("gavel model=mynet speeds=v100", "gavel flags: speeds=v100: entry v100 is not TYPE:NUMBER, "
                                      "e.g. speeds=v100:4.2,p100:2.1"),
])
def test_bad_flag_is_rejected_with_its_message(jobs, comment, message):
    r = jobs.sbatch(f"--comment={comment}", "--gres=gpu:1", check=False)
    assert r.returncode != 0
    assert f"sbatch: error: {message}\n" in r.stderr


def test_gavel_job_without_gpu_is_rejected(jobs):
    r = jobs.sbatch("--comment=gavel model=resnet50", check=False)
    assert r.returncode != 0 and f"sbatch: error: {NO_GPU}\n" in r.stderr
    r = jobs.sbatch("--comment=gavel", "--gres=gpu:0", check=False)
    assert r.returncode != 0 and NO_GPU in r.stderr


@pytest.mark.parametrize("command", ["srun", "salloc"])
def test_interactive_gavel_job_is_rejected(jobs, command):
    # srun/salloc jobs have no batch script: the daemon could neither signal a
    # checkpoint (scancel --batch) nor requeue them, so they must not be accepted.
    args = [command, "--comment=gavel model=resnet50", "--gres=gpu:1", "-t", "1"]
    r = jobs.run([*args, "true"], check=False)
    assert r.returncode != 0, r.stdout
    assert INTERACTIVE in r.stderr
    # the same request without the gavel comment is an ordinary job and runs
    r = jobs.run([command, "--gres=gpu:1", "-t", "1", "true"], check=False)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("first,second", [
    (["--comment=gavel model=resnet50"], ["--comment=gavel model=resnet50"]),
    (["--comment=gavel model=resnet50"], []),      # only the first component (with the script)
    ([], ["--comment=gavel model=resnet50"]),      # only a later one (no script of its own)
])
def test_heterogeneous_gavel_job_is_rejected_as_heterogeneous(jobs, first, second):
    # `sbatch A : B` with a gavel comment: refused, and the message names the real cause
    r = jobs.sbatch(*first, "--gres=gpu:1", ":", *second, "--gres=gpu:1", check=False)
    assert r.returncode != 0, r.stdout
    assert HETEROGENEOUS in r.stderr, r.stderr
    assert "srun" not in r.stderr
    # without the gavel comment it is an ordinary heterogeneous job, accepted
    r = jobs.sbatch("--gres=gpu:1", ":", "--gres=gpu:1", check=False)
    assert r.returncode == 0, r.stderr


# -- accepted gavel jobs ------------------------------------------------------------
def test_gavel_job_is_held_untyped_requeueable(jobs):
    jobs.sbatch("--comment=gavel model=resnet50 weight=2 slo=36h steps=100000",
                "--gres=gpu:v100:1", "--no-requeue")
    job = jobs.info(jobs.ids[-1])
    assert _state(job) == "PENDING"
    assert job["state_reason"] == "JobHeldUser"
    assert _number(job["priority"]) == 0
    assert job["admin_comment"] == CANONICAL
    assert job["comment"] == "gavel model=resnet50 weight=2 slo=36h steps=100000"
    assert re.fullmatch(r"gres[:/]gpu:1", job["tres_per_node"]), job["tres_per_node"]
    assert job["requeue"] is True                    # even though --no-requeue was given
    time.sleep(3)                                    # a scheduling pass: still held
    assert _state(jobs.info(jobs.ids[-1])) == "PENDING"


def test_gavel_job_gpus_per_job_and_account(jobs):
    jobs.sbatch("--comment=gavel", "--gpus=p100:2", "--account=physics")
    job = jobs.info(jobs.ids[-1])
    assert re.fullmatch(r"gres[:/]gpu:2", job["tres_per_job"]), job["tres_per_job"]
    assert job["admin_comment"] == "gavel:v1 weight=1 entity=physics"
    jobs.sbatch("--comment=gavel", "--gres=gpu:v100:1,gpu:p100:2")     # merged
    job = jobs.info(jobs.ids[-1])
    assert re.fullmatch(r"gres[:/]gpu:3", job["tres_per_node"]), job["tres_per_node"]


def test_speeds_hint_reaches_the_admin_comment_the_daemon_reads(jobs):
    from slurm_gavel.slurm.flags import from_admin_comment
    jobs.sbatch("--comment=gavel model=mynet speeds=v100:4.20,p100:2.1,k80:.9",
                "--gres=gpu:v100:2", "--account=physics")
    job = jobs.info(jobs.ids[-1])
    assert job["admin_comment"] == ("gavel:v1 model=mynet weight=1 entity=physics "
                                    "speeds=k80:0.9,p100:2.1,v100:4.2")
    flags = from_admin_comment(job["admin_comment"])
    assert flags.speeds == (("k80", 0.9), ("p100", 2.1), ("v100", 4.2))


# -- other jobs ------------------------------------------------------------------------
def test_other_jobs_pass_untouched_and_run(jobs):
    jobs.sbatch("--comment=gavelx is not a gavel comment", "--gres=gpu:v100:1", script="true")
    typed = jobs.ids[-1]
    jobs.sbatch("--no-requeue", "--gres=gpu:1", script="true")
    plain = jobs.ids[-1]
    job = jobs.wait(typed, {"COMPLETED"})
    assert re.fullmatch(r"gres[:/]gpu:v100:1", job["tres_per_node"]), job["tres_per_node"]
    assert not job.get("admin_comment")
    job = jobs.wait(plain, {"COMPLETED"})
    assert job["requeue"] is False and not job.get("admin_comment")


# -- who may change a gavel job ---------------------------------------------------------
def test_owner_cannot_release_or_move_but_can_cancel(jobs, user):
    r = jobs.sbatch("--comment=gavel model=resnet50", "--gres=gpu:1", "--partition=v100",
                    user=user)
    job_id = jobs.ids[-1]
    job = jobs.info(job_id)
    assert job["user_name"] == user and _number(job["priority"]) == 0
    for args in (["scontrol", "release", job_id],
                 ["scontrol", "update", f"jobid={job_id}", "partition=p100"],
                 ["scontrol", "update", f"jobid={job_id}", "admincomment=gavel:v1 weight=99"],
                 ["scontrol", "update", f"jobid={job_id}", "timelimit=10"]):
        r = jobs.run(args, user=user, check=False)
        assert r.returncode != 0, (args, r.stdout, r.stderr)
    job = jobs.info(job_id)
    assert _state(job) == "PENDING" and _number(job["priority"]) == 0
    # the partition given at submission is kept: the daemon starts the job there only
    assert job["partition"] == "v100"
    assert job["admin_comment"] == "gavel:v1 model=resnet50 weight=1 partitions=v100"

    # root places it: another partition, then release; it runs there
    move_job(jobs.run, job_id, "p100")
    jobs.run(["scontrol", "release", job_id])
    job = jobs.wait(job_id, {"RUNNING"})
    assert job["partition"] == "p100" and job["nodes"].startswith("p100-")

    # the owner can still cancel (scancel is not a modification), held or running
    jobs.sbatch("--comment=gavel", "--gres=gpu:1", user=user)
    held = jobs.ids[-1]
    for j in (held, job_id):
        jobs.run(["scancel", j], user=user)
        assert _state(jobs.wait(j, {"CANCELLED"})) == "CANCELLED"


def test_owner_can_modify_other_jobs(jobs, user):
    """The guard only concerns gavel jobs."""
    jobs.sbatch("--comment=mine", "--gres=gpu:1", "--hold", user=user)
    job_id = jobs.ids[-1]
    move_job(jobs.run, job_id, "k80", user=user)
    jobs.run(["scontrol", "release", job_id], user=user)
    job = jobs.wait(job_id, {"RUNNING"})
    assert job["partition"] == "k80"


"""Starts of held jobs cost processes that grow with the chunks, not the jobs (issue 25): a
start drops the daemon's hold status from the job's AdminComment in the same update, and a
comment has blanks, so each such start once was a `scontrol` of its own (1,000 starts took
29 s on a loaded 2-core machine).  22.05 keeps a line's quotes in the value (measured here
first: AdminComment="..." arrived with its quotes), so the comments go as one call per
comment for all its jobs, beside the lines; checked on the real local Slurm."""
from __future__ import annotations

import time

import pytest

from slurm_gavel.core.clock import WallClock
from slurm_gavel.core.plan import Assignment, RoundPlan
from slurm_gavel.slurm.backend import SlurmBackend
from slurm_gavel.slurm.commands import SlurmCLI


@pytest.fixture
def cluster(slurm_cluster):
    slurm_cluster.run(["scancel", "--user", "root"], check=False)
    yield slurm_cluster
    slurm_cluster.run(["scancel", "--user", "root"], check=False)


def sbatch(cluster, tmp_path) -> str:
    out = cluster.run(["sbatch", "--parsable", "-o", "/dev/null", "-p", "p100", "--hold",
                       "--wrap", "sleep 60"], env=cluster.env, cwd=tmp_path).stdout
    return out.strip().split(";")[0]


def test_starts_with_a_comment_of_blanks_cost_processes_per_chunk_and_comment(cluster, tmp_path):
    jobs = [sbatch(cluster, tmp_path) for _ in range(8)]
    cli = SlurmCLI(env=cluster.env, workers=2, chunk=4)
    comments = ["gavel:v1 model=convnet weight=1 steps=100", "gavel:v1 model=vgg16 weight=1"]
    updates = [(job, {"NodeList": "p100-0", "StartTime": "now", "AdminComment": comments[i % 2]})
               for i, job in enumerate(jobs)]
    assert cli.update_each(updates) == {}
    # 8 starts: 2 processes of 4 lines, and one call per comment (4 jobs each): not 8 alone
    assert cli.commands["scontrol"] == 2 and cli.commands["scontrol update"] == 2, cli.commands
    for i, job in enumerate(jobs):
        info = cluster.run(["scontrol", "-o", "show", "job", job]).stdout
        assert f"AdminComment={comments[i % 2]} " in info, info
        assert "ReqNodeList=p100-0 " in info, info


def test_a_refused_start_keeps_its_comment_and_fails_alone(cluster, tmp_path):
    jobs = [sbatch(cluster, tmp_path) for _ in range(3)]
    cli = SlurmCLI(env=cluster.env)
    comment = "gavel:v1 model=convnet weight=1"
    updates = [(job, {"NodeList": "p100-0", "AdminComment": comment}) for job in jobs]
    updates[1] = (jobs[1], {"NodeList": "nosuchnode", "AdminComment": comment})
    failures = cli.update_each(updates)
    assert set(failures) == {jobs[1]}, failures
    info = {j: cluster.run(["scontrol", "-o", "show", "job", j]).stdout for j in jobs}
    assert f"AdminComment={comment} " in info[jobs[0]] and f"AdminComment={comment} " in info[jobs[2]]
    assert "AdminComment=(null)" in info[jobs[1]] or comment not in info[jobs[1]], info[jobs[1]]


def test_a_value_with_a_quote_is_still_its_own_call(cluster, tmp_path):
    jobs = [sbatch(cluster, tmp_path) for _ in range(2)]
    cli = SlurmCLI(env=cluster.env)
    odd = 'gavel:v1 model=convnet | waits: "its" turn'
    assert cli.update_each([(jobs[0], {"AdminComment": odd}), (jobs[1], {"NodeList": "p100-0"})]) == {}
    assert cli.commands["scontrol update"] == 1 and cli.commands["scontrol"] == 1, cli.commands
    assert f"AdminComment={odd}" in cluster.run(["scontrol", "-o", "show", "job", jobs[0]]).stdout


def test_a_rounds_starts_cost_as_many_commands_at_2_as_at_6_jobs(cluster, tmp_path):
    """Through the backend: held jobs that show a hold status (their AdminComment), started
    2 then 6 in a round, cost the same commands (lines, one comment call, one release)."""
    cli = SlurmCLI(env=cluster.env)
    backend = SlurmBackend(cli, WallClock(), grace_seconds=30.0)
    jobs = [cluster.run(["sbatch", "--parsable", "-o", "/dev/null", "-p", "v100", "--comment",
                         "gavel model=convnet", "--gres=gpu:1", "--wrap", "sleep 300"],
                        env=cluster.env, cwd=tmp_path).stdout.strip().split(";")[0] for _ in range(8)]
    backend.observe()
    backend.show_holds({job: "waiting for its round" for job in jobs}, limit=50)
    backend.observe()
    assert all("held by slurm-gavel" in backend._jobs[j].admin_comment for j in jobs)
    acting = {}
    for number, batch in ((1, jobs[:2]), (2, jobs[2:])):
        starts = [Assignment((job,), "v100", ((f"v100-{i % 2}", 1),)) for i, job in enumerate(batch)]
        before = dict(cli.commands)
        backend.execute(RoundPlan(number, tuple(starts), (), tuple(starts), ()), time.time() + 60)
        acting[len(batch)] = {c: n - before.get(c, 0) for c, n in cli.commands.items()
                              if c not in ("squeue", "sinfo", "scontrol show") and n != before.get(c, 0)}
        backend.observe()
    assert acting[2] == acting[6], acting
    assert sum(acting[6].values()) <= 3, acting
    for job in jobs:
        info = cluster.run(["scontrol", "-o", "show", "job", job]).stdout
        assert "held by slurm-gavel" not in info, info

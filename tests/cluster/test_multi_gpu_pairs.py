"""Pairs of two-GPU jobs through the backend, on Slurm 23.11+ with MULTIPLE_SHARING_GRES_PJ and
ONE_TASK_PER_SHARING_GRES (docs/space-sharing.md, "Multi-GPU pairs"): a pair row of two
`--gres=gpu:2` gavel jobs runs both on the same two GPUs, half of each (per-task shards, one
task per GPU), next to a one-GPU gavel job, with no third job on them; the pair stops
together; one of them started alone again, by a backend that replaces the first (a daemon
restart, the originals kept in SQLite), gets its two GPUs and its one task back; a pair's
survivor holds back a new pair first fit would split, and is joined on its own GPUs by a new
partner without being stopped (which waits while first fit would put it elsewhere).  Skipped
before 23.11, whose slurmctld does not start with the flags."""
from __future__ import annotations

import json
import time

import pytest

from slurm_gavel.core.clock import WallClock
from slurm_gavel.core.plan import Assignment, RoundPlan
from slurm_gavel.slurm.backend import SlurmBackend
from slurm_gavel.slurm.commands import SlurmCLI
from slurm_gavel.slurm.backend.pairs.multi import StoredRequests
from slurm_gavel.daemon.store import SqliteStore
from tests.support.slurm import (SHARDS_PER_GPU, require_slurm, require_slurm_version,
                                 running_cluster, shard_job_submit_lua)
from tests.support.daemon import queue, submit
from tests.support.sharing import _holders

# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24

FLAGS = "MULTIPLE_SHARING_GRES_PJ,ONE_TASK_PER_SHARING_GRES"
# a preemptible job that says which GPUs and how many tasks it got, once per run
SCRIPT = r"""#!/bin/bash
#SBATCH --requeue
#SBATCH --open-mode=append
stop=0
trap 'stop=1' USR2
echo "$CUDA_VISIBLE_DEVICES $SLURM_JOB_GPUS ${SLURM_NTASKS:-unset}" >> "$JOBDIR/$SLURM_JOB_ID.env"
while [ "$stop" = 0 ]; do sleep 1; done
exit 85
"""


@pytest.fixture(scope="module")
def pair_cluster(tmp_path_factory):
    require_slurm()
    require_slurm_version((23, 11), "multi-GPU pairs need Slurm 23.11+ (MULTIPLE_SHARING_GRES_PJ, "
                          "ONE_TASK_PER_SHARING_GRES)")
    lua = shard_job_submit_lua(tmp_path_factory.mktemp("mpair-lua"))
    with running_cluster(tmp_path_factory.mktemp("mpair"), {"v100": (1, 4)}, shards=SHARDS_PER_GPU,
                         job_submit_lua=lua, select_parameters=FLAGS) as cluster:
        yield cluster


def _env(tmp_path, job) -> list[str]:
    f = tmp_path / f"{job}.env"
    return f.read_text().splitlines() if f.exists() else []


def _runs(c, tmp_path, jobs, runs=1, seconds=60.0) -> dict[str, list[str]]:
    """Wait until every job runs and has written its line `runs` times: job -> its last line."""
    deadline = time.time() + seconds
    while True:
        states = queue(c)
        lines = {j: _env(tmp_path, j) for j in jobs}
        if all(states.get(j) == "RUNNING" and len(lines[j]) >= runs for j in jobs):
            return {j: lines[j][-1].split() for j in jobs}
        assert time.time() < deadline, (states, lines)
        time.sleep(0.5)


def _squeue(c, job) -> dict:
    return next(j for j in json.loads(c.run(["squeue", "--json"]).stdout)["jobs"] if str(j["job_id"]) == job)


def _backend(c, store) -> SlurmBackend:
    backend = SlurmBackend(SlurmCLI(env=c.env), WallClock(), partitions={"v100": "v100"},
                           requests=StoredRequests(store))
    cli = SlurmCLI(env=c.env)
    said = backend.allow_pair_gpus(2, cli.version(), cli.config())
    assert backend.max_pair_gpus == 2, said
    return backend


def test_a_pair_of_two_gpu_jobs_shares_two_gpus_stops_together_and_one_alone_gets_its_request_back(
        pair_cluster, tmp_path):
    c = pair_cluster
    c.run(["scancel", "--user", "root"], check=False)
    (tmp_path / "job.sh").write_text(SCRIPT)
    (tmp_path / "progress").mkdir()
    a, b = (submit(c, tmp_path, "convnet", 2, 10 ** 6) for _ in range(2))
    one = submit(c, tmp_path, "convnet", 1, 10 ** 6)
    store = SqliteStore(tmp_path / "state.db")
    backend = _backend(c, store)
    try:
        node = next(s.name for s in backend.observe().servers if s.worker_type == "v100")
        pair = Assignment((a, b), "v100", ((node, 2),))
        alone = Assignment((one,), "v100", ((node, 1),))
        backend.execute(RoundPlan(0, (pair, alone), (), (pair, alone), ()), time.time() + 600)
        seen = _runs(c, tmp_path, [a, b, one])
        # both on the same two GPUs, a task on each: CUDA_VISIBLE_DEVICES, SLURM_JOB_GPUS, tasks
        assert seen[a] == seen[b] and len(seen[a][0].split(",")) == 2 and seen[a][2] == "2", seen
        assert seen[a][0] == seen[a][1]
        assert seen[one][0] not in seen[a][0].split(","), seen
        holders = _holders(c)
        pair_gpus = [(node, i) for i in seen[a][0].split(",")]
        assert [holders[g] for g in pair_gpus] == [{a, b}, {a, b}], holders
        obs = backend.observe()
        assert pair in obs.running and alone in obs.running, obs.running
        # the pair stops together: a round that preempts one of them signals both
        backend.execute(RoundPlan(1, (alone,), (alone,), (), (a,)), time.time() + 600)
        deadline = time.time() + 60
        while any(queue(c).get(j) == "RUNNING" for j in (a, b)):
            assert time.time() < deadline, queue(c)
            backend.observe()
            time.sleep(0.5)
    finally:
        c.run(["scancel", b], check=False)
    # a daemon restart: a new backend, the same database; `a` alone gets its request back
    backend = _backend(c, store)
    try:
        backend.observe()
        lone = Assignment((a,), "v100", ((node, 2),))
        backend.execute(RoundPlan(2, (lone, alone), (alone,), (lone,), ()), time.time() + 600)
        deadline = time.time() + 180      # a requeued job's restart: slow on a loaded machine
        while not (len(_env(tmp_path, a)) >= 2 and queue(c).get(a) == "RUNNING"):
            assert time.time() < deadline, (queue(c), _env(tmp_path, a))
            backend.observe()
            time.sleep(0.5)
        again = _env(tmp_path, a)[-1].split()
        assert len(again[0].split(",")) == 2 and again[2] == "1", again
        j = _squeue(c, a)
        assert j["tres_per_node"] == "gres/gpu:2" and not j.get("tres_per_task"), j
        assert _holders(c)[(node, again[0].split(",")[0])] == {a}
        assert StoredRequests(store).get(a) is None           # restored: forgotten
    finally:
        c.run(["scancel", "--user", "root"], check=False)
        store.close()


def test_a_survivors_half_holds_back_a_two_gpu_pair_first_fit_would_split(pair_cluster, tmp_path, caplog):
    """With one half of a pair left on GPUs 0,1 (its partner gone), a new pair's first half
    would take 0,1 beside it and the other 2,3 (measured: test_multi_gpu_shards); the backend
    does not release it, and says why once."""
    c = pair_cluster
    c.run(["scancel", "--user", "root"], check=False)
    (tmp_path / "job.sh").write_text(SCRIPT)
    (tmp_path / "progress").mkdir()
    a, b, d, e = (submit(c, tmp_path, "convnet", 2, 10 ** 6) for _ in range(4))
    backend = _backend(c, SqliteStore(tmp_path / "state.db"))
    try:
        node = next(s.name for s in backend.observe().servers if s.worker_type == "v100")
        first = Assignment((a, b), "v100", ((node, 2),))
        backend.execute(RoundPlan(0, (first,), (), (first,), ()), time.time() + 600)
        _runs(c, tmp_path, [a, b])
        c.run(["scancel", b])
        deadline = time.time() + 30
        while b in queue(c):
            assert time.time() < deadline, queue(c)
            time.sleep(0.5)
        backend.observe()
        second = Assignment((d, e), "v100", ((node, 2),))
        with caplog.at_level("WARNING", logger="slurm_gavel"):
            backend.execute(RoundPlan(1, (second,), (), (second,), ()), time.time() + 600)
            for _ in range(4):
                time.sleep(0.5)
                backend.observe()
        assert {queue(c).get(j) for j in (d, e)} == {"PENDING"}, queue(c)
        said = [r.getMessage() for r in caplog.records if "not started (space sharing)" in r.getMessage()]
        assert len(said) == 1 and f"part of its shards in use (job {a})" in said[0], said
    finally:
        c.run(["scancel", "--user", "root"], check=False)


def _alone_again(backend, job, seconds=30.0) -> None:
    """Observe until the backend reads `job` as the only job running, alone (its partner gone)."""
    deadline = time.time() + seconds
    while True:
        obs = backend.observe()
        if [r.jobs for r in obs.running] == [(job,)]:
            return
        assert time.time() < deadline, obs.running
        time.sleep(0.5)


def test_a_two_gpu_survivor_is_joined_by_a_new_partner_on_its_gpus_and_keeps_running(pair_cluster, tmp_path):
    """One half of a pair left alone on GPUs 0,1 (its partner gone); the plan pairs it with a
    new two-GPU job.  The survivor is not preempted (nor restarted), the new job gets the free
    halves of GPUs 0,1 (first fit, a task per GPU, gives it those), both see the same GPUs, no
    third job is on them, and the two are the pair row again."""
    c = pair_cluster
    c.run(["scancel", "--user", "root"], check=False)
    (tmp_path / "job.sh").write_text(SCRIPT)
    (tmp_path / "progress").mkdir()
    a, b, d = (submit(c, tmp_path, "convnet", 2, 10 ** 6) for _ in range(3))
    backend = _backend(c, SqliteStore(tmp_path / "state.db"))
    try:
        node = next(s.name for s in backend.observe().servers if s.worker_type == "v100")
        first = Assignment((a, b), "v100", ((node, 2),))
        backend.execute(RoundPlan(0, (first,), (), (first,), ()), time.time() + 600)
        seen = _runs(c, tmp_path, [a, b])
        assert seen[a][0] == seen[b][0] == "0,1", seen
        c.run(["scancel", b])
        _alone_again(backend, a)
        began = backend._jobs[a].start_time
        row = Assignment((a, d), "v100", ((node, 2),))
        backend.execute(RoundPlan(1, (row,), (), (row,), (a,)), time.time() + 600)
        seen = _runs(c, tmp_path, [a, d])
        assert seen[d] == ["0,1", "0,1", "2"], seen        # CUDA_VISIBLE_DEVICES, SLURM_JOB_GPUS, tasks
        assert len(_env(tmp_path, a)) == 1 and queue(c)[a] == "RUNNING"   # never stopped
        assert _squeue(c, d)["tres_per_task"] == "gres/shard:2"
        holders = _holders(c)
        assert [holders.get((node, i)) for i in "0123"] == [{a, d}, {a, d}, None, None], holders
        obs = backend.observe()
        assert [r.jobs for r in obs.running] == [(a, d)] and obs.running[0].servers == ((node, 2),)
        assert backend._jobs[a].start_time == began and backend._jobs[a].restarts == 0
    finally:
        c.run(["scancel", "--user", "root"], check=False)


def test_a_two_gpu_survivors_new_partner_waits_while_first_fit_would_put_it_elsewhere(
        pair_cluster, tmp_path, caplog):
    """A survivor alone on GPUs 2,3 with GPUs 0,1 free: its new partner, released, would get
    0,1 (first fit), so it waits, said once.  Once a new pair takes GPUs 0,1 (in the next
    round), first fit gives the partner 2,3 and it joins the survivor, in the same call."""
    c = pair_cluster
    c.run(["scancel", "--user", "root"], check=False)
    (tmp_path / "job.sh").write_text(SCRIPT)
    (tmp_path / "progress").mkdir()
    a, b, d, e, f, g, h = (submit(c, tmp_path, "convnet", 2, 10 ** 6) for _ in range(7))
    backend = _backend(c, SqliteStore(tmp_path / "state.db"))
    try:
        node = next(s.name for s in backend.observe().servers if s.worker_type == "v100")
        one, two = (Assignment(p, "v100", ((node, 2),)) for p in ((a, b), (d, e)))
        backend.execute(RoundPlan(0, (one, two), (), (one, two), ()), time.time() + 600)
        seen = _runs(c, tmp_path, [a, b, d, e])
        assert seen[a][0] == seen[b][0] == "0,1" and seen[d][0] == seen[e][0] == "2,3", seen
        c.run(["scancel", a, b, d])
        _alone_again(backend, e)
        row = Assignment((e, f), "v100", ((node, 2),))
        with caplog.at_level("WARNING", logger="slurm_gavel"):
            backend.execute(RoundPlan(1, (row,), (), (row,), (e,)), time.time() + 600)
            for _ in range(4):
                time.sleep(0.5)
                backend.observe()
            assert queue(c)[f] == "PENDING" and queue(c)[e] == "RUNNING", queue(c)
            new = Assignment((g, h), "v100", ((node, 2),))
            backend.execute(RoundPlan(2, (row, new), (), (row, new), (e,)), time.time() + 600)
            seen = _runs(c, tmp_path, [e, f, g, h])
        said = [r.getMessage() for r in caplog.records if "not started (space sharing)" in r.getMessage()]
        assert len(said) == 1 and f"job {f} GPUs 0,1, not GPUs 2,3 beside job {e}" in said[0], said
        assert seen[f] == ["2,3", "2,3", "2"] and seen[g][0] == seen[h][0] == "0,1", seen
        assert len(_env(tmp_path, e)) == 1                 # the survivor never stopped
        holders = _holders(c)
        assert [holders.get((node, i)) for i in "0123"] == [{g, h}, {g, h}, {e, f}, {e, f}], holders
        obs = backend.observe()
        assert sorted(r.jobs for r in obs.running) == sorted([(e, f), (g, h)]), obs.running
    finally:
        c.run(["scancel", "--user", "root"], check=False)

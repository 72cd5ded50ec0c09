"""Where Slurm puts a pair's two halves, on the real shard cluster (docs/space-sharing.md).

Slurm gives a shard job the first GPU of its node, in gres.conf order, with room for its
count (select/cons_tres `_pick_shared_gres_topo`, 22.05 and 24.11 alike).  A pair
released onto a node with no GPU free for both halves waits in Slurm, and each half is
placed on its own as room appears (a job leaving half a GPU, then another): the halves
split.  That was the cause of the split pairs of bench/mixed_workload.py on 24.11
(pairs released while the jobs they replaced were still checkpointing).  The backend
releases a pair only where the first GPU with room for a half has room for both, and no
job is leaving a GPU before it; the pairs of one node go one after another within the
same poll (each once Slurm has placed the previous one), and a pair's survivor blocks
only a pair that first fit would put on its GPU.
"""
from __future__ import annotations

import logging
import time

import pytest

from slurm_gavel.core.clock import WallClock
from slurm_gavel.core.plan import Assignment, RoundPlan
from slurm_gavel.slurm.backend import SlurmBackend
from slurm_gavel.slurm.commands import SlurmCLI

from tests.support.daemon import queue, submit
from tests.support.sharing import gpu_of


# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24


@pytest.fixture
def shard_cluster(slurm_shard_cluster, tmp_path):
    slurm_shard_cluster.run(["scancel", "--user", "root"], check=False)
    (tmp_path / "progress").mkdir()
    yield slurm_shard_cluster
    slurm_shard_cluster.run(["scancel", "--user", "root"], check=False)


def _backend(c) -> tuple[SlurmBackend, str]:
    backend = SlurmBackend(SlurmCLI(env=c.env), WallClock(), partitions={"v100": "v100"})
    obs = backend.observe()
    return backend, next(s.name for s in obs.servers if s.worker_type == "v100")


def _wait(backend, c, jobs, seconds=60.0):
    """Observe every 0.5 s until every job in `jobs` runs on a GPU."""
    deadline = time.time() + seconds
    while not all(gpu_of(c, j) for j in jobs):
        assert time.time() < deadline, queue(c)
        backend.observe()
        time.sleep(0.5)


def _observe_for(backend, seconds):
    end = time.time() + seconds
    while time.time() < end:
        backend.observe()
        time.sleep(0.5)


def test_the_pairs_of_a_round_on_one_node_all_start_in_that_round_each_on_its_own_gpu(shard_cluster, tmp_path):
    c = shard_cluster
    jobs = [submit(c, tmp_path, "convnet", 1, 10 ** 6) for _ in range(8)]
    backend, node = _backend(c)
    rows = tuple(Assignment((jobs[i], jobs[i + 1]), "v100", ((node, 1),)) for i in range(0, 8, 2))
    backend.execute(RoundPlan(0, rows, (), rows, ()), time.time() + 600)
    # no poll in between: the round's own call released all four pairs (Slurm places the
    # last one within its next scheduling pass)
    deadline = time.time() + 10
    while not all(gpu_of(c, j) for j in jobs):
        assert time.time() < deadline, queue(c)
        time.sleep(0.5)
    where = {j: gpu_of(c, j) for j in jobs}
    assert [where[a] == where[b] for a, b in (r.jobs for r in rows)] == [True] * 4, where
    assert len({where[r.jobs[0]] for r in rows}) == 4, where


def test_a_pair_waits_until_one_gpu_has_room_for_both_halves(shard_cluster, tmp_path):
    """The node is full; room appears half a GPU at a time on two GPUs.  Released at once,
    the pair's halves would each take one of them (measured on 22.05 and 24.11 before
    the fix); the backend releases it once a whole GPU is free."""
    c = shard_cluster
    jobs = [submit(c, tmp_path, "convnet", 1, 10 ** 6) for _ in range(8)]
    e, f = (submit(c, tmp_path, "convnet", 1, 10 ** 6) for _ in range(2))
    backend, node = _backend(c)
    rows = tuple(Assignment((jobs[i], jobs[i + 1]), "v100", ((node, 1),)) for i in range(0, 8, 2))
    backend.execute(RoundPlan(0, rows, (), rows, ()), time.time() + 600)
    _wait(backend, c, jobs)
    by_gpu = {}
    for r in rows:
        assert gpu_of(c, r.jobs[0]) == gpu_of(c, r.jobs[1])
        by_gpu[gpu_of(c, r.jobs[0])[1]] = r.jobs
    new = Assignment((e, f), "v100", ((node, 1),))
    backend.execute(RoundPlan(1, (*rows, new), rows, (new,), ()), time.time() + 600)
    _observe_for(backend, 1)
    c.run(["scancel", by_gpu["0"][0]])         # half of GPU 0 free
    _observe_for(backend, 4)
    c.run(["scancel", by_gpu["1"][0]])         # and half of GPU 1
    _observe_for(backend, 4)
    assert queue(c)[e] == "PENDING" and queue(c)[f] == "PENDING", queue(c)
    c.run(["scancel", by_gpu["0"][1]])         # GPU 0 all free
    _wait(backend, c, (e, f), 30)
    assert gpu_of(c, e) == gpu_of(c, f) == (node, "0")


def test_a_survivor_blocks_only_a_pair_that_first_fit_would_put_on_its_gpu(shard_cluster, tmp_path, caplog):
    c = shard_cluster
    a, b, d, e, f, g = (submit(c, tmp_path, "convnet", 1, 10 ** 6) for _ in range(6))
    backend, node = _backend(c)
    first, second = (Assignment(p, "v100", ((node, 1),)) for p in ((a, b), (d, e)))
    backend.execute(RoundPlan(0, (first, second), (), (first, second), ()), time.time() + 600)
    _wait(backend, c, (a, b, d, e))
    assert gpu_of(c, a) == gpu_of(c, b) == (node, "0") and gpu_of(c, d) == gpu_of(c, e) == (node, "1")
    c.run(["scancel", a, b, d])                # GPU 0 free; e runs on alone on half of GPU 1
    deadline = time.time() + 30
    while True:
        obs = backend.observe()
        if {j for r in obs.running for j in r.jobs} == {e}:
            break
        assert time.time() < deadline, obs.running
        time.sleep(0.5)
    third = Assignment((f, g), "v100", ((node, 1),))
    kept = Assignment((e,), "v100", ((node, 1),))
    backend.execute(RoundPlan(1, (kept, third), (kept,), (third,), ()), time.time() + 600)
    _wait(backend, c, (f, g), 30)               # GPU 0 comes first: the pair goes there
    assert gpu_of(c, f) == gpu_of(c, g) == (node, "0")
    assert gpu_of(c, e) == (node, "1") and queue(c)[e] == "RUNNING"


def test_a_survivor_paired_with_a_new_job_keeps_running_and_its_partner_takes_the_free_half(shard_cluster, tmp_path):
    """The plan pairs the survivor of a pair with a new job: the survivor is not preempted
    (and restarted with its partner), the new job gets the free half of its GPU."""
    c = shard_cluster
    a, b, f = (submit(c, tmp_path, "convnet", 1, 10 ** 6) for _ in range(3))
    backend, node = _backend(c)
    first = Assignment((a, b), "v100", ((node, 1),))
    backend.execute(RoundPlan(0, (first,), (), (first,), ()), time.time() + 600)
    _wait(backend, c, (a, b))
    c.run(["scancel", b])
    deadline = time.time() + 30
    while True:
        obs = backend.observe()
        if [r.jobs for r in obs.running] == [(a,)]:
            break
        assert time.time() < deadline, obs.running
        time.sleep(0.5)
    began = backend._jobs[a].start_time
    row = Assignment((a, f), "v100", ((node, 1),))
    backend.execute(RoundPlan(1, (row,), (), (row,), (a,)), time.time() + 600)
    _wait(backend, c, (a, f), 30)
    assert gpu_of(c, f) == gpu_of(c, a)
    obs = backend.observe()
    assert [r.jobs for r in obs.running] == [(a, f)]
    assert backend._jobs[a].start_time == began and backend._jobs[a].restarts == 0   # never stopped
    assert queue(c)[a] == "RUNNING"


def test_a_pair_that_slurm_splits_after_the_poll_is_requeued_at_once_and_starts_again_together(
        shard_cluster, tmp_path, caplog):
    """A pair's job leaves its GPU between the poll and the release (here: cancelled after
    the round's observation): first fit gives a half of the next pair that freed half, the
    other half the GPU the backend chose.  The backend sees it in its read after the
    release, requeues the new pair held at once, and starts it again together later."""
    c = shard_cluster
    a, b, e, f = (submit(c, tmp_path, "convnet", 1, 10 ** 6) for _ in range(4))
    backend, node = _backend(c)
    first = Assignment((a, b), "v100", ((node, 1),))
    backend.execute(RoundPlan(0, (first,), (), (first,), ()), time.time() + 600)
    _wait(backend, c, (a, b))
    assert gpu_of(c, a) == (node, "0")
    backend.observe()                          # the round's observation: GPU 0 full, 1-3 free
    c.run(["scancel", a])                      # a leaves GPU 0 after it
    deadline = time.time() + 20
    while a in queue(c):
        assert time.time() < deadline, queue(c)
        time.sleep(0.3)
    new = Assignment((e, f), "v100", ((node, 1),))
    with caplog.at_level(logging.WARNING, logger="slurm_gavel.slurm"):
        backend.execute(RoundPlan(1, (first, new), (first,), (new,), ()), time.time() + 600)
    said = [r.getMessage() for r in caplog.records if "landed on two GPUs" in r.getMessage()]
    assert said and e in said[0] and f in said[0], [r.getMessage() for r in caplog.records]
    time.sleep(2)
    where = {j: gpu_of(c, j) for j in (e, f)}
    assert not all(where.values()) or where[e] == where[f], where     # not left split
    c.run(["scancel", b])                      # GPU 0 free again
    _wait(backend, c, (e, f), 40)
    assert gpu_of(c, e) == gpu_of(c, f)

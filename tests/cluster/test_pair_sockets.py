"""Pairs on a node whose GPUs are bound to sockets (gres.conf Cores=), docs/space-sharing.md
"Sockets".

Slurm picks a job's cores first, then its GPU among those on the sockets of its cores
(select/cons_tres `_pick_shared_gres`: the job's sockets, then GPUs bound to no socket,
then, without --gres-flags=enforce-binding, the other sockets).  Measured on 22.05.8 and
24.11.5 on a 2-socket DevCluster (GPUs 0,1 on cores 0-3, GPUs 2,3 on cores 4-7): a one-core
job takes its core on the socket with more free cores, so the two halves of a pair released
together on an empty node ran on GPUs 0 and 2.  The first-fit model of slurm.backend.pairs.room cannot
see that (Slurm lists the node's shards as `shard:v100:16(S:0-1)`, not which GPU is on which
socket), so the backend starts no pair on such a node and says why.
"""
from __future__ import annotations

import logging
import time

import pytest

from slurm_gavel.core.clock import WallClock
from slurm_gavel.core.plan import Assignment, RoundPlan
from slurm_gavel.slurm.backend import SlurmBackend
from slurm_gavel.slurm.commands import SlurmCLI
from slurm_gavel.slurm.doctor import check_shard_sockets
from slurm_gavel.slurm.records import parse_nodes

from tests.support.daemon import queue, submit
from tests.support.sharing import gpu_of
from tests.support.slurm import SHARDS_PER_GPU, require_slurm, running_cluster, shard_job_submit_lua


# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24


@pytest.fixture(scope="module")
def socket_cluster(tmp_path_factory):
    require_slurm()
    lua = shard_job_submit_lua(tmp_path_factory.mktemp("sock-lua"))
    with running_cluster(tmp_path_factory.mktemp("sock"), {"v100": (1, 4)}, job_submit_lua=lua,
                         shards=SHARDS_PER_GPU, sockets=2) as cluster:
        yield cluster


@pytest.fixture
def c(socket_cluster, tmp_path):
    socket_cluster.run(["scancel", "--user", "root"], check=False)
    (tmp_path / "progress").mkdir()
    yield socket_cluster
    socket_cluster.run(["scancel", "--user", "root"], check=False)
    deadline = time.monotonic() + 30
    while socket_cluster.run(["squeue", "-h", "-o", "%i"]).stdout.strip():
        assert time.monotonic() < deadline, queue(socket_cluster)
        time.sleep(0.3)


def _wait_running(c, jobs, seconds=30.0):
    deadline = time.time() + seconds
    while not all(gpu_of(c, j) for j in jobs):
        assert time.time() < deadline, queue(c)
        time.sleep(0.5)


def test_the_shard_lines_are_bound_to_sockets_and_slurm_says_so(c):
    gres = (c.directory / "gres.conf").read_text()
    assert "File=" + str(c.directory / "gpus/v100-0/gpu2") + " Cores=4-7" in gres
    data = SlurmCLI(env=c.env).nodes()
    (node,) = [n for n in parse_nodes(data) if n.name == "v100-0"]
    assert (node.gpus, node.shards, node.shard_sockets) == (4, 16, 2), node
    assert "Sockets=2" in c.run(["scontrol", "show", "node", "v100-0"]).stdout
    (said,) = check_shard_sockets(data, space_sharing=True)
    assert said["level"] == "warning" and "node v100-0: GPUs (shards) bound to 2 sockets" in said["finding"]
    assert check_shard_sockets(data, space_sharing=False) == []


def test_a_pair_released_together_on_an_empty_socket_bound_node_lands_on_two_gpus(c, tmp_path):
    """Slurm's part, kept as a guard: if a Slurm version placed both halves on GPU 0 (first
    fit over the node), the refusal below could be lifted there."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nsleep 300\n")
    jobs = [c.run(["sbatch", "--parsable", "-H", "-o", "/dev/null", "--gres=shard:2",
                   str(script)]).stdout.strip() for _ in range(2)]
    c.run(["scontrol", "release", ",".join(jobs)])
    _wait_running(c, jobs)
    assert sorted(gpu_of(c, j)[1] for j in jobs) == ["0", "2"], queue(c)
    cpus = [c.run(["scontrol", "-d", "show", "job", j]).stdout for j in jobs]
    assert any("CPU_IDs=0 " in text for text in cpus) and any("CPU_IDs=4 " in text for text in cpus), cpus


def test_the_backend_starts_no_pair_on_a_socket_bound_node_and_says_why(c, tmp_path, caplog):
    a, b, alone = (submit(c, tmp_path, "convnet", 1, 10 ** 6) for _ in range(3))
    events = []
    backend = SlurmBackend(SlurmCLI(env=c.env), WallClock(), partitions={"v100": "v100"},
                           on_event=lambda kind, job, text: events.append((kind, job, text)))
    obs = backend.observe()
    node = next(s.name for s in obs.servers if s.worker_type == "v100")
    # the policy is offered no pair row: no node of ours can run one
    assert (backend.max_pair_gpus, backend.pair_limit) == (0, 1)
    pair = Assignment((a, b), "v100", ((node, 1),))
    single = Assignment((alone,), "v100", ((node, 1),))
    with caplog.at_level(logging.WARNING, logger="slurm_gavel.slurm"):
        backend.execute(RoundPlan(0, (pair, single), (), (pair, single), ()), time.time() + 600)
        end = time.time() + 6
        while time.time() < end:
            backend.observe()
            time.sleep(0.5)
    # before the fix: released, split over GPUs 0 and 2, requeued held, again (both versions)
    assert not [e for e in events if e[0] == "pair_split_undone"], events
    assert "landed on two GPUs" not in caplog.text, caplog.text[-3000:]
    assert queue(c)[a] == queue(c)[b] == "PENDING", queue(c)
    _wait_running(c, (alone,))                  # a job alone still runs there, on a whole GPU
    said = [r.getMessage() for r in caplog.records if "not started (space sharing)" in r.getMessage()]
    assert len(said) == 1 and "bound to 2 sockets" in said[0], said
    assert [(k, j) for k, j, _ in events if k == "pair_refused"] == [("pair_refused", a), ("pair_refused", b)]
    # and the daemon says so at start
    problems = backend.space_sharing_problems((24, 11))
    assert any("v100-0" in p and "bound to 2 sockets" in p for p in problems), problems

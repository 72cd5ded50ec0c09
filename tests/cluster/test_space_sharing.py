"""Space sharing on real Slurm (issue 13, docs/space-sharing.md): gres/shard on the cluster
of conftest.py's `slurm_shard_cluster` (fake GPUs that are devices, so Slurm sets each job's
CUDA_VISIBLE_DEVICES), job_submit.lua asking a one-GPU gavel job's GPU as shards, and the
daemon running pair rows: both jobs at the same time on the same GPU, no third job there.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from slurm_gavel.core.clock import WallClock
from slurm_gavel.core.plan import Assignment, RoundPlan
from slurm_gavel.slurm.backend import SlurmBackend
from slurm_gavel.slurm.commands import SlurmCLI
from slurm_gavel.daemon.store import SqliteStore, StoreError

from tests.support.daemon import TICK, queue, start_daemon, stop_daemon, submit, write_config
from tests.support.sharing import gpu_of, _holders
from tests.support.slurm import SHARDS_PER_GPU


# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24


# -- the job_submit plugin ----------------------------------------------------------------
def _tres(cluster, job: str) -> dict:
    out = cluster.run(["scontrol", "-o", "show", "job", job]).stdout
    # 22.05 writes gres:gpu:1, 24.11 gres/gpu:1
    return {k: v.replace("gres/", "gres:") for k, _, v in (w.partition("=") for w in out.split())
            if k.startswith("TresPer")}


@pytest.fixture
def shard_cluster(slurm_shard_cluster):
    slurm_shard_cluster.run(["scancel", "--user", "root"], check=False)
    yield slurm_shard_cluster
    slurm_shard_cluster.run(["scancel", "--user", "root"], check=False)


def test_job_submit_asks_a_one_gpu_gavel_job_as_a_whole_gpus_shards(shard_cluster, tmp_path):
    c = shard_cluster
    whole = f"gres:shard:{SHARDS_PER_GPU}"

    def sbatch(*opts, comment="gavel model=x"):
        args = ["sbatch", "--parsable", "-H", "-o", "/dev/null", *opts]
        if comment:
            args += ["--comment", comment]
        return c.run([*args, "--wrap", "sleep 1"], cwd=tmp_path).stdout.strip()

    assert _tres(c, sbatch("--gres=gpu:1")) == {"TresPerNode": whole}
    assert _tres(c, sbatch("--gres=gpu:v100:1")) == {"TresPerNode": whole}
    assert _tres(c, sbatch("--gpus=1")) == {"TresPerNode": whole}
    assert _tres(c, sbatch("--gres=gpu:2")) == {"TresPerNode": "gres:gpu:2"}     # not paired
    assert _tres(c, sbatch("--gpus=2"))["TresPerJob"] == "gres:gpu:2"
    assert _tres(c, sbatch("--gres=gpu:1", comment="")) == {"TresPerNode": "gres:gpu:1"}   # not gavel


def test_a_pending_jobs_gpu_request_turns_into_shards_on_24_11_not_22_05_its_shard_count_on_both(shard_cluster, tmp_path):
    """The fact the mechanism rests on (docs/space-sharing.md): on 22.05 `scontrol update` of
    a pending job cannot turn gpu into shard (24.11 replaces the request), but both change a
    shard count."""
    c = shard_cluster
    gpu = c.run(["sbatch", "--parsable", "-H", "-o", "/dev/null", "--gres=gpu:1", "--wrap", "sleep 1"],
                cwd=tmp_path).stdout.strip()
    switched = c.run(["scontrol", "update", f"jobid={gpu}", "Gres=shard:2"], check=False)
    if c.version[:2] < (23, 11):
        assert switched.returncode != 0 and "Invalid generic resource" in switched.stderr
        assert _tres(c, gpu) == {"TresPerNode": "gres:gpu:1"}
    else:
        assert switched.returncode == 0, switched.stderr
        assert _tres(c, gpu) == {"TresPerNode": "gres:shard:2"}
    shard = c.run(["sbatch", "--parsable", "-H", "-o", "/dev/null", "--gres=shard:4", "--wrap", "sleep 1"],
                  cwd=tmp_path).stdout.strip()
    c.run(["scontrol", "update", f"jobid={shard}", "Gres=shard:2"])
    assert _tres(c, shard) == {"TresPerNode": "gres:shard:2"}


# -- gated, never silently ------------------------------------------------------------------
def test_a_pair_on_a_cluster_without_shards_is_not_started_and_says_why(slurm_cluster, tmp_path, caplog):
    c = slurm_cluster
    c.run(["scancel", "--user", "root"], check=False)
    a, b = (submit(c, tmp_path, "convnet", 1, 5) for _ in range(2))
    backend = SlurmBackend(SlurmCLI(env=c.env), WallClock())
    try:
        obs = backend.observe()
        node = next(s.name for s in obs.servers if s.worker_type == "v100")
        row = Assignment((a, b), "v100", ((node, 1),))
        with caplog.at_level(logging.WARNING, logger="slurm_gavel.slurm"):
            backend.execute(RoundPlan(0, (row,), (), (row,), ()), time.time() + 60)
            backend.execute(RoundPlan(1, (row,), (), (row,), ()), time.time() + 60)
        said = [r.getMessage() for r in caplog.records if "pair" in r.getMessage()]
        assert len(said) == 1 and "has no gres/shard" in said[0]       # once, with the reason
        time.sleep(3)
        assert backend.observe().running == ()
        assert all(s == "PENDING" for j, s in queue(c).items() if j in (a, b))
        assert any("23.11" in p for p in backend.space_sharing_problems((22, 5, 8)))
        assert any("no GPU node has gres/shard" in p for p in backend.space_sharing_problems((24, 11, 7)))
    finally:
        c.run(["scancel", a, b], check=False)


# -- the daemon ---------------------------------------------------------------------------
def _pair_table(path: Path) -> Path:
    """Two models that lose little sharing a GPU: max-min fairness pairs them."""
    table = {wt: {"('convnet', 1)": {"null": 1.0, "('rl-agent', 1)": [0.9, 0.9]},
                  "('rl-agent', 1)": {"null": 1.0}} for wt in ("v100", "k80")}
    path.write_text(json.dumps(table))
    return path


def test_the_daemon_runs_pairs_on_one_gpu_credits_pair_time_and_no_third_job_joins(shard_cluster, tmp_path):
    c = shard_cluster
    # two other users' whole-GPU jobs take two of v100-0's four GPUs: the gavel jobs have two
    others = [c.run(["sbatch", "--parsable", "-o", "/dev/null", "-p", "v100", "--gres=gpu:1",
                     "--wrap", "sleep 600"], cwd=tmp_path).stdout.strip() for _ in range(2)]
    deadline = time.time() + 30
    while sum(queue(c).get(j) == "RUNNING" for j in others) < 2:
        assert time.time() < deadline, queue(c)
        time.sleep(0.5)
    config = write_config(tmp_path, c, space_sharing=True, round_seconds=10,
                          throughputs=str(_pair_table(tmp_path / "pairs.json")))
    with open(config, "a") as f:
        f.write('[partitions]\nv100 = "v100"\n')
    steps = 25
    jobs = [submit(c, tmp_path, model, 1, steps) for model in ("convnet", "rl-agent") * 2]
    daemon = start_daemon(config)
    shared: set[frozenset] = set()
    pair_seconds = 0.0
    left = None
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            states = queue(c)
            # squeue lists pending, running and completing jobs (and some finished ones)
            left = {j: states[j] for j in jobs if states.get(j, "COMPLETED") != "COMPLETED"}
            if not left:
                break
            for where, holders in _holders(c).items():
                ours = holders & set(jobs)
                assert len(holders) <= 2 and (len(holders) == 1 or ours == holders), (where, holders)
                if len(ours) == 2:
                    shared.add(frozenset(ours))
            try:                               # the ledger as the daemon saved it this round
                state = SqliteStore(tmp_path / "gavel.db", readonly=True).load_engine_state()
            except StoreError:                 # not created yet
                state = None
            if state is not None:
                pair_seconds = max(pair_seconds, sum(sum(s) for row, s in state.since_reset.items()
                                                     if len(row) == 2))
            assert daemon.poll() is None, daemon.communicate()[0][-3000:]
            time.sleep(1)
        time.sleep(2 * TICK + 1)               # the last departures observed
    finally:
        code, log = stop_daemon(daemon)
        c.run(["scancel", *others], check=False)
        (tmp_path / "daemon.log").write_text(log)
    assert not left, f"jobs not done after 240 s: {left}; daemon log:\n{log[-4000:]}"
    assert code == 0, log[-3000:]
    assert shared, f"no two gavel jobs ever shared a GPU; daemon log:\n{log[-3000:]}"
    assert pair_seconds > 0, "the ledger never credited a pair row"
    alarms = [line for line in log.splitlines() if "shares GPU" in line or "does not share a GPU" in line]
    assert not alarms, "\n".join(alarms)
    for job in jobs:                           # each finished its steps, exactly
        assert f"done at {steps}" in (tmp_path / f"out-{job}.txt").read_text()
    store = SqliteStore(tmp_path / "gavel.db", readonly=True)
    assert {r["id"] for r in store.jobs(states=("completed",))} >= set(jobs)
    # the jobs' progress reports while paired reached the estimator as pair throughputs
    rows = store.db.execute("select job, partner from job_throughputs where partner != ''").fetchall()
    paired = {j for pair in shared for j in pair}
    assert {job for job, _ in rows} & paired, rows


def test_two_pairs_planned_together_each_get_their_own_gpu_and_a_lone_half_blocks_a_new_pair(
        shard_cluster, tmp_path, caplog):
    """Slurm gives a pair's halves the first GPU with room for half its shards: the backend
    releases one pair per node at a time (two at once could cross), and starts no pair on a
    node where a GPU is half used (a pair's job whose partner left)."""
    c = shard_cluster
    (tmp_path / "progress").mkdir()
    a, b, d, e, f, g = (submit(c, tmp_path, "convnet", 1, 10 ** 6) for _ in range(6))
    backend = SlurmBackend(SlurmCLI(env=c.env), WallClock(), partitions={"v100": "v100"})
    try:
        obs = backend.observe()
        node = next(s.name for s in obs.servers if s.worker_type == "v100")
        first, second = (Assignment(p, "v100", ((node, 1),)) for p in ((a, b), (d, e)))
        backend.execute(RoundPlan(0, (first, second), (), (first, second), ()), time.time() + 600)
        deadline = time.time() + 60
        while not all(gpu_of(c, j) for j in (a, b, d, e)):
            assert time.time() < deadline, queue(c)
            obs = backend.observe()
            time.sleep(0.5)
        assert gpu_of(c, a) == gpu_of(c, b) != gpu_of(c, d) == gpu_of(c, e)
        # a restarted daemon's backend finds the pairs from what Slurm runs
        again = SlurmBackend(SlurmCLI(env=c.env), WallClock(), partitions={"v100": "v100"})
        assert {r.jobs for r in again.observe().running} == {(a, b), (d, e)}
        c.run(["scancel", b])                        # a runs on alone, on half its GPU's shards
        deadline = time.time() + 30
        while b in {x.id for x in obs.jobs} or a not in {j for r in obs.running for j in r.jobs}:
            assert time.time() < deadline, obs
            time.sleep(0.5)
            obs = backend.observe()
        assert [r for r in obs.running if a in r.jobs] == [Assignment((a,), "v100", ((node, 1),))]
        third = Assignment((f, g), "v100", ((node, 1),))
        with caplog.at_level(logging.WARNING, logger="slurm_gavel.slurm"):
            backend.execute(RoundPlan(1, (third,), (), (third,), ()), time.time() + 600)
            for _ in range(4):
                time.sleep(0.5)
                obs = backend.observe()
        said = [r.getMessage() for r in caplog.records if "not started" in r.getMessage()]
        assert len(said) == 1 and "part of its shards" in said[0] and a in said[0], said
        assert queue(c)[f] == "PENDING" and queue(c)[g] == "PENDING"
        assert not [r for r in obs.running if f in r.jobs or g in r.jobs]
    finally:
        c.run(["scancel", a, b, d, e, f, g], check=False)

"""One partition of mixed GPU nodes (typed GRES), and plain jobs racing the daemon's starts.

A real local cluster whose single partition `gpu` holds a v100 node and a k80
node (`Gres=gpu:v100:2`, `Gres=gpu:k80:2`; devcluster `mixed="gpu"`): the daemon
discovers the two types from the nodes' GRES, starts each job on the planned
type's nodes inside the shared partition (NodeList), preempts and moves jobs
between the types, and its ledger, gqueue and metrics say the type by node.

Then a plain (non-gavel) job takes the GPUs the daemon planned for a gavel job
between the plan and the start: a hook on the daemon's own Slurm update (the
real command, run right after the plain job is running) makes the race certain.
The released job is held at the next poll and planned again at once, long before
`start_timeout_seconds` and the end of the round.
"""
from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time

import pytest

from tests.support.slurm import require_slurm, running_cluster
from slurm_gavel.daemon import config as config_mod
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.devcluster import default_job_submit_lua
from slurm_gavel.daemon.store import SqliteStore
from tests.support.daemon import JOB, queue, start_daemon, stop_daemon, write_config
from tests.support.metrics import free_port, pick, scrape

# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24

MIXED_TYPES = {"v100": (1, 2), "k80": (1, 2)}
TYPE_OF = {"v100-0": "v100", "k80-0": "k80"}
# the test_daemon job, its run segments and progress records naming the node (not the
# partition, which is `gpu` for every type here)
NODE_JOB = (JOB.replace('echo "start restart=${SLURM_RESTART_COUNT:-0} step=$step partition=$SLURM_JOB_PARTITION"',
                        'echo "start restart=${SLURM_RESTART_COUNT:-0} step=$step node=$SLURMD_NODENAME"')
            .replace("segment $SLURM_JOB_PARTITION", "segment $SLURMD_NODENAME")
            .replace('\\"partition\\": \\"$SLURM_JOB_PARTITION\\"',
                     '\\"partition\\": \\"$SLURM_JOB_PARTITION\\", \\"node\\": \\"$SLURMD_NODENAME\\"'))
assert NODE_JOB.count("SLURMD_NODENAME") == 4


@pytest.fixture(scope="module")
def mixed_cluster(tmp_path_factory):
    require_slurm()
    with running_cluster(tmp_path_factory.mktemp("mixed"), MIXED_TYPES,
                         job_submit_lua=default_job_submit_lua(), mixed="gpu") as cluster:
        yield cluster


@pytest.fixture
def mixed(mixed_cluster):
    mixed_cluster.run(["scancel", "--user", "root"], check=False)
    yield mixed_cluster
    mixed_cluster.run(["scancel", "--user", "root"], check=False)


def submit(cluster, tmp, model, gpus, steps) -> str:
    script = tmp / "job.sh"
    if not script.exists():
        script.write_text(NODE_JOB)
    out = cluster.run(["sbatch", "--parsable", "-p", "gpu",
                       f"--export=ALL,TOTAL={steps},JOBDIR={tmp},GAVEL_PROGRESS_DIR={tmp / 'progress'}",
                       "-o", str(tmp / "out-%j.txt"), "--comment", f"gavel model={model} steps={steps}",
                       f"--gres=gpu:{gpus}", str(script)]).stdout
    return out.strip().split(";")[0]


def node_segments(tmp, job) -> list[tuple[str, float]]:
    path = tmp / f"{job}.segments"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(n, float(e) - float(b)) for _, n, b, e in (line.split() for line in lines)]


def test_the_cluster_has_one_partition_of_two_gres_types(mixed):
    out = mixed.run(["sinfo", "-h", "-N", "-o", "%N %P %G"]).stdout.split("\n")
    rows = sorted(line.split() for line in out if line.strip())
    assert rows == [["k80-0", "gpu*", "gpu:k80:2"], ["v100-0", "gpu*", "gpu:v100:2"]], rows


def test_jobs_start_on_the_planned_types_nodes_move_between_types_and_finish(mixed, tmp_path):
    cluster = mixed
    config = write_config(tmp_path, cluster, round_seconds=6, tick_seconds=1,
                          metrics_port=(port := free_port()))
    models = ("convnet", "rl-agent", "translation", "language-model")
    jobs = {submit(cluster, tmp_path, models[i % 4], 1, 14 + 2 * (i % 3)): 14 + 2 * (i % 3)
            for i in range(6)}                  # 6 one-GPU jobs on 4 GPUs: they take turns
    daemon = start_daemon(config)
    shown_types, metrics_ok = set(), False
    try:
        deadline = time.time() + 300
        while time.time() < deadline:
            left = {j for j, s in queue(cluster).items() if j in jobs and s != "COMPLETED"}
            if not left:
                break
            assert daemon.poll() is None, daemon.communicate()[0][-3000:]
            if (tmp_path / "gavel.db").exists():
                shown = subprocess.run([sys.executable, "-m", "slurm_gavel", "queue", "--db",
                                        str(tmp_path / "gavel.db"), "--json"], capture_output=True, text=True)
                if shown.returncode == 0 and shown.stdout.strip():
                    running = {r["jobid"]: r for r in json.loads(shown.stdout)["jobs"] if r["st"] == "R"}
                    # jobs Slurm has run on one node for a while (gqueue is up to a tick behind)
                    now = time.time()
                    on = {job: node for job, node, begun in (line.split() for line in cluster.run(
                        ["squeue", "-h", "-t", "RUNNING", "-o", "%i %N %S"]).stdout.splitlines() if line.strip())
                          if now - time.mktime(time.strptime(begun, "%Y-%m-%dT%H:%M:%S")) > 5}
                    for job, r in running.items():
                        if job in on and r.get("type"):
                            # gqueue's type is the type of the node Slurm runs it on
                            assert r["type"] == TYPE_OF[on[job]], (job, r, on)
                            shown_types.add(r["type"])
                if not metrics_ok:
                    try:
                        samples = scrape(port)
                    except OSError:
                        samples = {}
                    # every GPU of the mixed partition, counted under its node's type
                    metrics_ok = all(pick(samples, "slurm_gavel_gpus", partition="gpu", gpu_type=wt) == 2
                                     for wt in ("v100", "k80")) and pick(samples, "slurm_gavel_gpus") == 4
            time.sleep(2)
        else:
            pytest.fail(f"jobs still queued after 300 s: {left}")
    finally:
        code, log = stop_daemon(daemon)
    assert code == 0, log[-3000:]
    assert "partitions gpu=" in log, log[:2000]
    assert shown_types == {"v100", "k80"}, shown_types
    assert metrics_ok, "the metrics never labelled the mixed partition's GPUs by type"

    store = SqliteStore(tmp_path / "gavel.db", readonly=True)
    ledger = store.job_time()
    starts = [e for e in store.events(kinds=("start",)) if e["job"] in jobs]
    moved = 0
    for job, steps in jobs.items():
        out = (tmp_path / f"out-{job}.txt").read_text()
        assert f"done at {steps}" in out, out
        ran_on = [line.split("node=")[1] for line in out.splitlines() if line.startswith("start")]
        moved += len({TYPE_OF[n] for n in ran_on}) > 1
        # each run was on the nodes of the type the daemon planned, in the shared partition
        planned = [e["detail"] for e in starts if e["job"] == job]
        assert len(planned) >= len(ran_on), (job, planned, ran_on)
        for node in ran_on:
            assert any(f"on {TYPE_OF[node]} (partition gpu, nodes {node};" in d for d in planned), (node, planned)
        # the ledger credits each type with what ran on its nodes
        ran: dict[str, float] = {}
        segs = node_segments(tmp_path, job)
        for node, seconds in segs:
            ran[TYPE_OF[node]] = ran.get(TYPE_OF[node], 0.0) + seconds
        for wt, seconds in ran.items():
            recorded = ledger.get(job, {}).get(wt, 0.0)
            assert abs(recorded - seconds) <= len(segs) * 4.0, (job, wt, recorded, seconds)
        # and nothing to a type it did not run on
        assert all(wt in ran for wt, s in ledger.get(job, {}).items() if s > 4.0), (job, ledger.get(job), ran)
    assert moved >= 1, "no job moved between the GPU types of the mixed partition"
    assert any(e["kind"] == "preempt" for e in store.events(kinds=("preempt",)))


def test_a_plain_job_taking_the_planned_gpus_gets_the_start_replanned_at_once(mixed, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="slurm_gavel")
    cluster = mixed
    # long rounds and a long start timeout: a replan within seconds can only be the
    # take-back, not the timeout nor the next round
    path = write_config(tmp_path, cluster, round_seconds=90, tick_seconds=1, start_timeout_seconds=120)
    job = submit(cluster, tmp_path, "convnet", 2, 10)       # convnet: fastest on v100
    daemon = Daemon(config_mod.load(path))
    real_update_each = daemon.backend.cli.update_each
    raced = {}

    def plain_job_first(updates, *args, **kw):
        """The daemon's start of `job` (its update among the round's): a plain job takes the
        planned node's GPUs first."""
        updates = list(updates)
        fields = dict(updates).get(job, {})
        if fields.get("NodeList") and not raced:
            node = fields["NodeList"]
            raced["node"] = node
            raced["plain"] = cluster.run(["sbatch", "--parsable", "-p", "gpu", "-w", node, "--gres=gpu:2",
                                          "-o", "/dev/null", "--wrap", "sleep 40"]).stdout.strip()
            deadline = time.time() + 30
            while queue(cluster).get(raced["plain"]) != "RUNNING":
                assert time.time() < deadline, "the plain job did not start"
                time.sleep(0.3)
            raced["at"] = time.time()
        return real_update_each(updates, *args, **kw)

    daemon.backend.cli.update_each = plain_job_first
    reasons = []
    status = daemon._status

    def seen_status():
        rows = status()
        reasons.append(rows.get(job, {}).get("reason", ""))
        return rows

    daemon._status = seen_status
    seen = {}

    def watch():
        """Until the job runs (or 60 s): where and when; then stop the daemon."""
        deadline = time.time() + 60
        while time.time() < deadline and "on" not in seen:
            line = cluster.run(["squeue", "-h", "-j", job, "-t", "RUNNING", "-o", "%N"]).stdout.strip()
            if line:
                seen["on"], seen["at"] = line, time.time()
            time.sleep(0.5)
        daemon.request_stop()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    daemon.run()                    # in this thread: the store's SQLite connection is its own
    watcher.join(timeout=10)
    ran_on, started = seen.get("on"), seen.get("at", time.time())
    assert raced, "the daemon never started the job"
    assert raced["node"] == "v100-0"                         # planned on v100
    assert ran_on == "k80-0", (ran_on, caplog.text[-3000:])  # planned again, on the free type
    # at once: seconds after the plain job took the GPUs, not after 120 s nor a 90 s round
    assert started - raced["at"] < 20, started - raced["at"]
    store = SqliteStore(tmp_path / "gavel.db", readonly=True)
    taken = [e for e in store.events([job]) if e["kind"] == "start_taken"]
    assert len(taken) == 1 and "v100-0" in taken[0]["detail"], store.events([job])
    assert not [e for e in store.events([job]) if e["kind"] == "stuck"]
    assert any("took the GPUs planned for it on v100-0" in r for r in reasons), reasons   # gqueue said why
    shown = subprocess.run([sys.executable, "-m", "slurm_gavel", "events", "--db", str(tmp_path / "gavel.db"),
                            "-j", job], capture_output=True, text=True)
    assert "start taken back" in shown.stdout, shown.stdout + shown.stderr
    cluster.run(["scancel", raced["plain"]], check=False)


def test_configured_gpu_types_by_node_set_and_gres_type_on_the_real_cluster(mixed, tmp_path):
    """[gpu_types]: one type by node set, one by GRES type, both in partition gpu; a job
    started on one type's node runs there, and the backend credits that type."""
    from slurm_gavel.core.clock import WallClock
    from slurm_gavel.core.plan import Assignment, RoundPlan
    from slurm_gavel.slurm.backend import SlurmBackend
    from slurm_gavel.slurm.commands import SlurmCLI

    cfg = config_mod.from_dict({"gpu_types": {"fast": {"partition": "gpu", "nodes": "v100-[0]"},
                                              "slow": {"partition": "gpu", "gres": "k80"}}})
    deadline = time.time() + 60
    while mixed.run(["squeue", "-h", "-o", "%i"]).stdout.strip():    # the last test's jobs gone
        assert time.time() < deadline, mixed.run(["squeue"]).stdout
        time.sleep(0.5)
    backend = SlurmBackend(SlurmCLI(env=mixed.env), WallClock(), cfg.type_map())
    obs = backend.observe()
    assert {(s.name, s.worker_type, s.gpus) for s in obs.servers} == {("v100-0", "fast", 2), ("k80-0", "slow", 2)}
    job = submit(mixed, tmp_path, "convnet", 1, 30)
    deadline = time.time() + 30
    while job not in {j.id for j in backend.observe().jobs}:
        assert time.time() < deadline, "the job never showed up"
        time.sleep(0.5)
    start = Assignment((job,), "slow", (("k80-0", 1),))
    backend.execute(RoundPlan(0, (start,), (), (start,), ()), time.time() + 30)
    deadline = time.time() + 30
    while queue(mixed).get(job) != "RUNNING":
        assert time.time() < deadline, "the job did not start"
        time.sleep(0.5)
    running = [a for a in backend.observe().running if a.jobs == (job,)]
    assert running[0].worker_type == "slow" and running[0].nodes == ("k80-0",)
    line = mixed.run(["squeue", "-h", "-j", job, "-o", "%P %N %b"]).stdout.split()
    assert line[:2] == ["gpu", "k80-0"] and "k80" not in line[2], line     # the request stays untyped
    time.sleep(2)
    usage = backend.observe().usage
    assert usage and {u.assignment.worker_type for u in usage} == {"slow"}

"""Multi-GPU pairs on Slurm 23.11+ (issue 13 §2, docs/space-sharing.md "Multi-GPU pairs"):
what Slurm does with shards spread over several GPUs, measured on a one-node cluster of
four fake GPUs with 4 shards each and SelectTypeParameters MULTIPLE_SHARING_GRES_PJ and
ONE_TASK_PER_SHARING_GRES.  These are the facts a multi-GPU pair would rest on; the
backend does not run such pairs yet (its `max_pair_gpus` is 1), and these tests keep the
facts true on the Slurm that runs them (skipped before 23.11, which has neither flag).
"""
from __future__ import annotations

import json
import time

import pytest

from slurm_gavel.devcluster import DevCluster, DevClusterError, slurm_version

from tests.support.slurm import require_slurm, require_slurm_version, running_cluster


# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24


SHARDS = 4
FLAGS = "MULTIPLE_SHARING_GRES_PJ,ONE_TASK_PER_SHARING_GRES"
SCRIPT = ("#!/bin/bash\necho \"$CUDA_VISIBLE_DEVICES $SLURM_JOB_GPUS $SLURM_SHARDS_ON_NODE\" "
          "> \"$OUT/$SLURM_JOB_ID.env\"\nsleep 300\n")


@pytest.fixture(scope="module")
def multi_shard_cluster(tmp_path_factory):
    require_slurm()
    require_slurm_version((23, 11), "MULTIPLE_SHARING_GRES_PJ and ONE_TASK_PER_SHARING_GRES are Slurm 23.11+")
    with running_cluster(tmp_path_factory.mktemp("mshard"), {"v100": (1, 4)}, shards=SHARDS,
                         select_parameters=FLAGS) as cluster:
        yield cluster


@pytest.fixture
def c(multi_shard_cluster, tmp_path):
    multi_shard_cluster.run(["scancel", "--user", "root"], check=False)
    (tmp_path / "job.sh").write_text(SCRIPT)
    multi_shard_cluster.dir = tmp_path
    yield multi_shard_cluster
    multi_shard_cluster.run(["scancel", "--user", "root"], check=False)
    deadline = time.monotonic() + 30
    while multi_shard_cluster.run(["squeue", "-h", "-o", "%i"]).stdout.strip():
        assert time.monotonic() < deadline
        time.sleep(0.3)


def sbatch(c, *opts) -> str:
    return c.run(["sbatch", "--parsable", "-o", "/dev/null", f"--export=ALL,OUT={c.dir}", *opts,
                  str(c.dir / "job.sh")], cwd=c.dir).stdout.strip()


def running(c, jobs, timeout=30.0) -> dict[str, tuple[str, str]]:
    """job -> (gres_detail, what the job saw: CUDA_VISIBLE_DEVICES SLURM_JOB_GPUS shards), once
    every job runs and has written its line."""
    deadline = time.monotonic() + timeout
    while True:
        data = {str(j["job_id"]): j for j in json.loads(c.run(["squeue", "--json"]).stdout)["jobs"]}
        seen = {}
        for job in jobs:
            env = c.dir / f"{job}.env"
            state = data.get(job, {}).get("job_state")
            state = state[0] if isinstance(state, list) else state
            if state == "RUNNING" and env.exists() and env.read_text().strip():
                seen[job] = (",".join(data[job].get("gres_detail") or []), env.read_text().strip())
        if len(seen) == len(jobs):
            return seen
        assert time.monotonic() < deadline, f"not all of {jobs} running: {seen}"
        time.sleep(0.3)


def test_two_gpu_jobs_switched_to_shards_per_task_share_the_same_two_gpus_and_no_third_job(c):
    """The way a pair of two-GPU jobs could run: each pending `--gres=gpu:2` job becomes two
    tasks of half a GPU's shards each (`TresPerNode= TresPerTask=gres/shard:2 NumTasks=2`);
    one task per GPU (ONE_TASK_PER_SHARING_GRES), first fit: both get GPUs 0 and 1."""
    jobs = [sbatch(c, "-H", "--gres=gpu:2") for _ in range(2)]
    for job in jobs:
        c.run(["scontrol", "update", f"jobid={job}", "TresPerNode=", f"TresPerTask=gres/shard:{SHARDS // 2}",
               "NumTasks=2"])
    c.run(["scontrol", "release", ",".join(jobs)])
    seen = running(c, jobs)
    for job in jobs:
        assert seen[job] == ("shard:4(2/4,2/4,0/4,0/4)", "0,1 0,1 4"), seen
    # a third job gets another GPU, never a GPU of the pair
    third = sbatch(c, "--gres=gpu:1")
    assert running(c, [third])[third][1].split()[0] == "2"
    whole = sbatch(c, f"--gres=shard:{SHARDS}")
    assert running(c, [whole])[whole][1].split()[0] == "3"


def test_without_one_task_per_gpu_or_with_a_per_node_count_the_halves_stack_on_one_gpu(c):
    """Why the per-node request of one-GPU pairs cannot serve two-GPU pairs: a job's shards
    come from one GPU when one has room (first pass, a single device), so `--gres=shard:4`
    (half of each of two GPUs, in count) takes all of GPU 0; so do the two tasks of a job
    that allows task sharing."""
    per_node = [sbatch(c, f"--gres=shard:{SHARDS}") for _ in range(2)]
    seen = running(c, per_node)
    assert sorted(seen[j][1] for j in per_node) == ["0 0 4", "1 1 4"], seen
    c.run(["scancel", *per_node])
    shared = sbatch(c, "-n2", f"--tres-per-task=gres/shard:{SHARDS // 2}", "--gres-flags=multiple-tasks-per-sharing")
    assert running(c, [shared])[shared][1] == "0 0 4"


def test_a_lone_half_on_two_gpus_splits_the_next_pair(c):
    """First fit again: with one job of a pair gone, its partner's half-used GPUs take the next
    pair's first job, and the second one goes elsewhere (the hazard the daemon guards against
    for one-GPU pairs, "No pair next to a half-used GPU")."""
    per_task = ["-n2", f"--tres-per-task=gres/shard:{SHARDS // 2}"]
    first = [sbatch(c, *per_task) for _ in range(2)]
    running(c, first)
    c.run(["scancel", first[1]])
    deadline = time.monotonic() + 30
    while first[1] in c.run(["squeue", "-h", "-o", "%i"]).stdout.split():
        assert time.monotonic() < deadline
        time.sleep(0.3)
    new = [sbatch(c, *per_task) for _ in range(2)]
    seen = running(c, new)
    assert sorted(seen[j][1].split()[0] for j in new) == ["0,1", "2,3"], seen


def test_the_dev_cluster_takes_select_parameters_and_refuses_other_text(tmp_path):
    from slurm_gavel.core.errors import InputError
    from slurm_gavel.devcluster import render_slurm_conf
    conf = render_slurm_conf(tmp_path, {"v100": (1, 4)}, 20000, 20001, shards=4, select_parameters=FLAGS)
    assert f"SelectTypeParameters=CR_Core,{FLAGS}\n" in conf
    assert "SelectTypeParameters=CR_Core\n" in render_slurm_conf(tmp_path, {"v100": (1, 4)}, 20000, 20001)
    for bad in ("CR_Core\nSlurmUser=x", "lower", "A,,B", "A B"):
        with pytest.raises(InputError, match="select_parameters"):
            DevCluster(tmp_path / "c", {"v100": (1, 4)}, select_parameters=bad)


def test_with_multiple_sharing_a_lone_one_gpu_job_spreads_over_two_half_used_gpus_and_doctor_warns(c):
    """Why `slurm-gavel doctor` warns about MULTIPLE_SHARING_GRES_PJ with space sharing: a
    one-GPU gavel job (a GPU's 4 shards) that finds no GPU with 4 free takes 2 + 2 from two
    half-used GPUs, beside two other jobs (without the flag it waits)."""
    from slurm_gavel.slurm.commands import SlurmCLI
    from slurm_gavel.slurm.doctor import check_sharing_select
    fill = [sbatch(c, f"--gres=shard:{SHARDS // 2}") for _ in range(3)]     # GPU 0 full, GPU 1 half
    fill += [sbatch(c, f"--gres=shard:{SHARDS}") for _ in range(2)]          # GPUs 2 and 3 full
    seen = running(c, fill)
    assert sorted(seen[j][0] for j in fill) == ["shard:2(0/4,2/4,0/4,0/4)", "shard:2(2/4,0/4,0/4,0/4)",
                                                "shard:2(2/4,0/4,0/4,0/4)", "shard:4(0/4,0/4,0/4,4/4)",
                                                "shard:4(0/4,0/4,4/4,0/4)"], seen
    c.run(["scancel", fill[1]])                                              # GPU 0 half free
    lone = sbatch(c, f"--gres=shard:{SHARDS}")
    assert running(c, [lone])[lone] == ("shard:4(2/4,2/4,0/4,0/4)", "0,1 0,1 4")
    found = check_sharing_select(SlurmCLI(env=c.env).config(), space_sharing=True)
    assert [f["check"] for f in found] == ["space_sharing"]
    assert "MULTIPLE_SHARING_GRES_PJ" in found[0]["finding"]


@pytest.fixture(scope="module")
def least_loaded_cluster(tmp_path_factory):
    require_slurm()
    require_slurm_version((23, 11), "LL_SHARED_GRES is Slurm 23.11+")
    with running_cluster(tmp_path_factory.mktemp("llshard"), {"v100": (1, 4)}, shards=SHARDS,
                         select_parameters="LL_SHARED_GRES") as cluster:
        yield cluster


def test_with_least_loaded_sharing_a_pair_released_together_splits(least_loaded_cluster, tmp_path):
    """Why doctor warns about LL_SHARED_GRES with space sharing: the daemon's pair (two held
    jobs of half a GPU's shards, released in one call) lands on two GPUs."""
    c = least_loaded_cluster
    (tmp_path / "job.sh").write_text(SCRIPT)
    c.dir = tmp_path
    try:
        jobs = [sbatch(c, "-H", f"--gres=shard:{SHARDS // 2}") for _ in range(2)]
        c.run(["scontrol", "release", ",".join(jobs)])
        seen = running(c, jobs)
        assert sorted(seen[j][1] for j in jobs) == ["0 0 2", "1 1 2"], seen
    finally:
        c.run(["scancel", "--user", "root"], check=False)


def test_the_flags_exist_from_slurm_23_11(tmp_path):
    """What the tests above rest on, on whatever Slurm runs them (CI's 22.05 too): before
    23.11 slurmctld refuses the two flags and does not start, so there a multi-GPU pair
    cannot be built at all; from 23.11 it starts with them."""
    require_slurm()
    start = running_cluster(tmp_path, {"v100": (1, 4)}, shards=SHARDS, select_parameters=FLAGS)
    if slurm_version()[:2] < (23, 11):
        with pytest.raises(DevClusterError, match="slurmctld exited"), start:
            pass
        return
    with start as cluster:
        config = cluster.run(["scontrol", "show", "config"]).stdout
        assert all(flag in config for flag in FLAGS.split(","))


def test_other_users_per_task_jobs_are_read_as_holding_the_gpus_and_shards_slurm_gave_them(c):
    """A `-n2 --tres-per-task=gres/shard:2` job asks nothing per node; what it holds is in
    its `gres_detail` (GPUs 0 and 1, half of each), what it asks (pending) in `tres_per_task`
    times `tasks`.  The backend counts its two GPUs as taken, and the free shards per GPU
    that the pair room reads (slurm.backend.pairs.room) predict where Slurm's first fit puts the next shard job."""
    from slurm_gavel.core.clock import WallClock
    from slurm_gavel.slurm.backend import SlurmBackend
    from slurm_gavel.slurm.commands import SlurmCLI
    from slurm_gavel.slurm.backend.pairs.room import first_fit
    from slurm_gavel.slurm.records import parse_jobs
    shards = sbatch(c, "-n2", f"--tres-per-task=gres/shard:{SHARDS // 2}")
    gpus = sbatch(c, "-n2", "--gpus-per-task=1")
    held = sbatch(c, "-H", "-n3", "--tres-per-task=gres/shard:1")
    seen = running(c, [shards, gpus])
    assert seen[shards] == ("shard:4(2/4,2/4,0/4,0/4)", "0,1 0,1 4") and seen[gpus][1].startswith("2,3 "), seen
    cli = SlurmCLI(env=c.env)
    jobs = {j.job_id: j for j in parse_jobs(cli.squeue())}
    s, g, h = jobs[shards], jobs[gpus], jobs[held]
    assert (s.shards, s.gpus_on("v100-0"), s.gpu_indices, s.gpu_shards) == (4, 2, ("0,1",), (((0, 2), (1, 2)),))
    assert (g.gpus_on("v100-0"), g.gpu_indices) == (2, ("2-3",))
    assert (h.shards, h.gpus, h.running) == (3, 3, False)
    backend = SlurmBackend(cli, WallClock())
    obs = backend.observe()
    assert sum(sv.gpus for sv in obs.servers if sv.name == "v100-0") == 0
    room = backend._room["v100-0"]
    assert room.free == [2, 2, 0, 0] and first_fit(room, SHARDS // 2) == (0, "")
    third = sbatch(c, f"--gres=shard:{SHARDS // 2}")
    assert running(c, [third])[third][1] == "0 0 2"           # where first fit was predicted

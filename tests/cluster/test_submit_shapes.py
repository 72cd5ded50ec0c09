"""Which GPU requests a gavel job may make, and what job_submit.lua turns them into (issue 13).

A distributed job carries its GPU total per job (`--gpus=N`, TresPerJob): the
daemon reshapes it each round around that invariant (partition, nodes, GPUs per
node; docs/distributed.md).  The plugin gives `-N k --gres=gpu:m` (k > 1) that
total, turns `--gpus=N -N 1` into the one-node `--gres=gpu:N`, and refuses GPUs
per task or per socket.  Checked in the Lua driver (every case) and in the real
slurmctld of the session cluster (what Slurm hands the plugin and keeps).
"""
from __future__ import annotations

import re

import pytest

from tests.support.lua import run_driver
from tests.support.jobs import Jobs

# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24

REFUSED = ("gavel flags: GPUs per task or per socket cannot be reshaped by the scheduler: "
           "ask for the job's total, e.g. --gpus=4 (one task per GPU: --gpus=4 --ntasks-per-gpu=1)")
TASKS = ("gavel flags: --ntasks-per-node cannot follow the shape the scheduler chooses for a job "
         "on several nodes: ask --ntasks-per-gpu=1 (one task per GPU wherever they are) or one task per node")
BASE = {"admin_comment": "gavel:v1 model=m weight=1 entity=acct", "priority": 0, "requeue": 1}

# (job_desc fields, writes beyond BASE); NO_VAL (4294967294) is Slurm's "not given"
DRIVER_CASES = [
    ({"tres_per_node": "gres:gpu:v100:4", "min_nodes": "2", "max_nodes": "2"},
     {"tres_per_node": "gres:gpu:4", "tres_per_job": "gres:gpu:8"}),
    ({"tres_per_node": "gres/gpu:2", "min_nodes": "3", "max_nodes": "3"},      # 23.02+ spelling
     {"tres_per_job": "gres/gpu:6"}),
    ({"tres_per_node": "gres:gpu:4", "min_nodes": "4294967294", "max_nodes": "4294967294"}, {}),
    ({"tres_per_node": "gres:gpu:4", "min_nodes": "1", "max_nodes": "1"}, {}),
    ({"tres_per_job": "gres:gpu:4", "min_nodes": "4294967294"}, {}),          # --gpus=4: free shape
    ({"tres_per_job": "gres:gpu:k80:4", "min_nodes": "2", "max_nodes": "2"},
     {"tres_per_job": "gres:gpu:4"}),                                         # --gpus=4 -N 2
    ({"tres_per_job": "gres:gpu:v100:4", "min_nodes": "1", "max_nodes": "1"},  # --gpus=4 -N 1
     {"tres_per_node": "gres:gpu:4", "tres_per_job": ""}),
    ({"tres_per_job": "gres:gpu:8", "tres_per_node": "gres:gpu:4", "min_nodes": "2"}, {}),
    # tasks per node: unset (NO_VAL16), 1, or on a one-node job
    ({"tres_per_job": "gres:gpu:4", "ntasks_per_node": "65534"}, {}),
    ({"tres_per_job": "gres:gpu:4", "ntasks_per_node": "1"}, {}),
    ({"tres_per_node": "gres:gpu:4", "ntasks_per_node": "4"}, {}),
    ({"tres_per_job": "gres:gpu:4", "min_nodes": "1", "max_nodes": "1", "ntasks_per_node": "4"},
     {"tres_per_node": "gres:gpu:4", "tres_per_job": ""}),
]


@pytest.mark.parametrize("fields,writes", DRIVER_CASES)
def test_lua_gives_a_distributed_job_its_total(lua, fields, writes):
    args = ["unset:tres_per_node", "set:account=acct"]
    args += [f"set:{k}={v}" for k, v in fields.items()]
    (out,) = run_driver(lua, args + ["submit:gavel model=m"])
    assert out["rc"] == "SUCCESS" and out["messages"] == [], out
    assert out["writes"] == {**BASE, **writes}


@pytest.mark.parametrize("field", ["tres_per_task", "tres_per_socket"])
def test_lua_refuses_gpus_per_task_or_socket(lua, field):
    (out,) = run_driver(lua, ["unset:tres_per_node", f"set:{field}=gres:gpu:1", "submit:gavel model=m"])
    assert out == {"rc": "ERROR", "messages": [REFUSED], "writes": {}}
    (out,) = run_driver(lua, ["unset:tres_per_node", f"set:{field}=gres:gpu:1", "submit:plain"])
    assert out == {"rc": "SUCCESS", "messages": [], "writes": {}}


@pytest.mark.parametrize("fields", [
    {"tres_per_job": "gres:gpu:4", "ntasks_per_node": "2"},
    {"tres_per_node": "gres:gpu:2", "min_nodes": "2", "ntasks_per_node": "2"},
])
def test_lua_refuses_tasks_per_node_on_a_distributed_job(lua, fields):
    args = ["unset:tres_per_node"] + [f"set:{k}={v}" for k, v in fields.items()]
    (out,) = run_driver(lua, args + ["submit:gavel model=m"])
    assert out == {"rc": "ERROR", "messages": [TASKS], "writes": {}}


# -- in the real slurmctld --------------------------------------------------------------
@pytest.fixture
def jobs(slurm_cluster):
    j = Jobs(slurm_cluster)
    yield j
    if j.ids:
        slurm_cluster.run(["scancel", *j.ids], check=False)


def _gpus(spec) -> str:
    """'gres:gpu:8' / 'gres/gpu:8' -> '8'; '' when no GPU count."""
    m = re.search(r"gpu:(\d+)", spec or "")
    return m.group(1) if m else ""


@pytest.mark.parametrize("opts,per_job,per_node", [
    (["-N", "2", "--gres=gpu:v100:4"], "8", "4"),
    (["-N", "2", "--gpus-per-node=2"], "4", "2"),
    (["--gpus=4"], "4", ""),
    (["--gpus=4", "-N", "1"], "", "4"),
    (["--gres=gpu:4"], "", "4"),
    (["--gpus=4", "--ntasks-per-gpu=1"], "4", ""),
])
def test_submissions_slurm_keeps(jobs, opts, per_job, per_node):
    r = jobs.sbatch("--comment=gavel model=resnet50", *opts)
    job = jobs.info(r.stdout.strip().split(";")[0])
    assert (_gpus(job.get("tres_per_job")), _gpus(job.get("tres_per_node"))) == (per_job, per_node), job
    assert job["priority"] == 0 or job.get("priority", {}).get("number") == 0


@pytest.mark.parametrize("opts,message", [
    (["-n", "2", "--gpus-per-task=1"], REFUSED),
    (["--gpus-per-socket=1", "--sockets-per-node=1", "-N", "1"], REFUSED),
    (["-N", "2", "--gres=gpu:2", "--ntasks-per-node=2"], TASKS),
    (["--gpus=4", "--ntasks-per-node=2"], TASKS),
])
def test_shapes_the_scheduler_cannot_choose_are_refused_at_sbatch(jobs, opts, message):
    r = jobs.sbatch("--comment=gavel model=resnet50", *opts, check=False)
    assert r.returncode != 0 and message in r.stderr, r.stderr


def test_one_task_per_node_or_per_gpu_is_accepted(jobs):
    for opts in (["--gpus=4", "--ntasks-per-gpu=1"], ["-N", "2", "--gres=gpu:2", "--ntasks-per-node=1"],
                 ["--gres=gpu:4", "--ntasks-per-node=4"]):
        jobs.sbatch("--comment=gavel model=resnet50", *opts)

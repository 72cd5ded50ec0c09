"""slurm_gavel.job.distributed: a task's torch.distributed place from Slurm's variables."""
from __future__ import annotations

from slurm_gavel.job.distributed import torch_env

STEP = {"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "4", "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "SLURM_LAUNCH_NODE_IPADDR": "10.0.0.7", "SLURM_RESTART_COUNT": "1"}


def test_a_task_of_a_2x2_step():
    env = torch_env(STEP)
    assert env == {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                   "MASTER_ADDR": "10.0.0.7", "MASTER_PORT": str(15000 + 42 * 8 + 1)}


def test_the_same_rank_on_1x4_and_uneven_task_lists():
    env = torch_env({**STEP, "SLURM_NODEID": "0", "SLURM_LOCALID": "3", "SLURM_STEP_TASKS_PER_NODE": "4"})
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == ("3", "4", "4")
    env = torch_env({**STEP, "SLURM_STEP_TASKS_PER_NODE": "3,1"})
    assert env["LOCAL_WORLD_SIZE"] == "1"


def test_nothing_outside_a_multi_task_step_or_when_already_set():
    assert torch_env({}) == {}
    assert torch_env({k: v for k, v in STEP.items() if k != "SLURM_STEP_ID"}) == {}   # the batch shell
    assert torch_env({**STEP, "SLURM_NTASKS": "1"}) == {}
    assert torch_env({**STEP, "RANK": "0"}) == {}                                   # torchrun, our launcher
    assert torch_env({**STEP, "SLURM_PROCID": "x"}) == {}
    assert torch_env({**STEP, "GAVEL_MASTER_PORT": "23456"})["MASTER_PORT"] == "23456"

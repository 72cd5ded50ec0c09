"""torch.distributed's environment from Slurm's, for a job launched with `srun` (one task per GPU).

A distributed gavel job does not know its shape in advance: the daemon chooses
nodes and GPUs per node each time it starts (docs/distributed.md).  Its batch
script runs `srun python train.py ...` (with `--ntasks-per-gpu=1`, Slurm starts
one task per GPU of the job, on whichever nodes it has this run), and each task
reads its place from Slurm's variables:

    RANK        = SLURM_PROCID        WORLD_SIZE       = SLURM_NTASKS
    LOCAL_RANK  = SLURM_LOCALID       LOCAL_WORLD_SIZE = tasks on this node
    MASTER_ADDR = SLURM_LAUNCH_NODE_IPADDR (the batch node, which holds rank 0)
    MASTER_PORT = from the job id and restart count (GAVEL_MASTER_PORT overrides)

so the world is the same size on 1x4 as on 2x2, and ranks keep their numbers:
a run resumed on another shape continues exactly where the last one stopped.
Standard library only.
"""
from __future__ import annotations

import re
from typing import Mapping

PORT_BASE, PORT_SPAN = 15000, 30000
MASTER_PORT_ENV = "GAVEL_MASTER_PORT"


def _tasks_on_node(tasks_per_node: str, node_id: int) -> int | None:
    """SLURM_TASKS_PER_NODE ('2(x2),1') -> tasks on node `node_id` (0-based)."""
    counts: list[int] = []
    for part in tasks_per_node.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            return None
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts[node_id] if 0 <= node_id < len(counts) else None


def torch_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables torch.distributed reads, for a task of a multi-task Slurm step; {}
    outside one (no step, one task) or when they are already set (torchrun, our own
    launcher)."""
    if "RANK" in environ or "SLURM_PROCID" not in environ or "SLURM_STEP_ID" not in environ:
        return {}
    try:
        world = int(environ.get("SLURM_NTASKS") or environ.get("SLURM_NPROCS") or 1)
        rank = int(environ["SLURM_PROCID"])
        local = int(environ.get("SLURM_LOCALID", "0"))
        job = int(environ.get("SLURM_JOB_ID", "0").split("_")[0] or 0)
        restart = int(environ.get("SLURM_RESTART_COUNT") or 0)
        node_id = int(environ.get("SLURM_NODEID", "0"))
    except ValueError:
        return {}
    if world <= 1:
        return {}
    port = environ.get(MASTER_PORT_ENV) or str(PORT_BASE + (job * 8 + restart) % PORT_SPAN)
    env = {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local),
           "MASTER_ADDR": environ.get("MASTER_ADDR") or environ.get("SLURM_LAUNCH_NODE_IPADDR")
           or "127.0.0.1", "MASTER_PORT": port}
    here = _tasks_on_node(environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE", ""),
                          node_id)
    if here:
        env["LOCAL_WORLD_SIZE"] = str(here)
    return env


__all__ = ["MASTER_PORT_ENV", "torch_env"]

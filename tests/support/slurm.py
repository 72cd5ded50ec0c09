"""Local Slurm clusters for the tests: start one on random ports, skip (or fail under CI) where
Slurm cannot run, and the small Slurm chores several tests share."""
from __future__ import annotations

import contextlib
import os

import pytest

from slurm_gavel.slurm.commands import SlurmCommandError, retry_partition_change
from slurm_gavel.devcluster import (DevCluster, default_job_submit_lua, node_list, pick_ports,
                                          unavailable_reason, accounting_unavailable_reason)


def move_job(run, job, partition, **kw):
    """`scontrol update jobid=JOB partition=P` through `run(args, check=False, **kw)`,
    retried like SlurmCLI.update: Slurm 24.11+ without accounting refuses it at random
    with a stale errno (see slurm_gavel.slurm.commands.retry_partition_change)."""
    args = ["scontrol", "update", f"jobid={job}", f"partition={partition}"]

    def once():
        result = run(args, check=False, **kw)
        if result.returncode != 0:
            raise SlurmCommandError(args, result.returncode, result.stderr or "")
        return result
    try:
        return retry_partition_change(once)
    except SlurmCommandError as e:
        raise AssertionError(f"{' '.join(args)}: {e.stderr}") from None


def running(cluster) -> dict[str, str]:
    """Running job -> its nodes, as Slurm says."""
    out = cluster.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i %N"]).stdout
    return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)


def only(cluster, gpu_type) -> list[str]:
    """sbatch's -x for every node but those of `gpu_type`."""
    return ["-x", ",".join(f"{t}-{i}" for t in cluster.types for i in range(cluster.types[t][0])
                           if t != gpu_type)]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require_slurm(accounting: bool = False):
    """Skip (fail under CI) when a local Slurm cluster (with accounting) cannot run here."""
    reason = accounting_unavailable_reason() if accounting else unavailable_reason()
    if reason:
        if in_ci():
            pytest.fail(f"CI must run the Slurm tests, but: {reason}", pytrace=False)
        pytest.skip(f"needs a local Slurm cluster: {reason}")


def require_slurm_version(at_least: tuple, why: str):
    """Skip when this host's Slurm is older than `at_least`: tools/test.sh runs the tests
    marked `slurm24` again on Slurm 24.11 (tools/slurm-chroot.sh), where this must not skip,
    so there (GAVEL_NEWER_SLURM set) an older Slurm is a failure."""
    from slurm_gavel.devcluster import slurm_version
    from slurm_gavel.slurm.backend.pairs.multi import version_text
    version = slurm_version()
    if version[:len(at_least)] < tuple(at_least):
        text = version_text(version)
        if os.environ.get("GAVEL_NEWER_SLURM"):
            pytest.fail(f"the Slurm 24.11 pass runs Slurm {text}, but {why}", pytrace=False)
        pytest.skip(f"{why}; this is Slurm {text} (tools/test.sh runs it on 24.11)")


@contextlib.contextmanager
def running_cluster(directory, types, **kw):
    """A DevCluster of `types` in `directory` on random free ports in 20000-30000 (never the
    defaults of `slurm-gavel cluster up`), up for the block and stopped after it."""
    ctld_port, slurmd_port = pick_ports(len(node_list(types)))
    cluster = DevCluster(directory, types, ctld_port=ctld_port, slurmd_port=slurmd_port, **kw)
    cluster.up()          # cleans up after itself when it fails
    try:
        yield cluster
    finally:
        cluster.down()


ACCOUNTING_TYPES = {"v100": (1, 4), "k80": (1, 4)}

# Memory counted by Slurm (CR_Core_Memory, DefMemPerCPU=2048; RealMemory 16384 a node)
MEMORY_TYPES = {"p100": (2, 4), "k80": (2, 4)}

# Space sharing (docs/space-sharing.md): gres/shard on every GPU, and the repository's
# job_submit.lua with GAVEL_SHARDS_PER_GPU set, so that one-GPU gavel jobs ask shards.
SHARD_TYPES = {"v100": (1, 4), "k80": (1, 4)}
SHARDS_PER_GPU = 4


def shard_job_submit_lua(directory) -> str:
    """The repository's job_submit.lua with GAVEL_SHARDS_PER_GPU = SHARDS_PER_GPU, in `directory`."""
    text = default_job_submit_lua().read_text()
    line = "local GAVEL_SHARDS_PER_GPU = 0\n"
    assert line in text, "job_submit.lua has no GAVEL_SHARDS_PER_GPU setting"
    path = directory / "job_submit.lua"
    path.write_text(text.replace(line, f"local GAVEL_SHARDS_PER_GPU = {SHARDS_PER_GPU}\n"))
    return str(path)


# -- recorded JSON in another version's shapes --------------------------------------------
def as_24_11(value):
    """22.05's plain numbers as 24.11's {"set", "infinite", "number"} objects (null: unset),
    shared as 24.11's flag list: the same request in 24.11's field shapes."""
    if isinstance(value, dict):
        return {k: (as_24_11(v) if k not in ("shared",) else ([v] if isinstance(v, str) else []))
                for k, v in value.items()}
    if isinstance(value, list):
        return [as_24_11(v) for v in value]
    if isinstance(value, bool) or not isinstance(value, (int, float)) and value is not None:
        return value
    if value is None:
        return {"set": False, "infinite": False, "number": 0}
    return {"set": True, "infinite": False, "number": value}

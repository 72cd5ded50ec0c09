"""What the bench scripts on a real local Slurm cluster share (not part of the project).

Whether a cluster can run here; the cluster (free ports, the repository's job_submit.lua, with GAVEL_SHARDS_PER_GPU and
gres/shard for space sharing), up for a block and stopped after it; slurmctld's RPCs by
type (sdiag); seconds spent in wrapped calls by phase; and the median and 90th-percentile
line of a list of timings.
"""
from __future__ import annotations

import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

from slurm_gavel.devcluster import (DevCluster, default_job_submit_lua, node_list, pick_ports,
                                          unavailable_reason)


def shard_job_submit_lua(directory: Path, shards: int) -> Path:
    """The repository's job_submit.lua with GAVEL_SHARDS_PER_GPU = `shards`, in `directory`:
    one-GPU gavel jobs then ask a whole GPU's shards."""
    path = Path(directory) / "job_submit.lua"
    path.write_text(default_job_submit_lua().read_text().replace(
        "local GAVEL_SHARDS_PER_GPU = 0\n", f"local GAVEL_SHARDS_PER_GPU = {shards}\n"))
    return path


def no_cluster() -> bool:
    """Whether a local Slurm cluster cannot run here (then said on stderr: the bench exits 2)."""
    why = unavailable_reason()
    if why:
        print(f"needs a local Slurm cluster: {why}", file=sys.stderr)
    return bool(why)


@contextmanager
def local_cluster(directory: Path, types: Mapping[str, tuple[int, int]],
                  shards: int = 0, select_parameters: str = "", plugin: bool = True) -> Iterator[DevCluster]:
    """A DevCluster of `types` in DIRECTORY/c on free ports, with `shards` per GPU (and the
    job_submit.lua that asks them, written in DIRECTORY) when given, `select_parameters` added
    to SelectTypeParameters, no job_submit.lua at all without `plugin`; down after the block."""
    lua = (None if not plugin else
           shard_job_submit_lua(directory, shards) if shards else default_job_submit_lua())
    ctld, slurmd = pick_ports(len(node_list(types)))
    cluster = DevCluster(Path(directory) / "c", types, ctld_port=ctld, slurmd_port=slurmd,
                         job_submit_lua=lua, shards=shards, select_parameters=select_parameters)
    cluster.up()
    try:
        yield cluster
    finally:
        cluster.down()


def rpcs(cluster: DevCluster) -> dict[str, tuple[int, int]]:
    """slurmctld's RPCs so far by message type (sdiag): name -> (count, total microseconds)."""
    return cluster.rpcs()


class Phases:
    """Seconds spent in wrapped calls, by phase (`spent`; `take` returns it and starts anew)."""

    def __init__(self):
        self.spent: dict[str, float] = {}

    def wrap(self, obj, name: str, phase: str) -> None:
        original = getattr(obj, name)

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.spent[phase] = self.spent.get(phase, 0.0) + time.perf_counter() - started
        setattr(obj, name, timed)

    def take(self) -> dict[str, float]:
        spent, self.spent = self.spent, {}
        return spent


def summary(values: list[float]) -> str:
    """`median X ms, p90 Y ms` of seconds."""
    values = sorted(values)
    p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
    return f"median {statistics.median(values) * 1000:.1f} ms, p90 {p90 * 1000:.1f} ms"

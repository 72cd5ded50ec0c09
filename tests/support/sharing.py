"""Who holds which GPU on a cluster with gres/shard."""
from __future__ import annotations

import json

from slurm_gavel.slurm.records import parse_jobs


def _holders(cluster) -> dict[tuple[str, str], set[str]]:
    """(node, GPU index) -> the running jobs Slurm gave it (gres_detail), any job at all."""
    data = json.loads(cluster.run(["squeue", "--json"]).stdout)
    out: dict[tuple[str, str], set[str]] = {}
    for j in parse_jobs(data):
        if j.running:
            for node, idx in zip(j.nodes, j.gpu_indices):
                for i in filter(None, idx.split(",")):
                    lo, _, hi = i.partition("-")
                    for k in range(int(lo), int(hi or lo) + 1):
                        out.setdefault((node, str(k)), set()).add(j.slurm_id)
    return out


def gpu_of(cluster, job: str) -> tuple[str, str] | None:
    return next((where for where, holders in _holders(cluster).items() if job in holders), None)

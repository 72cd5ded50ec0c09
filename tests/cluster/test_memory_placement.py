"""Where Slurm counts memory (CR_Core_Memory), jobs are planned only where a node has it free.

On a cluster of 2 types x 2 nodes (4 GPUs, 8 CPUs, 16384 MB each; DefMemPerCPU=2048, so a
1-GPU job without --mem asks 2048 MB): a gavel job on 1 GPU and every MB of a k80 node keeps
that node (the other k80 jobs run on the other node, none is released onto GPUs Slurm cannot
start it on); a plain job on 1 GPU and every MB of p100-0 leaves it no free GPU for the
daemon; gqueue and explain say why a job waits in words. squeue --json gives --mem the same
way on 22.05 and 24.11 (tests/unit/test_memory_capacity.py has both shapes).
"""
from __future__ import annotations

from tests.support.capacity import plan_around_a_full_node

WORDS = "node p100-0: 3 GPUs free, 0 of 16384 MB memory free"      # why a p100 job waits


def test_jobs_are_planned_only_where_a_node_has_their_memory(slurm_memory_cluster, tmp_path):
    cluster = slurm_memory_cluster
    cluster.run(["scancel", "--user", "root"], check=False)
    log = plan_around_a_full_node(cluster, tmp_path, ["--mem=16384"], "memory free", WORDS)
    assert "memory is consumable (SelectTypeParameters=CR_CORE_MEMORY" in log, log[:3000]

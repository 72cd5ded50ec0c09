"""Pairs on a node whose GPUs are bound to sockets (gres.conf Cores=), docs/space-sharing.md
"Sockets": the cases of tests/cluster/test_pair_sockets.py that need no Slurm cluster (how
Slurm picks a shard job's GPU by its cores' socket, as measured, is told there).
"""
from __future__ import annotations

import pytest

from slurm_gavel.slurm.doctor import check_shard_sockets
from slurm_gavel.slurm.records import SlurmNode, shard_sockets
from slurm_gavel.slurm.backend.pairs.sharing import PairLimit as SpaceSharing


# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24


@pytest.mark.parametrize("gres, sockets", [
    ("gpu:v100:4(S:0-1),shard:v100:16(S:0-1)", 2),
    ("gpu:v100:4(S:0),shard:v100:16(S:0)", 1),
    ("gpu:v100:4,shard:v100:16", 0),
    ("gpu:v100:8(S:0-3),shard:32(S:0,2-3)", 3),
    ("gpu:v100:4(S:0-1),shard:v100:16", 0),
    ("shard:16(S:0-99999999)", 100_000_000),  # counted, not listed
    ("shard:16(S:a)", 2),                     # not readable: more than one, on the safe side
    ("gpu:4(S:0-1)", 0),
])
def test_the_sockets_of_a_nodes_shards_are_read_from_its_gres(gres, sockets):
    assert shard_sockets(gres) == sockets


def test_doctor_says_nothing_of_nodes_whose_shards_are_not_bound_to_sockets():
    nodes = {"nodes": [{"name": "a", "gres": "gpu:v100:4,shard:v100:16", "state": ["IDLE"]},
                       {"name": "b", "gres": "gpu:v100:4(S:0),shard:v100:16(S:0)", "state": ["IDLE"]},
                       {"name": "c", "gres": "gpu:v100:4(S:0-1)", "state": ["IDLE"]}]}
    assert check_shard_sockets(nodes, space_sharing=True) == []
    nodes["nodes"].append({"name": "d", "gres": "gpu:v100:8(S:0-3),shard:v100:32(S:0-3)"})
    (said,) = check_shard_sockets(nodes, space_sharing=True)
    assert "node d: GPUs (shards) bound to 4 sockets" in said["finding"], said


def test_pair_rows_are_offered_while_one_node_of_ours_with_shards_is_not_bound_to_sockets():
    class Sharing(SpaceSharing):
        partitions = {"v100": "v100"}

    def node(name, sockets, partition="v100", shards=16):
        return SlurmNode(name, ("IDLE",), (partition,), "v100", 4, shards=shards, shard_sockets=sockets)

    b = Sharing()
    b._nodes = []
    assert b.max_pair_gpus == 1                 # nothing known yet: what the config allows
    b._nodes = [node("a", 2), node("b", 2), node("c", 0, "other"), node("d", 0, shards=0)]
    assert b.max_pair_gpus == 0                 # (c is not ours, d has no shards)
    b._nodes.append(node("e", 1))
    assert b.max_pair_gpus == 1
    b.max_pair_gpus = 2
    assert (b.max_pair_gpus, b.pair_limit) == (2, 2)

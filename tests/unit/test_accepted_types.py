"""A job restricted to some GPU types (types=, sbatch -p, --constraint): never given a share
of another type, never started there; an unknown type is said clearly."""
from __future__ import annotations

import numpy as np
import pytest

from slurm_gavel.core.mechanism import Placement
from slurm_gavel.policies import POLICIES, make_policy
from slurm_gavel.slurm.feasibility import accepts, node_refuses
from slurm_gavel.slurm.flags import parse_comment
from slurm_gavel.slurm.records import SlurmJob, SlurmNode

from tests.support.inputs import make_input


TYPES = ("v100", "p100", "k80")


# -- the policy: a refused type is an infeasible entry ------------------------------
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_no_policy_gives_a_share_on_a_refused_type(name):
    """Job 0 accepts k80 only (what the engine's mask makes of its restriction: NaN
    elsewhere) although v100 runs it 10x faster and is free; the others take the rest."""
    t = np.array([[10.0, 5.0, 1.0], [10.0, 5.0, 1.0], [4.0, 3.0, 2.0]])
    t[0, :2] = np.nan
    slo = np.array([np.nan, np.nan, np.nan])
    inp = make_input(t, [2, 2, 2], types=TYPES, steps_remaining=np.full(3, 1000.0),
                     prices=np.array([3.0, 2.0, 1.0]), slo=slo)
    for agnostic in (False, True):
        alloc = make_policy(name, agnostic=agnostic).allocate(inp)
        assert alloc.x[0, 0] == 0 and alloc.x[0, 1] == 0, (name, agnostic, alloc.x)


# -- the backend's narrowing (feasibility.accepts) ------------------------------------
NODES = [SlurmNode("v100-0", ("IDLE",), ("v100",), "v100", 4, features=("v100", "volta")),
         SlurmNode("p100-0", ("IDLE",), ("p100", "gpu"), "p100", 4, features=("p100",)),
         SlurmNode("k80-0", ("IDLE",), ("k80", "gpu"), "k80", 4, features=("k80",)),
         SlurmNode("cpu-0", ("IDLE",), ("cpu",), None, 0)]


TYPE_OF = {"v100-0": "v100", "p100-0": "p100", "k80-0": "k80", "cpu-0": None}
ANY = Placement(one_server=True)


def flags(comment, partition=None):
    return parse_comment(comment, partition=partition)


def test_types_narrow_the_placement():
    p, hold = accepts(flags("gavel types=k80"), ANY, NODES, TYPE_OF)
    assert hold == "" and p.worker_types == frozenset({"k80"}) and p.one_server
    p, hold = accepts(flags("gavel types=k80,v100"), ANY, NODES, TYPE_OF)
    assert p.worker_types == frozenset({"k80", "v100"})
    assert accepts(flags("gavel"), ANY, NODES, TYPE_OF) == (ANY, "")


def test_the_partition_list_given_at_submission_narrows_the_placement():
    p, hold = accepts(flags("gavel", "p100,k80"), ANY, NODES, TYPE_OF)
    assert hold == "" and p.worker_types == frozenset({"p100", "k80"})
    p, hold = accepts(flags("gavel", "gpu"), ANY, NODES, TYPE_OF)     # a partition over two types
    assert p.worker_types == frozenset({"p100", "k80"})
    p, hold = accepts(flags("gavel types=k80,v100", "p100,k80"), ANY, NODES, TYPE_OF)
    assert p.worker_types == frozenset({"k80"})
    p, hold = accepts(flags("gavel", "cpu"), ANY, NODES, TYPE_OF)
    assert hold.startswith("submitted to partition cpu, where the scheduler has no GPUs")
    p, hold = accepts(flags("gavel types=v100", "k80"), ANY, NODES, TYPE_OF)
    assert hold == "types=v100 and partition k80 share no GPU type"


def test_an_unknown_type_is_a_clear_hold_reason():
    p, hold = accepts(flags("gavel types=k80,a100"), ANY, NODES, TYPE_OF)
    assert hold == ("types=a100,k80: unknown GPU type a100 (this cluster has k80, p100, v100): "
                    "resubmit with known types")


def test_restricted_servers_and_types_meet():
    fits = Placement(worker_types=frozenset({"v100", "p100"}), servers=frozenset({"v100-0", "p100-0"}),
                     one_server=True)
    p, hold = accepts(flags("gavel types=p100,k80"), fits, NODES, TYPE_OF)
    assert p.worker_types == frozenset({"p100"}) and p.servers == frozenset({"p100-0"})
    p, hold = accepts(flags("gavel types=k80"), fits, NODES, TYPE_OF)
    assert hold == "accepts only k80, and fits no node there"


def slurm_job(features: str) -> SlurmJob:
    return SlurmJob("1", "j", "u", "a", "v100", ("PENDING",), "JobHeldUser", (), "gavel", "gavel:v1",
                    None, 1, 1, 0, 0.0, None, None, None, features=features)


@pytest.mark.parametrize("constraint, fits", [
    ("v100", {"v100-0"}), ("v100&volta", {"v100-0"}), ("v100|p100", {"v100-0", "p100-0"}),
    ("k80|a100", {"k80-0"}), ("a100|h100", set()),
    ("[v100|p100]", {"v100-0", "p100-0", "k80-0"}),      # fancier: left to Slurm
])
def test_constraint_features_pick_the_nodes(constraint, fits):
    job = slurm_job(constraint)
    assert {n.name for n in NODES[:3] if not node_refuses(job, n)} == fits

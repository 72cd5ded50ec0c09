"""decisions.decide: a round's starts and preemptions in words, from plain data."""
from slurm_gavel.core.mechanism import Assignment, RoundPlan
from slurm_gavel.slurm.decisions import decide

PARTS = {"gpu-v100": "v100", "gpu-k80": "k80"}


def a(job, wt, node, gpus=1):
    return Assignment((job,), wt, ((node, gpus),))


def test_a_start_names_partition_nodes_share_priority_and_the_move():
    before = (a("7", "v100", "g1"), a("12", "k80", "k1"))
    plan = RoundPlan(3, (a("12", "v100", "g1"),), (), (a("12", "v100", "g1"),), ("7",))
    out = {d.kind: d for d in decide(plan, before, PARTS, {"12": 2.1, "7": 0.8},
                                     {"12": {"v100": 0.45, "k80": 0.1}, "7": {"v100": 0.5}})}
    assert out["start"].line(3) == ("round 3: job 12: started on v100 (partition gpu-v100, nodes g1; "
                                    "share 0.45; priority 2.1; moved from k80)")
    assert out["preempt"].line(3) == ("round 3: job 7: preempted on v100 (partition gpu-v100, nodes g1) "
                                      "for job 12 (priority 2.1 vs 0.8)")
    assert out["preempt"].partition == "gpu-v100" and out["preempt"].nodes == ("g1",)


def test_exploring_no_share_and_no_taker():
    before = (a("7", "k80", "k1"),)
    plan = RoundPlan(0, (a("9", "v100", "g1"),), (), (a("9", "v100", "g1"),), ("7",))
    out = {d.kind: d for d in decide(plan, before, PARTS, {"9": float("inf"), "7": 0.5},
                                     {"9": {"v100": 1.0}, "7": {"v100": 0.0, "k80": 0.0}},
                                     {"9": "explore"})}
    assert "priority inf; exploring v100: its speed there is not measured yet" in out["start"].detail
    assert out["preempt"].detail == ("on k80 (partition gpu-k80, nodes k1): the allocation gives it no "
                                     "GPU time now")

"""decisions.decide: a round's starts and preemptions in words, from plain data."""
from slurm_gavel.core.plan import Assignment, RoundPlan
from slurm_gavel.daemon.decisions import decide

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
                                      "for job 12 (job 12's priority 2.1, job 7's 0.8)")
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


def test_metrics_count_preemptions_by_type_and_migrations_from_to():
    import numpy as np

    from slurm_gavel.core.model import Allocation
    from slurm_gavel.daemon.metrics import Metrics

    m = Metrics(per_job=True)
    value = m.registry.get_sample_value
    r0 = RoundPlan(0, (a("7", "v100", "g1"), a("12", "k80", "k1", 2)), (),
                   (a("7", "v100", "g1"), a("12", "k80", "k1", 2)), ())
    alloc = Allocation(("7", "12"), ("v100", "k80"), np.array([[0.5, 0.0], [0.5, 0.5]]), policy="test")

    class Inp:
        job_ids, scale_factors = ("7", "12"), np.array([1, 2])

    m.round(r0, alloc, Inp, PARTS, 0.2, active=("7", "12"))
    r1 = RoundPlan(1, (a("12", "v100", "g1", 2),), (), (a("12", "v100", "g1", 2),), ("7",))
    m.round(r1, alloc, Inp, PARTS, 0.3, active=("7", "12"))
    assert value("slurm_gavel_preemptions_total", {"partition": "gpu-v100", "gpu_type": "v100"}) == 1
    assert value("slurm_gavel_migrations_total", {"from_gpu_type": "k80", "to_gpu_type": "v100"}) == 1
    # 0.5 x 1 GPU + 0.5 x 2 GPUs on v100, 0.5 x 2 on k80
    assert value("slurm_gavel_allocation_gpus", {"partition": "gpu-v100", "gpu_type": "v100"}) == 1.5
    assert value("slurm_gavel_allocation_gpus", {"partition": "gpu-k80", "gpu_type": "k80"}) == 1.0
    assert value("slurm_gavel_round_duration_seconds_count") == 2
    assert value("slurm_gavel_job_allocation_share", {"job": "12", "partition": "gpu-k80",
                                                      "gpu_type": "k80"}) == 0.5
    m.round(RoundPlan(2, (), (), (), ()), Allocation((), ("v100", "k80"), np.zeros((0, 2)), policy="test"), Inp, PARTS,
            0.1, active=())
    assert value("slurm_gavel_job_allocation_share", {"job": "12", "partition": "gpu-k80",
                                                      "gpu_type": "k80"}) is None     # it left


def test_a_job_released_but_never_started_is_not_said_preempted_or_moved():
    # job 7 was released on v100 last round and Slurm never ran it: taking it back is no
    # preemption, and starting job 12 (released on k80, never run) on v100 is no move
    before = (a("7", "v100", "g1"), a("12", "k80", "k1"))
    plan = RoundPlan(3, (a("12", "v100", "g1"),), (), (a("12", "v100", "g1"),), ("7",))
    out = {d.kind: d for d in decide(plan, before, PARTS, {"12": 2.1, "7": 0.8},
                                     {"12": {"v100": 0.45}, "7": {"v100": 0.5}},
                                     unstarted={"7", "12"})}
    assert set(out) == {"start", "take_back"}
    moved = RoundPlan(4, (a("7", "k80", "k1"),), (), (a("7", "k80", "k1"),), ("7",))
    (back, start) = sorted(decide(moved, (a("7", "v100", "g1"),), PARTS, {"7": 0.8}, {"7": {"k80": 1.0}},
                                  unstarted={"7"}), key=lambda d: d.kind, reverse=True)
    assert back.detail == ("on v100 (partition gpu-v100, nodes g1) but not started by Slurm; "
                           "taken back: planned on k80 instead")
    assert out["take_back"].line(3) == (
        "round 3: job 7: released on v100 (partition gpu-v100, nodes g1) but not started by "
        "Slurm; taken back for job 12 (job 12's priority 2.1, job 7's 0.8)")
    assert "preempted" not in out["take_back"].line(3)
    assert out["start"].detail == ("on v100 (partition gpu-v100, nodes g1; share 0.45; priority 2.1; "
                                   "released on k80 last round but not started by Slurm; taken back)")
    assert "moved" not in out["start"].detail
    # a job that ran is preempted and moved as before
    out = {d.kind: d for d in decide(plan, before, PARTS, {"12": 2.1, "7": 0.8},
                                     {"12": {"v100": 0.45}, "7": {"v100": 0.5}}, unstarted={"99"})}
    assert set(out) == {"start", "preempt"} and "moved from k80" in out["start"].detail


def test_taken_back_events_read_as_what_happened():
    from slurm_gavel.daemon.views import words

    said = words("take_back", "on v100 (partition v100, nodes n1) but not started by Slurm; "
                              "taken back: others have higher priority now (its priority 0.8)")
    assert said.startswith("released on v100 (partition v100, nodes n1) but not started by Slurm; "
                           "taken back")


def test_metrics_count_no_preemption_or_migration_for_a_job_taken_back():
    from slurm_gavel.daemon.metrics import Metrics

    m = Metrics()
    value = m.registry.get_sample_value
    m.round(RoundPlan(0, (a("7", "v100", "g1"),), (), (a("7", "v100", "g1"),), ()), None, None, PARTS,
            0.1, active=("7",))
    # released on v100, never started by Slurm, taken back and released on k80
    m.round(RoundPlan(1, (a("7", "k80", "k1"),), (), (a("7", "k80", "k1"),), ("7",)), None, None,
            PARTS, 0.1, active=("7",), unstarted={"7"})
    assert not value("slurm_gavel_preemptions_total", {"partition": "gpu-v100", "gpu_type": "v100"})
    assert not value("slurm_gavel_migrations_total", {"from_gpu_type": "v100", "to_gpu_type": "k80"})
    m.round(RoundPlan(2, (a("7", "v100", "g1"),), (), (a("7", "v100", "g1"),), ("7",)), None, None,
            PARTS, 0.1, active=("7",))            # one that ran on k80: moved
    assert value("slurm_gavel_migrations_total", {"from_gpu_type": "k80", "to_gpu_type": "v100"}) == 1
    assert value("slurm_gavel_preemptions_total", {"partition": "gpu-k80", "gpu_type": "k80"}) == 1

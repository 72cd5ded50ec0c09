"""Each policy means what its name says: FIFO, FTF's rho and the agnostic view, on hand-checked cases."""
from __future__ import annotations

import numpy as np
import pytest

from slurm_gavel.policies import Alias, make_policy, resolve
from tests.support.inputs import assert_feasible, make_input

# Arrival order below: job 0 earliest (largest time since arrival).
EARLIEST_FIRST = np.array([30.0, 20.0, 10.0])


# -- FIFO -------------------------------------------------------------------------

def test_fifo_is_arrival_order_each_job_on_its_fastest_free_type():
    """Job 0 takes the V100 (its fastest); job 1 gets the K80 left; job 2, which would
    rather have the K80 than anyone, still waits behind them."""
    inp = make_input([[10.0, 5.0], [4.0, 1.0], [1.0, 9.0]], [1, 1], ("v100", "k80"),
                     time_since_arrival=EARLIEST_FIRST)
    alloc = make_policy("fifo").allocate(inp)
    assert alloc.x.tolist() == [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]


def test_fifo_ranked_keeps_the_ranking_lp():
    """The ranking LP lets the late job that suits the free type overtake: a different policy."""
    inp = make_input([[10.0, 5.0], [4.0, 1.0], [1.0, 9.0]], [1, 1], ("v100", "k80"),
                     time_since_arrival=EARLIEST_FIRST)
    alloc = make_policy("fifo_ranked").allocate(inp)
    assert alloc.x[2, 1] == pytest.approx(1.0, abs=1e-6)
    assert alloc.x[1].sum() == pytest.approx(0.0, abs=1e-6)


def test_fifo_head_of_line_blocks_when_no_type_has_room():
    """Job 1 needs 2 GPUs and only 1 is free: the queue stops there, job 2 waits although
    a GPU it could use is idle (nobody overtakes)."""
    inp = make_input([[1.0], [1.0], [1.0]], [2], scale_factors=np.array([1, 2, 1]),
                     time_since_arrival=EARLIEST_FIRST)
    alloc = make_policy("fifo").allocate(inp)
    assert alloc.x[:, 0].tolist() == [1.0, 0.0, 0.0]


def test_fifo_skips_a_job_that_runs_on_none_of_the_free_types():
    """Job 1 runs only on the V100 that job 0 holds; it does not keep job 2 off the K80
    it can never use (as Gavel's fifo_perf)."""
    inp = make_input([[10.0, 5.0], [4.0, 0.0], [1.0, 9.0]], [1, 1], ("v100", "k80"),
                     time_since_arrival=EARLIEST_FIRST)
    alloc = make_policy("fifo").allocate(inp)
    assert alloc.x.tolist() == [[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]]


def test_fifo_arrival_ties_go_by_input_order_and_weights_do_not_reorder():
    inp = make_input([[1.0], [1.0], [1.0]], [1], time_since_arrival=np.array([5.0, 5.0, 5.0]),
                     weights=np.array([1.0, 1.0, 9.0]))
    assert make_policy("fifo").allocate(inp).x[:, 0].tolist() == [1.0, 0.0, 0.0]


def test_fifo_multi_gpu_job_takes_its_gpus_on_one_type():
    inp = make_input([[8.0, 4.0], [8.0, 4.0]], [2, 4], ("v100", "p100"),
                     scale_factors=np.array([4, 2]), time_since_arrival=np.array([2.0, 1.0]))
    alloc = make_policy("fifo").allocate(inp)
    assert alloc.x.tolist() == [[0.0, 1.0], [1.0, 0.0]]     # job 0 fits only the 4 P100s
    assert_feasible(alloc, inp)


def test_fifo_agnostic_is_type_blind_but_still_strict():
    """Type-blind: each running job's time is spread over the types; the third job waits."""
    inp = make_input([[10.0, 5.0], [4.0, 1.0], [1.0, 9.0]], [1, 1], ("v100", "k80"),
                     time_since_arrival=EARLIEST_FIRST)
    alloc = make_policy("fifo", agnostic=True).allocate(inp)
    assert alloc.x.sum(axis=1) == pytest.approx([1.0, 1.0, 0.0])
    assert alloc.x[0] == pytest.approx([0.5, 0.5])
    assert_feasible(alloc, inp)


def test_old_fifo_names_still_resolve():
    assert resolve("fifo_perf").policy == "fifo"
    assert resolve("fifo_packed") == Alias("fifo", space_sharing=True)


# -- FTF --------------------------------------------------------------------------

def test_ftf_rho_divides_by_isolated_time_of_the_work_done_plus_the_rest():
    """One GPU, two jobs of 100 steps at 1 step/s; an isolated share is half the GPU.

    Round 1 (t = 0): symmetric, half each.  Then 100 s later job 0 has done 50 steps
    (50 / 0.5 = 100 s of isolated time) and job 1 none (it was preempted):

        rho_0 = (100 + 50 / x_0) / (100 + 50 / 0.5),  rho_1 = (100 + 100 / x_1) / (0 + 100 / 0.5)

    Equal at 50 / x_0 = 100 / x_1: x = (1/3, 2/3).  (Dividing by the time since arrival
    instead, rho_1 = (100 + 100 / x_1) / (100 + 200), gives (1/2, 1/2): the job that
    waited gets no push.)"""
    policy = make_policy("ftf")
    first = make_input([[1.0], [1.0]], [1], steps_remaining=np.array([100.0, 100.0]),
                       time_since_arrival=np.array([0.0, 0.0]))
    assert policy.allocate(first).x[:, 0] == pytest.approx([0.5, 0.5], abs=1e-4)
    later = make_input([[1.0], [1.0]], [1], steps_remaining=np.array([50.0, 100.0]),
                       time_since_arrival=np.array([100.0, 100.0]))
    alloc = policy.allocate(later)
    assert alloc.x[:, 0] == pytest.approx([1 / 3, 2 / 3], abs=1e-4)
    assert alloc.objective == pytest.approx((100 + 100 / (2 / 3)) / 200, rel=1e-4)
    # Asking again about the same state changes nothing (no work was done in between).
    assert policy.allocate(later).x[:, 0] == pytest.approx([1 / 3, 2 / 3], abs=1e-4)


def test_ftf_isolated_time_uses_the_share_of_the_round_it_was_earned_in():
    """Job 0 alone (isolated share: the whole GPU, 1 step/s) does 40 steps = 40 s of isolated
    time; then job 1 arrives and the isolated share halves.  rho_0 = (40 + 60 / x_0) / (40 + 120),
    rho_1 = (0 + 100 / x_1) / 200, x_1 = 1 - x_0: equal where 2 x_0^2 + 5 x_0 - 3 = 0, x_0 = 1/2."""
    policy = make_policy("ftf")
    policy.allocate(make_input([[1.0]], [1], steps_remaining=np.array([100.0]),
                               time_since_arrival=np.array([0.0])))
    both = make_input([[1.0], [1.0]], [1], steps_remaining=np.array([60.0, 100.0]),
                      time_since_arrival=np.array([40.0, 0.0]))
    x0 = policy.allocate(both).x[0, 0]
    # (40 + 60/x0)/160 = (100/(1-x0))/200  <=>  5(40 + 60/x0)(1-x0) = 400
    residual = 5 * (40 + 60 / x0) * (1 - x0) - 400
    assert residual == pytest.approx(0.0, abs=1e-2)
    assert x0 == pytest.approx(0.5, abs=1e-3)


def test_ftf_forgets_finished_jobs():
    policy = make_policy("ftf")
    policy.allocate(make_input([[1.0], [1.0]], [1], steps_remaining=np.array([100.0, 50.0]),
                               time_since_arrival=np.array([0.0, 0.0])))
    policy.allocate(make_input([[1.0]], [1], steps_remaining=np.array([90.0]),
                               time_since_arrival=np.array([10.0])))
    inner = policy
    while hasattr(inner, "policy"):
        inner = inner.policy
    assert inner.isolated_seconds == pytest.approx({"0": 10 / 0.5})


# -- agnostic ---------------------------------------------------------------------

def test_type_blind_sees_every_type_at_the_reference_speed():
    """Gavel's agnostic baselines see each job at its V100 speed on every type."""
    inp = make_input([[10.0, 30.0, 2.0], [8.0, 2.0, 0.0], [9.0, 3.0, 1.0]], [1, 1, 1],
                     ("v100", "p100", "k80"))
    blind = inp.type_blind()
    assert blind.throughputs.tolist() == [[10.0, 10.0, 10.0], [8.0, 8.0, 0.0], [9.0, 9.0, 9.0]]


def test_type_blind_reference_without_a_v100_is_the_type_most_jobs_run_near_best_on():
    inp = make_input([[1.0, 3.0], [2.0, 5.0], [4.0, 3.0]], [1, 1], ("a100", "t4"))
    assert inp.type_blind().throughputs[:, 0].tolist() == [3.0, 5.0, 3.0]


def test_type_blind_job_not_running_on_the_reference_uses_its_fastest():
    inp = make_input([[0.0, 3.0, 2.0], [1.0, 1.0, 1.0]], [1, 1, 1], ("v100", "p100", "k80"))
    assert inp.type_blind().throughputs[0].tolist() == [0.0, 3.0, 3.0]


def test_ftf_agnostic_estimates_times_at_the_reference_speed():
    """One job, V100 10 steps/s, K80 1 step/s, one GPU of each.  Type-blind, its isolated
    share (half of each GPU) runs at 10 steps/s and the whole row at 10: rho = 1 whatever
    the type, so the row total is 1 (split by GPU count)."""
    inp = make_input([[10.0, 1.0]], [1, 1], ("v100", "k80"), steps_remaining=np.array([100.0]),
                     time_since_arrival=np.array([0.0]))
    alloc = make_policy("ftf", agnostic=True).allocate(inp)
    assert alloc.x[0] == pytest.approx([0.5, 0.5], abs=1e-4)


# -- FIFO with packing (Gavel's fifo_packed) --------------------------------------

def _packing_input(share):
    """One V100; job 0 (earliest) runs, job 1 waits; the pair runs each at `share` of its solo speed."""
    return make_input([[10.0], [4.0]], [1], ("v100",), time_since_arrival=np.array([2.0, 1.0]),
                      pair_jobs=np.array([[0, 1]]),
                      pair_throughputs=np.array([[[10.0 * share, 4.0 * share]]]))


def test_fifo_packed_pairs_a_waiting_job_with_a_running_one_when_it_pays():
    """Combined normalized throughput 0.8 + 0.8 = 1.6 > 1.5: job 1 joins job 0 on the V100."""
    alloc = make_policy("fifo_packed").allocate(_packing_input(0.8))
    assert alloc.x[:, 0].tolist() == [0.0, 0.0]
    assert alloc.x_pairs.tolist() == [[1.0]]
    assert_feasible(alloc, _packing_input(0.8))


def test_fifo_packed_does_not_pack_below_the_threshold():
    """0.7 + 0.7 = 1.4: better than taking turns, but under Gavel's 1.5: job 1 waits."""
    alloc = make_policy("fifo_packed").allocate(_packing_input(0.7))
    assert alloc.x[:, 0].tolist() == [1.0, 0.0]
    assert alloc.x_pairs.tolist() == [[0.0]]


def test_fifo_without_space_sharing_ignores_pairs():
    alloc = make_policy("fifo").allocate(_packing_input(0.8))
    assert alloc.x[:, 0].tolist() == [1.0, 0.0] and not alloc.x_pairs.any()

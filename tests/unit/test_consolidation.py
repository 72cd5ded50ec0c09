"""Placement keeps multi-GPU rows on as few servers as possible (issue 26).

A multi-GPU job spread over servers runs at its unconsolidated throughput
(0.42-0.81 of the consolidated one on Gavel's physical-cluster table), while a
1-GPU job moved to another server loses one restart.  So the mechanism moves
smaller rows off a server to give a larger row that server whole, rather than
spread the larger row; it never splits a row to make room for another, and it
moves nothing when the smaller rows have no whole place elsewhere.  Every case
is small enough to check by hand.
"""
from __future__ import annotations

import numpy as np

from slurm_gavel.core.ledger import Ledger
from slurm_gavel.core.mechanism import place, plan_round
from slurm_gavel.core.model import Allocation
from slurm_gavel.core.plan import Assignment, Placement, Server

TWO_FOURS = (Server("a", "v100", 4), Server("b", "v100", 4))


def on(job, *servers, worker_type="v100"):
    jobs = job if isinstance(job, tuple) else (job,)
    return Assignment(jobs, worker_type, tuple(servers))


def where(assignments):
    return {a.jobs if len(a.jobs) > 1 else a.jobs[0]: a.servers for a in assignments}


def used(placed):
    """{server: GPUs taken} over a round's assignments."""
    out: dict[str, int] = {}
    for a in placed:
        for name, count in a.servers:
            out[name] = out.get(name, 0) + count
    return out


def test_two_one_gpu_jobs_move_so_a_four_gpu_job_is_not_split():
    # a: s1 s2 + 2 free; b: t1 t2 + 2 free.  Today the 4-GPU job gets 2 + 2.
    previous = {(j,): on(j, (s, 1)) for j, s in (("s1", "a"), ("s2", "a"), ("t1", "b"), ("t2", "b"))}
    picks = [(("big",), "v100", 4)] + [((j,), "v100", 1) for j in ("s1", "s2", "t1", "t2")]
    placed = place(picks, TWO_FOURS, previous)
    at = where(placed)
    assert len(at["big"]) == 1 and at["big"][0][1] == 4            # whole, on one server
    home = at["big"][0][0]
    other = "b" if home == "a" else "a"
    assert all(at[j] == ((other, 1),) for j in ("s1", "s2", "t1", "t2"))
    moved = [j for j in ("s1", "s2", "t1", "t2") if previous[(j,)] not in placed]
    assert len(moved) == 2                                           # the fewest moves: two, not four
    assert used(placed) == {"a": 4, "b": 4}


def test_a_spread_row_that_keeps_its_type_is_consolidated_when_a_server_can_hold_it():
    # big ran 2 + 2 last round; x and y (1 GPU each) sit on b.  a alone can hold big.
    previous = {("big",): on("big", ("a", 2), ("b", 2)), ("x",): on("x", ("b", 1)), ("y",): on("y", ("b", 1))}
    picks = [(("big",), "v100", 4), (("x",), "v100", 1), (("y",), "v100", 1)]
    at = where(place(picks, TWO_FOURS, previous))
    assert at["big"] == (("a", 4),)
    assert at["x"] == (("b", 1),) and at["y"] == (("b", 1),)          # the small ones stay


def test_a_spread_row_is_consolidated_by_moving_one_small_job():
    # a: big 2 + s + 1 free; b: big 2 + t + 1 free; c: u (full).  Moving s to b gives a to big.
    servers = (Server("a", "v100", 4), Server("b", "v100", 4), Server("c", "v100", 1))
    previous = {("big",): on("big", ("a", 2), ("b", 2)), ("s",): on("s", ("a", 1)),
                ("t",): on("t", ("b", 1)), ("u",): on("u", ("c", 1))}
    picks = [(("big",), "v100", 4), (("s",), "v100", 1), (("t",), "v100", 1), (("u",), "v100", 1)]
    placed = place(picks, servers, previous)
    at = where(placed)
    assert len(at["big"]) == 1 and at["big"][0][1] == 4
    assert sum(previous[r] not in placed for r in previous) == 2     # big and one 1-GPU job
    assert used(placed) == {"a": 4, "b": 2, "c": 1} or used(placed) == {"a": 2, "b": 4, "c": 1}


def test_nothing_moves_for_a_row_when_the_others_are_as_large_or_may_not_move():
    # a: big 1 + p 3; b: big 1 + q 3: p and q are larger than big, they are not moved for it
    previous = {("big",): on("big", ("a", 1), ("b", 1)), ("p",): on("p", ("a", 3)), ("q",): on("q", ("b", 3))}
    picks = [(("big",), "v100", 2), (("p",), "v100", 3), (("q",), "v100", 3)]
    placed = place(picks, TWO_FOURS, previous)
    assert all(previous[r] in placed for r in previous)
    # s1 s2 may run only on a, t1 t2 only on b: no server can be emptied, big stays spread
    full = {("big",): on("big", ("a", 2), ("b", 2)), ("s1",): on("s1", ("a", 1)), ("s2",): on("s2", ("a", 1)),
            ("t1",): on("t1", ("b", 1)), ("t2",): on("t2", ("b", 1))}
    rules = {j: Placement(servers=frozenset({s})) for j, s in (("s1", "a"), ("s2", "a"), ("t1", "b"), ("t2", "b"))}
    picks = [(("big",), "v100", 4)] + [((j,), "v100", 1) for j in ("s1", "s2", "t1", "t2")]
    placed = place(picks, TWO_FOURS, full, rules)
    assert all(full[r] in placed for r in full)


def test_a_row_is_never_split_or_moved_for_one_of_its_own_size():
    # a: p (2 GPUs) + 2 free; b: q (2 GPUs) + 2 free; a new 4-GPU job comes.
    # p or q moves (2 < 4, and the other server holds it whole): big is whole.
    previous = {("p",): on("p", ("a", 2)), ("q",): on("q", ("b", 2))}
    picks = [(("big",), "v100", 4), (("p",), "v100", 2), (("q",), "v100", 2)]
    placed = place(picks, TWO_FOURS, previous)
    at = where(placed)
    assert len(at["big"]) == 1 and len(at["p"]) == 1 and len(at["q"]) == 1
    # two 2-GPU newcomers where each server has 2 free: both fit as they are, nobody moves
    picks = [(("n1",), "v100", 2), (("n2",), "v100", 2), (("p",), "v100", 2), (("q",), "v100", 2)]
    placed = place(picks, TWO_FOURS, previous)
    assert previous[("p",)] in placed and previous[("q",)] in placed


def test_a_pair_moves_as_one_row_on_the_same_gpus():
    # a: the pair (x, y) on one GPU + z + 2 free; b: w + 3 free.  Emptying a moves two
    # rows (the pair, both jobs on their one GPU, and z); emptying b moves w alone.
    previous = {("x", "y"): on(("x", "y"), ("a", 1)), ("z",): on("z", ("a", 1)), ("w",): on("w", ("b", 1))}
    picks = [(("big",), "v100", 4), (("x", "y"), "v100", 1), (("z",), "v100", 1), (("w",), "v100", 1)]
    placed = place(picks, TWO_FOURS, previous)
    at = where(placed)
    assert at["big"] == (("b", 4),)
    assert at[("x", "y")] == (("a", 1),) and at["z"] == (("a", 1),) and at["w"] == (("a", 1),)
    assert previous[("x", "y")] in placed and previous[("z",)] in placed   # only w moved


def test_a_one_server_job_is_placed_by_moving_small_ones_instead_of_being_dropped():
    # A backend that cannot spread a job (one_server): today the pick fails and the
    # round is picked again without it, though moving one 1-GPU job makes room.
    alloc = Allocation(("big", "s", "t"), ("v100",), np.array([[1.0], [1.0], [1.0]]), "x")
    previous = [on("s", ("a", 1)), on("t", ("b", 1))]
    # b: 3 free; a: 3 free.  big (4 GPUs, one server) fits only if s or t moves.
    ledger = Ledger(("v100",))
    plan = plan_round(1, alloc, ledger, TWO_FOURS, {"big": 4, "s": 1, "t": 1}, previous,
                      placements={"big": Placement(one_server=True)})
    at = where(plan.assignments)
    assert "big" in at and len(at["big"]) == 1
    assert len(plan.preempt) == 1                       # one of s, t moved to its neighbour
    assert used(plan.assignments) in ({"a": 4, "b": 2}, {"a": 2, "b": 4})

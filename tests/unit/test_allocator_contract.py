"""One contract for every allocator (core/interfaces.py Allocator), run on each.

The allocators: `Immediate` (solves inside `submit`: the simulator's),
`Delayed` (a solve takes a fixed number of clock seconds: a slow solver,
reproducibly) and `Background` (solves in a worker thread: the daemon's).  A
harness says when a submitted input's result may be asked for (`ready`): at
once, `DELAY` clock seconds later, or once `wait` returns.  The cases never
differ.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from slurm_gavel.core.errors import SolverError
from slurm_gavel.core.interfaces import Allocator
from slurm_gavel.core.model import Allocation, PolicyInput
from slurm_gavel.core.recompute import Background, Delayed, Failure, Immediate
from slurm_gavel.policies import make_policy

DELAY = 50.0
NOW = 1000.0


class Harness:
    kind: str

    def make(self, policy, on_error=None) -> Allocator:
        raise NotImplementedError

    def ready(self, allocator: Allocator, submitted: float) -> float:
        """The clock time from which the result of the last input submitted at `submitted` shows."""
        assert allocator.wait(timeout=30)
        return submitted


class ImmediateHarness(Harness):
    kind = "immediate"

    def make(self, policy, on_error=None):
        return Immediate(policy, on_error)


class DelayedHarness(Harness):
    kind = "delayed"

    def make(self, policy, on_error=None):
        return Delayed(policy, DELAY, on_error)

    def ready(self, allocator, submitted):
        # one solve at a time, each DELAY long: a queued input finishes after the running one
        return submitted + 2 * DELAY


class BackgroundHarness(Harness):
    kind = "background"

    def make(self, policy, on_error=None):
        return Background(policy, on_error)


@pytest.fixture(params=[ImmediateHarness, DelayedHarness, BackgroundHarness], ids=lambda h: h.kind)
def harness(request):
    return request.param()


@pytest.fixture
def made(harness):
    """harness.make, closing every allocator made."""
    made = []

    def make(policy, on_error=None):
        allocator = harness.make(policy, on_error)
        made.append(allocator)
        return allocator
    yield make
    for allocator in made:
        allocator.close()


def policy_input(jobs: tuple[str, ...]) -> PolicyInput:
    n = len(jobs)
    return PolicyInput(worker_types=("v100", "k80"), counts=np.array([1.0, 1.0]), job_ids=jobs,
                       throughputs=np.tile([[4.0, 1.0]], (n, 1)), scale_factors=np.ones(n, dtype=int),
                       weights=np.ones(n))


class Gated:
    """A policy whose solves fail while `failing` is set, and can be held until released."""

    def __init__(self):
        self.inner = make_policy("max_min_fairness")
        self.failing = False
        self.release = threading.Event()
        self.release.set()
        self.solved: list[tuple[str, ...]] = []

    def allocate(self, inp: PolicyInput) -> Allocation:
        self.release.wait(30)
        if self.failing:
            raise SolverError("infeasible (on purpose)")
        self.solved.append(inp.job_ids)
        return self.inner.allocate(inp)


def test_it_is_an_allocator_with_nothing_before_a_submit(harness, made):
    allocator = made(Gated())
    assert isinstance(allocator, Allocator)
    assert allocator.latest(NOW) is None
    assert not allocator.pending
    assert allocator.wait(timeout=1)


def test_a_submitted_input_is_solved_by_the_policy_and_then_nothing_is_pending(harness, made):
    policy = Gated()
    allocator = made(policy)
    inp = policy_input(("a", "b"))
    allocator.submit(inp, NOW)
    got = allocator.latest(harness.ready(allocator, NOW))
    assert got is not None and got.job_ids == ("a", "b")
    np.testing.assert_allclose(got.x, policy.inner.allocate(inp).x)
    assert not allocator.pending
    assert allocator.solves == 1 and allocator.solve_seconds >= 0


def test_the_newest_input_wins(harness, made):
    policy = Gated()
    if harness.kind == "background":
        policy.release.clear()      # the first solve is held while the others come in
    allocator = made(policy)
    allocator.submit(policy_input(("a",)), NOW)
    allocator.submit(policy_input(("a", "b")), NOW)
    allocator.submit(policy_input(("a", "b", "c")), NOW)
    policy.release.set()
    got = allocator.latest(harness.ready(allocator, NOW))
    assert got.job_ids == ("a", "b", "c")
    assert policy.solved[-1] == ("a", "b", "c")
    assert ("a", "b") not in policy.solved or harness.kind == "immediate"    # replaced while queued


def test_a_failed_solve_is_recorded_and_leaves_the_previous_allocation_in_force(harness, made):
    policy = Gated()
    failures: list[Failure] = []
    allocator = made(policy, failures.append)
    allocator.submit(policy_input(("a",)), NOW)
    first = allocator.latest(harness.ready(allocator, NOW))
    assert first.job_ids == ("a",)
    policy.failing = True
    later = NOW + 10 * DELAY
    allocator.submit(policy_input(("a", "b")), later)
    assert allocator.latest(harness.ready(allocator, later)) is first
    assert [f.error for f in allocator.errors] == ["SolverError: infeasible (on purpose)"]
    assert failures == allocator.errors and failures[0].time >= later
    assert not allocator.pending

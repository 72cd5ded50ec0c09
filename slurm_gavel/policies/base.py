"""The one interface every policy implements, and the heterogeneity-agnostic wrapper."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
from typing import Protocol, runtime_checkable

from ..core.model import Allocation, PolicyInput
from .program import repair


@runtime_checkable
class Policy(Protocol):
    """allocate(PolicyInput) -> Allocation; `name` and `summary` describe it.

    A policy that supports space sharing uses the input's pair rows; one with
    `takes_all_pairs` is handed every pair, others a pruned list (see
    space_sharing.WithPairs).
    """

    name: str
    summary: str
    supports_space_sharing: bool

    def allocate(self, inp: PolicyInput) -> Allocation: ...


class Agnostic:
    """The heterogeneity-agnostic baseline of a policy: same objective, type-blind throughputs.

    The wrapped policy sees every job run at one speed on every type it fits
    (`PolicyInput.type_blind`), as a scheduler that ignores GPU generations
    would.  To such a policy only each row's total share of time means
    anything: which types it comes from is a tie the solver breaks by column
    order (a lone job would always land on the last type listed, the K80 in
    `v100,p100,k80`, say).  So each row's time is spread over the types it
    fits in proportion to their GPU counts (then scaled back where a type
    would be oversubscribed): the baseline a type-blind scheduler with a
    shared queue gives, the same whatever order the types are listed in.
    Effective throughputs computed from the Allocation with the true input
    show what that X really delivers.  The allocation is marked `type_blind`:
    the mechanism does not hold each job to that split (it is a tie, not a
    target) but fills the types one after another in an order drawn each round,
    as Gavel's mechanism does for its agnostic policies (core/mechanism.py).

    The wrapped policy runs without its Pareto stage and tie-break
    (`LinearPolicy.pareto`): to a type-blind policy every job of a row total
    is worth the same on every type, so a second stage would only pick among
    ties, and the baseline stays the one-stage max-min that Gavel's agnostic
    numbers are measured against.
    """

    def __init__(self, policy: Policy):
        self.policy = policy
        inner = policy
        while hasattr(inner, "policy"):
            inner = inner.policy
        if hasattr(inner, "pareto"):
            inner.pareto = False
        self.name = policy.name + "_agnostic"
        self.summary = "heterogeneity-agnostic " + policy.summary
        self.supports_space_sharing = policy.supports_space_sharing

    def allocate(self, inp: PolicyInput) -> Allocation:
        allocation = self.policy.allocate(inp.type_blind())
        x = spread(allocation.x, inp.feasible, inp.counts)
        x_pairs = allocation.x_pairs
        if len(allocation.pair_jobs):
            rows, found, _ = allocation.pair_rows_in(inp)
            feasible = np.zeros_like(x_pairs, dtype=bool)
            feasible[found] = inp.pair_feasible[rows[found]]
            x_pairs = spread(x_pairs, feasible, inp.counts)
        x, x_pairs = repair(inp, x, x_pairs, allocation.pair_jobs)
        return replace(allocation, x=x, x_pairs=x_pairs, policy=self.name, type_blind=True)


def spread(x: np.ndarray, feasible: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each row's total time, over its feasible types in proportion to their GPU counts."""
    weight = np.where(feasible, counts[None, :], 0.0)
    total = weight.sum(axis=1, keepdims=True)
    share = np.divide(weight, total, out=np.zeros_like(weight), where=total > 0)
    return x.sum(axis=1, keepdims=True) * share

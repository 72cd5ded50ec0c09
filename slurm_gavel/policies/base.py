"""The one interface every policy implements, and the heterogeneity-agnostic wrapper."""
from __future__ import annotations

from dataclasses import replace
from typing import Protocol, runtime_checkable

from ..model import Allocation, PolicyInput


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
    would.  Its X is returned unchanged; effective throughputs computed from
    the Allocation with the true input show what that X really delivers.
    """

    def __init__(self, policy: Policy):
        self.policy = policy
        self.name = policy.name + "_agnostic"
        self.summary = "heterogeneity-agnostic " + policy.summary
        self.supports_space_sharing = policy.supports_space_sharing

    def allocate(self, inp: PolicyInput) -> Allocation:
        allocation = self.policy.allocate(inp.type_blind())
        return replace(allocation, policy=self.name)

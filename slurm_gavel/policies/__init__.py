"""The policy library: every policy by name, and the aliases Gavel's users know.

Policies are classes; this table is the only place that maps a name to one.
`make_policy(name, agnostic=..., space_sharing=...)` returns an object with
`allocate(PolicyInput) -> Allocation`.

May import: `core` (the model and errors), numpy, cvxpy and HiGHS. Never
`estimator`, `slurm`, `sim` or `job`: a policy sees only T and job metadata.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import InputError, UnknownPolicyError
from ..core.model import Allocation, PolicyInput
from .base import Agnostic, Policy
from .baselines import AlloX, Gandiva, Isolated
from .cost import MinCost, MinCostSLO
from .fairness import FinishTimeFairness, MaxMinFairness
from .hierarchical import Hierarchical
from .ordering import Fifo, FifoRanked, ShortestJobFirst
from .space_sharing import WithPairs
from .throughput import Makespan, MaxThroughput

POLICIES: dict[str, type] = {
    cls.name: cls for cls in (
        MaxMinFairness, FinishTimeFairness, Fifo, FifoRanked, ShortestJobFirst, Makespan,
        MaxThroughput, MinCost, MinCostSLO, Isolated, AlloX, Gandiva, Hierarchical)
}


@dataclass(frozen=True)
class Alias:
    policy: str
    agnostic: bool = False
    space_sharing: bool = False


ALIASES: dict[str, Alias] = {
    "las": Alias("max_min_fairness"),
    "ftf": Alias("finish_time_fairness"),
    # Gavel's names.  Its plain `max_min_fairness`, `finish_time_fairness` and
    # `fifo` were its agnostic baselines; here those names are the aware
    # policies (pass --agnostic for the baseline).  Its other plain names keep
    # Gavel's meaning.
    "max_min_fairness_perf": Alias("max_min_fairness"),
    "max_min_fairness_packed": Alias("max_min_fairness", space_sharing=True),
    "finish_time_fairness_perf": Alias("finish_time_fairness"),
    "finish_time_fairness_packed": Alias("finish_time_fairness", space_sharing=True),
    "fifo_perf": Alias("fifo"),
    "fifo_packed": Alias("fifo", space_sharing=True),
    "min_total_duration": Alias("makespan", agnostic=True),
    "min_total_duration_perf": Alias("makespan"),
    "min_total_duration_packed": Alias("makespan", space_sharing=True),
    "max_sum_throughput_perf": Alias("max_throughput"),
    "max_sum_throughput_normalized_by_cost_perf": Alias("min_cost"),
    "max_sum_throughput_normalized_by_cost_packed": Alias("min_cost", space_sharing=True),
    "max_sum_throughput_normalized_by_cost_perf_SLOs": Alias("min_cost_slo"),
    "max_sum_throughput_normalized_by_cost_packed_SLOs": Alias("min_cost_slo", space_sharing=True),
    # `allox` and `gandiva` are Gavel's names too; Gavel's `gandiva` always packs.
    "gandiva_packed": Alias("gandiva", space_sharing=True),
    # Gavel's hierarchical policies (water filling over entities): entities, their weights and
    # per-entity policies come from the input.
    "max_min_fairness_water_filling": Alias("hierarchical"),
    "max_min_fairness_water_filling_perf": Alias("hierarchical"),
    "max_min_fairness_water_filling_packed": Alias("hierarchical", space_sharing=True),
}


def register(cls: type) -> type:
    """Add a policy class to the table (used by the modules defined below)."""
    POLICIES[cls.name] = cls
    return cls


def resolve(name: str) -> Alias:
    if name in POLICIES:
        return Alias(name)
    if name in ALIASES:
        return ALIASES[name]
    raise UnknownPolicyError(name, sorted(POLICIES))


class WithoutPairs:
    """Runs a policy with space sharing off: pair rows are dropped from the input."""

    def __init__(self, policy: Policy):
        self.policy = policy
        self.name, self.summary = policy.name, policy.summary
        self.supports_space_sharing = False

    def allocate(self, inp: PolicyInput) -> Allocation:
        return self.policy.allocate(inp.without_pairs())


def make_policy(name: str, agnostic: bool = False, space_sharing: bool = False) -> Policy:
    """The policy called `name` (or an alias), optionally agnostic and with space sharing."""
    alias = resolve(name)
    cls = POLICIES[alias.policy]
    space_sharing = space_sharing or alias.space_sharing
    if space_sharing and not cls.supports_space_sharing:
        raise InputError("--space-sharing", f"policy {alias.policy} does not support space sharing")
    policy: Policy = cls()
    policy = WithPairs(policy) if space_sharing else WithoutPairs(policy)
    if agnostic or alias.agnostic:
        policy = Agnostic(policy)
    return policy


__all__ = ["POLICIES", "ALIASES", "Alias", "Policy", "make_policy", "resolve", "register",
           "Allocation", "PolicyInput"]

"""Simulated jobs that belong to users or entities, as the Slurm backend's do: for the fairness
and entity-weight tests."""
from __future__ import annotations

from dataclasses import replace

from slurm_gavel.core.interfaces import Backend


def owners(n_array=300, n_small=3):
    """job index -> user: the array's 300 tasks first (submitted first), then bob's and carol's."""
    return ["alice"] * n_array + ["bob"] * n_small + ["carol"] * n_small


class Relabelled(Backend):
    """A simulated cluster whose observed jobs pass through `relabel` (a subclass says who owns
    each); everything else is the inner cluster's."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    quiet_until = property(lambda self: self.inner.quiet_until)
    max_pair_gpus = property(lambda self: self.inner.max_pair_gpus)

    def execute(self, plan, round_end):
        self.inner.execute(plan, round_end)

    def observe(self):
        obs = self.inner.observe()
        return replace(obs, jobs=tuple(self.relabel(j) for j in obs.jobs))

    def relabel(self, job):
        raise NotImplementedError


class Users(Relabelled):
    """A simulated cluster whose jobs belong to users (as the Slurm backend's do)."""

    def __init__(self, inner, users, accounts=None):
        super().__init__(inner)
        self.users, self.accounts = users, accounts or {}

    def relabel(self, job):
        user = self.users[int(job.id)]
        return replace(job, user=user, account=self.accounts.get(user, "lab"),
                       entity=f"flag{job.id}")         # an entity= flag per job must not split a user


class Entities(Relabelled):
    """A simulated cluster whose jobs belong to entities (as the Slurm backend's do: account)."""

    def __init__(self, inner, entities):
        super().__init__(inner)
        self.entities = entities

    def relabel(self, job):
        return replace(job, entity=self.entities[job.id])

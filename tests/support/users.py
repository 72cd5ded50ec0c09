"""Simulated jobs that belong to users, as the Slurm backend's do: for the fairness tests."""
from __future__ import annotations

from dataclasses import replace


def owners(n_array=300, n_small=3):
    """job index -> user: the array's 300 tasks first (submitted first), then bob's and carol's."""
    return ["alice"] * n_array + ["bob"] * n_small + ["carol"] * n_small


class Users:
    """A simulated cluster whose jobs belong to users (as the Slurm backend's do)."""

    def __init__(self, inner, users, accounts=None):
        self.inner, self.users, self.accounts = inner, users, accounts or {}

    def __getattr__(self, name):
        return getattr(self.inner, name)

    quiet_until = property(lambda self: self.inner.quiet_until)
    max_pair_gpus = property(lambda self: self.inner.max_pair_gpus)

    def execute(self, plan, round_end):
        self.inner.execute(plan, round_end)

    def observe(self):
        obs = self.inner.observe()
        return replace(obs, jobs=tuple(
            replace(j, user=self.users[int(j.id)], account=self.accounts.get(self.users[int(j.id)], "lab"),
                    entity=f"flag{j.id}")         # an entity= flag per job must not split a user
            for j in obs.jobs))

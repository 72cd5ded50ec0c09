"""Who shares with whom: the hierarchical policy's entities and their weights.

Two ways to say what an entity is (`SHARE_BY`):

* ``user`` (the daemon's default): every user is an entity, whatever number of
  jobs they submit; the cluster is shared between users first, then each
  user's share among their jobs.  The user name comes from Slurm, so a user
  cannot split themselves into several entities (the ``entity=`` flag is not
  read).  Weights name *accounts*: each account's weight is split equally
  among its users that have jobs (Slurm's fairshare tree, account then user);
  a user with jobs in two accounts gets a part of each.  With no account
  weight set at all, every user weighs 1.
* ``entity`` (the simulator's and Gavel's): a job's entity is whatever the
  backend put in `JobState.entity` (the ``entity=`` flag, else the Slurm
  account; a simulated job's own entity), and weights name entities.

Plain data; no I/O.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

USER, ENTITY = "user", "entity"
SHARE_BY = (USER, ENTITY)


def entity_of(job, share_by: str) -> str:
    """The entity `job` (JobState-like: user, entity) belongs to."""
    if share_by == USER and job.user:
        return job.user
    return job.entity


def entity_weights(jobs: Sequence, weights: Mapping[str, float] | None, share_by: str) -> dict[str, float]:
    """The weights of the jobs' entities, divided by their median ({} when no weight is set:
    every entity weighs 1).  The allocation does not depend on their common scale; the
    solver's accuracy does."""
    if not weights:
        return {}
    if share_by == USER:
        users: dict[str, set[str]] = {}           # account -> its users with jobs
        for j in jobs:
            users.setdefault(j.account, set()).add(entity_of(j, share_by))
        present: dict[str, float] = {}
        for account, names in users.items():
            part = float(weights.get(account, 1.0)) / len(names)
            for name in names:
                present[name] = present.get(name, 0.0) + part
    else:
        present = {entity_of(j, share_by): float(weights.get(entity_of(j, share_by), 1.0)) for j in jobs}
    middle = float(np.median(list(present.values()))) if present else 1.0
    return {e: w / middle for e, w in present.items()}


__all__ = ["ENTITY", "SHARE_BY", "USER", "entity_of", "entity_weights"]

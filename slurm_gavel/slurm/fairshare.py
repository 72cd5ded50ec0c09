"""Entity weights from Slurm's fairshare: the shares of each account's association (sacctmgr).

With ``entity_weights = "fairshare"`` in gavel.toml the hierarchical policy's
entities (a job's ``entity=`` flag, else its Slurm account) weigh what
``sacctmgr show associations`` gives their account as ``Fairshare=N`` (raw
shares, compared as they are: sibling accounts under different parents are
not scaled by their parents' shares; ``Fairshare=parent`` takes the parent
account's), so the admin keeps one list.  Entries of
``[entities]`` win over them.  Read again every round; when sacctmgr fails
(slurmdbd down, no accounting) the daemon logs one line and keeps the weights
it had.  Parsing is defensive: lines of another cluster, user associations
and anything that is not a share > 0 are left out.
"""
from __future__ import annotations

import logging
import math
from typing import Mapping

from ..core.errors import GavelError
from ..core.display import printable
from .flags import entity_name_problem

log = logging.getLogger("slurm_gavel.fairshare")

SHOWN = 8     # accounts named in a log line; the rest are counted


def parse_shares(text: str, cluster: str | None = None) -> dict[str, float]:
    """{account: shares} of the account associations (no user) in sacctmgr's
    ``cluster|account|user|share|parent`` lines; of `cluster` only, when given.
    ``Fairshare=parent`` takes the parent account's shares (up the tree)."""
    shares: dict[str, float] = {}
    parents: dict[str, str] = {}        # account -> its parent, for Fairshare=parent
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 4:
            continue
        where, account, user, share = (p.strip() for p in parts[:4])
        parent = parts[4].strip() if len(parts) > 4 else ""
        if user or not account or (cluster and where and where != cluster):
            continue
        if share.lower() == "parent":
            if parent:
                parents[account] = parent
            continue
        try:
            value = float(share)
        except ValueError:
            continue            # garbage
        if math.isfinite(value) and value > 0:
            shares[account] = value
    for account, parent in parents.items():
        seen = {account}
        while parent in parents and parent not in seen:     # parent of a parent-share account
            seen.add(parent)
            parent = parents[parent]
        if parent in shares:
            shares.setdefault(account, shares[parent])
    # no job's entity can carry a name the entity= grammar cannot spell
    return {a: v for a, v in shares.items() if not entity_name_problem(a)}


def describe(weights: Mapping[str, float]) -> str:
    names = sorted(weights)
    shown = ", ".join(f"{printable(n)}={weights[n]:g}" for n in names[:SHOWN])
    return shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "") if names else "none"


class FairshareWeights:
    """The entity weights as Slurm's shares and the configured overrides give them."""

    def __init__(self, cli, overrides: Mapping[str, float] | None = None, cluster: str | None = None):
        self.cli, self.cluster = cli, cluster
        self.overrides = dict(overrides or {})
        self.weights: dict[str, float] = dict(self.overrides)
        self.failing = False
        self._read = False

    def refresh(self) -> dict[str, float]:
        """Read the shares again; the last weights when sacctmgr fails (logged once)."""
        try:
            if self.cluster is None:     # slurmdbd may keep several clusters: ours is slurm.conf's
                self.cluster = self.cli.config().get("ClusterName", "")
            shares = parse_shares(self.cli.shares(), self.cluster)
        except GavelError as e:
            if not self.failing:
                log.warning("entity weights: sacctmgr failed, keeping the last weights (%s): %s",
                            describe(self.weights), e)
            self.failing = True
            return self.weights
        if self.failing:
            log.info("entity weights: sacctmgr answers again")
        self.failing = False
        weights = {**shares, **self.overrides}
        if weights != self.weights or not self._read:
            self._read = True
            log.info("entity weights from Slurm's fairshare shares: %s", describe(weights))
            self.weights = weights
        return self.weights


__all__ = ["FairshareWeights", "describe", "parse_shares"]

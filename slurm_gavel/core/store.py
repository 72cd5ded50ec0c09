"""What the engine writes down: allocations, rounds, usage and departures.

The engine reports to a store and never reads its own history back from it
(its working state is the mechanism's ledger).  The interface (`Store`) is
declared in interfaces.py and re-exported here.  `MemoryStore` keeps
everything in lists (the simulator's); the daemon's SQLite store
(`SqliteStore`) implements the same five methods and also keeps the engine's
working state.  A store may set `keeps_usage = False` to say it drops usage
records: the engine then does not hand them over (a long simulation observes
about 30 per round).
"""
from __future__ import annotations

from .backend import Departure, Usage
from .interfaces import Store
from .model import Allocation
from .plan import RoundPlan


class MemoryStore(Store):
    """Keeps what it is told; `keep_rounds=False` drops round plans (long simulations)."""

    def __init__(self, keep_rounds: bool = True):
        self.keep_rounds = keep_rounds
        self.keeps_usage = keep_rounds
        self.allocations: list[tuple[int, float, Allocation, bool]] = []
        self.rounds: list[tuple[float, RoundPlan]] = []
        self.usages: list[tuple[float, Usage]] = []
        self.departures: list[Departure] = []

    def observe(self, time, observation):
        pass

    def allocation(self, round, time, allocation, fresh):
        self.allocations.append((round, time, allocation, fresh))

    def round(self, time, plan):
        if self.keep_rounds:
            self.rounds.append((time, plan))

    def usage(self, time, usage):
        if self.keep_rounds:
            self.usages.append((time, usage))

    def departure(self, departure):
        self.departures.append(departure)


__all__ = ["MemoryStore", "Store"]

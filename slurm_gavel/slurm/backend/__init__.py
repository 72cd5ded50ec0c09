"""The Slurm backend (facade.py: `SlurmBackend`), one module per concern.

snapshot.py  one poll of Slurm as immutable data (`Snapshot`)
credit.py    what ran, credited to the ledger; departures; measurements
starts.py    deferred starts, released in Slurm (update + release)
stops.py     preemption signals, their delay and escalation
holds.py     why a job is held, backoffs, the status Slurm shows
looks.py     between rounds: whether a tick needs the full poll (a cheap look at the job states)
pairs/       space sharing: pair rows (sharing.py), first fit (room.py), multi-GPU pairs
             (multi.py), placing pairs and reading them back (placing.py)
"""
from .credit import FINAL_STATE_PATIENCE_SECONDS
from .facade import UNKNOWN_MODEL, SlurmBackend
from .holds import LOST_SETTLE_SECONDS, MAX_BACKOFF_ROUNDS, START_TIMEOUT_SECONDS, STATUS_PER_ROUND
from .looks import FULL_READ_SECONDS
from .pairs.placing import PAIR_PLACED_SECONDS, PAIR_READ_SECONDS
from .snapshot import GAVEL_PREFIX, Snapshot, discover_partitions
from .starts import RESTART_GUARD_SECONDS

__all__ = ["FINAL_STATE_PATIENCE_SECONDS", "FULL_READ_SECONDS", "GAVEL_PREFIX", "LOST_SETTLE_SECONDS", "MAX_BACKOFF_ROUNDS",
           "PAIR_PLACED_SECONDS", "PAIR_READ_SECONDS", "RESTART_GUARD_SECONDS", "START_TIMEOUT_SECONDS",
           "STATUS_PER_ROUND", "SlurmBackend", "Snapshot", "UNKNOWN_MODEL", "discover_partitions"]

"""The engine's working state as plain data: what a restarted daemon needs to go on unnoticed.

The engine keeps its state in memory (the mechanism's ledger, the allocation
in force, the round number, what the last reset saw).  A daemon that stops
and starts again must not look like a new scheduler to the jobs: rounds go
on numbering where they were, the ledger still knows who received how much
since the last reset, and the allocation in force stays in force until a
reset event replaces it.  `EngineState` is that state; `to_dict` /
`from_dict` turn it into JSON-able data and back, so a store can keep it
(the daemon's SQLite store does, every observation).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from .errors import InputError
from .model import Allocation
from .plan import Row, Server

VERSION = 1


@dataclass(frozen=True)
class EngineState:
    round: int                                      # the next round's number
    worker_types: tuple[str, ...]
    last_reset: float                               # when the ledger's since-reset time restarted
    last_submit: float                              # when a solve was last submitted
    job_ids: tuple[str, ...]                        # the jobs the last reset event saw
    servers: tuple[Server, ...]                     # the servers it saw
    since_reset: Mapping[Row, tuple[float, ...]]    # the ledger, per row and worker type
    total: Mapping[str, tuple[float, ...]]
    allocation: Allocation | None                   # the allocation in force
    unschedulable: Mapping[str, str] = field(default_factory=dict)
    owed: Mapping[Row, tuple[float, ...]] = field(default_factory=dict)   # carried over resets
    # what a policy keeps between solves (finish-time fairness: each job's isolated-equivalent
    # time), plain JSON data from its `memory()`; {} for the policies that keep nothing
    policy_memory: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": VERSION, "round": self.round, "worker_types": list(self.worker_types),
            "last_reset": _number_out(self.last_reset), "last_submit": _number_out(self.last_submit),
            "job_ids": list(self.job_ids),
            "servers": [[s.name, s.worker_type, s.gpus] for s in self.servers],
            "since_reset": [[list(row), list(s)] for row, s in self.since_reset.items()],
            "total": {job: list(s) for job, s in self.total.items()},
            "allocation": None if self.allocation is None else allocation_to_dict(self.allocation),
            "unschedulable": dict(self.unschedulable),
            "owed": [[list(row), list(s)] for row, s in self.owed.items()],
            "policy_memory": dict(self.policy_memory),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "EngineState":
        """The state back from `to_dict`'s data; InputError when it is not that."""
        try:
            if data.get("version") != VERSION:
                raise InputError("engine state", f"version {data.get('version')!r}, "
                                                 f"this slurm-gavel reads {VERSION}")
            worker_types = tuple(str(w) for w in data["worker_types"])
            allocation = data.get("allocation")
            return cls(
                round=int(data["round"]), worker_types=worker_types,
                last_reset=_number_in(data["last_reset"]), last_submit=_number_in(data["last_submit"]),
                job_ids=tuple(str(j) for j in data["job_ids"]),
                servers=tuple(Server(str(n), str(w), int(g)) for n, w, g in data["servers"]),
                since_reset={tuple(str(j) for j in row): tuple(float(s) for s in seconds)
                             for row, seconds in data["since_reset"]},
                total={str(job): tuple(float(s) for s in seconds)
                       for job, seconds in data["total"].items()},
                allocation=None if allocation is None else allocation_from_dict(allocation),
                unschedulable={str(k): str(v) for k, v in data.get("unschedulable", {}).items()},
                owed={tuple(str(j) for j in row): tuple(float(s) for s in seconds)
                      for row, seconds in data.get("owed", [])},
                policy_memory=_mapping(data.get("policy_memory", {})))
        except InputError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise InputError("engine state", f"malformed: {type(e).__name__}: {e}") from None


def allocation_to_dict(a: Allocation) -> dict[str, Any]:
    return {"job_ids": list(a.job_ids), "worker_types": list(a.worker_types),
            "x": a.x.tolist(), "policy": a.policy, "objective": _number_out(a.objective),
            "pair_jobs": a.pair_jobs.tolist(), "x_pairs": a.x_pairs.tolist(),
            "interim_rows": list((a.info or {}).get("interim_rows", ())), "type_blind": bool(a.type_blind)}


def allocation_from_dict(d: Mapping[str, Any]) -> Allocation:
    k = len(d["worker_types"])
    info = {"interim_rows": list(d["interim_rows"])} if d.get("interim_rows") else {}
    return Allocation(tuple(str(j) for j in d["job_ids"]), tuple(str(w) for w in d["worker_types"]),
                      np.array(d["x"], dtype=float).reshape(len(d["job_ids"]), k), policy=str(d["policy"]),
                      objective=_number_in(d["objective"]),
                      pair_jobs=np.array(d["pair_jobs"], dtype=np.int64).reshape(-1, 2),
                      x_pairs=np.array(d["x_pairs"], dtype=float).reshape(-1, k), info=info,
                      type_blind=bool(d.get("type_blind", False)))


def _number_out(v: float):
    # JSON has no infinities or NaN: strings keep them exact
    v = float(v)
    return v if math.isfinite(v) else repr(v)


def _number_in(v) -> float:
    return float(v)


def _mapping(v) -> dict:
    if not isinstance(v, dict):
        raise TypeError(f"policy_memory is a {type(v).__name__}, not an object")
    return dict(v)


__all__ = ["EngineState", "allocation_from_dict", "allocation_to_dict"]

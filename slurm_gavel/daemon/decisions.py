"""A round's decisions in words: which job starts where and why, which is preempted for whom.

From plain data the daemon has after planning a round (its plan, the assignments of
the round before, each job's priority and share per GPU type, its estimate phase),
one `Decision` per start and preemption, naming the job, the partition, the nodes
and the reason -- e.g. ``job 12: started on v100 (partition v100, nodes v100-0;
share 0.45, priority 2.1; moved from p100)`` and ``job 7: preempted on k80
(partition k80, nodes k80-1) for job 12 (job 12's priority 2.1, job 7's 0.8)``.  The daemon logs
each line and records it as an event (kinds ``start`` and ``preempt``), which
`slurm-gavel events` shows.  A job released last round that Slurm never started is neither
preempted nor moved when the round takes it back: that is kind ``take_back`` (``job 7:
released on v100 (partition v100, nodes v100-0) but not started by Slurm; taken back ...``),
and a start elsewhere says so instead of ``moved from``.  Job ids are Slurm's (digits); nothing here comes from
users' text.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Collection, Mapping, Sequence


@dataclass(frozen=True)
class Decision:
    kind: str            # "start" | "preempt" | "take_back" (released, never started)
    job: str
    worker_type: str | None
    partition: str | None
    nodes: tuple[str, ...]
    detail: str          # the reason, in words (what the event records)

    def line(self, round_: int) -> str:
        return f"round {round_}: job {self.job}: {self.kind_word} {self.detail}"

    @property
    def kind_word(self) -> str:
        return {"start": "started", "take_back": "released"}.get(self.kind, "preempted")


def _priority(p) -> str:
    if p is None:
        return "-"
    return "inf" if isinstance(p, float) and math.isinf(p) else f"{p:.3g}"


def decide(plan, previous: Sequence, partitions: Mapping[str, str],
           priority: Mapping[str, float | None], share: Mapping[str, Mapping[str, float]],
           phase: Mapping[str, str] | None = None,
           unstarted: Collection[str] = ()) -> list[Decision]:
    """The decisions of `plan` (core.plan.RoundPlan): `previous` is the round before's
    assignments (where preempted jobs ran, the type a started job last had); `partitions`
    partition -> GPU type; `priority` job -> its best priority; `share` job -> {type: its
    share in the allocation in force}; `phase` job -> its estimate phase ("explore");
    `unstarted` the jobs of `previous` released there that Slurm never started."""
    # partition -> type, or (partition, type) pairs (gputypes.TypeMap.pairs: mixed partitions)
    pairs = partitions.items() if isinstance(partitions, Mapping) else partitions
    partition_of = {wt: p for p, wt in reversed(list(pairs))}
    phase = phase or {}
    before = {job: a for a in previous for job in a.jobs}
    out = []
    starts_on: dict[str, list[str]] = {}           # node -> jobs started there this round
    for a in plan.start:
        for job in a.jobs:
            for n in a.nodes:
                starts_on.setdefault(n, []).append(job)
            why = [f"share {share.get(job, {}).get(a.worker_type, 0.0):.2f}",
                   f"priority {_priority(priority.get(job))}"]
            old = before.get(job)
            if phase.get(job) == "explore":
                why.append(f"exploring {a.worker_type}: its speed there is not measured yet")
            if old is not None and job in unstarted:
                where = old.worker_type if old.worker_type != a.worker_type else "other nodes"
                why.append(f"released on {where} last round but not started by Slurm; taken back")
            elif old is not None and old.worker_type != a.worker_type:
                why.append(f"moved from {old.worker_type}")
            elif old is not None:
                why.append("moved to other nodes")
            detail = (f"on {a.worker_type} (partition {partition_of.get(a.worker_type, '?')}, "
                      f"nodes {','.join(a.nodes)}; {'; '.join(why)})")
            out.append(Decision("start", job, a.worker_type, partition_of.get(a.worker_type),
                                a.nodes, detail))
    moved_to = {job: a.worker_type for a in plan.start for job in a.jobs}
    for job in plan.preempt:
        old = before.get(job)
        wt = old.worker_type if old is not None else None
        nodes = old.nodes if old is not None else ()
        where = (f"on {wt} (partition {partition_of.get(wt, '?')}, nodes {','.join(nodes)})"
                 if old is not None else "")
        takers = list(dict.fromkeys(j for n in nodes for j in starts_on.get(n, ()) if j != job))
        mine = _priority(priority.get(job))
        if takers:
            # whose priority is whose: the starting job's first, then this job's
            reason = "for " + ", ".join(f"job {t} (job {t}'s priority {_priority(priority.get(t))}, "
                                        f"job {job}'s {mine})" for t in takers)
        elif job in moved_to:
            reason = f"planned on {moved_to[job]} instead"
        elif share.get(job) and not any(share[job].values()):
            reason = "the allocation gives it no GPU time now"
        else:
            reason = f"others have higher priority now (its priority {mine})"
        kind = "preempt"
        if job in unstarted and where:      # it never ran there: no preemption
            kind, where = "take_back", f"{where} but not started by Slurm; taken back"
        detail = (f"{where} {reason}" if takers else f"{where}: {reason}") if where else reason
        out.append(Decision(kind, job, wt, partition_of.get(wt) if wt else None, nodes, detail))
    return out


__all__ = ["Decision", "decide"]

"""The round-based mechanism: an allocation X in, one round's placements out.

It sees only three things: the allocation (job and pair rows of X), its own
ledger of the time each row has received on each worker type (`Ledger`,
core/ledger.py), and the GPUs that are free for it.  Each round it

1. computes priorities = X / time received since the last reset, with an
   infinite priority for an entry that has an allocation but no time yet
   (the paper's Figure 5: the anti-starvation rule);
2. picks rows greedily, highest priority first (Algorithm 1): an entry whose
   scale factor does not fit what is left of its type is skipped, and once a
   row is picked every other row that shares a job with it is out, so no job
   runs twice in a round.  A type-blind allocation (`Allocation.type_blind`,
   a heterogeneity-agnostic policy's, whose split of a row between types is
   a tie, not a target) is walked type by type instead, in an order drawn
   anew each round (`type_order`), each type's entries highest priority
   first, after the rows that keep their lease: Gavel's per-type queues,
   shuffled for its agnostic policies.  Each type in turn is filled first, so
   the jobs' time spreads over all types whatever X's split says;
3. fills what is left (work conserving): GPUs no positive-priority row took
   go to jobs that can run there but have no share on that type, most behind
   first (highest priority on their other entries), then where they run
   fastest relative to their best type; a job with a share takes such a GPU
   back in the next round simply by coming first (`usable`, `RoundPlan.filling`);
   a picked pair whose type still has a GPU idle after that runs apart, a GPU
   each (`split_pairs`: sharing a GPU pays only when GPUs are short);
4. places the picked rows on servers: a row that stays on its type keeps its
   servers (its lease is renewed, it is not stopped at all); the others go
   largest scale factor first onto as few servers as possible, smaller rows
   moving whole to other servers when that keeps a larger row whole (a spread
   multi-GPU job runs at its unconsolidated throughput, a moved one loses one
   restart).

Low churn (`Churn`, core/ledger.py, in seconds of time received): every
entry is seeded with some time (Gavel seeds half a round), so that a reset
does not put every entry at infinite priority at once; a row that runs now competes as if it had
received `hysteresis` seconds less, so another row takes its GPUs only when it
is clearly more behind its share, and every move is charged the time its
restart loses (`restart_seconds`).

A job may come with a `Placement` (what its backend knows of where it can
run: allowed worker types, allowed servers, all GPUs on one server).  Its
disallowed types get priority 0; a pick that its servers cannot hold is
dropped and the round is picked again without it, so the GPUs go to others.

The result is a `RoundPlan` (core/plan.py, with `Server`, `Placement` and
`Assignment`): what keeps running, what starts (on which type and servers),
what must stop.  Backends (Slurm, simulated) execute plans; the
mechanism knows nothing of them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .ledger import PLAIN, Churn, Ledger
from .model import Allocation
from .plan import Assignment, Placement, RoundPlan, Row, Server


def allocation_rows(allocation: Allocation) -> tuple[list[Row], np.ndarray]:
    """The rows of X (jobs, then pairs) and their (R, k) allocation (read-only, kept per allocation)."""
    return list(allocation.rows), allocation.x_rows


def priorities(x: np.ndarray, received: np.ndarray) -> np.ndarray:
    """X / received, element-wise; inf where X > 0 and nothing was received yet, 0 where X = 0.

    `received` may be seconds or rounds: only the order of priorities matters.
    """
    prio = np.full(x.shape, np.inf)
    np.divide(x, received, out=prio, where=received > 0)
    prio[~(x > 0)] = 0.0
    return prio


def select(rows: Sequence[Row], prio: np.ndarray, scale_factors: np.ndarray, free: np.ndarray,
           current: Mapping[Row, int] | None = None,
           usable: np.ndarray | None = None, fills: list | None = None,
           running_on: np.ndarray | None = None,
           type_rank: np.ndarray | None = None) -> list[tuple[int, int]]:
    """Algorithm 1: (row, type) picks, highest priority first, no job twice, no type over `free`.

    Ties go to a row that already runs on that type (no needless
    preemption), then to input order.  With `type_rank` ((k,), the type
    walked first has rank 0; for a type-blind allocation) the rows that keep
    their lease (an infinite priority where they run) come first, then the
    types are walked in rank order, each one's entries highest priority first:
    to a type-blind policy the types are alike, so a row goes to whichever
    type comes first in the round with room for it rather than to the type
    of its largest share (which leaves the other types idle while rows wait
    for it), and a running row is not moved while its lease lasts.  With `usable`
    ((n, k), one row per single-job row of `rows`; > 0 where the job can run),
    GPUs left over then go to jobs not picked yet on types where their
    priority is 0 (`fill`; those picks are also appended to `fills`).
    """
    r_idx, t_idx = np.nonzero(prio > 0)
    if running_on is None:        # (R,) the type each row runs on now, -1: none (from `current`)
        current = current or {}
        running_on = np.array([current.get(row, -1) for row in rows], dtype=np.int64).reshape(len(rows))
    left = [int(v) for v in free]
    sfs = scale_factors.tolist()
    busy: set[str] = set()
    chosen: list[tuple[int, int]] = []
    everyone = len(set().union(*rows))     # once all of them run, nothing more can be picked
    if len(r_idx):                # (none: only newcomers with no share yet, Engine.start_arrivals)
        staying = running_on[r_idx] == t_idx
        values = prio[r_idx, t_idx]
        # np.nonzero lists entries by row, then type, and lexsort is stable: that is the last tie-break
        if type_rank is None:
            order = np.lexsort((~staying, -values))
        else:
            leased = staying & np.isinf(values)
            order = np.lexsort((~staying, -values, np.asarray(type_rank)[t_idx], ~leased))
        _greedy(rows, zip(r_idx[order].tolist(), t_idx[order].tolist()), sfs, left, busy, chosen, everyone)
    if usable is not None and len(busy) < everyone and sum(left) >= min(sfs, default=1):
        first = len(chosen)
        fill(rows, prio, sfs, left, busy, chosen, running_on, usable, everyone)
        if fills is not None:
            fills.extend(chosen[first:])
    if usable is not None and sum(left):
        split_pairs(rows, chosen, sfs, left)
    return chosen


def split_pairs(rows, chosen, sfs, left) -> None:
    """Work conservation for pairs: a picked pair whose type still has idle GPUs runs apart.

    Once no other job can use the GPUs `left`, a pair sharing a GPU of that type
    while another one idles gives both jobs less than they would get on a GPU
    each (a job of a pair runs at most at its solo throughput), so its jobs go
    onto their own rows on the same type, first picked first.  Needs each job's
    own row in `rows` (an allocation lists every job alone before the pairs).
    """
    if not any(len(rows[r]) == 2 for r, _ in chosen):
        return
    index = row_index(rows)
    for i, (r, t) in enumerate(chosen):
        row = rows[r]
        if len(row) != 2 or left[t] < sfs[r]:
            continue
        a, b = index.get(row[:1]), index.get(row[1:])
        if a is None or b is None:
            continue
        chosen[i] = (a, t)
        chosen.append((b, t))
        left[t] -= sfs[r]


def type_order(number: int, k: int) -> np.ndarray:
    """(k,) each type's rank in round `number`'s walk of a type-blind allocation (0: first).

    A permutation drawn from the round number alone (numpy's default_rng), so a
    run is reproducible and every type is walked first in about 1/k of the
    rounds (Gavel shuffles its types each round with a seeded random.Random).
    """
    rank = np.empty(k, dtype=np.int64)
    rank[np.random.default_rng(number).permutation(k)] = np.arange(k)
    return rank


def _greedy(rows, candidates, sfs, left, busy, chosen, everyone) -> None:
    """Take (row, type) candidates in order while they fit: no job twice, no type over `left`."""
    room = sum(left)
    smallest = int(min(sfs)) if sfs else 1
    for r, t in candidates:
        if room < smallest or len(busy) == everyone:
            break                         # nothing fits anywhere any more
        row = rows[r]
        if not busy.isdisjoint(row):
            continue                      # a combination sharing a job was picked
        need = sfs[r]
        if need > left[t]:
            continue                      # does not fit what is left of this type
        chosen.append((r, t))
        busy.update(row)
        left[t] -= need
        room -= need


def fill(rows, prio, sfs, left, busy, chosen, running_on, usable, everyone) -> None:
    """Work conservation: GPUs `left` after the positive priorities go to jobs that can use them.

    Candidates are single-job entries with priority 0 where `usable` > 0, of
    jobs not picked yet.  Order: a job already filling that type keeps it (no
    churn among fillers), then the job most behind its share (its highest
    priority elsewhere: the lowest cost to fairness, since it is owed the
    most), then the type it runs fastest on (`usable`'s values), then input order.
    """
    n = usable.shape[0]
    room = np.array(left) > 0
    candidates = (usable > 0) & (prio[:n] == 0) & room[None, :]
    if busy:
        index = row_index(rows)
        taken = [index[(job,)] for job in busy if (job,) in index]
        candidates[taken] = False
    r_idx, t_idx = np.nonzero(candidates)
    if not len(r_idx):
        return
    behind = prio[:n].max(axis=1)[r_idx]
    staying = running_on[r_idx] == t_idx
    order = np.lexsort((-usable[r_idx, t_idx], -behind, ~staying))
    _greedy(rows, zip(r_idx[order].tolist(), t_idx[order].tolist()), sfs, left, busy, chosen, everyone)


# The last tuple of rows and of worker types indexed, with their {item: position}: the
# allocation's, the same objects for many rounds (shared: callers only read them).
_last_indexed: dict[str, tuple] = {"rows": ((), {}), "types": ((), {})}


def _indexed(items: Sequence, slot: str) -> dict:
    """{item: its position}, kept in `slot` for the last tuple of items."""
    last, index = _last_indexed[slot]
    if last is not items:
        index = {item: i for i, item in enumerate(items)}
        if isinstance(items, tuple):
            _last_indexed[slot] = (items, index)
    return index


def row_index(rows: Sequence[Row]) -> dict[Row, int]:
    """{row: its index} (kept for the last rows)."""
    return _indexed(rows, "rows")


def type_columns(worker_types: Sequence[str]) -> dict[str, int]:
    """{worker type: its column} (kept for the last tuple of types)."""
    return _indexed(worker_types, "types")


@dataclass(frozen=True)
class _Layout:
    """What the mechanism reads of the servers: the same every round until the cluster changes."""

    free: dict[str, int]                # GPUs of each server (place works on a copy)
    of_type: dict[str, list[str]]       # server names of each type, in the servers' order
    gpus: dict[str, int]                # GPUs of each type

    @staticmethod
    def of(servers: Sequence[Server]) -> "_Layout":
        of_type: dict[str, list[str]] = {}
        gpus: dict[str, int] = {}
        for s in servers:
            of_type.setdefault(s.worker_type, []).append(s.name)
            gpus[s.worker_type] = gpus.get(s.worker_type, 0) + s.gpus
        return _Layout({s.name: s.gpus for s in servers}, of_type, gpus)


_last_layouts: list[tuple[tuple[Server, ...], _Layout]] = []


def _layout(servers: Sequence[Server]) -> _Layout:
    """`_Layout.of(servers)`, kept for the last two tuples of servers: backends pass the same
    one each round, and a round's mid-round starts (Engine.start_arrivals) plan on a second
    one, the idle GPUs, which must not push the first out."""
    if not isinstance(servers, tuple):
        return _Layout.of(servers)
    for i, (kept, layout) in enumerate(_last_layouts):
        if kept is servers:
            if i:
                _last_layouts.insert(0, _last_layouts.pop(i))     # the most recently used first
            return layout
    layout = _Layout.of(servers)
    _last_layouts.insert(0, (servers, layout))
    del _last_layouts[2:]
    return layout


def place(picks: Sequence[tuple[Row, str, int]], servers: Sequence[Server],
          previous: Mapping[Row, Assignment],
          placements: Mapping[str, Placement] | None = None,
          pinned: frozenset[Row] = frozenset()) -> list[Assignment]:
    """Put picked (row, type, GPUs) on servers.

    A row that ran on the same type last round keeps its servers if they are
    still free; the rest go largest first, to the fullest server that still
    fits them whole (consolidated); else to a server that fits them whole once
    smaller rows held there move whole to other servers (they lose a restart,
    a spread row would run at its unconsolidated speed all round), else over
    the servers with most free GPUs.  A held row spread over servers is
    consolidated the same way when it can be, and keeps its servers otherwise.
    A `pinned` row that keeps its servers is never moved (the preemption cap's).
    A row whose jobs' `placements` the free servers cannot satisfy is a
    ValueError (`plan_round` picks again without it).
    """
    placed, failed = _place(picks, servers, previous, placements or {}, pinned)
    if failed:
        row, worker_type, gpus = failed[0]
        raise ValueError(f"{row} needs {gpus} GPUs of {worker_type}; they are not free "
                         f"where it may run")
    return placed


def _restriction(row: Row, placements: Mapping[str, Placement]) -> tuple[frozenset[str] | None, bool, bool]:
    """(servers the row may use or None for any, whether all its GPUs must be on one server,
    whether spread it needs as many GPUs on each server)."""
    allowed: frozenset[str] | None = None
    one = same = False
    for job in row:
        p = placements.get(job)
        if p is None:
            continue
        one = one or p.one_server
        same = same or p.same_gpus_per_server
        if p.servers is not None:
            allowed = p.servers if allowed is None else allowed & p.servers
    return allowed, one, same


def _equal_split(names: Sequence[str], free: Mapping[str, int], gpus: int) -> list[tuple[str, int]] | None:
    """`gpus` as k equal parts on k servers, k as small as possible (the fullest servers that
    hold a part); None when no such split is free."""
    for k in range(2, gpus + 1):
        if gpus % k:
            continue
        part = gpus // k
        fits = sorted((n for n in names if free[n] >= part), key=free.__getitem__)
        if len(fits) >= k:
            return [(n, part) for n in fits[:k]]
    return None


def _place(picks, servers, previous, placements, pinned=frozenset()) -> tuple[list[Assignment], list[tuple[Row, str, int]]]:
    layout = _layout(servers)
    free = dict(layout.free)
    of_type = layout.of_type
    held: dict[Row, Assignment] = {}      # rows that keep last round's servers, in pick order
    moved: dict[Row, Assignment] = {}     # rows placed anew (or moved to make room), in that order
    failed: list[tuple[Row, str, int]] = []
    waiting = []
    for pick in picks:
        row, worker_type, gpus = pick
        before = previous.get(row)
        if (before is not None and before.worker_type == worker_type and before.gpus == gpus
                and _still_free(before.servers, free)):
            for name, count in before.servers:
                free[name] -= count
            held[row] = before            # the very same object: the plan's `keep`
        else:
            waiting.append(pick)
    rules: dict[Row, tuple] = {}

    def rule(row):
        if not placements:
            return (None, False, False)
        if row not in rules:
            rules[row] = _restriction(row, placements)
        return rules[row]

    # A held row spread over servers is placed again after the new rows of its size:
    # whole on one server if that can be had (it restarts once and then runs at its
    # consolidated speed), else it keeps its servers.
    spread = [(a.jobs, a.worker_type, a.gpus) for a in held.values()
              if len(a.servers) > 1 and a.jobs not in pinned]
    # Largest first; among equals a restricted row first, so that rows that may
    # go anywhere do not take its servers, and a new row before a held one.  min() and
    # the stable sort keep the servers' order among equally free ones.
    todo = sorted([(p, False) for p in waiting] + [(p, True) for p in spread],
                  key=lambda e: (-e[0][2], rule(e[0][0])[0] is None, e[1]))
    for (row, worker_type, gpus), was_held in todo:
        names = of_type.get(worker_type, [])
        allowed, one, same = rule(row)
        if allowed is not None:
            names = [n for n in names if n in allowed]
        if was_held:
            mine = held[row]
            for name, count in mine.servers:
                free[name] += count
        fits = [n for n in names if free[n] >= gpus]
        taken: list[tuple[str, int]] | None = None
        if fits:
            taken = [(min(fits, key=free.__getitem__), gpus)]
        elif gpus > 1:
            room = _make_room(row, worker_type, gpus, names, of_type.get(worker_type, []), free,
                              layout.free, held, rule, pinned)
            if room is not None:
                home, moves = room
                for a in moves:
                    old = held.pop(a.jobs)
                    for name, count in old.servers:
                        free[name] += count
                    for name, count in a.servers:
                        free[name] -= count
                    moved[a.jobs] = a
                taken = [(home, gpus)]
        if taken is None and was_held:
            for name, count in mine.servers:      # no whole server for it: it stays where it is
                free[name] -= count
            continue
        if was_held:
            del held[row]
        if taken is None:
            if one:
                failed.append((row, worker_type, gpus))
                continue
            if same:
                taken = _equal_split(names, free, gpus)
                if taken is None:
                    failed.append((row, worker_type, gpus))
                    continue
            else:
                taken, need = [], gpus
                for n in sorted(names, key=lambda n: -free[n]):
                    if need == 0:
                        break
                    use = min(free[n], need)
                    if use:
                        taken.append((n, use))
                        need -= use
                if need:
                    if not placements:
                        raise ValueError(f"{row} needs {gpus} GPUs of {worker_type}; "
                                         f"only {gpus - need} are free")
                    failed.append((row, worker_type, gpus))
                    continue
        for name, count in taken:
            free[name] -= count
        moved[row] = Assignment(row, worker_type, tuple(taken))
    return [*held.values(), *moved.values()], failed


def _make_room(row, worker_type, gpus, names, all_names, free, capacity, held, rule, pinned):
    """(server, moves): the server of `names` that holds `gpus` whole once smaller held rows on
    it move, whole, to other servers of the type, and those moves (new assignments); the
    fewest GPUs moved, then the fewest rows, then the fullest server.  None when no server
    can be emptied so (a row is moved only for a larger one, and only where it may run)."""
    on: dict[str, list[Assignment]] = {}
    for a in held.values():
        if a.worker_type == worker_type and len(a.servers) == 1 and a.gpus < gpus and a.jobs not in pinned:
            on.setdefault(a.servers[0][0], []).append(a)
    best = None
    for home in names:
        if capacity.get(home, 0) < gpus:
            continue
        need = gpus - free[home]
        movable = sorted(on.get(home, ()), key=lambda a: a.gpus)
        if sum(a.gpus for a in movable) < need:
            continue
        chosen: list[Assignment] = []
        while need > 0:             # the smallest row that covers what is missing, else the largest
            a = next((a for a in movable if a.gpus >= need), movable[-1])
            movable.remove(a)
            chosen.append(a)
            need -= a.gpus
        trial = dict(free)
        trial[home] += sum(a.gpus for a in chosen) - gpus
        moves = []
        for a in sorted(chosen, key=lambda a: -a.gpus):
            allowed = rule(a.jobs)[0]
            spots = [n for n in all_names if n != home and trial[n] >= a.gpus
                     and (allowed is None or n in allowed)]
            if not spots:
                break
            there = min(spots, key=trial.__getitem__)
            trial[there] -= a.gpus
            moves.append(Assignment(a.jobs, worker_type, ((there, a.gpus),)))
        else:
            score = (sum(a.gpus for a in moves), len(moves), free[home])
            if best is None or score < best[0]:
                best = (score, home, moves)
    return None if best is None else (best[1], best[2])


def _still_free(servers: tuple[tuple[str, int], ...], free: Mapping[str, int]) -> bool:
    """Whether each (server, GPUs) of an assignment is still free."""
    for name, count in servers:
        if free.get(name, 0) < count:
            return False
    return True


_last_only: tuple = (None, None)


def only_types(x: np.ndarray) -> tuple[int, ...] | None:
    """The one type each row of `x` has a positive share on; None when a row has none or several."""
    only = _only_entries(x)
    return None if only is None else only[0]


def _only_entries(x: np.ndarray) -> tuple[tuple[int, ...], list[float]] | None:
    """(`only_types(x)`, each row's share there), kept for the last `x` (an allocation's
    read-only `x_rows`: the same for many rounds)."""
    global _last_only
    last, only = _last_only
    if last is not x:
        positive = x > 0
        only = None
        if np.count_nonzero(positive) == len(x) and positive.any(axis=1).all():
            types = positive.argmax(axis=1)
            only = (tuple(types.tolist()), x[np.arange(len(x)), types].tolist())
        _last_only = (x, only)
    return only


def _renew_all(rows, x, before, column, scale_factors, ledger, churn, servers) -> tuple[Assignment, ...] | None:
    """The round's assignments when every row runs on its only positive entry (and they
    still fit): every lease renewed, in the order `select` would pick them (highest
    priority first, then row order), without picking and placing.
    None when the round is not such a round (the full path plans it).

    The common round between arrivals and departures, decided in plain Python
    from each row's one running entry before any (R, k) array is built: the same
    priorities as `priorities` on the full path's `received` (the same float
    operations, entry by entry), the same plan (tests/test_speed_paths.py holds
    the two against each other).
    """
    only = _only_entries(x)
    if only is None:
        return None
    types, shares = only
    layout = _layout(servers)
    room = dict(layout.free)
    assignments, used = [], {}
    for row, t in zip(rows, types):
        a = before.get(row)
        if (a is None or column.get(a.worker_type) != t or a.gpus != int(scale_factors[row[0]])
                or len(a.servers) > 1):
            return None              # (a spread row: the full path may consolidate it)
        for name, count in a.servers:
            left = room.get(name, 0) - count
            if left < 0:
                return None          # its servers are no longer free (the full path moves it)
            room[name] = left
        assignments.append(a)
        used[a.worker_type] = used.get(a.worker_type, 0) + a.gpus
    if any(need > layout.gpus.get(wt, 0) for wt, need in used.items()):
        return None
    received = ledger.received(rows, types)
    if churn is not PLAIN:
        received = churn.running(received)
    values = []
    for share, seconds in zip(shares, received):
        value = share / seconds if seconds > 0 else math.inf
        if not value > 0:
            return None              # underflow: not positive, as `priorities` would say
        values.append(value)
    # highest priority first, row order among equals (reverse keeps a stable sort stable)
    order = sorted(range(len(rows)), key=values.__getitem__, reverse=True)
    return tuple([assignments[r] for r in order])


def _round_priorities(rows, x, ledger: Ledger, churn: Churn, staying_rows, staying_types) -> np.ndarray:
    """(R, k) the priorities a round picks by: X over the time received since the reset less
    what was owed at it, shifted by `churn` for the rows running now (index arrays)."""
    if not (x > 0).any():   # no share anywhere (newcomers mid-round): all 0, whatever was received
        return np.zeros(x.shape)
    received = ledger.since_reset(rows)
    owed = ledger.owed(rows)
    if owed is not None:
        received -= owed          # what a row was owed before the reset counts as not received
    if churn is not PLAIN:
        received = churn._shifted(received, staying_rows, staying_types)
    return priorities(x, received)


def round_priorities(allocation: Allocation, ledger: Ledger, running: Sequence[Assignment],
                     churn: Churn = PLAIN) -> np.ndarray:
    """(R, k) the priorities `plan_round` would pick the allocation's rows by now, with
    `running` the assignments that run (their lease credit; the others' restart cost): what
    people are shown, so that a comparison they read is the one the mechanism makes."""
    rows, x = allocation.rows, allocation.x_rows
    column, index = type_columns(allocation.worker_types), row_index(rows)
    staying = [(index[a.jobs], column[a.worker_type]) for a in running
               if a.jobs in index and a.worker_type in column]
    r = np.array([rt[0] for rt in staying], dtype=np.int64) if staying else None
    t = np.array([rt[1] for rt in staying], dtype=np.int64) if staying else None
    return _round_priorities(rows, x, ledger, churn, r, t)


def plan_round(number: int, allocation: Allocation, ledger: Ledger, servers: Sequence[Server],
               scale_factors: Mapping[str, int],
               previous: Sequence[Assignment] = (),
               placements: Mapping[str, Placement] | None = None,
               usable: np.ndarray | None = None, churn: Churn = PLAIN) -> RoundPlan:
    """The mechanism's whole step for round `number`.

    `servers` are the GPUs free for scheduled jobs (GPUs of other jobs already
    left out); `previous` is last round's assignments of jobs that are still
    active (a finished job is not "preempted"); `placements` where jobs may
    run (jobs left out may run anywhere).  `usable` ((n_jobs, k) in the
    allocation's job order, > 0 where a job can run, larger where it runs
    relatively faster) turns on work conservation; `churn` how much leases
    are preferred to moves.
    """
    rows, x = allocation.rows, allocation.x_rows
    worker_types = allocation.worker_types
    column = type_columns(worker_types)
    before: dict[Row, Assignment] = {a.jobs: a for a in previous}     # last round's assignment of each row
    placements = {job: p for job, p in (placements or {}).items() if p.restricts}
    if usable is not None:
        usable = np.asarray(usable, dtype=float)
        if usable.shape != (len(allocation.job_ids), len(worker_types)):
            raise ValueError(f"usable has shape {usable.shape}, expected "
                             f"{(len(allocation.job_ids), len(worker_types))}")
    if not placements and len(before) == len(rows) and not len(allocation.pair_jobs):
        kept = _renew_all(rows, x, before, column, scale_factors, ledger, churn, servers)
        if kept is not None:
            return RoundPlan(number, kept, kept, (), (), frozenset())
    current = {row: column.get(a.worker_type) for row, a in before.items()}     # and its type
    index = row_index(rows)
    staying = [(index[row], t) for row, t in current.items() if t is not None and row in index]
    running_on = np.full(len(rows), -1, dtype=np.int64)
    staying_rows = staying_types = None
    if staying:
        staying_rows = np.array([rt[0] for rt in staying], dtype=np.int64)
        staying_types = np.array([rt[1] for rt in staying], dtype=np.int64)
        running_on[staying_rows] = staying_types
    prio = _round_priorities(rows, x, ledger, churn, staying_rows, staying_types)
    if placements:
        if usable is not None:
            usable = usable.copy()
        for r, row in enumerate(rows):
            for job in row:
                p = placements.get(job)
                if p is not None and p.worker_types is not None:
                    for t, wt in enumerate(worker_types):
                        if wt not in p.worker_types:
                            prio[r, t] = 0.0
                            if usable is not None and len(row) == 1:
                                usable[r, t] = 0.0
    sizes = [int(scale_factors[row[0]]) for row in rows]
    gpus = _layout(servers).gpus
    free = [gpus.get(wt, 0) for wt in worker_types]
    sizes_array, free_array = np.array(sizes, dtype=np.int64), np.array(free, dtype=np.int64)

    type_rank = type_order(number, len(worker_types)) if allocation.type_blind else None

    def pick_and_place(prio, usable, pinned=frozenset()):
        fills: list[tuple[int, int]] = []
        chosen = select(rows, prio, sizes_array, free_array, current, usable, fills, running_on, type_rank)
        picks = [(rows[r], worker_types[t], sizes[r]) for r, t in chosen]
        if not placements:
            return place(picks, servers, before, pinned=pinned), fills
        # A pick whose servers cannot hold it is dropped and the round picked again
        # without that entry: its GPUs go to the next rows in priority order.
        while True:     # ends: each failure zeroes an entry of positive priority or usable
            assignments, failed = _place(picks, servers, before, placements, pinned)
            if not failed:
                return assignments, fills
            for row, wt, _gpus in failed:
                r, t = index[row], column[wt]
                if prio[r, t] > 0:
                    prio[r, t] = 0.0
                elif usable is not None:
                    usable[r, t] = 0.0
            fills = []
            chosen = select(rows, prio, sizes_array, free_array, current, usable, fills, running_on,
                            type_rank)
            picks = [(rows[r], worker_types[t], sizes[r]) for r, t in chosen]

    index = row_index(rows)
    assignments, fills = pick_and_place(prio, usable)
    capped = _cap_starts(churn.max_starts, rows, assignments, before, index, column, prio, usable)
    if capped is not None:
        prio, usable = capped
        assignments, fills = pick_and_place(prio, usable.copy() if usable is not None else None)
    cap = churn.max_preemptions
    forced: set[int] = set()
    while cap:
        # A wave of preemptions is spread over rounds: the rows stopped are the ones
        # most ahead of their share (lowest priority where they run); the rest keep their
        # GPUs this round, picked first, and the rows that would have taken them wait,
        # more behind (higher priority) next round.  Ends: `forced` grows every pass.
        # a row stops unless it keeps its very assignment (a move within its type stops it too)
        unchanged = set(assignments)
        stopped = [index[row] for row, b in before.items() if row in index and b not in unchanged
                   and running_on[index[row]] >= 0]
        if sum(len(rows[r]) for r in stopped) <= cap:
            break
        stopped.sort(key=lambda r: (prio[r, running_on[r]], r))
        allowed, keep = 0, []
        for r in stopped:
            if allowed + len(rows[r]) <= cap:
                allowed += len(rows[r])
            elif r not in forced:
                keep.append(r)
        if not keep:
            break
        prio = prio.copy()
        for r in keep:
            prio[r, running_on[r]] = np.inf
        forced.update(keep)
        assignments, fills = pick_and_place(prio, usable.copy() if usable is not None else None,
                                            frozenset(rows[r] for r in forced))
    filling = frozenset(rows[r][0] for r, _ in fills) if fills else frozenset()
    kept, started, still = [], [], set()
    for a in assignments:
        b = before.get(a.jobs)
        if b is a or b == a:
            kept.append(a)
            still.update(a.jobs)
        else:
            started.append(a)
    preempt = tuple(sorted(set().union(*before) - still))
    return RoundPlan(number, tuple(assignments), tuple(kept), tuple(started), preempt, filling)


def _cap_starts(cap: int, rows: Sequence[Row], assignments, before: Mapping[Row, Assignment],
                index: Mapping[Row, int], column: Mapping[str, int], prio: np.ndarray,
                usable: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None] | None:
    """The priorities (and `usable`) that start at most `cap` jobs that are not running, or
    None when the round starts no more than that (or `cap` is 0: no cap).

    The starts kept are the picks of highest priority where they were placed (work
    conserving fills, at priority 0, last); every other row of jobs that are not running
    gets priority 0 (and, a single job, nothing usable) for this round, so its GPUs stay
    with the rows running there, or idle: no preemption is made for a start the cap
    holds back.  Those left waiting received nothing this round, so they are further
    behind their share next round and come first then."""
    if not cap:
        return None
    running = set().union(*before) if before else set()

    def new_jobs(row) -> int:
        return sum(1 for job in row if job not in running)

    starting = [(index[a.jobs], a) for a in assignments if a.jobs in index and new_jobs(a.jobs)]
    if sum(new_jobs(a.jobs) for _, a in starting) <= cap:
        return None
    starting.sort(key=lambda ra: (-prio[ra[0], column[ra[1].worker_type]], ra[0]))
    allowed, taken = set(), 0
    for r, a in starting:
        if taken + new_jobs(a.jobs) <= cap:
            allowed.add(r)
            taken += new_jobs(a.jobs)
    waiting = [r for r, row in enumerate(rows) if r not in allowed and new_jobs(row)]
    prio = prio.copy()
    prio[waiting, :] = 0.0
    if usable is not None:
        usable = usable.copy()
        singles = [r for r in waiting if len(rows[r]) == 1 and r < usable.shape[0]]
        usable[singles, :] = 0.0       # rows of single jobs come first, in the jobs' order
    return prio, usable


__all__ = ["allocation_rows", "fill", "only_types", "place", "plan_round", "priorities", "round_priorities",
           "row_index", "select", "split_pairs",
           "type_columns", "type_order"]


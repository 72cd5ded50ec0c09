"""What the commands that read the daemon's database show: its jobs, one job, its events.

Each function takes a read-only `SqliteStore` and returns plain rows (dicts of
str/number/None), the same for a table and for ``--json``: `rows` and `cluster_rows`
(gqueue: every job with its state, share, time received and why it waits; per GPU type:
GPUs, busy, share, utilization), `explain` (one job: its share per type against what it
received, and what it needs to run next round), `events` (what happened to jobs, each
event as a sentence fragment by `words`), `throughputs` (what was measured and estimated).

The strings come from users (names, models, reasons) and from Slurm: the caller passes
every row through `core.display.clean` before printing it.
"""
from __future__ import annotations

import math
import time as _time
from datetime import datetime
from typing import Sequence

from ..core.engine import INTERIM
from ..core.errors import InputError
from .store import SqliteStore

# How a job left, in the ST column (`--states`); its REASON is what Slurm said of its end.
# A shadow database (the daemon ran with --dry-run): said above the table, in the JSON,
# and as the ST of every job the plan placed.
SHADOW = "shadow mode (--dry-run): planned, not done"
PLANNED = "PLAN"
DEPARTED = {"completed": "CD", "failed": "F", "cancelled": "CA", "node_fail": "NF",
            "timeout": "TO", "preempted": "PR", "lost": "LOST"}


ENDED = {"completed": "finished", "failed": "failed", "cancelled": "cancelled",
         "timeout": "hit its time limit", "node_fail": "ended with its node failing",
         "preempted": "preempted by Slurm", "lost": "lost"}

def _fraction(part: float, whole: float) -> str:
    """`part` of `whole` as a small fraction when it is one (1/3), else a percentage."""
    if not whole > 0:
        return "-"
    f = part / whole
    for q in range(1, 13):
        p = round(f * q)
        if p and abs(f - p / q) < 2e-3:
            return f"{p}/{q}"
    return f"{100 * f:.0f}%"


def share_levels(jobs: Sequence[dict], meta: dict | None, shares: dict, servers: Sequence[dict]) -> dict:
    """{job: where its share came from}: under the hierarchical policy its entity's (a user,
    when the entity is the job's user) share of the GPUs, split over the entity's jobs; under
    another policy its own (every job its own share, whatever its user)."""
    policy = (meta or {}).get("policy")
    total = sum(s["gpus"] for s in servers)
    active = [j for j in jobs if j["state"] == "active"]
    held = {j["id"]: sum(shares.get(j["id"], {}).values()) * (j["scale_factor"] or 1) for j in active}
    out = {}
    if policy and policy.startswith("hierarchical"):
        members: dict[str, list[str]] = {}
        for j in active:
            members.setdefault(j["entity"] or "", []).append(j["id"])
        for j in active:
            entity = j["entity"] or ""
            gpus = sum(held[o] for o in members[entity])
            kind = "user" if entity and entity == j["user"] else "entity"
            n = len(members[entity])
            fraction = _fraction(gpus, total)
            out[j["id"]] = {"level": kind, "entity": entity, "entity_jobs": n, "entity_gpus": gpus,
                            "entities": len(members), "gpus": total,
                            "short": f"{kind}:{entity}={fraction},{n}job{'s' if n != 1 else ''}",
                            "text": f"{kind} {entity}'s share {fraction} ({gpus:.3g} of {total} GPUs, "
                                    f"{len(members)} {kind}s sharing first), split over {n} "
                                    f"job{'s' if n != 1 else ''}"}
    else:
        for j in active:
            if policy == INTERIM:
                words = "an agnostic share until a solve that includes it"
            else:
                words = f"policy {policy or 'none yet'}: every job its own share, whatever its user"
            out[j["id"]] = {"level": "job", "entity": None, "entity_jobs": None, "entity_gpus": None,
                            "entities": None, "gpus": total,
                            "short": f"job={_fraction(held[j['id']], total)}",
                            "text": f"its own share {_fraction(held[j['id']], total)} ({words})"}
    return out


def rows(store: SqliteStore, users=(), types=(), job_ids=(),
         states=("active",)) -> tuple[list[dict], list[str]]:
    """One dict per job in `states` (default: the active ones), with everything the table
    shows; and the worker types."""
    jobs = store.jobs(states)
    ended = store.departure_details() if set(states) - {"active"} else {}
    meta, shares = store.latest_allocation()
    times = store.job_time()
    status = store.status_rows()
    rounds = store.rounds_of()
    servers = store.servers()
    worker_types = list(dict.fromkeys([s["worker_type"] for s in servers]
                                      + [wt for t in shares.values() for wt in t]
                                      + [wt for t in times.values() for wt in t]))
    interim = set(meta["interim_jobs"]) if meta else set()
    shadow = store.shadow()
    placed = store.last_placement()
    estimates: dict[str, dict[str, dict]] = {}
    for e in store.throughput_estimates(active_only=False):
        estimates.setdefault(e["job"], {})[e["worker_type"]] = e
    levels = share_levels(jobs if states == ("active",) else store.jobs(), meta, shares, servers)
    out = []
    for j in jobs:
        st = status.get(j["id"], {})
        wt = st.get("worker_type")
        if users and j["user"] not in users:
            continue
        if types and wt not in types:
            continue
        if job_ids and j["id"] not in job_ids:
            continue
        reason = st.get("reason") if st else "not yet scheduled (waiting for the next round)"
        if j["state"] != "active":
            wt, reason = None, ended.get(j["id"], j["state"])
        state = (DEPARTED.get(j["state"], j["state"]) if j["state"] != "active"
                 else st.get("state") or ("R" if wt else "PD"))
        if shadow and j["state"] == "active" and wt and state != "R":
            # --dry-run released nothing: a placed job is a plan, never R (nor S, "released")
            state, reason = PLANNED, f"{SHADOW}: on {wt}"
        shape = None
        if j["state"] == "active" and wt:
            # running: where Slurm runs it (a job the plan moves runs there until it stops);
            # else where the last round placed it
            running = state == "R" and st.get("nodes")
            shape = shape_of({"worker_type": wt, "nodes": st["nodes"], "gpus": st.get("gpus")}
                           if running else placed.get(j["id"]))
        est = estimates.get(j["id"], {})
        first = next(iter(est.values()), {})          # phase and proxy are per job
        phase, proxy = first.get("phase"), first.get("proxy")
        out.append({
            "jobid": j["id"], "user": j["user"], "name": j["name"], "account": j["account"],
            "model": j["model"], "gpus": j["scale_factor"], "weight": j["weight"],
            "st": state,
            "state": j["state"], "finished": j.get("finished"), "type": wt,
            "shape": shape,
            "share": {t: shares.get(j["id"], {}).get(t, 0.0) for t in worker_types},
            "interim_share": j["id"] in interim,
            "time": {t: times.get(j["id"], {}).get(t, 0.0) for t in worker_types},
            "priority": st.get("priority"), "rounds": rounds.get(j["id"], 0),
            "steps_done": j.get("steps_done"), "steps": j.get("steps"),
            "reason": reason or "",
            "throughput": {t: {"steps_per_second": est[t]["steps_per_second"], "kind": est[t]["kind"],
                               "confidence": est[t]["confidence"]} for t in worker_types if t in est},
            "estimate": (f"{phase} (like {proxy})" if phase == "fingerprint" and proxy else phase),
            # seconds to its last step at its shares (None: unknown), and whether a speed in
            # that is a guess (the same computation as explain's)
            **_finish_fields(j, shares.get(j["id"], {}), est, wt),
            "types": j["types"].split(",") if j.get("types") else None,     # None: any
            # where its share came from (a user's share split over their jobs, or its own)
            "level": levels.get(j["id"], {}).get("short"),
            "share_from": levels.get(j["id"], {}).get("text"),
        })
    return out, worker_types


def shape_of(placement: dict | None) -> dict | None:
    """Where the last round put the job: nodes x GPUs per node on a type (a distributed job
    holds as many GPUs on each of its nodes; the backend starts it exactly so)."""
    if not placement or not placement.get("nodes"):
        return None
    nodes = placement["nodes"].split(",")
    return {"worker_type": placement["worker_type"], "nodes": len(nodes), "node_list": nodes,
            "gpus_per_node": (placement["gpus"] or 0) // len(nodes)}


def cluster_rows(store: SqliteStore) -> list[dict]:
    """Per GPU type: GPUs the scheduler may use, busy, the allocation's share, utilization."""
    servers = store.servers()
    _, shares = store.latest_allocation()
    status = store.status_rows()
    slurm_states = any(r.get("state") for r in status.values())
    placed = store.last_placement()     # for a store without Slurm states (a simulation's)
    sf = {j["id"]: j["scale_factor"] or 1 for j in store.jobs()}
    out = []
    for wt in dict.fromkeys(s["worker_type"] for s in servers):
        gpus = sum(s["gpus"] for s in servers if s["worker_type"] == wt)
        # only what Slurm runs: a job planned (released) but not started holds nothing
        if slurm_states:
            busy = sum(r["gpus"] or 0 for r in status.values()
                       if r.get("state") == "R" and r["worker_type"] == wt)
        else:
            busy = sum(p["gpus"] for p in placed.values() if p["worker_type"] == wt)
        wanted = sum(share.get(wt, 0.0) * sf.get(job, 1) for job, share in shares.items())
        out.append({"worker_type": wt, "gpus": gpus, "busy": busy, "gavel_share": wanted,
                    "utilization": busy / gpus if gpus else 0.0})
    return out


def _finite_or_none(v):
    return v if isinstance(v, (int, float)) and math.isfinite(v) else None


def number(p) -> str:
    if p is None:
        return "-"
    if isinstance(p, str):
        return p
    return "inf" if math.isinf(p) else f"{p:.3g}"


# Where a speed the policy was given comes from; explore/mean/default are guesses.
SOURCES = {"measured": "measured", "learned": "learned", "hint": "hint", "reference": "reference",
           "fingerprint": "fingerprint", "explore": "guess", "mean": "guess", "default": "guess"}


def _finish(share: dict, speeds: dict, worker_type, remaining) -> tuple[float | None, bool]:
    """Seconds to its last step at its shares' average speed (or, without shares, at the
    speed of the type it runs on), and whether a speed in that is not measured."""
    if remaining is None or not math.isfinite(remaining):
        return None, False
    used = {t: x for t, x in share.items() if x > 0 and t in speeds}
    if not used and worker_type in speeds:
        used = {worker_type: 1.0}
    rate = sum(x * speeds[t][0] for t, x in used.items())
    if not used or not rate > 0:
        return None, False
    return max(0.0, remaining) / rate, any(speeds[t][1] != "measured" for t in used)


def _finish_fields(j: dict, share: dict, est: dict, worker_type) -> dict:
    speeds = {t: (e["steps_per_second"], SOURCES.get(e["kind"], "guess"))
              for t, e in est.items() if e.get("steps_per_second") is not None}
    done, total = _finite_or_none(j.get("steps_done")), _finite_or_none(j.get("steps"))
    if j["state"] != "active" or done is None or total is None:
        return {"finish_seconds": None, "finish_is_guess": False}
    finish, guess = _finish(share, speeds, worker_type, total - done)
    return {"finish_seconds": finish, "finish_is_guess": guess if finish is not None else False}


def _bar(running: list[tuple[float, int]], needed: int) -> float | None:
    """The priority a waiting job must beat on a type to get `needed` more GPUs there: the
    highest among the lowest-priority running jobs that hold them (None: they are not held
    by running jobs it could displace)."""
    got, bar = 0, None
    for priority, gpus in sorted(running):
        if got >= needed:
            break
        got, bar = got + gpus, priority
    return bar if got >= needed else None


def _beat(wt: str, bar: float, own, size: int) -> str:
    """What a waiting job needs on `wt`, in the terms the mechanism picks by (priorities
    of the next round: a running job's lease counted, a tie kept by the running job)."""
    whose = "the lowest of the jobs running there" if size == 1 else \
            f"the highest of the lowest-priority jobs there that hold the {size} GPUs it needs"
    if own is not None and own > bar:
        return (f"{wt}: nothing more; its priority {number(own)} is above {number(bar)} ({whose}), "
                f"so the next round picks it before them unless jobs of higher priority "
                f"take the GPUs first")
    tie = ("; infinite while a running job's lease lasts" if math.isinf(bar) else
           "; a tie keeps the running job")
    return f"{wt}: a priority above {number(bar)} ({whose}; its own is {number(own)}{tie})"


def explain(store: SqliteStore, job: str, now: float | None = None) -> dict:
    """One job as `slurm-gavel explain` shows it; `now` the wall clock (for "arrived ...
    ago"), the time its share asks for runs to the daemon's last round."""
    now = _time.time() if now is None else now
    found = [j for j in store.jobs(("active", "completed", "failed", "cancelled", "node_fail",
                                    "timeout", "preempted", "lost")) if j["id"] == job]
    if not found:
        raise InputError("JOB", f"job {job} is not in the database {store.path}")
    j = found[0]
    meta, shares = store.latest_allocation()
    times = store.job_time([job]).get(job, {})
    status = store.status_rows()
    mine = status.get(job, {})
    share = shares.get(job, {})
    last_round = max([r["time"] for r in status.values() if r.get("time")] + [j["last_seen"] or 0])
    elapsed = max(0.0, last_round - (j["first_seen"] or last_round))
    speeds = {e["worker_type"]: (e["steps_per_second"], SOURCES.get(e["kind"], "guess"))
              for e in store.throughput_estimates(active_only=False)
              if e["job"] == job and e["steps_per_second"] is not None}
    servers = store.servers()
    # gqueue's order of the types: the cluster's, then any the job has time on
    types = list(dict.fromkeys([s["worker_type"] for s in servers if s["worker_type"] in share]
                               + sorted(share) + sorted(times)))
    types += [wt for wt in sorted(speeds) if wt not in types]
    per_type = [{"worker_type": wt, "share": share.get(wt, 0.0),
                 "target_seconds": share.get(wt, 0.0) * elapsed, "received_seconds": times.get(wt, 0.0),
                 "steps_per_second": speeds[wt][0] if wt in speeds else None,
                 "source": speeds[wt][1] if wt in speeds else None}
                for wt in types]
    gpus = {}
    for s in servers:
        gpus[s["worker_type"]] = gpus.get(s["worker_type"], 0) + s["gpus"]
    busy, held_by = {}, {}
    for other, r in status.items():
        if r.get("state") == "R" and r.get("worker_type"):
            wt = r["worker_type"]
            busy[wt] = busy.get(wt, 0) + (r.get("gpus") or 0)
            if other != job and r.get("priority") is not None:
                held_by.setdefault(wt, []).append((r["priority"], r.get("gpus") or 0))
    size = j["scale_factor"] or 1
    done, total = _finite_or_none(j.get("steps_done")), _finite_or_none(j.get("steps"))
    finish, guess = _finish(share, speeds, mine.get("worker_type"),
                            total - done if total is not None and done is not None else None)
    state = mine.get("state") or ("R" if mine.get("worker_type") else "PD")
    if j["state"] != "active":
        needs = f"nothing: it left ({j['state']})"
    elif state == "R":
        needs = f"nothing: it runs on {mine.get('worker_type')}"
    elif state == "W":
        needs = f"the daemon holds it back: {mine.get('reason')}"
    elif not any(v > 0 for v in share.values()):
        needs = "a share: the allocation in force gives it no GPU time now (it waits for a new solve)"
    else:
        options = []
        for wt, x in share.items():
            if x <= 0:
                continue
            free = gpus.get(wt, 0) - busy.get(wt, 0)
            bar = _bar(held_by.get(wt, []), size - max(free, 0))
            if free >= size:
                options.append(f"{wt}: {free} GPUs free, it should start there next round")
            elif bar is not None:
                options.append(_beat(wt, bar, mine.get("priority"), size))
            else:
                options.append(f"{wt}: {size} free GPUs ({max(free, 0)} free now)")
        needs = "; or ".join(options)
    level = share_levels(store.jobs(), meta, shares, servers).get(job, {})
    return {"jobid": job, "user": j["user"], "name": j["name"], "model": j["model"], "gpus": size,
            "share_level": level.get("level"), "share_from": level.get("text"),
            "state": state if j["state"] == "active" else j["state"],
            "worker_type": mine.get("worker_type"), "priority": mine.get("priority"),
            "reason": mine.get("reason") or "", "arrived": j["first_seen"],
            "ago_seconds": max(0.0, now - j["first_seen"]) if j["first_seen"] else None,
            "elapsed_seconds": elapsed, "types": per_type, "needs": needs,
            "steps_done": done, "steps": total,
            "finish_seconds": finish if j["state"] == "active" else None,
            "finish_is_guess": guess if j["state"] == "active" else False,
            "preemptions": len(store.events([job], kinds=("preempt",))),
            # what the job reports it lost to being stopped (saves, restarts); the user's number
            "lost_seconds": _finite_or_none(j.get("lost_seconds")),
            # the GPU types it may run on (types=, sbatch -p, what fits it); None: any
            "may_run_on": j["types"].split(",") if j.get("types") else None}


def words(kind: str, detail: str | None) -> str:
    """An event as a sentence fragment (`detail` is already cleaned or Slurm's/ours)."""
    d = detail or ""
    if kind == "arrival":
        return f"submitted (model {d})" if d else "submitted"
    if kind == "start":
        return f"started {d}"
    if kind == "preempt":
        return f"preempted {d}"
    if kind == "take_back":
        return f"released {d}"
    if kind == "action_failed":
        what, _, why = d.partition(": ")
        return (f"failed to {what}: {why}" if why else f"an action failed: {d}")
    if kind == "stuck":
        return f"released but Slurm did not start it ({d})"
    if kind == "start_taken":
        return f"start taken back: {d}; planned again at once"
    if kind == "lost_with_node":
        return f"lost with node {d}: waits until the node is back"
    if kind == "action":
        return f"daemon asked Slurm to {d}"
    if kind == "dry_run":
        return f"would {d} (dry run: not done)"
    if kind in ENDED:
        return f"{ENDED[kind]}: {d}" if d else ENDED[kind]
    return f"{kind}: {d}" if d else kind


def events(store: SqliteStore, jobs=(), since: float | None = None, actions: bool = False) -> list[dict]:
    out = []
    for e in store.events(jobs, since):
        if e["kind"] == "action" and not actions:
            continue
        out.append({"time": e["time"],
                    "at": datetime.fromtimestamp(e["time"]).isoformat(sep=" ", timespec="seconds"),
                    "job": e["job"], "kind": e["kind"], "detail": e["detail"],
                    "event": words(e["kind"], e["detail"])})
    return out


def throughputs(store: SqliteStore, models: Sequence[str] = (), pairs: bool = False) -> dict:
    """`slurm-gavel throughputs show`: the measured throughputs per model (alone, and with
    `pairs` in pairs too; only `models` if given), and per active job the estimate per type
    the policy was last given, with how many samples measured it."""
    model_rows, job_rows = store.load_throughputs()
    wanted = set(models)
    measured = [r for r in model_rows if (pairs or not r["partner"]) and (not wanted or r["model"] in wanted)]
    measured.sort(key=lambda r: (r["model"], r["scale_factor"], r["partner"], r["spread"], r["worker_type"]))
    samples = {(r["job"], r["worker_type"]): r["samples"] for r in job_rows
               if not r["partner"] and not r["spread"]}
    estimates = []
    for e in store.throughput_estimates():
        if wanted and e["model"] not in wanted:
            continue
        e = dict(e)
        e["samples"] = samples.get((e["job"], e["worker_type"]), 0)
        estimates.append(e)
    return {"measured": measured, "estimates": estimates}


__all__ = ["DEPARTED", "ENDED", "PLANNED", "SHADOW", "cluster_rows", "events", "explain", "number",
           "rows", "shape_of", "throughputs", "words"]

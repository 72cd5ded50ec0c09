"""A site's job history from Slurm accounting (`sacct`), read defensively.

This module owns `HistoryJob` (one job as accounting saw it: submitted, its runs, GPUs and
type per run, account, user) and the two readers of `sacct -X -D` output: `parse_history_json`
(`sacct --json`: 22.05's OpenAPI v0.0.38 plain numbers and state strings, or 23.02+'s number
objects and state lists) and `parse_history_parsable` (`--parsable2 --format=HISTORY_FIELDS`,
for a Slurm without `--json`).  Nothing is trusted: job names, accounts and admin comments are
kept as given (the caller makes them printable), unknown or missing fields read as unknown, a
record of another shape is skipped.

GPUs come from the allocation's TRES (``gres/gpu=2`` and ``gres/gpu:v100=2``); the site must
track them (``AccountingStorageTRES=gres/gpu,gres/gpu:TYPE...``).  A run whose TRES has no
type takes its node's GPU type, when the caller knows the nodes.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from ..core.errors import InputError
from .flags import from_admin_comment, is_admin_comment
from .records import _sacct_time, expand_hostlist, number, states, text

# The fields `SlurmCLI.history` asks for with --parsable2, in order.  JobName last: it is the
# user's own text and may hold the delimiter, so a longer line gives it every field left.
HISTORY_FIELDS = ("JobIDRaw", "State", "Submit", "Start", "End", "ElapsedRaw", "Partition",
                  "NodeList", "AllocTRES", "Account", "User", "AdminComment", "JobName")

_TRES_GPU = re.compile(r"^gres/gpu(?::([^=]+))?=(\d+)$")


@dataclass(frozen=True)
class HistoryRun:
    """One run of a job (sacct -D lists one record per run of a requeued job)."""
    state: str                  # base state: COMPLETED, REQUEUED, FAILED, RUNNING, ...
    submit: float | None        # a requeued run's record carries the requeue time
    start: float | None
    end: float | None
    elapsed: float              # seconds it ran (sacct's own count)
    partition: str
    nodes: tuple[str, ...]
    gpus: int                   # GPUs allocated (0: none, or the site does not track them)
    gpu_type: str | None


@dataclass(frozen=True)
class HistoryJob:
    """One job: its first submission and every run, oldest first."""
    job_id: str
    name: str
    user: str
    account: str
    admin_comment: str
    runs: tuple[HistoryRun, ...]

    @property
    def submit(self) -> float | None:
        times = [r.submit for r in self.runs if r.submit is not None]
        return min(times) if times else None

    @property
    def ran(self) -> tuple[HistoryRun, ...]:
        """The runs that started (one of less than a second has ElapsedRaw 0, and counts)."""
        return tuple(r for r in self.runs if r.start is not None)

    @property
    def last(self) -> HistoryRun:
        ran = self.ran
        return ran[-1] if ran else self.runs[-1]

    @property
    def state(self) -> str:
        return self.runs[-1].state

    @property
    def gpus(self) -> int:
        return self.last.gpus

    @property
    def gpu_type(self) -> str | None:
        return self.last.gpu_type

    @property
    def partition(self) -> str:
        return self.last.partition

    @property
    def start(self) -> float | None:
        ran = self.ran
        return ran[0].start if ran else None

    @property
    def end(self) -> float | None:
        return self.runs[-1].end

    @property
    def restarts(self) -> int:
        return max(0, len(self.ran) - 1)

    def gpu_seconds(self) -> dict[str, float]:
        """GPU-seconds per GPU type over every run ("" when a run's type is unknown)."""
        out: dict[str, float] = {}
        for r in self.ran:
            if r.gpus:
                key = r.gpu_type or ""
                out[key] = out.get(key, 0.0) + r.gpus * r.elapsed
        return out


def _gpus_from_tres(items: Iterable[tuple[str, int]]) -> tuple[int, str | None]:
    """(count, type) from ("gpu", 2), ("gpu:v100", 2) pairs (names after ``gres/``)."""
    total, typed = 0, {}
    for name, count in items:
        base, _, kind = name.partition(":")
        if base != "gpu" or count <= 0:
            continue
        if kind:
            typed[kind] = typed.get(kind, 0) + count
        else:
            total = max(total, count)
    if not total and typed:
        total = sum(typed.values())
    # one type: that one; several (a rare heterogeneous allocation): the largest share
    kind = max(typed, key=typed.get) if typed else None
    return total, kind


def _tres_text(value: str) -> tuple[int, str | None]:
    pairs = []
    for item in (value or "").split(","):
        m = _TRES_GPU.match(item.strip())
        if m:
            pairs.append((f"gpu:{m.group(1)}" if m.group(1) else "gpu", int(m.group(2))))
    return _gpus_from_tres(pairs)


def _tres_json(value: Any) -> tuple[int, str | None]:
    pairs = []
    for t in value if isinstance(value, list) else []:
        if not isinstance(t, dict) or text(t.get("type")) != "gres":
            continue
        count = number(t.get("count"))
        if count is not None and count > 0:
            pairs.append((text(t.get("name")), int(count)))
    return _gpus_from_tres(pairs)


def _nodes(value: str) -> tuple[str, ...]:
    return tuple(n for n in expand_hostlist((value or "").strip()) if n and n != "None assigned")


def _typed(run: HistoryRun, node_types: Mapping[str, str] | None) -> HistoryRun:
    if run.gpu_type or not run.gpus or not node_types:
        return run
    kinds = {node_types[n] for n in run.nodes if n in node_types}
    if len(kinds) != 1:
        return run
    return HistoryRun(run.state, run.submit, run.start, run.end, run.elapsed, run.partition,
                      run.nodes, run.gpus, kinds.pop())


def _elapsed(value, start, end) -> float:
    n = number(value)
    if n is not None and n >= 0:
        return float(n)
    return max(0.0, end - start) if start is not None and end is not None else 0.0


def _collect(rows, node_types) -> list[HistoryJob]:
    """(id, name, user, account, admin comment, run) rows -> jobs, oldest submission first."""
    jobs: dict[str, list] = {}
    for job_id, name, user, account, admin, run in rows:
        entry = jobs.setdefault(job_id, [name, user, account, admin, []])
        entry[3] = entry[3] or admin
        entry[4].append(_typed(run, node_types))
    out = []
    for job_id, (name, user, account, admin, runs) in jobs.items():
        # sacct prints a job's later runs after other jobs' records
        runs.sort(key=lambda r: (r.start is None, r.start or 0.0, r.submit or 0.0))
        out.append(HistoryJob(job_id, name, user, account, admin, tuple(runs)))
    out.sort(key=lambda j: (j.submit is None, j.submit or 0.0, int(j.job_id)))
    return out


def parse_history_parsable(output: str, fields: Iterable[str] = HISTORY_FIELDS,
                           node_types: Mapping[str, str] | None = None) -> list[HistoryJob]:
    """`sacct -n -X -D --parsable2 --format=FIELDS` -> jobs.  Steps (ids with a dot), array
    specs and headers are skipped; the last field takes any extra delimiters."""
    fields = [f.lower() for f in fields]
    rows = []
    for line in (output or "").splitlines():
        values = line.split("|")
        if len(values) < len(fields):
            continue
        values = values[:len(fields) - 1] + ["|".join(values[len(fields) - 1:])]
        row = dict(zip(fields, values))
        job = (row.get("jobidraw") or row.get("jobid") or "").strip()
        if not re.fullmatch(r"[0-9]+", job):
            continue
        state = states(row.get("state", "").split(" by ")[0])      # "CANCELLED by 0"
        start, end = _sacct_time(row.get("start", "")), _sacct_time(row.get("end", ""))
        gpus, kind = _tres_text(row.get("alloctres", ""))
        run = HistoryRun(state[0] if state else "UNKNOWN", _sacct_time(row.get("submit", "")),
                         start, end, _elapsed(row.get("elapsedraw"), start, end),
                         row.get("partition", "").strip(), _nodes(row.get("nodelist", "")),
                         gpus, kind)
        rows.append((job, row.get("jobname", ""), row.get("user", "").strip(),
                     row.get("account", "").strip(), row.get("admincomment", "").strip(), run))
    return _collect(rows, node_types)


def _time(value) -> float | None:
    n = number(value)
    return float(n) if n is not None and n > 0 and n != float("inf") else None


# The state flags Slurm's job_state_string names a job by, before its base state, in its
# order: 24.11's JSON gives a requeued run as ["PENDING", "REQUEUED"] (base first, then
# flags) where sacct's State column (and 22.05's JSON) says "REQUEUED".
_NAMED_FLAGS = ("COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING", "REQUEUED", "REQUEUE_FED",
                "REQUEUE_HOLD", "SPECIAL_EXIT", "STOPPED", "REVOKED", "RESV_DEL_HOLD", "SIGNALING")


def _state_name(flags: Sequence[str]) -> str:
    """The one name sacct's State column gives a state list: a naming flag, else the base."""
    for flag in _NAMED_FLAGS:
        if flag in flags[1:]:
            return flag
    return flags[0] if flags else "UNKNOWN"


def parse_history_json(data: Any, node_types: Mapping[str, str] | None = None) -> list[HistoryJob]:
    """`sacct -X -D --json` (any version's layout) -> jobs.  A record that is not a job
    object, or has no numeric id, is skipped."""
    rows = []
    jobs = data.get("jobs") if isinstance(data, dict) else None
    for j in jobs if isinstance(jobs, list) else []:
        if not isinstance(j, dict):
            continue
        job_id = number(j.get("job_id"))
        if job_id is None or job_id != int(job_id) or job_id < 1:
            continue
        t = j.get("time") if isinstance(j.get("time"), dict) else {}
        state = j.get("state")
        current = state.get("current") if isinstance(state, dict) else state
        base = states(current)
        start, end = _time(t.get("start")), _time(t.get("end"))
        tres = j.get("tres") if isinstance(j.get("tres"), dict) else {}
        gpus, kind = _tres_json(tres.get("allocated"))
        comment = j.get("comment")
        admin = text(comment.get("administrator")) if isinstance(comment, dict) else text(j.get("admin_comment"))
        run = HistoryRun(_state_name(base), _time(t.get("submission")), start, end,
                         _elapsed(t.get("elapsed"), start, end), text(j.get("partition")).strip(),
                         _nodes(text(j.get("nodes"))), gpus, kind)
        rows.append((str(int(job_id)), text(j.get("name")), text(j.get("user")).strip(),
                     text(j.get("account")).strip(), admin.strip(), run))
    return _collect(rows, node_types)


# -- for `slurm-gavel replay` ----------------------------------------------------------------
def model_of(job: HistoryJob, pattern: re.Pattern | None) -> str | None:
    """A gavel job's `model` flag, else the name pattern's group `model` (or group 1, or the
    whole match)."""
    if is_admin_comment(job.admin_comment):
        try:
            flags = from_admin_comment(job.admin_comment)
        except InputError:
            flags = None
        if flags is not None and flags.model:
            return flags.model
    if pattern is not None:
        m = pattern.search(job.name)
        if m:
            groups = m.groupdict()
            value = groups.get("model") or (m.group(1) if m.re.groups else m.group(0))
            return value or None
    return None


def steps_of(job: HistoryJob) -> int | None:
    if is_admin_comment(job.admin_comment):
        try:
            return from_admin_comment(job.admin_comment).steps
        except InputError:
            return None
    return None


def read_history(text: str, node_types: Mapping[str, str] | None = None) -> list[HistoryJob]:
    """A saved or live sacct output: JSON when it is one, else --parsable2 of HISTORY_FIELDS."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise InputError("sacct", f"output is not JSON ({e.msg} at line {e.lineno})") from None
        return parse_history_json(data, node_types)
    return parse_history_parsable(text, HISTORY_FIELDS, node_types)


def cluster_shape(nodes) -> tuple[dict[str, int], dict[str, int], dict[str, str]]:
    """(GPUs per type, GPUs per node per type, node -> type) of `SlurmNode`s with GPUs."""
    gpus, per_node, node_types = {}, {}, {}
    for n in nodes:
        if n.gpu_type and n.gpus:
            gpus[n.gpu_type] = gpus.get(n.gpu_type, 0) + n.gpus
            per_node[n.gpu_type] = max(per_node.get(n.gpu_type, 0), n.gpus)
            node_types[n.name] = n.gpu_type
    return gpus, per_node, node_types


def load_history(cli, start: str, end: str = "now", partitions: Sequence[str] = (),
                 accounts: Sequence[str] = (), users: Sequence[str] = (), parsable: bool = False,
                 sacct_file: str | None = None,
                 node_types: Mapping[str, str] | None = None) -> list[HistoryJob]:
    """The jobs of a time range from `cli` (a SlurmCLI: `sacct --json`, else `--parsable2`
    when asked or when this Slurm refuses --json), or from a saved output; only those of the
    given partitions, accounts and users."""
    from .commands import SlurmCommandError

    if sacct_file:
        try:
            with open(sacct_file, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError as e:
            raise InputError("--sacct-file", f"cannot read {sacct_file}: {e.strerror or e}") from None
    else:
        query = dict(partitions=partitions, accounts=accounts, users=users, fields=HISTORY_FIELDS)
        try:
            text = cli.history(start, end, as_json=not parsable, **query)
        except SlurmCommandError as e:
            # a Slurm built without its JSON plugin refuses --json: the same rows as text
            if parsable or "json" not in str(e).lower():
                raise
            text = cli.history(start, end, as_json=False, **query)
    keep = {"partition": set(partitions), "account": set(accounts), "user": set(users)}
    return [j for j in read_history(text, node_types)
            if all(not want or getattr(j, k) in want for k, want in keep.items())]


def replay_records(history: Iterable[HistoryJob], pattern: re.Pattern | None = None) -> list[dict]:
    """Each job as the plain record sim/replay.py `build` reads: ids, names, times (epoch
    seconds), GPUs and type of its last run, its model and steps when known, and every run
    that ran (type, GPUs, seconds)."""
    return [{"job": j.job_id, "name": j.name, "user": j.user, "account": j.account,
             "partition": j.partition, "state": j.state, "submit": j.submit, "start": j.start,
             "end": j.end, "gpus": j.gpus, "gpu_type": j.gpu_type, "model": model_of(j, pattern),
             "steps": steps_of(j),
             "runs": [{"gpu_type": r.gpu_type, "gpus": r.gpus, "elapsed": r.elapsed} for r in j.ran]}
            for j in history]


__all__ = ["HISTORY_FIELDS", "HistoryJob", "HistoryRun", "cluster_shape", "load_history", "model_of",
           "parse_history_json", "parse_history_parsable", "read_history", "replay_records",
           "steps_of"]

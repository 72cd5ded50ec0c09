"""Reading Slurm's `--json` output, whatever the Slurm version.

Slurm's JSON changes between releases (recorded outputs of both are in
tests/fixtures/): in 22.05 (OpenAPI v0.0.38) a job's `job_state` is one string
(a held requeued job is just "SPECIAL_EXIT"), times are plain integers and
`exit_code` is the raw wait(2) status (exit 85 reads 21760); in 24.11
(data_parser v0.0.42) states are lists of the base state and its flags
(["PENDING", "SPECIAL_EXIT"]), numbers are objects like
``{"set": true, "infinite": false, "number": 1700000000}`` and `exit_code` is
``{"status": [...], "return_code": {...}, "signal": {...}}``; the GPU request
is ``gres:gpu:2`` in one and ``gres/gpu:2`` in the other.  This module turns
any of those into plain `SlurmJob` / `SlurmNode` values and never raises on
an unknown or missing field (a missing field reads as "unknown").
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Iterable

# Job states in which a job holds or may soon hold resources.
ACTIVE_STATES = {"PENDING", "RUNNING", "SUSPENDED", "CONFIGURING", "COMPLETING", "REQUEUED",
                 "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "SPECIAL_EXIT"}
FINISHED_STATES = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                   "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"}


def number(value: Any, default: float | None = None) -> float | None:
    """A plain number, or one of 23.x+'s {"set", "infinite", "number"} objects."""
    if isinstance(value, bool):
        return default
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, dict):
        if value.get("infinite"):
            return float("inf")
        if value.get("set") is False:
            return default
        return number(value.get("number"), default)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return default
    return default


def states(value: Any) -> tuple[str, ...]:
    """A state as a tuple of upper-case flags: "RUNNING" -> ("RUNNING",); ["IDLE", "DRAIN"] as is."""
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(p for p in re.split(r"[+ ,]", value.upper()) if p)
    if isinstance(value, (list, tuple)):
        return tuple(str(v).upper() for v in value)
    return ()


def text(value: Any) -> str:
    return "" if value is None else str(value)


_GPU_REQUEST = re.compile(r"(?:^|,)(?:gres[:/])?gpu(?::([A-Za-z0-9_.\-]+))?[:=](\d+)")


def gpu_request(*fields: Any) -> tuple[str | None, int]:
    """(type or None, count) from tres_per_node / gres strings such as gres:gpu:v100:2, gres/gpu=2."""
    for f in fields:
        s = text(f)
        if not s:
            continue
        m = _GPU_REQUEST.search(s)
        if m:
            return m.group(1), int(m.group(2))
    return None, 0


def expand_hostlist(value: str) -> list[str]:
    """'v100-[0-1],k80-3' -> ['v100-0', 'v100-1', 'k80-3'] (Slurm's bracket ranges)."""
    out: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", value or ""):
        m = re.match(r"^(.*?)\[([^\]]*)\](.*)$", part)
        if not m:
            if part:
                out.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for r in ranges.split(","):
            if "-" in r:
                lo, hi = r.split("-", 1)
                width = len(lo)
                for i in range(int(lo), int(hi) + 1):
                    out.append(f"{prefix}{str(i).zfill(width)}{suffix}")
            elif r:
                out.append(f"{prefix}{r}{suffix}")
    return out


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    name: str
    user: str
    account: str
    partition: str
    state: tuple[str, ...]
    reason: str
    nodes: tuple[str, ...]
    comment: str
    admin_comment: str
    gpu_type: str | None
    gpus: int                 # GPUs per node requested
    node_count: int
    restarts: int
    submit_time: float | None
    # As Slurm reports them (both versions): for a job that has not started or ended
    # yet these may be Slurm's estimates, in the future (a requeued job: its next
    # eligible time; a running job without time limit: a year after its start).
    # A job that just stopped carries its real end until the scheduler estimates again.
    start_time: float | None
    end_time: float | None
    exit_code: int | None
    work_dir: str = ""
    # Slurm's own id: for an array task split off its array (35_2 running as job 38)
    # the id Slurm prints; `job_id` is then the task's name, 35_2, which every
    # command accepts and which stays the same across requeues.
    slurm_id: str = ""
    priority: float | None = None    # 0: held (by the plugin, the daemon or an admin)

    @property
    def primary_state(self) -> str:
        return self.state[0] if self.state else "UNKNOWN"

    @property
    def running(self) -> bool:
        return "RUNNING" in self.state or "COMPLETING" in self.state and bool(self.nodes)

    @property
    def finished(self) -> bool:
        return bool(FINISHED_STATES.intersection(self.state)) and "REQUEUED" not in self.state \
            and "COMPLETING" not in self.state

    @property
    def held(self) -> bool:
        """Pending and held: Slurm will not start it until someone releases it."""
        return (self.priority == 0 or "JobHeld" in self.reason
                or "requeued in held state" in self.reason
                or bool({"SPECIAL_EXIT", "REQUEUE_HOLD"} & set(self.state)))

    @property
    def total_gpus(self) -> int:
        return self.gpus * max(1, self.node_count)


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: tuple[str, ...]
    partitions: tuple[str, ...]
    gpu_type: str | None
    gpus: int

    @property
    def usable(self) -> bool:
        bad = {"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "INVALID", "NOT_RESPONDING",
               "POWERED_DOWN", "POWERING_DOWN", "FUTURE", "MAINTENANCE", "REBOOT_REQUESTED"}
        flags = set(self.state)
        return bool(flags) and not (flags & bad) and not any(f.endswith("*") for f in self.state)


# 22.05 names a pending job by its flag alone; 24.11 lists ["PENDING", flag].
_PENDING_FLAGS = {"SPECIAL_EXIT", "REQUEUE_HOLD", "RESV_DEL_HOLD"}


def _exit_code(value: Any) -> int | None:
    """The exit code (0-255), or 128 + N for a job killed by signal N."""
    if isinstance(value, dict):           # 23.x+: {"status": [...], "return_code": {...}, "signal": {...}}
        signal = number((value.get("signal") or {}).get("id"), None) \
            if isinstance(value.get("signal"), dict) else None
        if "SIGNALED" in states(value.get("status")) and signal:
            return 128 + int(signal)
        code = number(value.get("return_code"), None)
        return None if code is None else int(code)
    n = number(value, None)               # 22.05: the wait(2) status
    if n is None or n == float("inf"):
        return None
    status = int(n)
    if status & 0x7F:                     # killed by a signal
        return 128 + (status & 0x7F)
    return (status >> 8) & 0xFF


def _job_state(value: Any) -> tuple[str, ...]:
    state = states(value)
    if len(state) == 1 and state[0] in _PENDING_FLAGS:
        return ("PENDING",) + state
    return state


def parse_jobs(data: dict) -> list[SlurmJob]:
    jobs = []
    for j in data.get("jobs") or []:
        if not isinstance(j, dict):
            continue
        gpu_type, gpus = gpu_request(j.get("tres_per_node"), j.get("gres_detail"),
                                     j.get("tres_per_job"), j.get("tres_req_str"))
        state = _job_state(j.get("job_state"))
        start = number(j.get("start_time"))
        end = number(j.get("end_time"))
        slurm_id = text(number(j.get("job_id"), j.get("job_id"))).split(".")[0]
        job = SlurmJob(
            job_id=slurm_id,
            name=text(j.get("name")), user=text(j.get("user_name") or j.get("user")),
            account=text(j.get("account")), partition=text(j.get("partition")),
            state=state, reason=text(j.get("state_reason")),
            nodes=tuple(expand_hostlist(text(j.get("nodes")))), comment=text(j.get("comment")),
            admin_comment=text(j.get("admin_comment")), gpu_type=gpu_type, gpus=gpus,
            node_count=int(number(j.get("node_count"), 1) or 1),
            restarts=int(number(j.get("restart_cnt"), 0) or 0),
            submit_time=number(j.get("submit_time")), start_time=start or None,
            end_time=end or None, exit_code=_exit_code(j.get("exit_code")),
            work_dir=text(j.get("current_working_directory")), slurm_id=slurm_id,
            priority=number(j.get("priority"), None))
        jobs.extend(_array_tasks(job, j))
    return jobs


def _task_ids(spec: str) -> list[int]:
    """'0-3', '1,3,5-7', '0-15:4' or with a throttle '0-9%2' -> the task ids."""
    out: list[int] = []
    for part in spec.split("%")[0].split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", part.strip())
        if not m:
            continue
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        out.extend(range(lo, min(hi, lo + 100_000) + 1, int(m.group(3) or 1) or 1))
    return out


def _array_tasks(job: SlurmJob, raw: dict) -> list[SlurmJob]:
    """An array's record as the scheduler sees it: one job per task, named ARRAY_TASK.

    A task Slurm has split off (running, or requeued) has its own record with
    its task id; the array's pending tasks share one record with a task string
    ("0,2-3"), until a command names one of them (`scontrol update jobid=35_2`
    splits it off).
    """
    array = int(number(raw.get("array_job_id"), 0) or 0)
    if array <= 0:
        return [job]
    task = number(raw.get("array_task_id"), None)
    spec = text(raw.get("array_task_string"))
    if spec:
        return [replace(job, job_id=f"{array}_{t}") for t in _task_ids(spec)]
    if task is not None and 0 <= task < 4_000_000_000:
        return [replace(job, job_id=f"{array}_{int(task)}")]
    return [job]


def _node_gres(value: Any) -> tuple[str | None, int]:
    """'gpu:v100:4(S:0)' or 'gpu:v100:4,other:1' -> ('v100', 4)."""
    for part in text(value).split(","):
        m = re.match(r"^gpu(?::([A-Za-z0-9_.\-]+))?:(\d+)", part.strip())
        if m:
            return m.group(1), int(m.group(2))
    return None, 0


def parse_nodes(data: dict) -> list[SlurmNode]:
    nodes = []
    for n in data.get("nodes") or []:
        if not isinstance(n, dict):
            continue
        gpu_type, gpus = _node_gres(n.get("gres"))
        parts = n.get("partitions") or []
        if isinstance(parts, str):
            parts = [p for p in parts.split(",") if p]
        nodes.append(SlurmNode(name=text(n.get("name") or n.get("hostname")),
                               state=states(n.get("state")) + states(n.get("state_flags")),
                               partitions=tuple(parts), gpu_type=gpu_type, gpus=gpus))
    return nodes


def slurm_release(data: dict) -> str:
    meta = (data.get("meta") or {})
    slurm = meta.get("Slurm") or meta.get("slurm") or {}
    return text(slurm.get("release"))


__all__ = ["ACTIVE_STATES", "FINISHED_STATES", "SlurmJob", "SlurmNode", "expand_hostlist",
           "gpu_request", "number", "parse_jobs", "parse_nodes", "slurm_release", "states"]

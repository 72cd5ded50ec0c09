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

Besides state and GPUs, a job's request says where it can run at all: its
node count, memory per node or per CPU (MB), CPUs per node, exclusive
(22.05: ``"shared": "none"``; 24.11: a list of flags), dependency (with its
status, ``afterok:7(unfulfilled)``), constraint (``features``), reservation,
required and excluded nodes; a node's memory (``real_memory``, MB), CPUs and
features (a string in 22.05, a list in 24.11).  Unset numbers (22.05's null,
24.11's ``{"set": false}`` or 0) read as None.

GPUs and shards may be asked per node (``tres_per_node``), per job (``tres_per_job``) or
per task (``tres_per_task`` times ``tasks``: ``-n 2 --tres-per-task=gres/shard:2``,
``--gpus-per-task=1``); a running job's ``gres_detail`` says what it holds on each node
and on which GPUs (docs/space-sharing.md, "Jobs that ask per task").  Other users' jobs
are untrusted input: what cannot be read counts as held, never as free.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime
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


_SHARD_REQUEST = re.compile(r"(?:^|,)(?:gres[:/])?shard(?::[A-Za-z0-9_.\-]+)?[:=](\d+)")


def shard_request(value: Any) -> int:
    """Shards from a tres_per_node / tres_per_task string (gres:shard:4, gres/shard:4), else 0."""
    m = _SHARD_REQUEST.search(text(value))
    return int(m.group(1)) if m else 0


# At most this many device indices are read from one gres_detail entry (a node has a few
# GPUs; a larger range is malformed and reads as every GPU of the node being held).
MAX_INDICES = 1024
# One item of a running job's gres_detail entry for a node: gpu:v100:2(IDX:2-3),
# shard:2(IDX:0) (22.05), shard:4(2/4,2/4,0/4,0/4) (24.11: its count on each GPU).
_GRES_ITEM = re.compile(r"(?:^|,)(gpu|shard)(?::([A-Za-z0-9_.\-]+))?:(\d+)(?:\(([^)]*)\))?")
_PER_DEVICE = re.compile(r"^(?:\d+/\d+,)*\d+/\d+$")


def index_list(idx: str) -> list[int]:
    """'0-1,3' -> [0, 1, 3] (a gres_detail IDX list), at most MAX_INDICES; junk is skipped."""
    out: list[int] = []
    for part in text(idx).split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or hi and not hi.isdigit():
            continue
        first = int(lo)
        last = int(hi) if hi else first
        out.extend(range(first, min(last, first + MAX_INDICES - len(out) - 1) + 1))
        if len(out) >= MAX_INDICES:
            break
    return out[:MAX_INDICES]


@dataclass(frozen=True)
class _NodeGres:
    """What a running job holds on one node, from its gres_detail entry."""
    indices: str = ""                         # as gpu_indices: '2-3', '0,1', '' unknown
    use: tuple[tuple[int, int | None], ...] = ()   # (GPU, its shards there; None: whole)
    gpus: int = 0                             # GPUs it holds there (0: none listed)
    shards: int = 0                           # shards it holds there


def _node_detail(entry: Any) -> _NodeGres:
    """One gres_detail entry -> _NodeGres.  Shards listed by IDX over several GPUs (22.05)
    count all of the node's shards on each of them (the split is not said)."""
    whole: list[int] = []
    shard_use: dict[int, int] = {}
    raw: list[str] = []
    gpu_count = shard_count = 0
    known = True
    for m in _GRES_ITEM.finditer(text(entry)):
        kind, count, detail = m.group(1), int(m.group(3)), (m.group(4) or "").strip()
        if not count:
            continue
        if detail.startswith("IDX:") and index_list(detail[4:]):
            where = index_list(detail[4:])
            raw.append(detail[4:])
            if kind == "gpu":
                whole.extend(where)
            else:
                for i in where:
                    shard_use[i] = shard_use.get(i, 0) + count
        elif kind == "shard" and _PER_DEVICE.match(detail):
            used = [(i, int(part.split("/")[0])) for i, part in enumerate(detail.split(","))]
            used = [(i, n) for i, n in used[:MAX_INDICES] if n > 0]
            raw.append(",".join(str(i) for i, _ in used))
            for i, n in used:
                shard_use[i] = shard_use.get(i, 0) + n
            known = known and bool(used)
        else:
            known = False                     # held, on GPUs not listed (or not readable)
        if kind == "gpu":
            gpu_count += count
        else:
            shard_count += count
    if not known or not raw:
        # some of what it holds is not placed: no GPU list, so it reads as unknown
        return _NodeGres("", (), gpu_count + (1 if shard_count else 0), shard_count)
    use = {i: None for i in whole}
    for i, n in shard_use.items():
        use.setdefault(i, n)
    indices = raw[0] if len(raw) == 1 else ",".join(str(i) for i in sorted(use))
    return _NodeGres(indices, tuple(sorted(use.items())), max(len(use), gpu_count), shard_count)


def _gpu_indices(value: Any) -> tuple[str, ...]:
    """gres_detail -> the device indices (IDX) a running job holds on each node:
    ['shard:2(IDX:0)'] (22.05) -> ('0',), ['gpu:v100:2(IDX:0-1)'] -> ('0-1',), and 24.11's
    shards, the job's count on each GPU of the node, ['shard:2(2/4,0/4)'] -> ('0',),
    ['shard:4(2/4,2/4,0/4,0/4)'] -> ('0,1',); '' where unknown."""
    if not isinstance(value, list):
        return ()
    return tuple(_node_detail(entry).indices for entry in value)


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
    gpus: int                 # GPUs per node requested (or, without one, the total over its nodes)
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
    # where the request can run (None: not set, so no limit known)
    cpus_per_node: int | None = None
    memory_per_node: float | None = None      # MB
    memory_per_cpu: float | None = None       # MB
    # --mem-per-gpu (squeue's memory_per_tres "gres:gpu:5000", 24.11 "gres/gpu:5000"); MB.
    # It wins over the two above: 22.05 lists DefMemPerCPU as memory_per_cpu beside it, 24.11
    # its total on the node as memory_per_node.
    memory_per_gpu: float | None = None
    exclusive: bool = False
    dependency: str = ""
    features: str = ""                        # the --constraint expression
    reservation: str = ""
    required_nodes: tuple[str, ...] = ()
    excluded_nodes: tuple[str, ...] = ()
    # Slurm's own id: for an array task split off its array (35_2 running as job 38)
    # the id Slurm prints; `job_id` is then the task's name, 35_2, which every
    # command accepts and which stays the same across requeues.
    slurm_id: str = ""
    priority: float | None = None    # 0: held (by the plugin, the daemon or an admin)
    # --gpus=N (TresPerJob): the job's GPU total, whatever its shape; 0 when it asks per node
    # only.  A distributed gavel job carries one (job_submit.lua): the daemon reshapes it.
    gpus_per_job: int = 0
    # GPUs Slurm gave it on each of `nodes` (running; from gres_detail), () when unknown:
    # a --gpus=6 job on two 4-GPU nodes holds 4+2, not 3+3
    gpus_on_nodes: tuple[int, ...] = ()
    # gres/shard (space sharing, docs/space-sharing.md): shards per node it asks for (its
    # one GPU is then `gpus` = 1; per task, its count times its tasks on a node, on as many
    # GPUs as tasks), running: the most it holds on one of its nodes; and the device
    # indices (IDX) it holds on each of `nodes` ('0', '2-3', '0,1'; '' where not listed)
    shards: int = 0
    gpu_indices: tuple[str, ...] = ()
    # running: on each of `nodes`, (GPU index, the job's shards on it, or None for the whole
    # GPU) for each GPU it holds there; () where gres_detail does not list them
    gpu_shards: tuple[tuple[tuple[int, int | None], ...], ...] = ()
    # --ntasks-per-gpu (squeue's tasks_per_tres; 24.11 lists it, 22.05's JSON does not: 0)
    tasks_per_gpu: int = 0
    # its task count (squeue's tasks; 0 unknown) and the shards it asks per task
    # (--tres-per-task=gres/shard:K, a multi-GPU pair's half: slurm/backend/pairs/multi.py; 0 none)
    tasks: int = 0
    task_shards: int = 0
    # CPUs of the whole job (squeue's cpus: asked while pending, held while running; 0 unknown)
    cpus: int = 0
    # Slurm's eligible time (0, unset, for a job held at submission without --begin).  For
    # a pending job never run it is the user's `sbatch --begin`; for a requeued one it is
    # Slurm's requeue delay, which the daemon's starts override (StartTime=now).
    eligible_time: float | None = None

    def begins_after(self, now: float) -> float | None:
        """The begin time its owner asked for, while it is still ahead; None otherwise.
        A job that ran (restarts) or runs has passed its begin time already."""
        if self.restarts or self.running or self.finished or not self.eligible_time:
            return None
        return self.eligible_time if self.eligible_time > now else None

    def tasks_per_node(self, gpus_per_node: int) -> int | None:
        """Tasks on each node when run with `gpus_per_node` GPUs there (--ntasks-per-gpu);
        None: the job does not tie its tasks to its GPUs (or Slurm did not say)."""
        return gpus_per_node * self.tasks_per_gpu if self.tasks_per_gpu > 0 else None

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
        return self.gpus_per_job or self.gpus * max(1, self.node_count)

    def gpus_on(self, node: str) -> int:
        """GPUs it holds on `node` (of its nodes): what Slurm says, else its per-node count."""
        if len(self.gpus_on_nodes) == len(self.nodes) and node in self.nodes:
            return self.gpus_on_nodes[self.nodes.index(node)]
        return self.gpus

    @property
    def reshapeable(self) -> bool:
        """Its GPU total is fixed per job, so nodes and GPUs per node may be chosen."""
        return self.gpus_per_job > 0

    @property
    def cpus_needed(self) -> int:
        """CPUs it takes on each of its nodes: its CPUs per node, or its CPUs spread over its
        nodes (``-n 4 -c 2`` on one node: 8, though Slurm's per-node minimum says 2); 0 unknown."""
        spread = -(-self.cpus // max(1, self.node_count)) if self.cpus else 0
        return max(self.cpus_per_node or 0, spread)

    @property
    def memory_needed(self) -> float | None:
        """MB it asks of each node (per GPU times its GPUs per node, per node, or per CPU times
        its CPUs per node), None if unset."""
        if self.memory_per_gpu:
            return self.memory_per_gpu * max(1, self.gpus)
        if self.memory_per_node:
            return self.memory_per_node
        if self.memory_per_cpu:
            return self.memory_per_cpu * max(1, self.cpus_needed)
        return None

    @property
    def waiting_for_dependency(self) -> bool:
        """Its dependency is not met yet (or can never be): Slurm will not start it."""
        dep = self.dependency.lower()
        return ("unfulfilled" in dep or "failed" in dep
                or self.reason in ("Dependency", "DependencyNeverSatisfied"))


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: tuple[str, ...]
    partitions: tuple[str, ...]
    gpu_type: str | None
    gpus: int
    memory: float | None = None          # MB (real_memory)
    cpus: int | None = None
    features: tuple[str, ...] = ()       # active features
    shards: int = 0                      # gres/shard of the node (all its GPUs together)
    shard_sockets: int = 0               # sockets its shards are bound to (gres.conf Cores=)
    alloc_cpus: int = 0                  # CPUs running jobs hold of it (every job's; 0 unknown)
    alloc_memory: float = 0.0            # MB running jobs hold of it (AllocMem; 0 where not consumable)

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
        signal = _int(value["signal"].get("id"), None) if isinstance(value.get("signal"), dict) else None
        if "SIGNALED" in states(value.get("status")) and signal:
            return 128 + signal
        return _int(value.get("return_code"), None)
    status = _int(value, None)            # 22.05: the wait(2) status
    if status is None:
        return None
    if status & 0x7F:                     # killed by a signal
        return 128 + (status & 0x7F)
    return (status >> 8) & 0xFF


def _job_state(value: Any) -> tuple[str, ...]:
    state = states(value)
    if len(state) == 1 and state[0] in _PENDING_FLAGS:
        return ("PENDING",) + state
    return state


def _positive(value: Any) -> float | None:
    """A number that is set and > 0, else None (22.05's null, 24.11's unset or 0 objects)."""
    n = number(value, None)
    return n if n is not None and 0 < n < float("inf") else None


_MEM_PER_GPU = re.compile(r"(?:^|,)gres[:/]gpu(?::[^:,]*)?:(\d{1,12})(?:,|$)")


def _memory_per_gpu(value: Any) -> float | None:
    """--mem-per-gpu in MB from squeue's memory_per_tres ('gres:gpu:5000' on 22.05,
    'gres/gpu:5000' on 24.11+); None when it asks none."""
    m = _MEM_PER_GPU.search(text(value))
    return float(m.group(1)) or None if m else None


def _exclusive(job: dict) -> bool:
    """--exclusive: 22.05 says ``"shared": "none"``, 24.11 lists flags (``["none"]``); some
    versions carry an ``exclusive`` field too."""
    shared = job.get("shared")
    flags = [shared] if isinstance(shared, str) else shared if isinstance(shared, list) else []
    if any(str(f).lower() == "none" for f in flags):
        return True
    ex = job.get("exclusive")
    ex = [ex] if isinstance(ex, (str, bool)) else ex if isinstance(ex, list) else []
    return any(f is True or str(f).lower() in ("true", "exclusive") for f in ex)


def _gres_detail(value: Any, nodes: int) -> tuple[int, ...]:
    """gres_detail, one entry per node of a running job (['gpu:p100:4(IDX:0-3)',
    'gpu:p100:2(IDX:0-1)']) -> the GPUs it holds on each, (4, 2); a shard job holds the GPUs
    its shards are on (['shard:4(2/4,2/4,0/4,0/4)'] -> (2,)); () unless every node's entry
    names some."""
    if not isinstance(value, list) or len(value) != nodes or not nodes:
        return ()
    counts = []
    for entry in value:
        n = _node_detail(entry).gpus
        if not n:
            return ()
        counts.append(n)
    return tuple(counts)


def _count(value: Any, limit: float = 1_000_000) -> int:
    """A count Slurm set (1 .. limit), else 0: unset (NO_VAL, {"set": false}), infinite,
    negative or not a number."""
    n = _positive(value)
    return int(n) if n is not None and n <= limit else 0


def _int(value: Any, default: int | None = 0) -> int | None:
    """A finite number as an int (truncated), else `default` (None, NaN, infinite, text)."""
    n = number(value, None)
    if n is None or n != n or n in (float("inf"), float("-inf")):
        return default
    return int(n)


def _tasks_on_node(j: dict, node_count: int) -> int:
    """Tasks a job runs on each of its nodes: --ntasks-per-node, else its tasks spread
    evenly (rounded up), else 1 (at least one task per node)."""
    per = _count(j.get("tasks_per_node"), 65533)          # 65534: NO_VAL16
    if per:
        return per
    tasks = _count(j.get("tasks"))
    return -(-tasks // max(1, node_count)) if tasks else 1


def _tres_count(value: Any, name: str) -> int:
    """One count of a TRES string: ('cpu=2,mem=16G,node=1,billing=2', 'node') -> 1; 0 if absent."""
    m = re.search(rf"(?:^|,){re.escape(name)}=(\d+)(?:,|$)", text(value))
    return int(m.group(1)) if m and int(m.group(1)) <= 1_000_000 else 0


def _node_count(j: dict, nodes: list[str]) -> int:
    """The nodes a job holds (running: its node list), else the nodes it asked for.

    A pending job's ``node_count`` is Slurm's estimate, not the request: 22.05 says 2 for
    ``-N 1 --ntasks=1 --cpus-per-task=2 --gres=gpu:2`` (``scontrol show job``: NumNodes=1-1).
    Its request is the smallest node count, ``node=`` of ``tres_req_str``, at most
    ``max_nodes`` (-N min-max; 0: no maximum)."""
    if nodes:
        return _count(j.get("node_count")) or len(nodes)
    asked = _tres_count(j.get("tres_req_str"), "node") or _count(j.get("node_count")) or 1
    most = _count(j.get("max_nodes"))
    return min(asked, most) if most else asked


def _names(value: Any) -> tuple[str, ...]:
    """A node or feature list: 'a,b' or 'v100-[0-1]' (22.05) or ['a', 'b'] (24.11)."""
    if isinstance(value, list):
        value = ",".join(text(v) for v in value)
    return tuple(expand_hostlist(text(value)))


def parse_jobs(data: dict) -> list[SlurmJob]:
    """Every job record of a `squeue --json` (an array's pending tasks one job each)."""
    jobs: list[SlurmJob] = []
    for j in data.get("jobs") or []:
        if isinstance(j, dict):
            jobs.extend(parse_job(j))
    return jobs


def parse_job(j: dict) -> list[SlurmJob]:
    """One job record -> its jobs (one, or an array's pending tasks)."""
    gpu_type, gpus = gpu_request(j.get("tres_per_node"))
    job_type, per_job = gpu_request(j.get("tres_per_job"))
    nodes = expand_hostlist(text(j.get("nodes")))
    node_count = _node_count(j, nodes)
    detail = [_node_detail(e) for e in j["gres_detail"]] \
        if isinstance(j.get("gres_detail"), list) else []
    on_nodes = _gres_detail(j.get("gres_detail"), len(nodes))
    # per task (--tres-per-task=gres/shard:2 -n 2, --gpus-per-task=1): count x tasks
    task_type, per_task = gpu_request(j.get("tres_per_task"))
    task_shards = shard_request(j.get("tres_per_task"))
    tasks = _tasks_on_node(j, node_count) if per_task or task_shards else 0
    shards = shard_request(j.get("tres_per_node")) or task_shards * tasks
    held_shards = max((d.shards for d in detail), default=0)
    if held_shards and "RUNNING" in _job_state(j.get("job_state")):
        shards = held_shards              # running: what it holds (per node, the most)
    if not gpus and on_nodes and not per_job:
        gpus = max(on_nodes)              # running: the GPUs Slurm lists
    if not gpus and per_task and not per_job:
        gpu_type, gpus = task_type, per_task * tasks
    if shards and not gpus and not per_job:
        # a job's shards per node sit on one GPU; per task, with ONE_TASK_PER_SHARING_GRES
        # (or --gres-flags=one-task-per-sharing), each task's on a GPU of its own: the most
        # GPUs it takes (docs/space-sharing.md, "Jobs that ask per task")
        gpus = tasks if task_shards and not shard_request(j.get("tres_per_node")) else 1
    if not gpus:
        # --gpus=N alone: N over its nodes (as Slurm spreads it); else what it was given
        gpu_type, gpus = (job_type, -(-per_job // node_count)) if per_job else \
            gpu_request(j.get("tres_req_str"))
    state = _job_state(j.get("job_state"))
    start = number(j.get("start_time"))
    end = number(j.get("end_time"))
    slurm_id = text(number(j.get("job_id"), j.get("job_id"))).split(".")[0]
    job = SlurmJob(
        job_id=slurm_id,
        name=text(j.get("name")), user=text(j.get("user_name") or j.get("user")),
        account=text(j.get("account")), partition=text(j.get("partition")),
        state=state, reason=text(j.get("state_reason")),
        nodes=tuple(nodes), comment=text(j.get("comment")),
        admin_comment=text(j.get("admin_comment")), gpu_type=gpu_type, gpus=gpus,
        node_count=node_count,
        restarts=_int(j.get("restart_cnt")) or 0,
        submit_time=number(j.get("submit_time")), start_time=start or None,
        end_time=end or None, exit_code=_exit_code(j.get("exit_code")),
        work_dir=text(j.get("current_working_directory")),
        cpus_per_node=int(_positive(j.get("minimum_cpus_per_node")) or 0) or None,
        memory_per_node=_positive(j.get("memory_per_node")),
        memory_per_cpu=_positive(j.get("memory_per_cpu")),
        memory_per_gpu=_memory_per_gpu(j.get("memory_per_tres")),
        exclusive=_exclusive(j),
        dependency="" if text(j.get("dependency")) == "(null)" else text(j.get("dependency")),
        features="&".join(text(f) for f in j["features"]) if isinstance(j.get("features"), list)
        else text(j.get("features")),
        reservation=text(j.get("resv_name") or j.get("reservation")),
        required_nodes=_names(j.get("required_nodes")),
        excluded_nodes=_names(j.get("excluded_nodes")),
        slurm_id=slurm_id, priority=number(j.get("priority"), None), gpus_per_job=per_job,
        gpus_on_nodes=on_nodes, shards=shards,
        gpu_indices=tuple(d.indices for d in detail), gpu_shards=tuple(d.use for d in detail),
        tasks_per_gpu=_count(j.get("tasks_per_tres")), tasks=_count(j.get("tasks")),
        task_shards=task_shards, cpus=_count(j.get("cpus")),
        eligible_time=_positive(j.get("eligible_time")))
    return _array_tasks(job, j)


class _Watched(dict):
    """A job record that notes which of its fields were read (`read`), so that a later record
    is known to parse the same when those fields are the same (`JobReader`)."""

    def __init__(self, raw: dict):
        super().__init__(raw)
        self.read: dict[str, None] = {}

    def get(self, key, default=None):
        self.read[key] = None
        return super().get(key, default)

    def __getitem__(self, key):
        self.read[key] = None
        return super().__getitem__(key)

    def __contains__(self, key):
        self.read[key] = None
        return super().__contains__(key)


class JobReader:
    """`parse_jobs`, incremental: a record is parsed again only when a field its last parse
    read changed (by job id; a field it did not read, such as slurmctld's
    `last_sched_evaluation`, which changes every scheduling pass, does not count), else its
    jobs are the same objects as at the last poll.  `reparsed`: records parsed by the last
    `parse` (new or changed ones); a quiet queue costs none.

    Exact by construction: `parse_job` is a function of the fields it reads, and a record
    whose read fields are equal reads the same branch, so it parses to equal jobs."""

    def __init__(self):
        # job id -> (fields read, their values, the jobs parsed from them)
        self._cache: dict[str, tuple[tuple[str, ...], tuple, list[SlurmJob]]] = {}
        self.reparsed = 0

    def parse(self, data: dict) -> list[SlurmJob]:
        jobs: list[SlurmJob] = []
        cache: dict[str, tuple[tuple[str, ...], tuple, list[SlurmJob]]] = {}
        reparsed = 0
        for raw in data.get("jobs") or []:
            if not isinstance(raw, dict):
                continue
            key = text(raw.get("job_id"))
            known = self._cache.get(key)
            if known is not None and key not in cache:
                fields, values, parsed = known
                if tuple(raw.get(f) for f in fields) == values:
                    cache[key] = known
                    jobs.extend(parsed)
                    continue
            watched = _Watched(raw)
            parsed = parse_job(watched)
            reparsed += 1
            if key and key not in cache:
                fields = tuple(watched.read)
                cache[key] = (fields, tuple(raw.get(f) for f in fields), parsed)
            jobs.extend(parsed)
        self._cache, self.reparsed = cache, reparsed
        return jobs


def task_ids(spec: str) -> list[int]:
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
    array = _int(raw.get("array_job_id")) or 0
    if array <= 0:
        return [job]
    task = number(raw.get("array_task_id"), None)
    spec = text(raw.get("array_task_string"))
    if spec:
        return [replace(job, job_id=f"{array}_{t}") for t in task_ids(spec)]
    if task is not None and 0 <= task < 4_000_000_000:   # (NaN: False)
        return [replace(job, job_id=f"{array}_{int(task)}")]
    return [job]


def _node_gres(value: Any) -> tuple[str | None, int]:
    """'gpu:v100:4(S:0)' or 'gpu:v100:4,other:1' -> ('v100', 4)."""
    for part in text(value).split(","):
        m = re.match(r"^gpu(?::([A-Za-z0-9_.\-]+))?:(\d+)", part.strip())
        if m:
            return m.group(1), int(m.group(2))
    return None, 0


def _node_shards(value: Any) -> int:
    """'gpu:v100:4,shard:v100:16' or 'gpu:v100:4(S:0),shard:16(S:0)' -> 16."""
    for part in text(value).split(","):
        m = re.match(r"^shard(?::[A-Za-z0-9_.\-]+)?:(\d+)", part.strip())
        if m:
            return int(m.group(1))
    return 0


def requeue_exit_codes(text: str) -> set[int]:
    """`scontrol show config`'s RequeueExitHold (`85`, `85,86`, `80-90`, `(null)`) as a set of
    codes: a job that exits with one of them is requeued held, which is how a preempted
    job comes back (the daemon checks its requeue_exit_code is among them at start)."""
    codes: set[int] = set()
    for part in (text or "").replace("(null)", "").split(","):
        lo, sep, hi = part.partition("-")
        if sep and lo.strip().isdigit() and hi.strip().isdigit():
            codes.update(range(int(lo), int(hi) + 1))
        elif part.strip().isdigit():
            codes.add(int(part))
    return codes


def socket_bound(nodes, what: str = "GPUs") -> str:
    """'node a,b: GPUs bound to 2 sockets (gres.conf Cores=)' for the nodes (SlurmNode) whose
    shards are bound to 2+ sockets, the first ten named; '' when none is."""
    bound = sorted((n.name, n.shard_sockets) for n in nodes if n.shards and n.shard_sockets > 1)
    if not bound:
        return ""
    names = ",".join(name for name, _ in bound[:10]) + (" ..." if len(bound) > 10 else "")
    counts = "/".join(str(k) for k in sorted({k for _, k in bound}))
    return f"node {names}: {what} bound to {counts} sockets (gres.conf Cores=)"


_SHARD_SOCKETS = re.compile(r"(?:^|,)\s*shard(?::[A-Za-z0-9_.\-]+)?:\d+\(S:([^)]*)\)")


def shard_sockets(value: Any) -> int:
    """How many sockets a node's shards are bound to, from its gres: 'gpu:v100:4(S:0-1),
    shard:v100:16(S:0-1)' -> 2, '(S:0)' -> 1, no '(S:...)' -> 0 (no gres.conf Cores=).
    Slurm gives a shard job a GPU on its cores' sockets first (docs/space-sharing.md,
    "Sockets"); a list that cannot be read counts as 2, on the safe side."""
    m = _SHARD_SOCKETS.search(text(value))
    if not m:
        return 0
    listed: set[int] = set()
    counted = 0                                  # ranges too long to list
    for item in m.group(1).split(","):
        r = re.fullmatch(r"\s*(\d{1,9})(?:-(\d{1,9}))?\s*", item)
        if not r or int(r.group(2) or r.group(1)) < int(r.group(1)):
            return max(2, len(listed) + counted)
        low, high = int(r.group(1)), int(r.group(2) or r.group(1))
        if high - low >= 1024:
            counted += high - low + 1
        else:
            listed.update(range(low, high + 1))
    return len(listed) + counted


def parse_nodes(data: dict) -> list[SlurmNode]:
    nodes = []
    for n in data.get("nodes") or []:
        if not isinstance(n, dict):
            continue
        gpu_type, gpus = _node_gres(n.get("gres"))
        parts = n.get("partitions") or []
        if isinstance(parts, str):
            parts = [p for p in parts.split(",") if p]
        cpus = _positive(n.get("effective_cpus")) or _positive(n.get("cpus"))
        features = n.get("active_features") if n.get("active_features") else n.get("features")
        nodes.append(SlurmNode(name=text(n.get("name") or n.get("hostname")),
                               state=states(n.get("state")) + states(n.get("state_flags")),
                               partitions=tuple(parts), gpu_type=gpu_type, gpus=gpus,
                               memory=_positive(n.get("real_memory")),
                               cpus=int(cpus) if cpus else None, features=_names(features),
                               shards=_node_shards(n.get("gres")),
                               shard_sockets=shard_sockets(n.get("gres")),
                               alloc_cpus=_count(n.get("alloc_cpus")),
                               alloc_memory=_positive(n.get("alloc_memory")) or 0.0))
    return nodes


# -- a job's final state: sacct (accounting) or slurmctld's memory (squeue) ------------------
# The fields `SlurmCLI.sacct` asks for, in order (`sacct --parsable2 --format=...`); the same
# names on 22.05 and 24.11.  JobIDRaw: an array task's own id.
SACCT_FIELDS = ("JobIDRaw", "State", "ExitCode", "Start", "End", "Partition", "NodeList")

# Slurm's final job state -> how the scheduler records the job's departure.
DEPARTURE_STATES = {"COMPLETED": "completed", "FAILED": "failed", "OUT_OF_MEMORY": "failed",
                    "CANCELLED": "cancelled", "NODE_FAIL": "node_fail", "BOOT_FAIL": "node_fail",
                    "TIMEOUT": "timeout", "DEADLINE": "timeout", "PREEMPTED": "preempted"}


@dataclass(frozen=True)
class SlurmRun:
    """One run of a job (sacct -D gives one record per run of a requeued job)."""
    job_id: str
    state: str                  # base state: COMPLETED, FAILED, REQUEUED, RUNNING, ...
    exit_code: int | None       # the job's own exit code (0-255)
    signal: int | None          # the signal that killed it, if one did
    start: float | None
    end: float | None
    partition: str = ""
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class FinalState:
    """What Slurm says of a job that left the queue: its last run's state and the runs."""
    job_id: str
    state: str
    exit_code: int | None
    signal: int | None
    end: float | None
    runs: tuple[SlurmRun, ...]
    source: str                 # "sacct" or "slurmctld"

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES

    @property
    def departure(self) -> str:
        """completed / failed / cancelled / node_fail / timeout / preempted, else lost: a
        job Slurm still calls running or pending that it no longer runs (a `slurmctld -c`)."""
        return DEPARTURE_STATES.get(self.state, "lost") if self.finished else "lost"


def _sacct_time(value: str) -> float | None:
    """'2026-12-01T11:18:13' (local time, as sacct prints it), epoch seconds (with
    SLURM_TIME_FORMAT=%s), or None for Unknown/None/empty."""
    value = value.strip()
    if not value or value in ("Unknown", "None", "N/A"):
        return None
    n = number(value)
    if n is not None:
        return n or None
    try:
        return datetime.fromisoformat(value).timestamp()   # naive: local, like sacct
    except ValueError:
        return None


def _sacct_exit(value: str) -> tuple[int | None, int | None]:
    """'3:0' -> (3, None); '0:12' -> (0, 12) (killed by signal 12)."""
    code, _, sig = value.strip().partition(":")
    code_n, sig_n = number(code), number(sig)
    return (None if code_n is None else int(code_n)), (int(sig_n) if sig_n else None)


def parse_sacct(output: str, fields: Iterable[str] = SACCT_FIELDS) -> dict[str, list[SlurmRun]]:
    """`sacct -n --parsable2 -X -D --format=FIELDS` -> {job id: its runs, oldest first}.
    Steps (ids with a dot) and lines of another shape are skipped."""
    fields = [f.lower() for f in fields]
    out: dict[str, list[SlurmRun]] = {}
    for line in (output or "").splitlines():
        values = line.split("|")
        if len(values) < len(fields):
            continue
        row = dict(zip(fields, values))
        job = (row.get("jobidraw") or row.get("jobid") or "").strip()
        if not re.fullmatch(r"[0-9]+", job):
            continue                      # a step (1.batch), an array spec, a header
        state = states(row.get("state", "").split(" by ")[0])   # "CANCELLED by 0"
        code, sig = _sacct_exit(row.get("exitcode", ""))
        out.setdefault(job, []).append(SlurmRun(
            job_id=job, state=state[0] if state else "UNKNOWN", exit_code=code, signal=sig,
            start=_sacct_time(row.get("start", "")), end=_sacct_time(row.get("end", "")),
            partition=row.get("partition", "").strip(),
            nodes=tuple(n for n in expand_hostlist(row.get("nodelist", "").strip())
                        if n != "None assigned")))
    for runs in out.values():             # sacct lists a job's later runs after other jobs
        runs.sort(key=lambda r: (r.start is None, r.start or 0.0))
    return out


def final_from_sacct(runs: Iterable[SlurmRun]) -> FinalState | None:
    """The final state of a job from its sacct records (the last run decides)."""
    runs = tuple(runs)
    if not runs:
        return None
    last = runs[-1]
    return FinalState(last.job_id, last.state, last.exit_code, last.signal, last.end, runs, "sacct")


def final_from_job(job: SlurmJob, runs: Iterable[SlurmRun] = ()) -> FinalState:
    """The final state of a finished job slurmctld still lists (squeue / scontrol): its exit
    code reads 128 + N when signal N killed it (records._exit_code).  `runs`: its earlier
    runs from sacct, when known; this record is its last."""
    code = job.exit_code
    sig = code - 128 if code is not None and 128 < code < 160 else None
    last = SlurmRun(job.job_id, job.primary_state, None if sig else code, sig, job.start_time,
                    job.end_time, job.partition, job.nodes)
    earlier = tuple(r for r in runs if r.end is not None and (job.start_time is None
                                                              or r.end <= job.start_time))
    return FinalState(job.job_id, job.primary_state, last.exit_code, sig, job.end_time,
                      earlier + (last,), "slurmctld")


def slurm_release(data: dict) -> str:
    meta = (data.get("meta") or {})
    slurm = meta.get("Slurm") or meta.get("slurm") or {}
    return text(slurm.get("release"))


__all__ = ["requeue_exit_codes", "ACTIVE_STATES", "DEPARTURE_STATES", "FINISHED_STATES", "FinalState", "SACCT_FIELDS",
           "SlurmJob", "SlurmNode", "SlurmRun", "expand_hostlist", "final_from_job",
           "final_from_sacct", "gpu_request", "JobReader", "number", "parse_job", "parse_jobs",
           "parse_nodes", "parse_sacct",
           "slurm_release", "states"]

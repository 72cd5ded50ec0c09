"""Every call to Slurm's command-line tools goes through here.

Argument lists only (never a shell), a timeout on each call, and an error
that names the command and carries Slurm's stderr.  Job ids and the names
we pass (partitions, nodes, signals) are checked before they reach an
argument, so that a value can never turn into a second `key=value`.
This is the one narrow interface to Slurm: a pyslurm implementation of the
same methods can replace it where a site's pyslurm matches its Slurm.
"""
from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence, TypeVar

from ..core.errors import GavelError, InputError
from .records import SACCT_FIELDS, task_ids

log = logging.getLogger("slurm_gavel.slurm")
T = TypeVar("T")

_JOB_ID = re.compile(r"^[0-9]+(_[0-9]+)?$")     # 35, or array task 35_2
_ARRAY_SHOWN = re.compile(r"^([0-9]+)_(?:([0-9]+)|\[([0-9,\-:%]+)\])$")   # squeue's %i: 35_2, 35_[3-9%2]
_NAME = re.compile(r"^[A-Za-z0-9._\-\[\],]+$")          # partitions, node lists
# Gres=gpu:4 (untyped, a count per node) or Gres=shard:2 (space sharing: a pair's half GPU)
_GRES = re.compile(r"^(gpu|shard):[0-9]+$")
_TRES_PER_TASK = re.compile(r"^(gres/shard:[0-9]+)?$")      # TresPerTask=gres/shard:2, or empty
_EMPTY = re.compile(r"^$")
_TIME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9:._+\-]*$")  # sacct's times: now-30days, 2026-12-01T08:00
_ADMIN_COMMENT = re.compile(r"^gavel:[ -~]{0,1000}$")   # flags, then the daemon's status
SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP", "CONT", "STOP")
# Slurm 24.11+ without accounting (AccountingStorageType=none: no associations) answers a
# change of a pending job's partition with a stale errno, about half of the calls on 24.11
# and up to three in four on 26.05 ("Resource temporarily unavailable for job 3", "Interrupted
# system call ..."): job_mgr.c's _update_job takes the NULL association _retrieve_new_assoc
# rightly returns as a failure and reports whatever errno holds; with errno 0 the change
# goes through.  Such a change is tried again for a while (12 tries left 4 % of changes
# refused at 26.05's rate; 10 s, 35 to 45 tries, leave fewer than one in 10,000); Slurm's own
# (permanent) refusals are not.
PARTITION_RETRY_SECONDS = 10.0
# From here on squeue's JSON no longer says --exclusive (26.05.5; 24.11.5 still does) [25.05
# itself not run here].
EXCLUSIVE_APART = (25, 5)
SACCT_BATCH = 500                   # job ids per sacct call (one call for a usual poll)
# Job ids per scancel / scontrol hold, release, requeuehold call.  Slurm acts on a list
# one RPC per job (sdiag on 22.05: `scontrol update jobid=1,2` counts two
# REQUEST_UPDATE_JOB), each under slurmctld's job lock; while slurmctld works through a
# preemption wave those RPCs took 0.25-0.95 s each (a 1,600-GPU cluster), so that one
# call of ~600 ids overran the 30 s timeout half-done.  25 ids end within ~24 s at the
# slowest rate measured, and a chunk that times out is tried again in halves.  An id
# Slurm refuses fails alone (22.05: the others are done, exit 1, stderr "Invalid job id
# specified for job 77"), so a refused chunk names its failed jobs (`named`).
CHUNK_IDS = 25
# Concurrent `scontrol` processes for a round's starts: 22.05 refuses a list of ids
# together with NodeList ("Invalid job ID 1,2"), so each start is its own update, a line of
# an `scontrol` reading CHUNK_IDS of them (`update_each`); a process's cost is mostly its own
# start-up (libslurm, slurm.conf), not slurmctld's (an update RPC is ~0.5 ms there): a few
# at once overlap it without queueing up RPCs.
UPDATE_WORKERS = 4
_PERMANENT = re.compile(r"invalid|denied|not pending|no longer pending|already (completed|finished)"
                        r"|not available|gavel|not supported|permission", re.IGNORECASE)


def transient_update_error(stderr: str) -> bool:
    """A failed `scontrol update ... partition=` that may succeed when simply tried again."""
    return bool(stderr.strip()) and not _PERMANENT.search(stderr)


def retry_partition_change(call: Callable[[], T], seconds: float = PARTITION_RETRY_SECONDS) -> T:
    """`call()` (a partition change: it raises SlurmCommandError when refused), tried again
    while Slurm's refusal is a transient one (transient_update_error) and `seconds` have not
    passed, with short growing pauses.  A retry is harmless: a job already in the target
    partition skips the association check."""
    deadline = time.monotonic() + seconds
    pause, tries = 0.02, 1
    while True:
        try:
            return call()
        except SlurmCommandError as e:
            if (e.returncode is None or isinstance(e, SlurmUnreachable)
                    or not transient_update_error(e.stderr) or time.monotonic() + pause > deadline):
                raise
            log.debug("%s: %s; trying again (try %d)", " ".join(e.command), e.stderr, tries)
        time.sleep(pause)
        pause, tries = min(0.25, pause * 1.5), tries + 1


class SlurmCommandError(GavelError):
    """A Slurm command failed: which one, its exit code, what it said."""

    def __init__(self, args: Sequence[str], returncode: int | None, stderr: str):
        self.command = list(args)
        self.returncode = returncode
        self.stderr = stderr.strip()
        what = "timed out" if returncode is None else f"exited {returncode}"
        detail = f": {self.stderr.splitlines()[-1]}" if self.stderr else ""
        super().__init__(f"`{' '.join(self.command)}` {what}{detail}")
        self.failed: tuple[str, ...] = ()      # the job ids not done (a chunked call), if known


# What Slurm's clients say when slurmctld does not answer (slurm_strerror: "Unable to contact
# slurm controller (connect failure)", "Socket timed out on send/recv operation", "Zero Bytes
# were transmitted or received"); `squeue --json` (22.05) instead exits 0 with an error JSON
# of "Unspecified error", so that case is told by asking `scontrol ping`.
_UNREACHABLE = re.compile(r"Unable to contact slurm controller|Socket timed out|Zero Bytes were "
                          r"transmitted|Communication connection failure", re.IGNORECASE)
# these talk to slurmdbd, not slurmctld: their failures are never "slurmctld unreachable"
_DBD_TOOLS = ("sacct", "sacctmgr")


# scontrol update's answer when slurmctld is down (22.05: "Unexpected message received for
# job 5"): it may mean that, so `scontrol ping` is asked
_AMBIGUOUS = re.compile(r"Unexpected message received")


def unreachable(text: str) -> bool:
    """Whether Slurm's output `text` says that slurmctld could not be reached."""
    return bool(_UNREACHABLE.search(text or ""))


def controller_down(ping_output: str) -> bool:
    """`scontrol ping` says no controller is up ("Slurmctld(primary) at vm is DOWN")."""
    return "is DOWN" in ping_output and "is UP" not in ping_output


class SlurmUnreachable(SlurmCommandError):
    """slurmctld did not answer: said as such, with the command and Slurm's words."""

    def __init__(self, args: Sequence[str], returncode: int | None, stderr: str):
        super().__init__(args, returncode, stderr)
        GavelError.__init__(self, f"slurmctld unreachable: {self} (is slurmctld running? "
                                  f"`scontrol ping`, systemctl status slurmctld)")


# What scancel says of a job that has ended (or is ending) by the time it is signalled
# (22.05.8 and 24.11.5: "Invalid job id specified" once the job is done).
_ENDED = re.compile(r"^scancel: error: Kill job error on job id ([0-9]+(?:_[0-9]+)?): "
                    r"(?:Invalid job id specified|Job/step already completing or completed)$")


def ended_jobs(stderr: str, ids: Iterable[str]) -> set[str] | None:
    """The jobs of `ids` that a failed scancel says have ended, when that is all its error
    output says; None when it says anything else (a real failure)."""
    wanted, ended = {str(i) for i in ids}, set()
    for line in (stderr or "").strip().splitlines():
        m = _ENDED.match(line.strip())
        if m is None or m.group(1) not in wanted:
            return None
        ended.add(m.group(1))
    return ended or None


# A word of a line `scontrol` reads from its input: it splits lines at blanks (and takes
# quotes), so a value with either is given as an argument of its own call instead.
_LINE_WORD = re.compile(r"^[^\s'\"]+$")
_NAMED = re.compile(r"(?:job id|for job|job) ([0-9]+(?:_[0-9]+)?)\b")


def named(stderr: str, ids: Sequence[str]) -> list[str]:
    """The jobs of `ids` that Slurm's error output names (scancel: "... on job id 12: ...",
    scontrol: "... for job 12"), in order; [] if it names none of them."""
    said = {m.group(1) for m in _NAMED.finditer(stderr or "")}
    return [i for i in ids if i in said]


def job_ids(ids: Iterable[str]) -> list[str]:
    out = [str(i) for i in ids]
    for i in out:
        if not _JOB_ID.match(i):
            raise InputError("job id", f"not a Slurm job id: {i!r}")
    return out


def name(value: str, what: str) -> str:
    if not _NAME.match(value or ""):
        raise InputError(what, f"unexpected characters in {value!r}")
    return value


def json_version(data: dict) -> tuple[int, ...]:
    """The Slurm version a `--json` answer names in its meta (22.05: `Slurm`, 23.02+:
    `slurm`; numbers or strings); () if none."""
    meta = data.get("meta") if isinstance(data, dict) else None
    slurm = (meta.get("slurm") or meta.get("Slurm")) if isinstance(meta, dict) else None
    version = slurm.get("version") if isinstance(slurm, dict) else None
    if not isinstance(version, dict):
        return ()
    try:
        return tuple(int(version[k]) for k in ("major", "minor", "micro"))
    except (KeyError, TypeError, ValueError):
        return ()


def parse_version(text: str) -> tuple[int, ...]:
    """'slurm 22.05.8' (sinfo --version, scontrol's SLURM_VERSION) -> (22, 5, 8); () if none."""
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(p) for p in match.groups() if p is not None) if match else ()


def update_pairs(fields: Mapping[str, str]) -> list[str]:
    """The checked `Key=value` words of an `scontrol update` (a value can never become a
    second key=value, nor an option)."""
    pairs = []
    for key, value in fields.items():
        if not re.match(r"^[A-Za-z]+$", key):
            raise InputError("scontrol update", f"bad field name {key!r}")
        if key.lower() == "admincomment":
            # the flags and the daemon's status (flags.with_status): printable ASCII only,
            # one argument, so it can never become a second key=value
            if not _ADMIN_COMMENT.match(str(value)):
                raise InputError("scontrol update", f"not a gavel AdminComment: {value!r}")
            pairs.append(f"{key}={value}")
            continue
        if key.lower() in ("trespernode", "trespertask"):
            # a multi-GPU pair's half (slurm/backend/pairs/multi.py): the per-node request emptied, a
            # per-task shard count set or emptied; nothing else
            allowed = _TRES_PER_TASK if key.lower() == "trespertask" else _EMPTY
            if not allowed.match(str(value)):
                raise InputError("scontrol update", f"{key} must be {allowed.pattern!r}, not {value!r}")
            pairs.append(f"{key}={value}")
            continue
        if key.lower() == "gres":
            if not _GRES.match(str(value)):
                raise InputError("scontrol update", f"Gres must be gpu:COUNT or shard:COUNT, "
                                                      f"not {value!r}")
            pairs.append(f"{key}={value}")
            continue
        pairs.append(f"{key}={name(str(value), key)}")
    return pairs


def reshape_fields(partition: str, nodes: Sequence[str], gpus_per_node: int,
                   tasks_per_node: int | None = None, **extra: str) -> dict[str, str]:
    """The `scontrol update` fields of `SlurmCLI.reshape` (which says why each is there)."""
    k, per = len(nodes), int(gpus_per_node)
    if k < 1 or per < 1:
        raise InputError("reshape", f"needs nodes and GPUs per node, not {k} x {per}")
    tasks = ({"TasksPerNode": str(int(tasks_per_node)), "NumTasks": str(k * int(tasks_per_node))}
             if tasks_per_node else {})
    return dict(Partition=partition, NumNodes=f"{k}-{k}", NodeList=",".join(nodes),
                Gres=f"gpu:{per}", **tasks, StartTime="now", **extra)


@dataclass
class SlurmCLI:
    """Runs Slurm's tools with `env` (e.g. SLURM_CONF) from `bin_dir` (default: PATH)."""

    env: Mapping[str, str] | None = None
    bin_dir: str | None = None
    timeout: float = 30.0
    chunk: int = CHUNK_IDS
    workers: int = UPDATE_WORKERS
    calls: int = field(default=0, repr=False)
    # processes run by command ("scontrol update", "scancel", ...): a round's cost in Slurm calls
    commands: Counter = field(default_factory=Counter, repr=False)
    _nodes_command: list | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _version: tuple | None = field(default=None, repr=False)

    def _exe(self, tool: str) -> str:
        return os.path.join(self.bin_dir, tool) if self.bin_dir else tool

    def run(self, args: Sequence[str], check: bool = True, timeout: float | None = None,
            input: str | None = None) -> subprocess.CompletedProcess:
        argv = [self._exe(args[0]), *args[1:]]
        env = dict(os.environ, **self.env) if self.env else None
        with self._lock:
            self.calls += 1
            self.commands[" ".join(args[:2]) if args[0] in ("scontrol", "sacctmgr") else args[0]] += 1
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, input=input,
                                  timeout=timeout or self.timeout, check=False)
        except subprocess.TimeoutExpired as e:
            stderr = (e.stderr or b"").decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
            down = args[0] not in _DBD_TOOLS and (unreachable(stderr) or self._down())
            raise (SlurmUnreachable if down else SlurmCommandError)(args, None, stderr) from None
        except FileNotFoundError:
            raise SlurmCommandError(args, 127, f"{argv[0]}: command not found (is Slurm installed "
                                               f"and on PATH?)") from None
        if check and done.returncode != 0:
            down = args[0] not in _DBD_TOOLS and (
                unreachable(done.stderr) or (bool(_AMBIGUOUS.search(done.stderr)) and self._down()))
            raise (SlurmUnreachable if down else SlurmCommandError)(args, done.returncode, done.stderr)
        return done

    def _down(self) -> bool:
        """Ask `scontrol ping` whether slurmctld is down (after a failure that does not say)."""
        try:
            done = subprocess.run([self._exe("scontrol"), "ping"], capture_output=True, text=True,
                                  env=dict(os.environ, **self.env) if self.env else None,
                                  timeout=min(self.timeout, 20), check=False)
        except (subprocess.TimeoutExpired, OSError):
            return False
        return controller_down(done.stdout + done.stderr)

    def json(self, args: Sequence[str]) -> dict:
        out = self.run(args).stdout
        try:
            data = json.loads(out)
        except json.JSONDecodeError as e:
            raise SlurmCommandError(args, 0, f"output is not JSON ({e.msg} at line {e.lineno})") from None
        if not isinstance(data, dict):
            raise SlurmCommandError(args, 0, "output is not a JSON object")
        errors = [e for e in data.get("errors") or [] if e]
        if errors:
            text = f"reported errors: {errors}"
            raise (SlurmUnreachable if unreachable(text) or self._down() else SlurmCommandError)(
                args, 0, text)
        return data

    # -- reading ------------------------------------------------------------------
    def squeue(self) -> dict:
        """Every job Slurm still lists, one call (pending, running, recently finished).  From
        25.05 on the JSON's `shared` no longer says `--exclusive` (26.05.5: `[]` for every
        job); there a second, plain-text call adds each job's `exclusive` (True for a whole
        node, as 22.05's `"shared": "none"` and 24.11's `["none"]` read)."""
        data = self.json(["squeue", "--all", "--states=all", "--json"])
        if json_version(data) >= EXCLUSIVE_APART:
            exclusive = self.exclusive_jobs()
            for job in data.get("jobs") or []:
                if isinstance(job, dict) and str(job.get("job_id")) in exclusive:
                    job["exclusive"] = exclusive[str(job.get("job_id"))]
        return data

    def exclusive_jobs(self) -> dict[str, bool]:
        """job id -> whether it holds its nodes alone (`squeue -O JobID,Exclusive`, 25.05+:
        NODE for --exclusive; NO, USER, MCS, TOPO otherwise)."""
        out = self.run(["squeue", "--all", "--states=all", "--noheader",
                        "--Format=JobID:|,Exclusive:|"]).stdout
        found = {}
        for line in out.splitlines():
            job, sep, rest = line.partition("|")
            if sep and _JOB_ID.match(job.strip()):
                found[job.strip()] = rest.split("|")[0].strip().upper() == "NODE"
        return found

    def job_states(self) -> dict[str, str]:
        """job id -> base state (PENDING, RUNNING, ...) of every listed job: the cheap look
        between rounds.  23.11+: `squeue --only-job-state`, which asks slurmctld for the
        states alone (9 ms against 50 ms for the full `--json` on a busy cluster)."""
        if self._version is None:
            self._version = self.version()
        # --only-job-state takes no --all (nor most other options).  The ids are named as
        # parse_jobs names them: an array task 35_2 (%i; its pending tasks 35_[3-9] one by one),
        # any other job, a heterogeneous job's components too (%i: 64+1), by its own id (%A).
        fmt = "--format=%A|%i|%T"
        args = (["squeue", "--only-job-state", "--states=all", "--noheader", fmt]
                if self._version >= (23, 11) else
                ["squeue", "--all", "--states=all", "--noheader", fmt])
        states = {}
        for line in self.run(args).stdout.splitlines():
            own, _, rest = line.strip().partition("|")
            shown, _, state = rest.partition("|")
            state = state.strip()
            if not state:
                continue
            m = _ARRAY_SHOWN.match(shown)
            if m and m.group(3) is not None:
                for task in task_ids(m.group(3)):
                    states[f"{m.group(1)}_{task}"] = state
            elif m and m.group(2) is not None:
                states[f"{m.group(1)}_{m.group(2)}"] = state
            elif _JOB_ID.match(own):
                states[own] = state
        return states

    def nodes(self) -> dict:
        """Every node with its state, partitions and GRES: {"nodes": [...]}.

        `scontrol show nodes --json` from 23.02 on; 22.05's scontrol has no
        --json, but its `sinfo --json` lists the same nodes.
        """
        if self._nodes_command is None:
            self._nodes_command = (["scontrol", "show", "nodes", "--json"] if self.version() >= (23, 2)
                                   else ["sinfo", "--json"])
        return self.json(self._nodes_command)

    def partitions(self) -> dict:
        return self.json(["scontrol", "show", "partitions", "--json"])

    def partition_states(self) -> dict[str, str]:
        """partition -> its state as sinfo says it, upper case: UP, DOWN, DRAIN or INACT
        (every Slurm version; `%a` is the partition's availability)."""
        out = {}
        for line in self.run(["sinfo", "--noheader", "--format=%R %a"]).stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                out[parts[0]] = parts[1].upper()
        return out

    def version(self) -> tuple[int, ...]:
        text = self.run(["sinfo", "--version"]).stdout.strip()      # "slurm 22.05.8"
        version = parse_version(text)
        if not version:
            raise SlurmCommandError(["sinfo", "--version"], 0, f"cannot read a version from {text!r}")
        return version

    def config(self) -> dict[str, str]:
        """`scontrol show config` as {key: value}."""
        out = {}
        for line in self.run(["scontrol", "show", "config"]).stdout.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                out[key.strip()] = value.strip()
        return out

    def accounting(self) -> bool:
        """Whether slurmctld stores accounting in slurmdbd (so that `sacct` answers)."""
        return "slurmdbd" in self.config().get("AccountingStorageType", "")

    def sacct(self, ids: Iterable[str], fields: Sequence[str] = SACCT_FIELDS,
              batch: int = SACCT_BATCH) -> str:
        """Every run (-D: a requeued job has one record per run) of these jobs, allocations
        only (-X), as `--parsable2` lines of `fields` (records.parse_sacct reads them): one
        call per `batch` ids.  --starttime: without it sacct looks at today only when -j is
        missing, and not every version treats -j as "any time"."""
        ids = job_ids(ids)
        out = []
        for i in range(0, len(ids), batch):
            chunk = ids[i:i + batch]
            out.append(self.run(["sacct", "--noheader", "--parsable2", "--allocations",
                                 "--duplicates", "--starttime=1970-01-02", "--endtime=now",
                                 f"--jobs={','.join(chunk)}", f"--format={','.join(fields)}"]).stdout)
        return "".join(out)

    def shares(self) -> str:
        """Every association's fairshare shares (slurmdbd), `--parsable2` lines of
        cluster|account|user|share|parent account (slurm/fairshare.py reads them)."""
        return self.run(["sacctmgr", "--noheader", "--parsable2", "show", "associations",
                         "format=Cluster,Account,User,Share,ParentName"]).stdout

    def history(self, start: str, end: str = "now", partitions: Sequence[str] = (),
                accounts: Sequence[str] = (), users: Sequence[str] = (), as_json: bool = True,
                fields: Sequence[str] = ()) -> str:
        """Every job's every run (-X -D) that was eligible between `start` and `end`
        (sacct's own time syntax), `--json`, else `--parsable2` lines of `fields`
        (slurm.history reads either).  Names are checked: none becomes a second option."""
        for what, value in (("--start", start), ("--end", end)):
            if not _TIME.match(value or ""):
                raise InputError(what, f"not a sacct time: {value!r}")
        args = ["sacct", "--allocations", "--duplicates", f"--starttime={start}", f"--endtime={end}"]
        for option, values in (("--partition", partitions), ("--accounts", accounts),
                               ("--user", users)):
            if values:
                args.append(f"{option}={','.join(name(v, option) for v in values)}")
        if not users:
            args.append("--allusers")
        if as_json:
            args.append("--json")
        else:
            args += ["--noheader", "--parsable2", f"--format={','.join(fields)}"]
        return self.run(args, timeout=300).stdout

    # -- acting -------------------------------------------------------------------
    def update(self, ids: Iterable[str], **fields: str) -> None:
        """`scontrol update jobid=1,2 Key=value ...` for several jobs at once."""
        ids = job_ids(ids)
        if not ids:
            return
        args = ["scontrol", "update", f"jobid={','.join(ids)}", *update_pairs(fields)]
        if any(k.lower() == "partition" for k in fields):
            retry_partition_change(lambda: self.run(args))
        else:
            self.run(args)

    def reshape(self, job: str, partition: str, nodes: Sequence[str], gpus_per_node: int,
                tasks_per_node: int | None = None, **extra: str) -> None:
        """Give a pending distributed job (GPU total per job) its shape for the next run, in
        one call: partition, exactly these nodes (NumNodes=k-k: ReqNodeList is a must-include
        set, and on 22.05 a bare NumNodes=k keeps the old maximum, which Slurm's GRES check
        refuses) and `gpus_per_node` on each (Gres=gpu:m; Slurm checks total % m == 0).
        StartTime=now: a requeued job would otherwise wait ~121 s.  `tasks_per_node`
        (a --ntasks-per-gpu job: GPUs per node x tasks per GPU) as TasksPerNode=: 24.11
        otherwise runs it with one task per node after a change of NumNodes (srun: "More
        processors requested than permitted"; verified), and NumTasks= (nodes x tasks per
        node) beside it: 26.05 keeps the old task count otherwise (1 task per node, or
        "setting num_tasks to 1" and BadConstraints); 22.05 and 24.11 take both.  `extra`:
        more fields for the same call (AdminComment without the daemon's hold status)."""
        self.update([job], **reshape_fields(partition, nodes, gpus_per_node, tasks_per_node, **extra))

    def clear_node_list(self, ids: Iterable[str]) -> None:
        """Drop the node list the daemon pinned on pending jobs (`NodeList=` empties it)."""
        for job in job_ids(ids):       # 22.05 refuses a list of ids together with NodeList
            self.run(["scontrol", "update", f"jobid={job}", "NodeList="])

    def release(self, ids: Iterable[str]) -> None:
        self._chunked(lambda part: ["scontrol", "release", ",".join(part)], ids)

    def hold(self, ids: Iterable[str]) -> None:
        self._chunked(lambda part: ["scontrol", "hold", ",".join(part)], ids)

    def signal(self, ids: Iterable[str], signal: str, full: bool = False) -> None:
        """Signal the batch shell (or, with `full`, every step too) of each job."""
        if signal not in SIGNALS:
            raise InputError("signal", f"{signal!r} is not one of {', '.join(SIGNALS)}")
        self._chunked(lambda part: ["scancel", "--full" if full else "--batch", f"--signal={signal}",
                                    *part], ids)

    def requeue_hold(self, ids: Iterable[str]) -> None:
        self._chunked(lambda part: ["scontrol", "requeuehold", ",".join(part)], ids)

    def _chunked(self, command, ids: Iterable[str]) -> None:
        """Run `command(part)` for each `chunk` of the ids, every chunk even when one fails.
        A chunk that timed out (part of it may be done) is tried again in two halves (the
        acts are idempotent but for a signal, which a preempted job takes twice without
        harm: its checkpoint is already under way); one Slurm refused is not (its error
        names the ids).  Failures are raised at the end as one error that carries every
        chunk's stderr and the ids not known to be done (`failed`)."""
        ids = job_ids(ids)
        if not ids:
            return
        size = max(1, int(self.chunk))
        todo = [(ids[i:i + size], True) for i in range(0, len(ids), size)]
        failed: list[tuple[list[str], SlurmCommandError]] = []
        while todo:
            part, retry = todo.pop(0)
            try:
                self.run(command(part))
            except SlurmUnreachable as e:
                # the rest is not sent: each call would wait as long, to the same answer
                e.failed = tuple(i for p, _ in failed for i in p) + tuple(part) + tuple(
                    i for p, _ in todo for i in p)
                raise
            except SlurmCommandError as e:
                if e.returncode is None and retry:
                    half = max(1, len(part) // 2)
                    log.warning("%s timed out; trying its %d jobs again in smaller calls",
                                " ".join(command(part))[:200], len(part))
                    todo[:0] = [(p, False) for p in (part[:half], part[half:]) if p]
                    continue
                failed.append((named(e.stderr, part) or part, e))
        if failed:
            not_done = tuple(i for part, _ in failed for i in part)
            codes = [e.returncode for _, e in failed if e.returncode is not None]
            timed_out = [i for part, e in failed if e.returncode is None for i in part]
            if timed_out:
                log.error("%d of %d jobs: Slurm did not answer in time, even in smaller calls: %s",
                          len(timed_out), len(ids), ",".join(timed_out))
            # a refusal's exit code if any chunk was refused (its stderr says which jobs); None:
            # only timeouts
            error = SlurmCommandError(command(list(not_done)), codes[0] if codes else None,
                                      "\n".join(e.stderr for _, e in failed if e.stderr))
            error.failed = not_done
            raise error

    def update_each(self, updates, workers: int | None = None) -> dict[str, SlurmCommandError]:
        """`scontrol update jobid=J ...` for each (job, {field: value}) of `updates`; the
        failures, by job.  The updates are lines read by `scontrol` from its input, `chunk`
        lines a process, at most `workers` processes at a time: a process's start-up, not
        slurmctld, was most of an update's time (200 starts: 1.8 s as 200 processes four at
        a time, 0.3-0.9 s as four processes of 50 lines; 22.05 refuses a list of ids with
        NodeList=, and so do 24.11 and 26.05).  A line Slurm refuses names its job ("... for
        job 12"); that job, every job of a process whose failure names none of them (or that
        timed out), and an update with a space in another value than AdminComment (one word
        per value on a line) are each done on their own (`update`, as before: a partition
        change tried again while the refusal is transient), so a failure is that job's own
        error.  An AdminComment with blanks (a start drops the hold status from it) goes in
        one call per comment for all its jobs (`_update_comments`), not one per job: 1,000
        starts were ~1,000 processes."""
        updates = [(job_ids([job])[0], dict(fields)) for job, fields in updates]
        if not updates:
            return {}
        lines, alone = [], []
        comments: dict[str, list[str]] = {}     # an AdminComment with blanks -> its jobs
        for job, fields in updates:
            rest = dict(fields)
            comment = next((k for k, v in fields.items() if k.lower() == "admincomment"
                            and not _LINE_WORD.match(str(v))), None)
            if comment is not None:
                update_pairs({comment: fields[comment]})      # checked before any call
                comments.setdefault(fields[comment], []).append(job)
                del rest[comment]
            words = [f"jobid={job}", *update_pairs(rest)]
            if not rest:
                continue
            if all(_LINE_WORD.match(w) for w in words):
                lines.append((job, rest, "update " + " ".join(words) + "\n"))
            else:
                alone.append((job, rest))
        size = max(1, int(self.chunk))
        batches = [lines[i:i + size] for i in range(0, len(lines), size)]
        def batch(items) -> tuple[list[tuple[str, dict]], SlurmUnreachable | None]:
            """One scontrol reading `items`' lines: the updates to do again on their own, and
            the error of all of them when slurmctld could not be reached."""
            ids = [job for job, _, _ in items]
            try:
                done = self.run(["scontrol"], check=False, input="".join(line for _, _, line in items))
            except SlurmUnreachable as e:
                return [], e
            except SlurmCommandError:        # timed out: which lines were done is not known
                return [(job, fields) for job, fields, _ in items], None
            if done.returncode == 0:
                return [], None
            if unreachable(done.stderr):
                return [], SlurmUnreachable(["scontrol", "update"], done.returncode, done.stderr)
            refused = set(named(done.stderr, ids)) or set(ids)
            return [(job, fields) for job, fields, _ in items if job in refused], None

        def one(item):
            job, fields = item
            try:
                self.update([job], **fields)
            except SlurmCommandError as e:
                return job, e
            return job, None

        with ThreadPoolExecutor(max_workers=max(1, min(workers or self.workers,
                                                       len(batches) + len(alone)))) as pool:
            failures: dict[str, SlurmCommandError] = {}
            again = []
            for items, (redo, down) in zip(batches, pool.map(batch, batches)):
                again += redo
                if down is not None:
                    failures.update((job, down) for job, _, _ in items)
            for job, error in pool.map(one, again + alone):
                if error is not None:
                    failures[job] = error
            failures.update(self._update_comments(comments, set(failures), pool))
        return failures

    def _update_comments(self, comments: Mapping[str, list[str]], failed: set[str],
                         pool: ThreadPoolExecutor) -> dict[str, SlurmCommandError]:
        """`update_each`'s AdminComments with blanks (a line would split them: 22.05 keeps a
        line's quotes in the value): one call per comment and `chunk` of its jobs (a list
        of ids takes AdminComment), after the jobs' other fields took (a refused start keeps
        its status); a call that failed is done again job by job, each failure its own."""
        calls = [(value, ids[i:i + max(1, int(self.chunk))])
                 for value, jobs in comments.items()
                 for ids in [[j for j in jobs if j not in failed]] if ids
                 for i in range(0, len(ids), max(1, int(self.chunk)))]

        def grouped(call):
            value, ids = call
            try:
                self.update(ids, AdminComment=value)
            except SlurmCommandError as e:
                return call, e
            return call, None

        def alone(item):
            job, value = item
            try:
                self.update([job], AdminComment=value)
            except SlurmCommandError as e:
                return job, e
            return job, None

        redo = [(job, value) for (value, ids), error in pool.map(grouped, calls)
                if error is not None for job in ids]
        return {job: e for job, e in pool.map(alone, redo) if e is not None}


class Backoff:
    """Delay before the next try after consecutive failures: doubling, capped."""

    def __init__(self, first: float = 1.0, cap: float = 60.0):
        self.first, self.cap = first, cap
        self.failures = 0
        self.next_try = 0.0

    def ready(self, now: float) -> bool:
        return now >= self.next_try

    def failed(self, now: float) -> float:
        self.failures += 1
        delay = min(self.cap, self.first * 2 ** (self.failures - 1))
        self.next_try = now + delay
        return delay

    def succeeded(self):
        self.failures = 0
        self.next_try = 0.0


__all__ = ["Backoff", "CHUNK_IDS", "PARTITION_RETRY_SECONDS", "UPDATE_WORKERS", "reshape_fields", "SIGNALS",
           "SlurmCLI", "SlurmCommandError", "SlurmUnreachable", "controller_down", "job_ids",
           "json_version", "name", "retry_partition_change", "transient_update_error", "unreachable"]

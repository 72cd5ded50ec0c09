"""The daemon's configuration: /etc/slurm/gavel.toml, read and checked in one place.

Every key is optional; `Config()` is the default.  A wrong key or value is
an `InputError` naming the file and the key, so `slurm-gavel daemon` refuses
to start (exit 2) instead of scheduling with a setting nobody asked for.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

from ..core.engine import (DEFAULT_HYSTERESIS, DEFAULT_LEASE_LOAD_EXPONENT, DEFAULT_MAX_LEASE_SCALE,
                           DEFAULT_MOVE_HYSTERESIS, MEASURED_MAX_PREEMPTIONS, MEASURED_MAX_STARTS,
                           MEASURED_RESTART_SECONDS)
from ..core.entities import SHARE_BY
from ..core.errors import InputError
from ..core.weights import WeightLimits
from ..estimator.trust import Trust
from ..slurm.backend.looks import FULL_READ_SECONDS
from ..slurm.commands import SIGNALS, SlurmCLI
from ..slurm.flags import entity_name_problem

try:                      # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - 3.9/3.10
    import tomli as tomllib

DEFAULT_PATH = "/etc/slurm/gavel.toml"
SHARED_CLUSTER_TRUST = Trust(shared_min_users=2)
WEIGHT_KEYS = ("min", "max", "users", "accounts")
SYSLOG_FACILITIES = ("daemon", "user", *(f"local{i}" for i in range(8)))
ESTIMATOR_KEYS = ("ceiling", "max_steps_per_second", "shared_min_users", "agreement", "trusted_users")
ENTITY_WEIGHT_SOURCES = ("config", "fairshare")
MAX_ENTITY_WEIGHT = 1_000_000
MAX_PAIR_GPUS = 64                   # GPUs of one node, at most (a pair shares one node's GPUs)


@dataclass(frozen=True)
class Config:
    # Between users first, then among each user's jobs (the hierarchical policy with users as
    # entities, share_by below): a user with a 300-task array gets what a user with 3 jobs
    # gets.  "max_min_fairness" is Gavel's per-job LAS, where every job is its own share.
    policy: str = "hierarchical"
    agnostic: bool = False
    space_sharing: bool = False
    # the largest jobs paired (GPUs each): 1, or up to this on Slurm 23.11+ whose
    # SelectTypeParameters has MULTIPLE_SHARING_GRES_PJ,ONE_TASK_PER_SHARING_GRES
    # (slurm/backend/pairs/multi.py, docs/space-sharing.md "Multi-GPU pairs"); else 1, said at start
    max_pair_gpus: int = 1
    round_seconds: float = 360.0
    # the mechanism's churn (core/ledger.py Churn): a running job competes for its GPUs as
    # if it had received hysteresis_rounds less, moves to another type of its own accord only
    # move_hysteresis_rounds behind there; each start or resume costs restart_seconds
    hysteresis_rounds: float = DEFAULT_HYSTERESIS
    move_hysteresis_rounds: float = DEFAULT_MOVE_HYSTERESIS
    # both leases grow by (GPUs asked for / GPUs) ** lease_load_exponent, at most by
    # max_lease_scale, while the cluster is oversubscribed (a restart then delays every job)
    lease_load_exponent: float = DEFAULT_LEASE_LOAD_EXPONENT
    max_lease_scale: float = DEFAULT_MAX_LEASE_SCALE
    restart_seconds: float = MEASURED_RESTART_SECONDS
    # at most this many jobs preempted a round (0: no cap): a large reshuffle over a few rounds
    max_preemptions_per_round: int = MEASURED_MAX_PREEMPTIONS
    # at most this many waiting jobs started a round (0: no cap): a large fill over a few rounds
    max_starts_per_round: int = MEASURED_MAX_STARTS
    work_conserving: bool = True         # idle GPUs go to waiting jobs with no share on that type
    mid_round_starts: bool = False       # a job submitted during a round starts at the next tick on idle GPUs
    tick_seconds: float = 10.0           # how often Slurm is looked at within a round (slurm/backend/looks.py)
    # the longest a tick goes without reading the whole queue (credit and gqueue lag at most
    # this); a large queue's read costs seconds (about 1 ms a job), so a site with tens of
    # thousands of jobs raises it towards round_seconds
    full_read_seconds: float = FULL_READ_SECONDS
    database: str = "/var/lib/slurm-gavel/state.db"
    throughputs: str | None = None       # a throughput table in Gavel's JSON layout
    explore_rounds: int = 6              # rounds a job of a model nobody measured explores types
    partitions: Mapping[str, str] = field(default_factory=dict)  # partition -> GPU type; {} = from Slurm
    # GPU type -> "partition" or {partition, gres | nodes}: a partition of mixed GPU nodes
    # (gputypes.py); with [partitions], the types the daemon schedules (none: from Slurm)
    gpu_types: Mapping[str, Any] = field(default_factory=dict)
    prices: Mapping[str, float] = field(default_factory=dict)    # GPU type -> $ per GPU-hour
    solver_budget_seconds: float = 60.0
    solver_wait_seconds: float = 5.0     # a round waits this long (at most half a round) for a fresh solve
    preemption_signal: str = "USR2"
    signal_all_steps: bool = False       # scancel --full (training under srun) instead of --batch
    requeue_exit_code: int = 85
    grace_seconds: float = 60.0          # after the signal, then `scontrol requeuehold`
    # a job signalled only once it has run this long (at most half a round): one
    # started late in a round and preempted at its end gets the time to set its trap
    min_run_seconds: float = 30.0
    start_timeout_seconds: float = 30.0  # a released job not started by then is held again (backoff)
    # the database forgets ended jobs, old rounds, placements, allocations and events after
    # this many days (checked hourly; 0: keeps everything)
    retention_days: float = 28.0
    progress_dir: str | None = None      # where jobs write progress (GAVEL_PROGRESS_DIR); else
                                         # <job working directory>/.gavel/<job id>.jsonl
    slurm_bin_dir: str | None = None
    slurm_conf: str | None = None        # SLURM_CONF for the Slurm commands
    command_timeout_seconds: float = 30.0
    # Watching (daemon/metrics.py, slurm_conf/README.md): a Prometheus endpoint when a port is set
    metrics_port: int | None = None
    metrics_address: str = "127.0.0.1"    # localhost only unless the admin opens it
    metrics_per_job: bool = False        # per-job series (a label per job id): opt-in
    # Logging: stderr always (journald under systemd); also a file and/or syslog
    log_file: str | None = None
    syslog: bool = False
    syslog_facility: str = "daemon"
    syslog_address: str = "/dev/log"     # the local syslog socket (journald and rsyslog listen there)
    # [weights]: what users' weight= flags are bounded to (core/weights.py)
    weights: WeightLimits = field(default_factory=WeightLimits)
    # [estimator]: how far jobs' own throughput reports are believed (estimator/trust.py);
    # on a shared cluster a model's shared row needs two users who agree
    estimator: Trust = field(default_factory=lambda: SHARED_CLUSTER_TRUST)
    # The hierarchical policy's entities (a job's entity: its entity= flag, else its Slurm
    # account): [entities] name = weight; entity_weights = "fairshare" takes every account's
    # Fairshare shares from sacctmgr (slurm/fairshare.py), [entities] entries winning over them
    entities: Mapping[str, float] = field(default_factory=dict)
    entity_weights: str = "config"
    # What an entity of the hierarchical policy is (core/entities.py): "user", every user
    # (the weights above then name accounts, each split among its users with jobs); "entity",
    # a job's entity= flag, else its Slurm account (the weights name entities)
    share_by: str = "user"
    source: str = ""                     # the file it came from

    def check(self) -> "Config":
        where = self.source or "config"

        def bad(key, problem):
            raise InputError(f"{where}: {key}", problem)

        from ..policies import UnknownPolicyError, make_policy
        try:
            make_policy(self.policy, agnostic=self.agnostic, space_sharing=self.space_sharing)
        except UnknownPolicyError as e:
            bad("policy", str(e))
        except InputError as e:
            bad("policy", e.problem)
        if not (isinstance(self.solver_wait_seconds, (int, float)) and 0 <= self.solver_wait_seconds < math.inf):
            bad("solver_wait_seconds", f"must be a number >= 0, got {self.solver_wait_seconds!r}")
        for key in ("round_seconds", "tick_seconds", "full_read_seconds", "solver_budget_seconds", "grace_seconds",
                    "command_timeout_seconds", "start_timeout_seconds"):
            v = getattr(self, key)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                bad(key, f"must be a number > 0, got {v!r}")
        if not (isinstance(self.min_run_seconds, (int, float)) and not isinstance(self.min_run_seconds, bool)
                and 0 <= self.min_run_seconds < math.inf):
            bad("min_run_seconds", f"must be a number >= 0, got {self.min_run_seconds!r}")
        for key in ("hysteresis_rounds", "restart_seconds", "move_hysteresis_rounds", "retention_days",
                    "lease_load_exponent"):
            v = getattr(self, key)
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < math.inf):
                bad(key, f"must be a number >= 0, got {v!r}")
        if not (isinstance(self.max_lease_scale, (int, float)) and not isinstance(self.max_lease_scale, bool)
                and 1 <= self.max_lease_scale < math.inf):
            bad("max_lease_scale", f"must be a number >= 1, got {self.max_lease_scale!r}")
        for key in ("max_preemptions_per_round", "max_starts_per_round"):
            v = getattr(self, key)
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
                bad(key, f"must be a whole number >= 0 (0: no cap), got {v!r}")
        if not (isinstance(self.max_pair_gpus, int) and not isinstance(self.max_pair_gpus, bool)
                and 1 <= self.max_pair_gpus <= MAX_PAIR_GPUS):
            bad("max_pair_gpus", f"must be an integer 1-{MAX_PAIR_GPUS}, got {self.max_pair_gpus!r}")
        if self.tick_seconds > self.round_seconds:
            bad("tick_seconds", f"must not exceed round_seconds ({self.round_seconds})")
        if isinstance(self.full_read_seconds, (int, float)) and self.full_read_seconds < self.tick_seconds:
            bad("full_read_seconds", f"must be at least tick_seconds ({self.tick_seconds})")
        if self.preemption_signal not in SIGNALS:
            bad("preemption_signal", f"must be one of {', '.join(SIGNALS)}, got {self.preemption_signal!r}")
        if not (isinstance(self.requeue_exit_code, int) and 1 <= self.requeue_exit_code <= 255):
            bad("requeue_exit_code", f"must be an integer 1-255, got {self.requeue_exit_code!r}")
        for p, wt in self.partitions.items():
            if not isinstance(wt, str) or not wt:
                bad(f"partitions.{p}", "must name a GPU type")
        from ..slurm.gputypes import from_config
        from_config(self.partitions, self.gpu_types, where)     # a bad [gpu_types] entry: InputError
        for wt, price in self.prices.items():
            if not (isinstance(price, (int, float)) and price >= 0):
                bad(f"prices.{wt}", f"must be a number >= 0, got {price!r}")
        if not (isinstance(self.explore_rounds, int) and not isinstance(self.explore_rounds, bool)
                and 0 <= self.explore_rounds <= 1000):
            bad("explore_rounds", f"must be a whole number 0-1000, got {self.explore_rounds!r}")
        for key, problem in self.weights.problems():
            bad(f"weights.{key}", problem)
        for key, problem in self.estimator.problems():
            bad(f"estimator.{key}", problem)
        if self.metrics_port is not None and not (
                isinstance(self.metrics_port, int) and not isinstance(self.metrics_port, bool)
                and 1 <= self.metrics_port <= 65535):
            bad("metrics_port", f"must be a port number 1-65535, got {self.metrics_port!r}")
        if not isinstance(self.metrics_address, str) or not self.metrics_address:
            bad("metrics_address", f"must be an address to listen on, got {self.metrics_address!r}")
        if self.log_file is not None and (not isinstance(self.log_file, str) or not self.log_file):
            bad("log_file", f"must be a file path, got {self.log_file!r}")
        if not isinstance(self.syslog_address, str) or not self.syslog_address:
            bad("syslog_address", f"must be a socket path, got {self.syslog_address!r}")
        if self.syslog_facility not in SYSLOG_FACILITIES:
            bad("syslog_facility", f"must be one of {', '.join(SYSLOG_FACILITIES)}, "
                                   f"got {self.syslog_facility!r}")
        if self.entity_weights not in ENTITY_WEIGHT_SOURCES:
            bad("entity_weights", f"must be one of {', '.join(ENTITY_WEIGHT_SOURCES)}, "
                                  f"got {self.entity_weights!r}")
        if self.share_by not in SHARE_BY:
            bad("share_by", f"must be one of {', '.join(SHARE_BY)}, got {self.share_by!r}")
        for name, problem in entity_problems(self.entities):
            bad(f"entities.{name}", problem)
        if self.throughputs is not None and not Path(self.throughputs).is_file():
            bad("throughputs", f"no such file: {self.throughputs}")
        return self

    def type_map(self):
        """The configured GPU types (gputypes.TypeMap), None: discover them from Slurm."""
        from ..slurm.gputypes import from_config
        return from_config(self.partitions, self.gpu_types, self.source or "config")


def entity_problems(entities: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(entity, problem) for each bad [entities] entry: names as the entity= flag spells them,
    weights numbers in (0, MAX_ENTITY_WEIGHT]."""
    out = []
    for name, weight in entities.items():
        problem = entity_name_problem(name)
        if problem:
            out.append((str(name), f"not an entity name: {problem}"))
        elif (isinstance(weight, bool) or not isinstance(weight, (int, float))
              or not math.isfinite(weight) or not 0 < weight <= MAX_ENTITY_WEIGHT):
            out.append((name, f"must be a weight > 0 and <= {MAX_ENTITY_WEIGHT}, got {weight!r}"))
    return out


def load(path: str | Path | None) -> Config:
    """The configuration in `path` (None: all defaults), checked."""
    if path is None:
        return Config().check()
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(str(path), "file not found") from None
    except OSError as e:
        raise InputError(str(path), f"cannot read: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise InputError(str(path), f"not valid TOML: {e}") from None
    return from_dict(data, source=str(path))


def _section(name: str, value: Any, source: str):
    """[weights] or [estimator] as a WeightLimits / Trust (checked later, in Config.check)."""
    if not isinstance(value, Mapping):
        raise InputError(f"{source}: {name}", "must be a table")
    allowed = WEIGHT_KEYS if name == "weights" else ESTIMATOR_KEYS
    out: dict[str, Any] = {}
    for key, v in value.items():
        if key not in allowed:
            raise InputError(f"{source}: {name}.{key}", f"unknown setting (known: {', '.join(allowed)})")
        if key in ("users", "accounts"):
            if not isinstance(v, Mapping):
                raise InputError(f"{source}: {name}.{key}", "must be a table of name = maximum weight")
            v = dict(v)
        elif key == "trusted_users":
            if not isinstance(v, list) or not all(isinstance(u, str) and u for u in v):
                raise InputError(f"{source}: {name}.{key}", f"must be a list of user names, got {v!r}")
            v = frozenset(v)
        elif isinstance(v, int) and not isinstance(v, bool) and key != "shared_min_users":
            v = float(v)
        out[key] = v
    return WeightLimits(**out) if name == "weights" else replace(SHARED_CLUSTER_TRUST, **out)


def from_dict(data: Mapping[str, Any], source: str = "config") -> Config:
    known = {f.name: f for f in fields(Config) if f.name != "source"}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("weights", "estimator"):
            values[key] = _section(key, value, source)
            continue
        if key not in known:
            raise InputError(f"{source}: {key}", f"unknown setting (known: {', '.join(sorted(known))})")
        default = getattr(Config(), key)
        if isinstance(default, bool) and not isinstance(value, bool):
            raise InputError(f"{source}: {key}", f"must be true or false, got {value!r}")
        if isinstance(default, Mapping) and not isinstance(value, Mapping):
            raise InputError(f"{source}: {key}", "must be a table")
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if key == "entities":       # weights as floats (TOML integers too)
            value = {k: float(v) if isinstance(v, int) and not isinstance(v, bool) else v
                     for k, v in value.items()}
        values[key] = dict(value) if isinstance(value, Mapping) else value
    return replace(Config(), source=source, **values).check()


__all__ = ["Config", "DEFAULT_PATH", "from_dict", "load"]


def slurm_cli(config: Config, cls: type[SlurmCLI] = SlurmCLI) -> SlurmCLI:
    """The Slurm commands as `config` says to run them (slurm.conf, bin dir, timeout)."""
    env = {"SLURM_CONF": config.slurm_conf} if config.slurm_conf else None
    return cls(env=env, bin_dir=config.slurm_bin_dir, timeout=config.command_timeout_seconds)

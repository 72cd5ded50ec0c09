"""The daemon's Prometheus metrics: their definitions, their update from what a round knows,
and the HTTP endpoint (`metrics_port`, `metrics_address` in gavel.toml).

Served by `prometheus_client` from a thread of the daemon, on its own registry.
Names follow Prometheus' conventions: the `slurm_gavel_` prefix, base units (seconds,
GPUs), counters ending in `_total`; per GPU type series carry the `partition` label
the common Slurm exporters use, beside `gpu_type`.  No series is labelled by user;
per-job series (a label per job id, so unbounded over time) are only made with
`metrics_per_job = true`, and the daemon drops the series of jobs that left.

What is counted comes from the daemon as plain data: Slurm's nodes and gavel's
running jobs (GPU states), the status rows gqueue shows (job states), the allocation
in force and the policy input it was made for, and each round's plan (preemptions,
migrations).  Slurm command failures are counted where every command runs
(`CountingCLI`), policy solves where the policy runs (`TimedPolicy`).
"""
from __future__ import annotations

import errno
import time
from typing import Collection, Iterable, Mapping

from prometheus_client import (CollectorRegistry, Counter, Gauge, Histogram, PlatformCollector,
                               ProcessCollector, start_http_server)

from ..core.errors import GavelError
from ..slurm.commands import SlurmCLI, SlurmCommandError

# gqueue's ST column, in the words a dashboard shows
JOB_STATES = {"R": "running", "S": "released", "W": "held_back", "PD": "pending"}
GPU_STATES = ("gavel", "other", "idle", "down")
ROUND_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
SOLVE_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class MetricsError(GavelError):
    pass


def command_name(args) -> str:
    """`scontrol update`, `squeue`: the tool and, for scontrol, what it was asked to do."""
    args = list(args)
    if not args:
        return "?"
    if args[0] == "scontrol" and len(args) > 1:
        return f"scontrol {args[1]}"
    return str(args[0])


class CountingCLI(SlurmCLI):
    """`SlurmCLI` that counts each failed command (`failed(name)`), then raises as before."""

    failed = staticmethod(lambda name: None)

    def run(self, args, check=True, timeout=None, input=None):
        try:
            return super().run(args, check=check, timeout=timeout, input=input)
        except SlurmCommandError as e:
            e.counted = True
            self.failed(command_name(args))
            raise

    def json(self, args):
        try:
            return super().json(args)
        except SlurmCommandError as e:      # output that is not JSON, or Slurm's own errors
            if not getattr(e, "counted", False):
                self.failed(command_name(args))
            raise


class TimedPolicy:
    """A policy whose every `allocate` is timed into `histogram` (solves run in a thread)."""

    def __init__(self, policy, histogram):
        self._policy, self._histogram = policy, histogram

    def allocate(self, inp):
        started = time.perf_counter()
        try:
            return self._policy.allocate(inp)
        finally:
            self._histogram.observe(time.perf_counter() - started)

    def __getattr__(self, name):
        return getattr(self._policy, name)


def gpu_states(nodes, gavel_jobs: Iterable, others: Mapping[str, int],
               partitions: Mapping[str, str], types=None,
               closed: Collection[str] = ()) -> dict[tuple[str, str, str], int]:
    """GPUs per (partition, gpu_type, state) of the scheduler's partitions.

    `nodes`: Slurm's nodes (records.SlurmNode); `gavel_jobs`: gavel's jobs as Slurm lists
    them (records.SlurmJob: running, nodes, GPUs per node); `others`: node -> GPUs held by
    jobs that are not gavel's; `partitions`: partition -> GPU type.  A node counts once,
    in the first of its partitions the scheduler uses (as the backend types it).  A down or
    drained node's GPUs are all "down", and so are those of a partition in `closed` (Slurm
    has it DOWN, DRAIN or INACT: it starts nothing there); on the others each GPU is gavel's, another job's,
    or idle.  With `types` (gputypes.TypeMap) a node counts under its type's partition and
    its own type: a partition of mixed GPU nodes has a series per type."""
    on_node: dict[str, int] = {}
    for j in gavel_jobs:
        if j.running:
            for n in j.nodes:
                on_node[n] = on_node.get(n, 0) + j.gpus
    pairs = types.pairs if types is not None else tuple(partitions.items())
    out = {(p, wt, s): 0 for p, wt in pairs for s in GPU_STATES}
    for n in nodes:
        if types is not None:
            wt = types.node_type(n)
            if wt is None:
                continue
            key = (types.partition_of(wt), wt)
        else:
            p = next((p for p in n.partitions if p in partitions), None)
            if p is None:
                continue
            key = (p, partitions[p])
        if not n.usable or key[0] in closed:
            out[(*key, "down")] += n.gpus
            continue
        gavel = min(n.gpus, on_node.get(n.name, 0))
        other = min(n.gpus - gavel, others.get(n.name, 0))
        out[(*key, "gavel")] += gavel
        out[(*key, "other")] += other
        out[(*key, "idle")] += n.gpus - gavel - other
    return out


class Metrics:
    """Every series of the daemon, on one registry (`serve` publishes it)."""

    def __init__(self, per_job: bool = False, registry: CollectorRegistry | None = None):
        self.per_job = per_job
        self.registry = r = registry or CollectorRegistry()
        ProcessCollector(registry=r)            # process_start_time_seconds, memory, CPU
        PlatformCollector(registry=r)
        self.gpus = Gauge("slurm_gavel_gpus", "GPUs of the scheduler's partitions by state: "
                          "gavel (gavel jobs run on them), other (non-gavel jobs), idle, down "
                          "(node down or drained, or its partition not UP)", ["partition", "gpu_type", "state"], registry=r)
        self.jobs = Gauge("slurm_gavel_jobs", "gavel jobs by state: running (Slurm runs it), "
                          "released (not started yet), held_back (the daemon does not plan it "
                          "now), pending", ["state"], registry=r)
        self.allocation = Gauge("slurm_gavel_allocation_gpus", "GPUs the allocation in force "
                                "gives the jobs per GPU type (time share x GPUs per job, summed)",
                                ["partition", "gpu_type"], registry=r)
        self.round_duration = Histogram("slurm_gavel_round_duration_seconds",
                                        "time a round took to observe Slurm, plan and act",
                                        buckets=ROUND_BUCKETS, registry=r)
        self.solve_duration = Histogram("slurm_gavel_solve_duration_seconds",
                                        "time a policy solve took (solves run beside the rounds)",
                                        buckets=SOLVE_BUCKETS, registry=r)
        self.rounds = Counter("slurm_gavel_rounds", "rounds planned", registry=r)
        self.preemptions = Counter("slurm_gavel_preemptions", "jobs preempted, by the GPU type "
                                   "they ran on", ["partition", "gpu_type"], registry=r)
        self.migrations = Counter("slurm_gavel_migrations", "jobs started on another GPU type "
                                  "than the one they last ran on",
                                  ["from_gpu_type", "to_gpu_type"], registry=r)
        self.command_errors = Counter("slurm_gavel_slurm_command_errors", "Slurm commands that "
                                      "failed or timed out, per command", ["command"], registry=r)
        self.restarts = Counter("slurm_gavel_daemon_restarts", "times the daemon started again on "
                                "this database (kept in the database)", registry=r)
        self.up = Gauge("slurm_gavel_database_writable", "1 while the daemon can record (and so "
                        "act), 0 while its database cannot be written", registry=r)
        self.database_bytes = Gauge("slurm_gavel_database_bytes", "size of the daemon's "
                                    "database file and its write-ahead log", registry=r)
        self.database_rows = Gauge("slurm_gavel_database_rows", "rows per table of the daemon's "
                                   "database (retention_days bounds them)", ["table"], registry=r)
        self.database_pruned = Counter("slurm_gavel_database_pruned_rows", "rows retention "
                                       "deleted, per table", ["table"], registry=r)
        self.dry_run = Gauge("slurm_gavel_dry_run", "1 in shadow mode (--dry-run: planned, "
                             "not done)", registry=r)
        self.job_share = (Gauge("slurm_gavel_job_allocation_share", "a job's time share per GPU "
                                "type in the allocation in force (metrics_per_job)",
                                ["job", "partition", "gpu_type"], registry=r) if per_job else None)
        self._server = None
        self._last_type: dict[str, str] = {}      # job -> the GPU type it was last placed on

    def database(self, size: int, rows: Mapping[str, int], pruned: Mapping[str, int] = {}) -> None:
        """The database's size and rows per table, and what the last pruning deleted."""
        self.database_bytes.set(size)
        for table, n in rows.items():
            self.database_rows.labels(table=table).set(n)
        for table, n in pruned.items():
            if n:
                self.database_pruned.labels(table=table).inc(n)

    # -- the endpoint ------------------------------------------------------------------
    def serve(self, port: int, address: str = "127.0.0.1") -> None:
        """Listen on address:port (a thread); a port in use is one MetricsError line."""
        try:
            self._server, _ = start_http_server(port, addr=address, registry=self.registry)
        except OSError as e:
            why = ("is in use (another daemon or exporter?): free it or set another metrics_port"
                   if e.errno == errno.EADDRINUSE else f"cannot be opened: {e.strerror or e}")
            raise MetricsError(f"metrics endpoint {address}:{port} {why}") from None

    @property
    def port(self) -> int | None:
        return self._server.server_address[1] if self._server is not None else None

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # -- updates -------------------------------------------------------------------------
    def seed(self, placements: Mapping[str, str]) -> None:
        """The GPU type each job was last placed on (a restart: from the database)."""
        self._last_type.update(placements)

    def cluster(self, states: Mapping[tuple[str, str, str], int], status: Mapping[str, Mapping]) -> None:
        """GPUs by state (`gpu_states`) and jobs by state (the status rows gqueue shows)."""
        for (p, wt, s), n in states.items():
            self.gpus.labels(partition=p, gpu_type=wt, state=s).set(n)
        counts = dict.fromkeys(JOB_STATES.values(), 0)
        for row in status.values():
            counts[JOB_STATES.get(row.get("state") or "PD", "pending")] += 1
        for s, n in counts.items():
            self.jobs.labels(state=s).set(n)

    def round(self, plan, allocation, policy_input, partitions: Mapping[str, str],
              seconds: float, active: Iterable[str] = (), unstarted: Iterable[str] = ()) -> None:
        """After a round: its duration, what it preempted and moved, the allocation in force.
        `unstarted`: jobs released last round that Slurm never started; taking them back
        is neither a preemption nor a migration."""
        unstarted = set(unstarted)
        # partition -> type, or (partition, type) pairs (gputypes.TypeMap.pairs: mixed partitions)
        pairs = partitions.items() if isinstance(partitions, Mapping) else partitions
        partition_of = {wt: p for p, wt in reversed(list(pairs))}
        self.rounds.inc()
        self.round_duration.observe(seconds)
        for job in plan.preempt:
            wt = self._last_type.get(job)
            if wt is not None and job not in unstarted:
                self.preemptions.labels(partition=partition_of.get(wt, ""), gpu_type=wt).inc()
        for a in plan.start:
            for job in a.jobs:
                before = self._last_type.get(job)
                if before is not None and before != a.worker_type and job not in unstarted:
                    self.migrations.labels(from_gpu_type=before, to_gpu_type=a.worker_type).inc()
        for a in (*plan.keep, *plan.start):
            for job in a.jobs:
                self._last_type[job] = a.worker_type
        active = set(active)
        self._last_type = {job: wt for job, wt in self._last_type.items() if job in active}
        gpus = dict.fromkeys(partition_of, 0.0)
        if self.job_share is not None:
            self.job_share.clear()          # jobs that left lose their series
        if allocation is not None and policy_input is not None and allocation.job_ids:
            size = dict(zip(policy_input.job_ids, (int(s) for s in policy_input.scale_factors)))
            for i, job in enumerate(allocation.job_ids):
                for k, wt in enumerate(allocation.worker_types):
                    share = float(allocation.x[i, k])
                    gpus[wt] = gpus.get(wt, 0.0) + share * size.get(job, 1)
                    if self.job_share is not None and share > 0:
                        self.job_share.labels(job=job, partition=partition_of.get(wt, ""),
                                              gpu_type=wt).set(share)
            for r, (a, b) in enumerate(allocation.pair_jobs.tolist()):
                for k, wt in enumerate(allocation.worker_types):
                    gpus[wt] = gpus.get(wt, 0.0) + float(allocation.x_pairs[r, k]) * max(
                        size.get(allocation.job_ids[a], 1), size.get(allocation.job_ids[b], 1))
        for wt, n in gpus.items():
            self.allocation.labels(partition=partition_of.get(wt, ""), gpu_type=wt).set(n)


__all__ = ["CountingCLI", "GPU_STATES", "JOB_STATES", "Metrics", "MetricsError", "TimedPolicy",
           "command_name", "gpu_states"]

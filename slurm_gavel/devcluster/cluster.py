"""A real Slurm cluster on this machine, in one directory: for tests, CI and the demo.

`DevCluster(directory)` owns that directory and the processes it starts, nothing else:

    slurm.conf, gres.conf, job_submit.lua (optional), cgroup.conf (Slurm >= 23.02)
    munge/        its own munged: key, socket, pid, log and seed files
    ctld/         slurmctld's state;  spool/NODE  each slurmd's spool
    gpus/NODE/    fake GPUs (empty files);  log/  every log;  run/  pid files
    state.json    the pids (and start times) of the daemons it started
    db/, slurmdbd.conf   with `accounting=True`: a private MariaDB server (its data, socket
                  and a random 127.0.0.1 port) and slurmdbd on a random port, the cluster
                  registered with two accounts (gavel-a, gavel-b) and root in both

Each GPU type gets a partition named after it with nodes TYPE-0, TYPE-1, ...
("GRES-typed partitions": jobs ask for `--gres=gpu:N`, the partition picks the
type); or, with `mixed="gpu"`, one partition of that name holds every node
(mixed GPU nodes, typed GRES: the node list picks the type, slurm/gputypes.py).  With
`sockets=2`, each node has two sockets and gres.conf binds each half of its GPUs (and their
shards) to one socket's cores (`Cores=`; slurmd takes them on this fake hardware with
SlurmdParameters=config_overrides; docs/space-sharing.md, "Sockets").  Every node is a slurmd on localhost with its own port.  `down()` stops
exactly the processes `up()` started, by pid, and the slurmstepd processes of
their jobs; never anything found by name.  Client commands need `env`
(SLURM_CONF=<directory>/slurm.conf), or use `run()`.

Verified with Slurm 22.05 (Debian 12) and 24.11 (Debian 13, see docs/slurm-versions.md):
version-specific choices branch on `slurmd -V` and are marked "24.11" below.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import secrets
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..core.errors import InputError
from .host import (INSTALL_HINT, MIN_VERSION, SBIN, DevClusterError, check_accounting, check_machine,
                   free_port, port_free)
from .procs import (MARK, alive, ancestry, descendants, has_mark, is_our_job, is_our_stepd,
                    one_line, proc_stat, processes, tail, write_atomic)
from .render import (ACCOUNTS, CLUSTER_NAME, DEFAULT_CTLD_PORT, DEFAULT_SLURMD_PORT, DEFAULT_TYPES,
                     TYPE_NAME, check_types, fake_gpu, node_list, render_cgroup_conf, render_gres_conf,
                     render_slurm_conf, render_slurmdbd_conf)

_CLIENT_PREFIXES = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SINFO_", "SCONTROL_")
_SUN_PATH_MAX = 107                       # a UNIX socket path, without its NUL
_BAD_PATH_CHARS = set(" \t\n#,=[]\"'\\")


# -- the cluster ------------------------------------------------------------------
# one line of sdiag's statistics by message type
_RPC_LINE = re.compile(r"^\s*(\w+)\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:\d+\s+total_time:(\d+)", re.M)

class DevCluster:
    """A local Slurm cluster under `directory`: see the module docstring."""

    def __init__(self, directory, types: Mapping[str, tuple[int, int]] | None = None,
                 ctld_port: int = DEFAULT_CTLD_PORT, slurmd_port: int = DEFAULT_SLURMD_PORT,
                 job_submit_lua=None, requeue_exit_hold: int = 85, accounting: bool = False,
                 mixed: str | None = None, shards: int = 0, shard_flags: str = "",
                 select_parameters: str = "", sockets: int = 0, bind_shards: bool = True,
                 memory: bool = False):
        if select_parameters and not re.fullmatch(r"[A-Z_]+(,[A-Z_]+)*", str(select_parameters)):
            raise InputError("select_parameters", f"{select_parameters!r}: NAME[,NAME...] in capitals")
        self.select_parameters = str(select_parameters)
        self.memory = bool(memory)          # CR_Core_Memory (render_slurm_conf)
        if mixed is not None and not TYPE_NAME.match(str(mixed)):
            raise InputError("mixed", f"partition name {mixed!r}: use lowercase letters, digits and _")
        self.mixed = mixed
        self.shards, self.shard_flags = int(shards), str(shard_flags)
        self.directory = Path(directory).expanduser().absolute()
        self.accounting = bool(accounting)
        # slurmdbd's and MariaDB's ports: chosen free at random by `up()` (or kept from the
        # running cluster's state.json)
        self.dbd_port: int | None = None
        self.db_port: int | None = None
        self.types = dict(DEFAULT_TYPES if types is None else types)
        check_types(self.types)
        self.sockets, self.bind_shards = int(sockets), bool(bind_shards)
        if self.sockets and (self.sockets < 2 or any(gpus % self.sockets
                                                     for _, gpus in self.types.values())):
            raise InputError("sockets", f"{sockets}: 2 or more, dividing every node's GPUs")
        self.nodes = [name for name, _, _ in node_list(self.types)]
        self.ctld_port, self.slurmd_port = int(ctld_port), int(slurmd_port)
        self.job_submit_lua = Path(job_submit_lua) if job_submit_lua else None
        self.requeue_exit_hold = int(requeue_exit_hold)
        bad = _BAD_PATH_CHARS & set(str(self.directory))
        if bad:
            raise InputError("directory", f"{self.directory}: Slurm config paths cannot hold "
                                          f"{''.join(sorted(bad))!r}")
        # slurmstepd listens on spool/NODE/NODE_JOB.STEP: a UNIX socket path has a limit
        longest = max(len(f"{self.directory}/spool/{n}/{n}_99999999.4294967295")
                      for n in self.nodes)
        if self.accounting:
            longest = max(longest, len(str(self.db_socket)))
        if longest > _SUN_PATH_MAX:
            raise InputError("directory", f"{self.directory} is too long for Slurm's UNIX "
                                          f"socket paths ({longest} > {_SUN_PATH_MAX} "
                                          "characters): use a shorter one")
        ports = [self.ctld_port] + [self.slurmd_port + k for k in range(len(self.nodes))]
        if min(ports) < 1024 or max(ports) > 65535 or len(set(ports)) != len(ports):
            raise InputError("ports", f"slurmctld port {self.ctld_port} and slurmd ports "
                                      f"{self.slurmd_port}-{ports[-1]} must be distinct, "
                                      "in 1024-65535")
        if not 0 < self.requeue_exit_hold < 256:
            raise InputError("requeue_exit_hold", "an exit code, 1 to 255")
        self._procs: dict[str, subprocess.Popen] = {}   # the daemons this object started
        self._no_json: set[str] = set()                  # commands without --json here

    # paths and environment
    @property
    def slurm_conf(self) -> Path:
        return self.directory / "slurm.conf"

    @property
    def state_file(self) -> Path:
        return self.directory / "state.json"

    @property
    def munge_socket(self) -> Path:
        return self.directory / "munge" / "munge.socket"

    @property
    def db_socket(self) -> Path:
        return self.directory / "db" / "mysqld.sock"

    @property
    def slurmdbd_conf(self) -> Path:
        return self.directory / "slurmdbd.conf"    # slurmdbd looks next to SLURM_CONF

    @property
    def env(self) -> dict[str, str]:
        """Environment for client commands: this cluster's SLURM_CONF, no stray SLURM_* input."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(_CLIENT_PREFIXES)}
        env["SLURM_CONF"] = str(self.slurm_conf)
        for d in SBIN:                      # scontrol & co. are in /usr/bin; daemons in /usr/sbin
            if d not in env.get("PATH", "").split(os.pathsep):
                env["PATH"] = env.get("PATH", "") + os.pathsep + d
        return env

    def run(self, args: Sequence, *, timeout: float = 30, check: bool = True, **kw):
        """subprocess.run(args) with this cluster's env; DevClusterError names a failure."""
        args = [str(a) for a in args]
        if "stdout" not in kw and "stderr" not in kw:
            kw["capture_output"] = True
        kw.setdefault("text", True)
        kw.setdefault("stdin", subprocess.DEVNULL)
        try:
            result = subprocess.run(args, env=kw.pop("env", self.env), timeout=timeout,
                                    check=False, **kw)
        except FileNotFoundError:
            raise DevClusterError(f"{args[0]}: command not found; {INSTALL_HINT}") from None
        except subprocess.TimeoutExpired:
            raise DevClusterError(f"`{shlex.join(args)}` timed out after {timeout:g} s") from None
        if check and result.returncode != 0:
            said = one_line(result.stderr or result.stdout or "") or "no output"
            raise DevClusterError(f"`{shlex.join(args)}` failed (exit {result.returncode}): {said}")
        return result

    def rpcs(self) -> dict[str, tuple[int, int]]:
        """slurmctld's RPCs so far by message type (sdiag): name -> (count, total microseconds).
        The tests and benches that count what a round costs slurmctld read it here."""
        out = self.run(["sdiag"]).stdout
        by_type = out.split("Remote Procedure Call statistics by message type", 1)[-1]
        by_type = by_type.split("Remote Procedure Call statistics by user", 1)[0]
        return {m.group(1): (int(m.group(2)), int(m.group(3))) for m in _RPC_LINE.finditer(by_type)}

    # files
    def write_config(self, version: tuple[int, ...] = MIN_VERSION):
        """Create the directory tree, the fake GPU files and the config files."""
        d = self.directory
        for sub in ("ctld", "log", "run", "spool", "gpus"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        d.chmod(0o755)                        # job scripts live under spool/: 755 (slurm.conf(5))
        (d / "munge").mkdir(exist_ok=True)
        (d / "munge").chmod(0o755)            # every user reaches the socket; the key is 0600
        for name, _, gpus in node_list(self.types):
            (d / "spool" / name).mkdir(exist_ok=True)
            (d / "gpus" / name).mkdir(exist_ok=True)
            for k in range(gpus):
                fake_gpu(d / "gpus" / name / f"gpu{k}", device=bool(self.shards))
        lua = d / "job_submit.lua"
        if self.job_submit_lua:
            if not self.job_submit_lua.is_file():
                raise InputError("job_submit_lua", f"{self.job_submit_lua}: no such file")
            write_atomic(lua, self.job_submit_lua.read_text())
        elif lua.exists():
            lua.unlink()
        write_atomic(self.slurm_conf, self._render_slurm_conf())
        if self.accounting:
            (d / "db").mkdir(exist_ok=True)
            (d / "db").chmod(0o700)
            password = d / "db" / "password"          # kept: the data dir outlives a `down`
            if not password.exists():
                write_atomic(password, secrets.token_hex(16), mode=0o600)
            write_atomic(self.slurmdbd_conf, render_slurmdbd_conf(
                d, self.dbd_port, self.db_port, password.read_text().strip()), mode=0o600)
        write_atomic(d / "gres.conf", render_gres_conf(d, self.types, self.shards, self.shard_flags,
                                                       self.sockets, self.bind_shards))
        cgroup = render_cgroup_conf(version)
        if cgroup:
            write_atomic(d / "cgroup.conf", cgroup)
        elif (d / "cgroup.conf").exists():
            (d / "cgroup.conf").unlink()

    # state of the processes we started
    def _load_state(self) -> dict:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {}

    def _render_slurm_conf(self) -> str:
        return render_slurm_conf(self.directory, self.types, self.ctld_port, self.slurmd_port,
                                 bool(self.job_submit_lua), self.requeue_exit_hold,
                                 self.dbd_port if self.accounting else None, mixed=self.mixed,
                                 shards=self.shards, select_parameters=self.select_parameters,
                                 sockets=self.sockets, memory=self.memory)

    def _record(self, name: str, pid: int):
        state = self._load_state()
        state.setdefault("directory", str(self.directory))
        ports = {"slurmctld": self.ctld_port, "slurmd": self.slurmd_port}
        if self.accounting:
            ports.update(slurmdbd=self.dbd_port, mariadb=self.db_port)
        state.setdefault("ports", ports)
        st = proc_stat(pid)
        state.setdefault("daemons", {})[name] = {"pid": pid, "start": st[2] if st else None}
        write_atomic(self.state_file, json.dumps(state, indent=1) + "\n")

    def daemons(self) -> dict[str, dict]:
        """Recorded daemons: name -> {'pid', 'running'}."""
        return {name: {"pid": rec["pid"], "running": alive(rec["pid"], rec.get("start"))}
                for name, rec in self._load_state().get("daemons", {}).items()}

    # up
    def up(self, timeout: float = 60) -> DevCluster:
        """Start munged, slurmctld and one slurmd per node; wait until every node is idle.
        When this directory's cluster already runs with the same config, just check it."""
        tools, version = check_machine()
        if self.accounting:
            tools.update(check_accounting())
        self.version = version
        running = self.daemons()
        if running and all(d["running"] for d in running.values()):
            ports = self._load_state().get("ports", {})
            self.dbd_port, self.db_port = ports.get("slurmdbd"), ports.get("mariadb")
            conf = self.slurm_conf.read_text() if self.slurm_conf.exists() else ""
            if conf != self._render_slurm_conf():
                raise DevClusterError(f"a cluster with another configuration is running in "
                                      f"{self.directory}: stop it first (cluster down)")
            self._wait_ready(time.monotonic() + timeout)
            return self
        if running:
            self.down()                        # what is left of an earlier cluster
        ports = [self.ctld_port] + [self.slurmd_port + k for k in range(len(self.nodes))]
        busy = [p for p in ports if not port_free(p)]
        if busy:
            raise DevClusterError(f"port(s) {', '.join(map(str, busy))} in use: another cluster "
                                  "(`slurm-gavel cluster down`)? or choose other ports")
        if self.accounting:
            self.db_port = free_port(avoid=ports)
            self.dbd_port = free_port(avoid=ports + [self.db_port])
        self.write_config(version)
        try:
            self._start_munged(tools)
            deadline = time.monotonic() + timeout
            if self.accounting:
                # MariaDB creates its tables, slurmdbd its own: give them time of their own
                self._start_accounting(tools, deadline + 60)
                deadline = time.monotonic() + timeout
            self._spawn("slurmctld", [tools["slurmctld"], "-D", "-c", "-f", str(self.slurm_conf)])
            self._wait_ctld(deadline)
            for node in self.nodes:
                self._spawn(f"slurmd:{node}", [tools["slurmd"], "-D", "-f", str(self.slurm_conf),
                                               "-N", node])
            self._wait_ready(deadline)
        except BaseException:
            self.down()
            raise
        return self

    def restart_slurmctld(self, clean: bool = False, timeout: float = 60) -> None:
        """Stop slurmctld (by pid) and start it again; `clean`: with -c, forgetting every
        job (slurmd then kills the jobs it runs), as an admin's cold start does."""
        tools, _ = check_machine()
        rec = self._load_state().get("daemons", {}).get("slurmctld")
        if rec:
            self._stop({rec["pid"]: rec.get("start")}, 10.0)
        self._procs.pop("slurmctld", None)
        self._spawn("slurmctld", [tools["slurmctld"], "-D", *(["-c"] if clean else []),
                                  "-f", str(self.slurm_conf)])
        deadline = time.monotonic() + timeout
        self._wait_ctld(deadline)
        self._wait_ready(deadline)

    # -- failures, for tests -----------------------------------------------------------
    def kill_node(self, node: str) -> None:
        """SIGKILL one node's slurmd (a crashed slurmd: its jobs' slurmstepds go on running)."""
        rec = self.daemons().get(f"slurmd:{node}")
        if rec is None:
            raise DevClusterError(f"no slurmd of node {node!r} recorded")
        if rec["running"]:
            os.kill(rec["pid"], signal.SIGKILL)
            proc = self._procs.get(f"slurmd:{node}")
            if proc is not None:
                proc.wait(timeout=10)

    def start_node(self, node: str) -> None:
        """Start one node's slurmd again (after `kill_node`)."""
        if node not in self.nodes:
            raise DevClusterError(f"no node {node!r} in this cluster")
        tools, _ = check_machine()
        self._spawn(f"slurmd:{node}", [tools["slurmd"], "-D", "-f", str(self.slurm_conf), "-N", node])

    def _spawn(self, name: str, argv: list[str]):
        env = dict(self.env, **{MARK: str(self.directory)})
        with open(self.directory / "log" / f"{name.replace(':', '-')}.out", "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env=env, cwd=self.directory,
                                    start_new_session=True)   # a ^C in the shell spares it
        self._procs[name] = proc
        self._record(name, proc.pid)

    def _start_munged(self, tools):
        m = self.directory / "munge"
        key = m / "munge.key"
        if not key.exists():
            if tools.get("mungekey"):
                self.run([tools["mungekey"], "--create", "--keyfile", key])
            else:                              # munge < 0.5.14 has no mungekey
                fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
                with os.fdopen(fd, "wb") as f:
                    f.write(os.urandom(1024))
        self._spawn("munged", [tools["munged"], "--foreground", "--force",
                               "--socket", str(self.munge_socket), "--key-file", str(key),
                               "--pid-file", str(m / "munged.pid"),
                               "--log-file", str(self.directory / "log" / "munged.log"),
                               # --foreground logs to stderr instead: log/munged.out
                               "--seed-file", str(m / "munged.seed")])
        deadline = time.monotonic() + 10
        while not self.munge_socket.exists():
            self._check_alive("munged", self.directory / "log" / "munged.out")
            if time.monotonic() > deadline:
                raise DevClusterError(f"munged did not create {self.munge_socket} within 10 s")
            time.sleep(0.05)

    def _start_accounting(self, tools, deadline: float):
        """MariaDB (own data dir, socket, 127.0.0.1 port), then slurmdbd, then the cluster,
        its accounts and root's associations registered with sacctmgr."""
        db = self.directory / "db"
        data = db / "data"
        if not (data / "mysql").is_dir():
            with open(self.directory / "log" / "mariadb-install.log", "ab") as out:
                self.run([tools["install_db"], "--no-defaults", f"--datadir={data}", "--user=root",
                          "--auth-root-authentication-method=socket", "--skip-test-db"],
                         timeout=max(30.0, deadline - time.monotonic()), stdout=out,
                         stderr=subprocess.STDOUT)
        self._spawn("mariadb", [tools["mariadbd"], "--no-defaults", f"--datadir={data}",
                                f"--socket={self.db_socket}", f"--pid-file={db}/mariadb.pid",
                                f"--port={self.db_port}", "--bind-address=127.0.0.1",
                                "--skip-name-resolve", "--user=root",
                                f"--log-error={self.directory}/log/mariadb.log",
                                "--innodb-buffer-pool-size=64M",
                                "--innodb-lock-wait-timeout=900"])   # slurmdbd's advice
        password = (db / "password").read_text().strip()
        sql = (f"CREATE OR REPLACE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}'; "
               "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';")
        client = [tools["mariadb"], "--no-defaults", f"--socket={self.db_socket}", "-u", "root"]
        self._wait_for("mariadb", lambda: self.run(client + ["-e", "SELECT 1"], check=False,
                                                   timeout=15).returncode == 0, deadline)
        self.run(client + ["-e", sql])
        self._spawn("slurmdbd", [tools["slurmdbd"], "-D"])
        self._wait_for("slurmdbd", lambda: self.run(
            ["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"], check=False,
            timeout=15).returncode == 0, deadline)
        known = self.run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"]).stdout.split()
        if CLUSTER_NAME not in known:
            self.run(["sacctmgr", "-i", "add", "cluster", CLUSTER_NAME])
        for account in ACCOUNTS:
            self.add_user("root", account)

    def add_user(self, user: str, account: str):
        """Give `user` an association with `account` (created under root when missing) on
        this cluster; nothing when it exists (accounting clusters only)."""
        if not re.fullmatch(r"[a-z_][a-z0-9_-]*", user) or not re.fullmatch(r"[a-z][a-z0-9_-]*",
                                                                             account):
            raise InputError("user", f"{user!r} / {account!r}: not a user and account name")
        have = self.run(["sacctmgr", "-n", "-P", "show", "assoc", f"cluster={CLUSTER_NAME}",
                         "format=account,user"]).stdout.split()
        if f"{account}|" not in have:
            self.run(["sacctmgr", "-i", "add", "account", account, f"cluster={CLUSTER_NAME}",
                      f"description={account}", "organization=gavel"])
        if f"{account}|{user}" not in have:
            self.run(["sacctmgr", "-i", "add", "user", user, f"account={account}",
                      f"cluster={CLUSTER_NAME}"])

    def _wait_for(self, name: str, ready, deadline: float):
        log = self.directory / "log" / f"{name}.log"
        while not ready():
            self._check_alive(name, log)
            if time.monotonic() > deadline:
                raise DevClusterError(f"{name} did not answer in time: {tail(log)}")
            time.sleep(0.3)

    def _check_alive(self, name: str, log: Path):
        proc = self._procs.get(name)
        if proc is not None and proc.poll() is not None:
            raise DevClusterError(f"{name} exited with code {proc.returncode}: {tail(log)}")

    def _wait_ctld(self, deadline: float):
        log = self.directory / "log" / "slurmctld.log"
        while True:
            self._check_alive("slurmctld", log)
            if self.run(["scontrol", "ping"], check=False, timeout=15).returncode == 0:
                return
            if time.monotonic() > deadline:
                raise DevClusterError("slurmctld did not answer `scontrol ping` in time: "
                                      f"{tail(log)}")
            time.sleep(0.2)

    def _wait_ready(self, deadline: float):
        """Wait until every node is up: idle (a fresh cluster has no jobs) or running jobs.
        Resume nodes that registered down or drained; fail on an invalid registration."""
        resumed: dict[str, float] = {}
        while True:
            for node in self.nodes:
                self._check_alive(f"slurmd:{node}", self.directory / "log" / f"slurmd-{node}.log")
            nodes = {n["name"]: n for n in self.nodes_info()}
            waiting = []
            for name in self.nodes:
                info = nodes.get(name, {"state": "MISSING", "flags": []})
                state = {info["state"]} | set(info["flags"])
                if state & {"INVAL", "INVALID", "INVALID_REG"}:
                    raise DevClusterError(
                        f"node {name} registered with an invalid configuration "
                        f"({info.get('reason') or 'no reason'}): see "
                        f"{self.directory}/log/slurmd-{name}.log and slurmctld.log")
                if (info["state"] in ("IDLE", "MIXED", "ALLOCATED")
                        and not state & {"DRAIN", "NOT_RESPONDING"}):
                    continue
                waiting.append(f"{name} {'+'.join(sorted(state))}")
                down = state & {"DOWN", "DRAIN", "FAIL"}
                if (down and "NOT_RESPONDING" not in state
                        and time.monotonic() - resumed.get(name, 0) > 2):
                    self.run(["scontrol", "update", f"nodename={name}", "state=resume"],
                             check=False)
                    resumed[name] = time.monotonic()
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise DevClusterError(f"nodes not up in time: {', '.join(waiting)} "
                                      f"(logs in {self.directory}/log)")
            time.sleep(0.3)

    # down
    def down(self, grace: float = 5.0) -> list[int]:
        """Stop what `up()` started (SIGTERM, SIGKILL after `grace`), the slurmstepds of
        its jobs and their children; returns the pids signalled.  Idempotent."""
        recorded = {name: rec for name, rec in self._load_state().get("daemons", {}).items()
                    if alive(rec["pid"], rec.get("start"))}
        # after slurmctld, the slurmds and their jobs: slurmdbd, MariaDB, then munged
        last = ("slurmdbd", "mariadb", "munged")
        daemons = {rec["pid"] for name, rec in recorded.items() if name not in last}
        slurmds = {rec["pid"] for name, rec in recorded.items() if name.startswith("slurmd:")}
        parents = processes()
        # A slurmstepd is forked by our slurmd, then reparented to init: find it by the
        # mark it inherits from slurmd's environment (22.05), by its working directory
        # or open log file (24.11), or as a child, if not reparented.
        mark = f"{MARK}={self.directory}".encode()
        conf_mark = f"SLURM_CONF={self.slurm_conf}".encode()
        steps = {pid for pid, ppid in parents.items() if ppid in slurmds}
        steps |= {pid for pid in parents if pid not in daemons
                  and (has_mark(pid, mark) or is_our_stepd(pid, self.directory))}
        steps -= {rec["pid"] for rec in recorded.values()}
        doomed = {rec["pid"]: rec.get("start")
                  for name, rec in recorded.items() if name not in last}
        for pid in steps | descendants(daemons | steps, parents):   # jobs, slurmscriptd
            st = proc_stat(pid)
            if st:
                doomed[pid] = st[2]
        # slurmstepd ignores SIGTERM: wait for everything else only, then SIGKILL what is left
        signalled = self._stop(doomed, grace, patient=set(doomed) - steps)
        # A job step may have forked while we were stopping the rest (a busy machine):
        # look again for processes carrying our mark until none is left.
        for _ in range(3):
            parents = processes()
            # a job's own processes carry our SLURM_CONF (slurmd puts it in the job's
            # environment): one started as its slurmstepd was killed is an orphan now
            late = {pid for pid in parents
                    if has_mark(pid, mark) or is_our_job(pid, conf_mark)
                    or is_our_stepd(pid, self.directory)} - ancestry()
            late |= descendants(late, parents)
            late -= {rec["pid"] for rec in recorded.values()}   # stopped in order below
            late = {pid: st[2] for pid in late if (st := proc_stat(pid))}
            if not late:
                break
            signalled += self._stop(late, 0.0)
        # slurmdbd before its database; munged last: everyone talks through it.  MariaDB
        # may take a while to shut InnoDB down cleanly.
        for name, wait in (("slurmdbd", grace), ("mariadb", 4 * grace), ("munged", grace)):
            if name in recorded:
                rec = recorded[name]
                signalled += self._stop({rec["pid"]: rec.get("start")}, wait)
        for proc in self._procs.values():     # reap our own children
            try:
                proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
        self._procs.clear()
        if self.state_file.exists():
            self.state_file.unlink()
        return signalled

    def _stop(self, pids: Mapping[int, int | None], grace: float, patient=None) -> list[int]:
        """SIGTERM `pids`; SIGKILL those left once the `patient` ones (default: all) have
        exited or after `grace` seconds.  Each pid is checked against its start time."""
        live = {pid: start for pid, start in pids.items() if alive(pid, start)}
        for sig, wait, waited in ((signal.SIGTERM, grace, patient), (signal.SIGKILL, 5.0, None)):
            for pid, start in live.items():
                if alive(pid, start):
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
            watch = {p: s for p, s in live.items() if waited is None or p in waited}
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and any(alive(p, s) for p, s in watch.items()):
                self._reap()
                time.sleep(0.05)
        left = [pid for pid, start in live.items() if alive(pid, start)]
        if left:
            raise DevClusterError(f"processes {left} survived SIGKILL")
        return sorted(live)

    def _reap(self):
        for proc in self._procs.values():
            proc.poll()

    # status
    def nodes_info(self) -> list[dict]:
        """Every node: name, state ('IDLE', 'MIXED', ...), flags ('DRAIN', ...), gres,
        partitions, reason.  From `scontrol show nodes --json` (23.02+, 24.11), else
        `sinfo --json` (22.05: 'nodes' at the top; 24.11 groups them), else `sinfo` text."""
        for args in (["scontrol", "show", "nodes", "--json"], ["sinfo", "--json"]):
            if args[0] in self._no_json:
                continue
            result = self.run(args, check=False)
            try:
                nodes = json.loads(result.stdout).get("nodes") if result.returncode == 0 else None
            except ValueError:
                nodes = None
            if isinstance(nodes, list) and all(isinstance(n, dict) and "name" in n for n in nodes):
                return [_node_from_json(n) for n in nodes]
            self._no_json.add(args[0])
        result = self.run(["sinfo", "-h", "-N", "-o", "%N|%T|%G|%P|%E"])
        nodes: dict[str, dict] = {}
        for line in result.stdout.splitlines():
            name, state, gres, part, reason = (line.split("|", 4) + [""] * 5)[:5]
            words = state.upper().rstrip("*~#!%$@^-").split("+")
            node = nodes.setdefault(name, {"name": name, "state": words[0], "flags": words[1:],
                                           "gres": gres, "partitions": [],
                                           "reason": "" if reason == "none" else reason})
            node["partitions"].append(part.rstrip("*"))
        return list(nodes.values())

    def status(self) -> dict:
        """{'directory', 'slurm_conf', 'running', 'daemons': {name: {pid, running}},
        'nodes': [...]} (nodes empty when slurmctld is not running)."""
        daemons = self.daemons()
        out = {"directory": str(self.directory), "slurm_conf": str(self.slurm_conf),
               "running": bool(daemons) and all(d["running"] for d in daemons.values()),
               "ports": self._load_state().get("ports", {}), "daemons": daemons, "nodes": []}
        if daemons.get("slurmctld", {}).get("running"):
            try:
                out["nodes"] = self.nodes_info()
            except DevClusterError as err:
                out["error"] = str(err)
        return out


def _node_from_json(n: dict) -> dict:
    """One node of `scontrol show nodes --json`: 22.05 gives 'state': 'idle' and
    'state_flags': [...]; 24.11 gives 'state': ['IDLE', 'DRAIN', ...]."""
    state = n.get("state")
    words = [str(s).upper() for s in (state if isinstance(state, list) else [state or "UNKNOWN"])]
    words += [str(s).upper() for s in n.get("state_flags", [])]
    base = {"IDLE", "ALLOCATED", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN"}
    main = next((w for w in words if w in base), words[0])
    return {"name": n.get("name", ""), "state": main, "flags": [w for w in words if w != main],
            "gres": n.get("gres", ""), "partitions": list(n.get("partitions", [])),
            "reason": n.get("reason", "") if isinstance(n.get("reason"), str) else ""}


def default_job_submit_lua() -> Path | None:
    """The repository's slurm_conf/job_submit.lua, when it exists."""
    path = Path(__file__).resolve().parents[2] / "slurm_conf" / "job_submit.lua"
    return path if path.is_file() else None


# -- `slurm-gavel cluster up|down|status` -------------------------------------------
def default_directory() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "slurm-gavel-cluster"
    return Path(f"/tmp/slurm-gavel-cluster-{os.getuid()}")

"""`slurm-gavel run -- COMMAND`: run a training launcher (torchrun, srun) so that slurm-gavel can preempt it.

slurm-gavel preempts a job by a signal to its batch process (``scancel --batch
--signal=USR2``) and expects every rank to checkpoint and the job to exit 85. A
launcher between the batch process and the ranks breaks that when it is the
batch process's ``exec``: torchrun starts each worker in a session of its own
and has no handler for USR2, so the signal ends torchrun and leaves the ranks
orphaned (reparented to init) and training, on a node the job no longer holds.
When torchrun does see its workers exit 85, it reports a failure (exit 1).

This module owns the process tree of such a command. ``python -m
slurm_gavel.job.launcher -- torchrun --nproc-per-node 2 train.py`` (later
``slurm-gavel run -- ...``) runs as two processes:

- the *outer* process (the pid Slurm and the daemon signal) catches the
  preemption signal (USR2 unless ``--signal`` says otherwise), SIGTERM and
  SIGINT (handlers that only set a flag), tells the supervisor through a pipe
  and exits with the supervisor's exit code;
- the *supervisor*, its child, is a child subreaper (PR_SET_CHILD_SUBREAPER:
  every process of the tree that loses its parent is reparented to it, not to
  init) and starts COMMAND (an argument list, no shell) in a new session, with
  PR_SET_PDEATHSIG=SIGTERM. On a forwarded signal it sends that signal to every
  process below it (found in /proc, signalled through a pidfd): torchrun and
  each rank, or srun (which passes it to its tasks). A rank that sees the
  preemption signal checkpoints and exits 85 (GavelIterator); torchrun, killed
  by USR2, can neither reap the ranks nor SIGTERM one that is still saving: they
  are reparented to the supervisor, which waits for them (``--checkpoint-timeout``)
  and reads their exit codes.

Exit code (the protocol with Slurm's ``RequeueExitHold=85``): 85 when the
command exited 85 (srun, a plain ``python train.py``), or when, after the
preemption signal, every process that was a child of the command when the
signal came (torchrun's ranks) exited 85; the command's own code otherwise (a
death by signal N as 128+N); 0 stays 0. A rank that crashes stays a failure.

Whatever ends the command, the supervisor ends the rest of the tree before it
exits: SIGTERM to every process left, SIGKILL after ``--grace`` seconds. When the
outer process dies (SIGKILL by Slurm at the job's end, or by hand) the supervisor
sees its pipe close and does the same; when the supervisor dies, the outer
process (a subreaper too) inherits the tree and ends it. (With proctrack/cgroup
Slurm ends every process of the job anyway; with proctrack/linuxproc or
proctrack/pgid, orphans that escaped the tree would not be.)

Messages go to stderr, prefixed ``slurm-gavel run:``, with anything the user
chose (the command's name) made printable. Linux only (prctl, /proc).
Standard library only.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

from .iterator import REQUEUE_EXIT_CODE, signal_number

PREFIX = "slurm-gavel run:"
DEFAULT_GRACE = 30.0
DEFAULT_CHECKPOINT_TIMEOUT = 600.0
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36
_TICK = 0.5                  # at most this long between looks at the tree


def _printable(text) -> str:
    """`text` with anything but printable ASCII escaped: no raw bytes of the user's on a terminal."""
    text = str(text)
    if text.isascii() and text.isprintable():
        return text
    return text.encode("unicode_escape", "backslashreplace").decode("ascii")


def _log(message: str) -> None:
    print(f"{PREFIX} {message}", file=sys.stderr, flush=True)


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def exit_code(status: int) -> int:
    """A wait status as a shell reports it: the exit code, or 128+N for a death by signal N."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


# -- the process tree --------------------------------------------------------------
def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of `pid`, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    return (int(fields[1]), fields[0]) if len(fields) > 1 else None


def _table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state letter) of every process in /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            table[int(entry)] = stat
    return table


def descendants(root: int, table: Mapping[int, tuple[int, str]] | None = None) -> list[int]:
    """Every process below `root` (children first, then theirs), zombies included."""
    table = _table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (ppid, _state) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, frontier = [], [root]
    while frontier:
        level = [c for p in frontier for c in sorted(children.get(p, ()))]
        found += level
        frontier = level
    return found


def _alive(root: int) -> list[int]:
    """The live (not zombie) processes below `root`."""
    table = _table()
    return [p for p in descendants(root, table) if table[p][1] not in "ZX"]


def _below(pid: int, root: int) -> bool:
    """`pid` is a live process below `root` now."""
    seen, current = 0, pid
    while seen < 4096:
        stat = _stat(current)
        if stat is None or (current == pid and stat[1] in "ZX"):
            return False
        if stat[0] == root:
            return True
        if stat[0] <= 1:
            return False
        current, seen = stat[0], seen + 1
    return False


def _send(pid: int, signum: int, root: int) -> bool:
    """Signal `pid` if it is still a live process below `root` (through a pidfd, so that a
    pid reused since it was looked up is never signalled)."""
    fd = None
    try:
        if hasattr(os, "pidfd_open"):
            fd = os.pidfd_open(pid)
        if not _below(pid, root):
            return False
        if fd is None:
            os.kill(pid, signum)
        else:
            signal.pidfd_send_signal(fd, signum)
        return True
    except (ProcessLookupError, PermissionError):
        return False
    finally:
        if fd is not None:
            os.close(fd)


def signal_tree(root: int, signum: int) -> int:
    """Send `signum` to every live process below `root`; returns how many got it."""
    return sum(_send(pid, signum, root) for pid in _alive(root))


def end_tree(root: int, grace: float, wait, why: str) -> None:
    """SIGTERM to every process below `root`, SIGKILL to those left after `grace` seconds.

    `wait(seconds)` waits at most that long and reaps what ended (the caller's children)."""
    left = _alive(root)
    if not left:
        return
    _log(f"{why}: SIGTERM to {len(left)} process(es) left, SIGKILL after {grace:g} s")
    signal_tree(root, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while _alive(root) and time.monotonic() < deadline:
        wait(0.1)
    if _alive(root):
        signal_tree(root, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while descendants(root) and time.monotonic() < deadline:
        wait(0.05)


# -- the outcome --------------------------------------------------------------------
def outcome(command_status: int, preempted: bool, rank_statuses: Mapping[int, int | None],
            requeue_code: int = REQUEUE_EXIT_CODE) -> int:
    """The launcher's exit code.

    `command_status`: the command's wait status; `preempted`: the preemption signal
    was forwarded; `rank_statuses`: the wait status (None: not seen) of each process
    that was a child of the command when it was.
    """
    code = exit_code(command_status)
    if code in (0, requeue_code) or not preempted:
        return code
    statuses = list(rank_statuses.values())
    if statuses and all(s is not None and exit_code(s) == requeue_code for s in statuses):
        return requeue_code
    failed = [exit_code(s) for s in statuses if s is not None and exit_code(s) != requeue_code]
    return failed[0] if failed else code


# -- the supervisor -------------------------------------------------------------------
def _child_setup() -> None:
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _wakeup_pipe() -> int:
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    return r


def _drain(fd: int) -> bytes:
    data = b""
    while True:
        try:
            chunk = os.read(fd, 512)
        except BlockingIOError:
            return data
        if not chunk:
            return data + b"\0"          # end of file: marked with a zero byte
        data += chunk


class _Supervisor:
    def __init__(self, command: Sequence[str], preempt: int, grace: float,
                 checkpoint_timeout: float, requeue_code: int, orders: int):
        self.command, self.preempt = list(command), preempt
        self.grace, self.checkpoint_timeout = grace, checkpoint_timeout
        self.requeue_code, self.orders = requeue_code, orders
        self.me = os.getpid()
        self.child: subprocess.Popen | None = None
        self.child_status: int | None = None
        self.preempted = False
        self.ranks: dict[int, int | None] = {}
        self.parent_gone = False

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.child is not None and pid == self.child.pid:
                self.child_status = status
                self.child.returncode = os.waitstatus_to_exitcode(status)
            elif pid in self.ranks:
                self.ranks[pid] = status

    def _forward(self, signum: int) -> None:
        if signum == self.preempt and self.child_status is None:
            # torchrun's ranks: the processes whose exit codes say "checkpointed"
            self.preempted = True
            for pid, (ppid, state) in _table().items():
                if ppid == self.child.pid and state not in "ZX":
                    self.ranks.setdefault(pid, None)
        count = signal_tree(self.me, signum)
        _log(f"{signal.Signals(signum).name}: sent to {count} process(es) of the command")

    def _orders(self, timeout: float) -> None:
        """Wait for a signal to forward, a child event or the outer process's end."""
        watched = [self.wakeup] + ([self.orders] if self.orders is not None else [])
        try:
            ready, _, _ = select.select(watched, [], [], timeout)
        except InterruptedError:
            ready = []
        if self.wakeup in ready:
            _drain(self.wakeup)
        if self.orders is not None and self.orders in ready:
            for byte in _drain(self.orders):
                if byte == 0:            # end of file: the outer process is gone
                    _log("the launcher's outer process is gone: ending the command")
                    self.parent_gone = True
                    os.close(self.orders)
                    self.orders = None
                    return
                self._forward(byte)

    def _wait(self, seconds: float) -> None:
        self._orders(seconds)
        self._reap()

    def run(self) -> int:
        for signum in {self.preempt, signal.SIGTERM, signal.SIGINT}:
            signal.signal(signum, lambda *_: None)   # told by the outer process instead
        signal.signal(signal.SIGCHLD, lambda *_: None)      # wakes the select
        self.wakeup = _wakeup_pipe()
        if not _prctl(_PR_SET_CHILD_SUBREAPER, 1):
            _log("cannot become a child subreaper (not Linux?): orphaned ranks may escape")
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        try:
            self.child = subprocess.Popen(self.command, start_new_session=True,
                                          preexec_fn=_child_setup)
        except OSError as e:
            _log(f"cannot start {_printable(self.command[0])}: {_printable(e.strerror or e)}")
            return 127 if isinstance(e, FileNotFoundError) else 126
        while self.child_status is None and not self.parent_gone:
            self._wait(_TICK)
        if self.parent_gone:
            end_tree(self.me, self.grace, self._wait, "ending")
            return 128 + signal.SIGKILL
        if self.preempted:
            deadline = time.monotonic() + self.checkpoint_timeout
            while _alive(self.me) and time.monotonic() < deadline and not self.parent_gone:
                self._wait(0.1)
        end_tree(self.me, self.grace, self._wait, "the command has ended")
        self._reap()
        code = outcome(self.child_status, self.preempted, self.ranks, self.requeue_code)
        if self.preempted and code == self.requeue_code:
            if exit_code(self.child_status) == self.requeue_code:
                who = "the command"
            else:
                who = f"its {len(self.ranks)} rank(s)"
            _log(f"preempted: {who} checkpointed and exited {self.requeue_code}: "
                 f"exiting {self.requeue_code} (requeue held)")
        elif code == self.requeue_code:
            # it checkpointed on its own (e.g. a signal sent to it directly, not through us)
            _log(f"{_printable(os.path.basename(self.command[0]))} exited {code}: exiting "
                 f"{code} (requeue held)")
        elif code:
            _log(f"{_printable(os.path.basename(self.command[0]))} failed: exiting {code}")
        return code


# -- the outer process ----------------------------------------------------------------
def _supervise(args, orders: int) -> None:
    code = 1
    try:
        code = _Supervisor(args.command, signal_number(args.signal), args.grace,
                           args.checkpoint_timeout, args.requeue_exit_code, orders).run()
    except BaseException as e:  # noqa: BLE001 -- the outer process must get an exit code
        _log(f"supervisor error: {_printable(type(e).__name__)}: {_printable(e)}")
    finally:
        sys.stderr.flush()
        os._exit(code)


def run(args: argparse.Namespace) -> int:
    """Run `args.command` as `build_parser` describes; returns the exit code."""
    command = list(args.command or [])
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        _log("no command given (usage: slurm-gavel run -- torchrun ... | srun ...)")
        return 2
    args.command = command
    pending: list[int] = []

    def remember(signum, _frame):
        pending.append(signum)      # the loop below passes it on
    try:
        preempt = signal_number(args.signal)
        forward = {signal.Signals(preempt), signal.SIGTERM, signal.SIGINT}
        for signum in forward:
            signal.signal(signum, remember)
    except (ValueError, OSError):
        _log(f"cannot catch signal {_printable(args.signal)}")
        return 2
    signal.signal(signal.SIGCHLD, lambda *_: None)
    wakeup = _wakeup_pipe()
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)      # inherits the tree if the supervisor dies
    orders_r, orders_w = os.pipe()
    os.set_blocking(orders_r, False)
    # Blocked across the fork: a signal that comes meanwhile waits for a handler.
    signal.pthread_sigmask(signal.SIG_BLOCK, forward | {signal.SIGCHLD})
    sys.stdout.flush()
    sys.stderr.flush()
    supervisor = os.fork()
    if supervisor == 0:
        os.close(orders_w)
        os.close(wakeup)
        _supervise(args, orders_r)
    os.close(orders_r)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, forward | {signal.SIGCHLD})
    status = None
    while status is None:
        try:
            select.select([wakeup], [], [], _TICK)
        except InterruptedError:
            pass
        _drain(wakeup)
        while pending:
            signum = pending.pop(0)
            try:
                os.write(orders_w, bytes([signum]))
            except OSError:
                pass
        while True:
            try:
                pid, st = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid == 0:
                break
            if pid == supervisor:
                status = st
    os.close(orders_w)
    code = exit_code(status)
    if os.WIFSIGNALED(status):
        # Said whether or not anything is left: the command's own processes may have
        # ended already (PR_SET_PDEATHSIG), and the log is how a user learns why.
        _log(f"the supervisor ended ({code}): killed by signal {os.WTERMSIG(status)}")

    def reap(seconds):
        time.sleep(seconds)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
    end_tree(os.getpid(), args.grace, reap, f"the supervisor ended ({code})")
    return code


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The arguments of `slurm-gavel run`, added to `parser` (e.g. a subcommand's) or a new one."""
    if parser is None:
        parser = argparse.ArgumentParser(
            prog="python -m slurm_gavel.job.launcher",
            description="Run a training command (torchrun, srun, python) so that slurm-gavel "
                        "can preempt it: forwards the preemption signal to every rank, exits 85 "
                        "when they all checkpointed, and leaves no rank behind.")
    parser.add_argument("--signal", default="USR2",
                        help="the preemption signal (default USR2, the daemon's); SIGTERM and "
                             "SIGINT are forwarded too")
    parser.add_argument("--grace", type=float, default=DEFAULT_GRACE,
                        help="seconds between SIGTERM and SIGKILL to what is left when the "
                             f"command has ended (default {DEFAULT_GRACE:g})")
    parser.add_argument("--checkpoint-timeout", type=float, default=DEFAULT_CHECKPOINT_TIMEOUT,
                        help="after the preemption signal, seconds the ranks may take to "
                             "checkpoint and exit once the command itself has ended "
                             f"(default {DEFAULT_CHECKPOINT_TIMEOUT:g})")
    parser.add_argument("--requeue-exit-code", type=int, default=REQUEUE_EXIT_CODE,
                        help=f"the exit code that means 'checkpointed' (default {REQUEUE_EXIT_CODE})")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the command after --, e.g. -- torchrun --nproc-per-node 4 train.py")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    return run(args)


if __name__ == "__main__":
    sys.exit(main())

"""Gavel for Hugging Face Accelerate loops: a preemptible batch iterator and a launcher wrapper.

The lines a plain Accelerate script adds (docs/accelerate.md)::

    +from slurm_gavel.job.iterator import catch_signal_early
    +catch_signal_early()                 # first thing, on every rank
    +from slurm_gavel.job.accelerate import GavelAccelerateIterator
    -accelerator = Accelerator()
    +accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True))
     model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    -for epoch in range(epochs):
    -    for batch in loader:
    +for batch in GavelAccelerateIterator(accelerator, loader, total_steps=steps):
             ...

and the sbatch script runs the launcher through this module's wrapper::

    exec python -m slurm_gavel.job.accelerate launch [accelerate launch options] train.py ...

`GavelAccelerateIterator` (every rank, under Slurm):

- Construction installs the preemption signal's handler (only sets a flag; a
  signal caught by `catch_signal_early` counts), finds the newest checkpoint
  ``step-<N>`` in the checkpoint directory (``$GAVEL_CHECKPOINT_DIR/<jobid>``,
  else ``$SLURM_SUBMIT_DIR/.gavel/<jobid>.ckpt``; rank 0 looks and broadcasts N)
  and restores it with ``accelerator.load_state`` (models, optimizers, LR
  schedulers, GradScaler, objects registered with
  ``accelerator.register_for_checkpointing``, and every rank's RNG states).
- It yields ``total_steps`` batches in all, counted across restarts, epoch after
  epoch, calling ``set_epoch(epoch)`` on the loader before each. On resume it
  continues the current epoch with ``accelerator.skip_first_batches`` (the
  sampler skips; no batch is loaded). The data order must be a function of the
  epoch: a shuffled loader needs Accelerate's seedable sampler
  (``DataLoaderConfiguration(use_seedable_sampler=True)``), else construction
  refuses. Starting an epoch's iterator draws from torch's global RNG (a base
  seed for loader workers) and fetches two batches: the iterator restores the
  global RNG around that, in every epoch, so that dropout does not depend on
  where a run resumed. (So a dataset must not draw random augmentations from
  torch's global RNG in the training process: seed them from the epoch and the
  sample index.)
- At every step boundary the flag is all-reduced (MAX) when more than one process
  runs, so every rank stops after the same step; with gradient accumulation only
  at the end of an accumulation (``step % accelerator.gradient_accumulation_steps
  == 0``). Stopping: every rank calls ``accelerator.save_state`` into a temporary
  directory, rank 0 fsyncs and renames it to ``step-<N>`` (atomic) and removes
  older checkpoints, appends a ``checkpoint`` progress record, every rank writes
  ``$GAVEL_REQUEUE_FILE`` (set by the wrapper) and exits 85.
- Progress records (`slurm_gavel.job.progress`) from rank 0: start, progress,
  checkpoint, done. When all steps are done the checkpoints are removed
  (``keep_checkpoints=True`` keeps the last).

The wrapper (`launch`): ``accelerate launch`` runs the ranks as its children, and
``scancel --batch`` signals only the batch script's process, so:

- it runs ``accelerate launch ARGS`` with the preemption signal ignored (so the
  launcher, and a rank not yet past `catch_signal_early`, are not killed by it);
- on the signal it forwards it to each rank (the launcher's child processes) as
  soon as that rank catches it (its handler is installed), never to the
  launcher or to data-loader workers;
- it is the "child subreaper" of everything it starts (Linux), so when the
  launcher ends, processes left behind (a rank whose launcher died, a daemon a
  rank started) are still its children: it waits for them 5 s, then kills
  them (TERM, then KILL): no rank outlives the job;
- on TERM, INT or HUP it terminates the launcher and the ranks (exit 128 + N);
- it exits 85 when a rank saved a checkpoint and exited 85 (the launcher itself
  ends with 1 when a child fails), else with the launcher's code.

Without Slurm: no handler, no progress; it resumes from ``checkpoint_dir`` when
one is given. Accelerate is imported only when the iterator is used.
"""
from __future__ import annotations

import ctypes
import itertools
import os
import shutil
import signal as _signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import progress as _progress
from .iterator import (DEFAULT_PROGRESS_INTERVAL, PROGRESS_INTERVAL_ENV,
                       REQUEUE_EXIT_CODE, catch_signal_early, checkpoint_name, list_checkpoints,
                       newest_checkpoint, signal_number)

REQUEUE_FILE_ENV = "GAVEL_REQUEUE_FILE"
_PR_SET_CHILD_SUBREAPER = 36
_END = object()

__all__ = ["GavelAccelerateIterator", "REQUEUE_FILE_ENV", "catch_signal_early", "launch", "main"]


def _log(message: str) -> None:
    print(f"gavel: {message}", file=sys.stderr, flush=True)


def _early_signal(signum: int) -> bool:
    """Whether `catch_signal_early` caught `signum` already (and forget it)."""
    from . import iterator
    early = getattr(iterator, "_early", None)
    if isinstance(early, dict) and early.get("signum") == signum and early.get("received"):
        early["received"] = False
        return True
    return False


def _fsync_tree(path: Path) -> None:
    for root, _dirs, files in os.walk(path):
        for name in files:
            fd = os.open(Path(root) / name, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(root))


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:        # some filesystems refuse fsync on directories
        pass
    finally:
        os.close(fd)


class GavelAccelerateIterator:
    """Yield `total_steps` batches of an Accelerate-prepared `data_loader`, preemptible by slurm-gavel.

    See the module docstring. Attributes: ``step`` (batches done, across
    restarts; inside the loop the number of the current one, from 1),
    ``start_step``, ``epoch``, ``checkpoint_dir``, ``managed``.
    """

    def __init__(self, accelerator, data_loader, total_steps: int, checkpoint_dir=None,
                 signal_name="USR2", requeue_exit_code: int = REQUEUE_EXIT_CODE,
                 keep_checkpoints: bool | None = None, progress: bool = True,
                 progress_interval: float | None = None):
        if int(total_steps) != total_steps or total_steps < 0:
            raise ValueError(f"total_steps must be a whole number >= 0, got {total_steps!r}")
        import torch
        self.torch = torch
        self.accelerator, self.data_loader = accelerator, data_loader
        self.total_steps = int(total_steps)
        self.requeue_exit_code = int(requeue_exit_code)
        if keep_checkpoints is None:      # the job's environment decides: GAVEL_KEEP_CHECKPOINTS=1
            keep_checkpoints = os.environ.get("GAVEL_KEEP_CHECKPOINTS", "").strip().lower() in (
                "1", "true", "yes")
        self.keep_checkpoints = bool(keep_checkpoints)
        env = os.environ
        self.job_id = env.get("SLURM_JOB_ID") or None
        self.managed = self.job_id is not None
        self.rank, self.world_size = accelerator.process_index, accelerator.num_processes
        if checkpoint_dir is None and self.managed:
            checkpoint_dir = _progress.default_checkpoint_dir(self.job_id, env)
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self._check_data_order()

        self.progress_path = None
        if self.managed and progress and self.rank == 0:
            self.progress_path = _progress.progress_path(_progress.job_key(env) or self.job_id)
        if progress_interval is None:
            progress_interval = float(env.get(PROGRESS_INTERVAL_ENV) or DEFAULT_PROGRESS_INTERVAL)
        self.progress_interval = float(progress_interval)
        self._progress_failed = False

        self._flag = False
        self.signum = signal_number(signal_name)
        if self.managed:
            if threading.current_thread() is not threading.main_thread():
                raise RuntimeError("GavelAccelerateIterator must be created in the main thread "
                                   "under Slurm (Python delivers signals to the main thread only)")
            _signal.signal(self.signum, self._on_signal)
            if _early_signal(self.signum):
                self._flag = True

        self.epoch, self._inner, self._finished = 0, None, False
        self.load_seconds = self.save_seconds = None
        self.step = self.start_step = self._load()
        self._last_time, self._last_step = time.monotonic(), self.step
        self._record("start", steps_per_second=None,
                     **({"load_seconds": round(self.load_seconds, 6)}
                        if self.load_seconds is not None else {}))

    def _on_signal(self, signum, frame) -> None:
        self._flag = True            # nothing else: acted on at the next step boundary

    def request_stop(self) -> None:
        """Checkpoint and exit 85 at the next step boundary, as if the signal had come."""
        self._flag = True

    # -- data order ---------------------------------------------------------------
    def _check_data_order(self) -> None:
        from accelerate.data_loader import SeedableRandomSampler, get_sampler
        if getattr(self.data_loader, "use_stateful_dataloader", False):
            raise ValueError("GavelAccelerateIterator skips batches with skip_first_batches, which "
                             "does not work with a StatefulDataLoader: leave "
                             "use_stateful_dataloader off")
        sampler = get_sampler(self.data_loader)
        if isinstance(sampler, self.torch.utils.data.RandomSampler) and \
                not isinstance(sampler, SeedableRandomSampler):
            raise ValueError("the data loader shuffles with an order that is not a function of the "
                             "epoch, so a resumed run would see other batches: create the Accelerator "
                             "with dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True)")

    # -- checkpoints --------------------------------------------------------------
    def _load(self) -> int:
        step = -1
        if self.checkpoint_dir is not None and self.rank == 0:
            found = newest_checkpoint(self.checkpoint_dir)
            if found:
                step = found[0]
        step = self._broadcast(step)
        if step < 0:
            return 0
        path = self.checkpoint_dir / checkpoint_name(step) if self.checkpoint_dir else None
        if path is None or not path.exists():
            raise RuntimeError(f"rank {self.rank} cannot see checkpoint step {step} that rank 0 "
                               f"resumes from: the checkpoint directory must be shared by all ranks")
        t0 = time.perf_counter()
        self.accelerator.load_state(str(path))
        self.load_seconds = time.perf_counter() - t0
        if self.rank == 0 and self.managed:
            _log(f"resumed from {path} (step {step}) in {self.load_seconds:.2f} s")
        return step

    def _reduce_max(self, value: int) -> int:
        if self.world_size == 1:
            return int(value)
        dist = self.torch.distributed
        t = self.torch.tensor([int(value)], dtype=self.torch.int64, device=self.accelerator.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def _broadcast(self, value: int) -> int:
        if self.world_size == 1:
            return int(value)
        from accelerate.utils import broadcast
        t = self.torch.tensor([int(value)], device=self.accelerator.device)
        return int(broadcast(t, from_process=0).item())

    def _save(self) -> Path:
        directory = self.checkpoint_dir
        final = directory / checkpoint_name(self.step)
        tmp = directory / f".{checkpoint_name(self.step)}.tmp-accelerate"
        if self.rank == 0:
            directory.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        t0 = time.perf_counter()
        self.accelerator.save_state(str(tmp))
        self.accelerator.wait_for_everyone()          # every rank's RNG file is written
        if self.rank == 0:
            _fsync_tree(tmp)
            if final.exists():      # resumed and stopped again before a step: same state
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                os.replace(tmp, final)
            _fsync_dir(directory)
            for _step, old in list_checkpoints(directory)[:-1]:
                shutil.rmtree(old, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        self.save_seconds = time.perf_counter() - t0
        return final

    def _preempt(self):
        if self.checkpoint_dir is None:
            raise RuntimeError("stop requested but there is no checkpoint directory to save to")
        path = self._save()
        if self.rank == 0:
            self._measured("checkpoint", save_seconds=round(self.save_seconds, 6))
            name = _signal.Signals(self.signum).name
            _log(f"{name}: checkpoint of step {self.step} saved to {path} in "
                 f"{self.save_seconds:.2f} s; exiting {self.requeue_exit_code} (requeue held)")
        marker = os.environ.get(REQUEUE_FILE_ENV)
        if marker:
            Path(marker).write_text(f"{self.step}\n")
        sys.stdout.flush()
        sys.stderr.flush()
        sys.exit(self.requeue_exit_code)

    # -- progress -----------------------------------------------------------------
    def _record(self, event: str, **fields) -> None:
        if self.progress_path is None:
            return
        record = _progress.job_record(self.job_id, event, self.step, self.total_steps, self.world_size,
                                      **fields)
        try:
            _progress.write_record(self.progress_path, record)
        except OSError as e:
            if not self._progress_failed:
                _log(f"cannot write progress to {self.progress_path}: {e} (training goes on)")
            self._progress_failed = True

    def _measured(self, event: str, **fields) -> None:
        now = time.monotonic()
        elapsed, steps = now - self._last_time, self.step - self._last_step
        rate = round(steps / elapsed, 6) if elapsed > 0 and steps > 0 else None
        self._record(event, steps_per_second=rate, **fields)
        self._last_time, self._last_step = now, self.step

    # -- iteration ----------------------------------------------------------------
    def __iter__(self):
        return self

    def __len__(self):
        return self.total_steps - self.start_step

    def _epoch_iterator(self, skip: int):
        loader = self.data_loader
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(self.epoch)
        if skip:
            loader = self.accelerator.skip_first_batches(loader, skip)
        # Accelerate's loader is a generator: it draws its workers' base seed from the
        # global RNG, and fetches a batch ahead, at the first next(). Keep the global RNG
        # as it was across that first next(), in every epoch, so that what training draws
        # (dropout) does not depend on where a run started the epoch.
        state = self.torch.get_rng_state()
        try:
            inner = iter(loader)
            first = next(inner, _END)
        finally:
            self.torch.set_rng_state(state)
        return iter(()) if first is _END else itertools.chain((first,), inner)

    def _next_batch(self):
        if self._inner is None:
            length = len(self.data_loader)
            if length == 0:
                raise ValueError("the data loader yields no batches")
            self.epoch, skip = divmod(self.step, length)
            self._inner = self._epoch_iterator(skip)
        try:
            return next(self._inner)
        except StopIteration:
            self.epoch += 1
            self._inner = self._epoch_iterator(0)
        try:
            return next(self._inner)
        except StopIteration:
            raise ValueError("the data loader yields no batches") from None

    def _stop_requested(self) -> bool:
        if not self.managed or self.step % max(1, self.accelerator.gradient_accumulation_steps):
            return False
        return bool(self._reduce_max(1 if self._flag else 0))

    def __next__(self):
        if self._finished:
            raise StopIteration
        if self.step >= self.total_steps:
            self._finish()
            raise StopIteration
        if self._stop_requested():
            self._preempt()
        if self.progress_path is not None and self.step > self._last_step and \
                time.monotonic() - self._last_time >= self.progress_interval:
            self._measured("progress")
        batch = self._next_batch()
        self.step += 1
        return batch

    def _finish(self) -> None:
        self._finished = True
        self._measured("done")
        if self.rank == 0 and self.checkpoint_dir is not None and not self.keep_checkpoints:
            for _step, old in list_checkpoints(self.checkpoint_dir):
                shutil.rmtree(old, ignore_errors=True)


# -- the launcher wrapper ---------------------------------------------------------------
def _children(pid: int) -> list[int]:
    """The live child processes of `pid`, from the parent ids in /proc (Linux)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(entry))
    return out


def _kill(pids, sig) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _catches(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler installed for `signum` (SigCgt in /proc)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except OSError:
        pass
    return False


def _become_subreaper() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):       # not Linux: orphans go to init, as usual
        pass


def _reap_all(deadline: float) -> None:
    """Wait for every child (orphaned ranks included) until `deadline`, then kill the rest."""
    def reap() -> bool:
        try:
            while True:
                pid, _ = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    return True          # children left, none finished
        except ChildProcessError:
            return False                  # none left
    while reap():
        if time.monotonic() >= deadline:
            for sig in (_signal.SIGTERM, _signal.SIGKILL):
                _kill(_children(os.getpid()), sig)
                end = time.monotonic() + 5
                while reap() and time.monotonic() < end:
                    time.sleep(0.1)
            reap()
            return
        time.sleep(0.1)


def launch(argv: list[str], signal_name="USR2", grace_seconds: float = 5.0) -> int:
    """Run ``accelerate launch *argv``, forward the preemption signal to its ranks; the exit code.

    85 when a rank saved a checkpoint and exited 85 (``$GAVEL_REQUEUE_FILE``
    written), else the launcher's exit code (128 + N when a signal N ended it).
    """
    signum = signal_number(signal_name)
    requested, ended = [], []
    _signal.signal(signum, lambda _s, _f: requested.append(True))
    for other in (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP):
        _signal.signal(other, lambda s, _f: ended.append(s))
    _become_subreaper()
    workdir = tempfile.mkdtemp(prefix="gavel-launch-")
    marker = Path(workdir) / "requeue"
    env = dict(os.environ, **{REQUEUE_FILE_ENV: str(marker)})
    launcher = shutil.which("accelerate")
    command = [launcher, "launch", *argv] if launcher else \
        [sys.executable, "-m", "accelerate.commands.launch", *argv]

    def ignore_signal():                  # in the launcher (and inherited by its ranks until
        _signal.signal(signum, _signal.SIG_IGN)   # they install their handler)
    proc = subprocess.Popen(command, env=env, preexec_fn=ignore_signal)
    signalled: set[int] = set()
    terminated, had_ranks, ranks_gone_at, orphans_killed = False, False, None, 0
    try:
        while True:
            try:
                code = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pass
            ranks = _children(proc.pid)
            if ended and not terminated:      # TERM/INT/HUP: end the launcher and its ranks
                _kill([proc.pid, *ranks], _signal.SIGTERM)
                terminated = True
            if requested:
                for pid in ranks:
                    if pid not in signalled and _catches(pid, signum):
                        _kill([pid], signum)
                        signalled.add(pid)
            # The ranks are gone but the launcher waits: for processes they left behind,
            # which hold its pipe open (reparented to us, the subreaper). End those.
            had_ranks = had_ranks or bool(ranks)
            if had_ranks and not ranks:
                ranks_gone_at = ranks_gone_at or time.monotonic()
                if time.monotonic() - ranks_gone_at > grace_seconds * (1 + orphans_killed):
                    _kill([p for p in _children(os.getpid()) if p != proc.pid],
                          _signal.SIGKILL if orphans_killed else _signal.SIGTERM)
                    orphans_killed += 1
        _reap_all(time.monotonic() + grace_seconds)
    finally:
        requeue = marker.exists()
        shutil.rmtree(workdir, ignore_errors=True)
    if requeue:
        _log(f"a rank saved its checkpoint: exiting {REQUEUE_EXIT_CODE} (requeue held)")
        return REQUEUE_EXIT_CODE
    if ended:
        return 128 + ended[0]
    return code if code >= 0 else 128 - code


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "launch":
        print("usage: python -m slurm_gavel.job.accelerate launch [accelerate launch options] "
              "script.py [script options]\n(environment: GAVEL_SIGNAL, default USR2)",
              file=sys.stderr)
        return 2
    return launch(argv[1:], signal_name=os.environ.get("GAVEL_SIGNAL") or "USR2")


if __name__ == "__main__":
    sys.exit(main())

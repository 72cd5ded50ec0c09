"""GavelIterator: makes a PyTorch training loop preemptible by slurm-gavel.

The in-job half of Gavel's scheduler/application contract (the job runs
while its lease lasts, then checkpoints and exits). Wrap the data loader, give two checkpoint callbacks, and the job can be
stopped at any step, moved to another GPU type and resumed without losing or
repeating a step. The change to a training script (under five lines)::

    +from slurm_gavel.job.iterator import GavelIterator
    +def save(path): torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, path)
    +def load(path): ck = torch.load(path); model.load_state_dict(ck["model"]); opt.load_state_dict(ck["opt"])
    -for batch in loader:                # (and its `for epoch in ...` loop)
    +for batch in GavelIterator(loader, load, save, total_steps=args.steps):
         train_step(batch)

and the sbatch script ends with ``exec python train.py ...`` (so that
``scancel --batch --signal=USR2``, which signals only the batch process, reaches
Python), with ``#SBATCH --requeue`` and ``#SBATCH --open-mode=append``. The
templates in ``job_templates/`` do all of this.

What it does under Slurm (``SLURM_JOB_ID`` set):

- Construction installs a handler for ``signal_name`` (default USR2) that only
  sets a flag, then loads the newest checkpoint in ``checkpoint_dir``, if any, by
  calling ``load_checkpoint(path)``, and continues from the step it was saved at.
  Construct the iterator early, or call `catch_signal_early()` first thing in
  the script: before either, the signal's default action (end the process)
  applies.
- At every step boundary (each ``next()``): when the flag is set (on any rank, see
  below), ``save_checkpoint(tmp)`` writes the checkpoint to a temporary path in
  ``checkpoint_dir``, the iterator fsyncs it and renames it to its final name
  ``step-<N>`` (atomic), removes older checkpoints, appends a ``checkpoint``
  progress record and exits with ``requeue_exit_code`` (85), which
  ``RequeueExitHold=85`` turns into "requeue held" (``sys.exit``: ``finally``
  blocks and context managers of the script run).
- It iterates the loader epoch after epoch and stops (StopIteration, ``done``
  record) after ``total_steps`` steps in all, counted across restarts; the script
  then ends normally (exit 0). A signal after the last step is ignored. (No
  checkpoint is saved at the end: save the final model yourself.) Without ``total_steps``: one epoch
  (``len(data_loader)`` steps; with a loader that has no length, until it is
  exhausted).
- Progress: JSON lines appended to ``$GAVEL_PROGRESS_DIR/<jobid>.jsonl``, else
  ``$SLURM_SUBMIT_DIR/.gavel/<jobid>.jsonl`` (see `slurm_gavel.job.progress`).
- Default ``checkpoint_dir``: ``$GAVEL_CHECKPOINT_DIR/<jobid>`` when set, else
  ``$SLURM_SUBMIT_DIR/.gavel/<jobid>.ckpt``. It must be on a filesystem that
  every node the job may run on sees (the job moves between GPU types).

The checkpoint contract:

- ``save_checkpoint(path)`` writes everything that training depends on (model,
  optimizer, LR scheduler, GradScaler, RNG states if the model draws random
  numbers, e.g. dropout) to ``path``, a file or a directory it creates; it does
  not need to store the step. If it raises (or the process dies while it runs),
  the temporary path is discarded and the previous checkpoint stays the newest:
  the exception propagates (the job fails rather than loop on a broken save).
- ``load_checkpoint(path)`` restores that state. Its return value is ignored:
  the iterator records the step itself, in the checkpoint's name, and reads it
  from there. ``it.step`` tells the script the steps done (e.g. for an LR
  schedule or logging); inside the loop body it is the number of the current
  step, counted from 1.
- Data order: to resume without replaying or skipping a batch, the loader's order
  must be a function of the epoch. The iterator calls ``set_epoch(epoch)`` on the
  loader, or on its ``sampler``/``batch_sampler`` (as for
  ``torch.utils.data.DistributedSampler``, which also works in a single process
  with ``num_replicas=1, rank=0``) before each epoch, and on resume skips the
  batches of the current epoch already done by iterating over them (data loading
  only, no training; at most one epoch). Making a torch DataLoader's epoch
  iterator draws from torch's global RNG; the iterator restores the global RNG
  state around it, so that what training draws (dropout, ...) does not depend on
  where a run resumed. Seeds of loader workers (``num_workers > 0``) come from
  that draw: for random augmentations in workers to be reproducible across
  restarts too, seed them from the epoch and the sample index, not the worker.

Distributed jobs (``torch.distributed`` initialized before construction): the
flag is all-reduced (MAX of a one-element tensor; on the current CUDA device with
NCCL) every ``sync_every`` steps, at the same steps on every rank, so all ranks
stop after the same step and run the same number of steps whichever rank got the
signal. Rank 0 saves (``checkpoint_dir`` must be shared by the ranks), then a
second all-reduce tells every rank whether the save succeeded; all ranks then
exit 85 together. At construction rank 0 picks the checkpoint and broadcasts its
step; every rank loads it. Only rank 0 writes progress records. The cost is one
tiny collective per step (tens of microseconds on NCCL, about 0.1 ms on gloo on
one host); raise ``sync_every`` when steps are shorter than a millisecond. A
signal then waits at most ``sync_every`` steps.

Without Slurm (no ``SLURM_JOB_ID``, e.g. a laptop): no signal handler, no
progress file, never exits by itself. It still loads the newest checkpoint in
``checkpoint_dir`` when one is given explicitly (``GAVEL_CHECKPOINT_DIR`` is not
used), skips to its step, and stops after ``total_steps``; ``it.checkpoint()``
saves one on request. With neither, it is a plain pass-through of the loader
(one epoch, or ``total_steps`` steps over repeated epochs).

One GavelIterator per process at a time (the signal handler is per process).
This module needs only the standard library; torch is used when the job has
initialized ``torch.distributed``.
"""
from __future__ import annotations

import os
import re
import shutil
import signal as _signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from . import progress as _progress

REQUEUE_EXIT_CODE = 85
DEFAULT_PROGRESS_INTERVAL = 30.0
CHECKPOINT_DIR_ENV = "GAVEL_CHECKPOINT_DIR"
PROGRESS_INTERVAL_ENV = "GAVEL_PROGRESS_INTERVAL"
_CKPT = re.compile(r"step-([0-9]+)\Z")
_TMP = re.compile(r"\.step-[0-9]+\.tmp-[0-9]+\Z")


def _log(message: str) -> None:
    print(f"gavel: {message}", file=sys.stderr, flush=True)


def signal_number(name) -> int:
    """USR2, SIGUSR2, "12" or 12 -> the signal number."""
    if isinstance(name, int):
        return int(name)
    text = str(name).strip().upper()
    if text.isdigit():
        return int(text)
    if not text.startswith("SIG"):
        text = "SIG" + text
    try:
        return int(getattr(_signal.Signals, text))
    except AttributeError:
        raise ValueError(f"unknown signal {name!r}") from None


def checkpoint_name(step: int) -> str:
    return f"step-{step:012d}"


def list_checkpoints(directory) -> list[tuple[int, Path]]:
    """(step, path) of every complete checkpoint in `directory`, oldest first."""
    try:
        entries = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = []
    for entry in entries:
        m = _CKPT.match(entry)
        if m:
            found.append((int(m.group(1)), Path(directory) / entry))
    return sorted(found)


def newest_checkpoint(directory) -> tuple[int, Path] | None:
    found = list_checkpoints(directory)
    return found[-1] if found else None


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def _fsync_path(path: Path) -> None:
    """fsync a file, or every file and directory under a directory."""
    if path.is_dir():
        for root, _dirs, files in os.walk(path):
            for f in files:
                _fsync_file(Path(root) / f)
            _fsync_dir(Path(root))
    else:
        _fsync_file(path)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:      # some filesystems refuse fsync on directories
        pass
    finally:
        os.close(fd)


_early = {"signum": None, "received": False}


def catch_signal_early(signal_name="USR2") -> None:
    """Under Slurm, start catching the preemption signal now, before the iterator exists.

    Call it first thing in a training script whose setup (imports, building the
    model and data) takes a while: a signal that arrives meanwhile is remembered,
    and the GavelIterator created later checkpoints and exits at its first step
    boundary. Without it, such a signal ends the process (its default action).
    Does nothing without ``SLURM_JOB_ID``.
    """
    if not os.environ.get("SLURM_JOB_ID"):
        return
    signum = signal_number(signal_name)

    def remember(_signum, _frame):
        _early["received"] = True
    _signal.signal(signum, remember)
    _early["signum"] = signum


class _Dist:
    """The few torch.distributed calls the iterator makes (None when not distributed)."""

    def __init__(self):
        torch = sys.modules.get("torch")
        dist = getattr(torch, "distributed", None) if torch else None
        if dist is None or not dist.is_available() or not dist.is_initialized():
            raise LookupError
        self.torch, self.dist = torch, dist
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.device = torch.device("cpu")
        if str(dist.get_backend()).lower() == "nccl":
            self.device = torch.device("cuda", torch.cuda.current_device())

    def max(self, value: int) -> int:
        t = self.torch.tensor([int(value)], dtype=self.torch.int64, device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return int(t.item())

    def broadcast(self, value: int) -> int:
        t = self.torch.tensor([int(value)], dtype=self.torch.int64, device=self.device)
        self.dist.broadcast(t, src=0)
        return int(t.item())


def _distributed() -> _Dist | None:
    try:
        return _Dist()
    except LookupError:
        return None


class GavelIterator:
    """Iterate `data_loader` for `total_steps` steps, preemptible by slurm-gavel.

    See the module docstring for the whole contract. Attributes: ``step`` (steps
    done, counted across restarts), ``start_step`` (where this run started),
    ``total_steps``, ``epoch``, ``checkpoint_dir`` (a Path or None), ``managed``
    (running under Slurm), ``rank``/``world_size``, ``progress_path``.
    """

    def __init__(self, data_loader: Iterable, load_checkpoint: Callable[[str], Any],
                 save_checkpoint: Callable[[str], Any], checkpoint_dir=None,
                 total_steps: int | None = None, signal_name="USR2",
                 requeue_exit_code: int = REQUEUE_EXIT_CODE, progress: bool = True,
                 progress_interval: float | None = None, sync_every: int = 1,
                 keep_checkpoints: int = 1):
        if total_steps is not None and (int(total_steps) != total_steps or total_steps < 0):
            raise ValueError(f"total_steps must be a whole number >= 0, got {total_steps!r}")
        if sync_every < 1 or keep_checkpoints < 1:
            raise ValueError("sync_every and keep_checkpoints must be >= 1")
        self.data_loader = data_loader
        self.load_checkpoint, self.save_checkpoint = load_checkpoint, save_checkpoint
        self.total_steps = None if total_steps is None else int(total_steps)
        self.requeue_exit_code = int(requeue_exit_code)
        self.sync_every, self.keep_checkpoints = int(sync_every), int(keep_checkpoints)
        env = os.environ
        self.job_id = env.get("SLURM_JOB_ID") or None
        self.managed = self.job_id is not None
        self._dist = _distributed()
        self.rank = self._dist.rank if self._dist else 0
        self.world_size = self._dist.world_size if self._dist else 1

        if checkpoint_dir is None and self.managed:
            if env.get(CHECKPOINT_DIR_ENV):
                checkpoint_dir = Path(env[CHECKPOINT_DIR_ENV]) / self.job_id
            else:
                submit = env.get("SLURM_SUBMIT_DIR") or os.getcwd()
                checkpoint_dir = Path(submit) / _progress.SUBDIR / f"{self.job_id}.ckpt"
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None

        self.progress_path = None
        if self.managed and progress and self.rank == 0:
            self.progress_path = _progress.progress_path(_progress.job_key(env) or self.job_id)
        if progress_interval is None:
            progress_interval = float(env.get(PROGRESS_INTERVAL_ENV) or DEFAULT_PROGRESS_INTERVAL)
        self.progress_interval = float(progress_interval)
        self._progress_failed = False

        self._flag = False
        self._signum = None
        self._previous_handler = None
        if self.managed:
            self._install_handler(signal_number(signal_name))

        if self.total_steps is None:
            self.total_steps = self._epoch_length()       # one epoch; None: until exhausted
        self.epoch = 0
        self._inner = None
        self.save_seconds = None
        self._finished = False
        self.load_seconds = None
        self.step = self.start_step = self._load()
        self._last_time, self._last_step = time.monotonic(), self.step
        self._record("start", steps_per_second=None,
                     **({"load_seconds": round(self.load_seconds, 6)}
                        if self.load_seconds is not None else {}))

    # -- signal -------------------------------------------------------------------
    def _install_handler(self, signum: int) -> None:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("GavelIterator must be created in the main thread under Slurm "
                               "(Python delivers signals to the main thread only)")
        self._signum = signum
        self._previous_handler = _signal.signal(signum, self._on_signal)
        if _early["signum"] == signum and _early["received"]:
            self._flag = True            # came during the script's setup
            _early["received"] = False

    def _on_signal(self, signum, frame) -> None:
        self._flag = True            # nothing else: acted on at the next step boundary

    def request_stop(self) -> None:
        """Checkpoint and exit at the next step boundary, as if the signal had come.

        Needs a checkpoint_dir. Under Slurm in a distributed job, calling it on one
        rank stops all of them (the flag is reduced); off Slurm there is no
        collective, so call it on every rank."""
        self._flag = True

    def close(self) -> None:
        """Restore the previous signal handler.

        Not done automatically: after the last step, or while exiting 85, a further
        signal must be ignored rather than end the process (a job killed by a signal
        is not requeued held)."""
        if self._signum is not None:
            _signal.signal(self._signum, self._previous_handler or _signal.SIG_DFL)
            self._signum = None

    # -- checkpoints --------------------------------------------------------------
    def _load(self) -> int:
        step = -1
        if self.checkpoint_dir is not None and self.rank == 0:
            self._clean_temporaries()
            found = newest_checkpoint(self.checkpoint_dir)
            if found:
                step = found[0]
        if self._dist:
            step = self._dist.broadcast(step)
        if step < 0:
            return 0
        if self.checkpoint_dir is None:
            raise RuntimeError(f"rank 0 resumes from step {step} but rank {self.rank} has no "
                               f"checkpoint_dir")
        path = self.checkpoint_dir / checkpoint_name(step)
        if not path.exists():
            raise RuntimeError(f"rank {self.rank} cannot see checkpoint {path} that rank 0 "
                               f"resumes from: checkpoint_dir must be shared by all ranks")
        t0 = time.perf_counter()
        self.load_checkpoint(str(path))
        self.load_seconds = time.perf_counter() - t0
        if self.rank == 0 and self.managed:
            _log(f"resumed from {path} (step {step}) in {self.load_seconds:.2f} s")
        return step

    def _clean_temporaries(self) -> None:
        try:
            entries = os.listdir(self.checkpoint_dir)
        except FileNotFoundError:
            return
        for entry in entries:
            if _TMP.match(entry):
                _remove(self.checkpoint_dir / entry)

    def checkpoint(self) -> Path | None:
        """Save a checkpoint of the current step now (rank 0; collective when distributed).

        Returns its path on rank 0, None elsewhere. Raises when the save failed on
        rank 0 (on every rank); the previous checkpoint is then still the newest.
        """
        if self.checkpoint_dir is None:
            raise RuntimeError("no checkpoint_dir: nowhere to save a checkpoint")
        error, path = None, None
        if self.rank == 0:
            try:
                path = self._save(self.step)
            except BaseException as e:  # noqa: BLE001 -- told to the other ranks, then re-raised
                error = e
        if self._dist:
            ok = self._dist.max(1 if (self.rank == 0 and error is None) else 0)
            if not ok and error is None:
                raise RuntimeError(f"rank 0 failed to save the checkpoint of step {self.step}")
        if error is not None:
            raise error
        return path

    def _save(self, step: int) -> Path:
        directory = self.checkpoint_dir
        directory.mkdir(parents=True, exist_ok=True)
        final = directory / checkpoint_name(step)
        tmp = directory / f".{checkpoint_name(step)}.tmp-{os.getpid()}"
        _remove(tmp)
        t0 = time.perf_counter()
        try:
            self.save_checkpoint(str(tmp))
            if not os.path.lexists(tmp):
                raise RuntimeError(f"save_checkpoint({str(tmp)!r}) returned without writing it")
            _fsync_path(tmp)
            if tmp.is_dir() and final.exists():
                # A directory cannot replace another atomically; a checkpoint of
                # this step exists already (resumed and preempted before a step).
                _remove(tmp)
            else:
                os.replace(tmp, final)
            _fsync_dir(directory)
        except BaseException:
            _remove(tmp)
            raise
        self.save_seconds = time.perf_counter() - t0
        for _old_step, old in list_checkpoints(directory)[:-self.keep_checkpoints]:
            _remove(old)
        return final

    # -- progress -----------------------------------------------------------------
    def _record(self, event: str, **fields) -> None:
        if self.progress_path is None:
            return
        env = os.environ
        try:
            restart = int(env.get("SLURM_RESTART_COUNT") or 0)
        except ValueError:
            restart = 0
        record = {"job": self.job_id, "time": round(time.time(), 3), "event": event,
                  "step": self.step, "total_steps": self.total_steps, **fields,
                  "partition": env.get("SLURM_JOB_PARTITION"),
                  "node": env.get("SLURMD_NODENAME") or socket.gethostname(),
                  "restart": restart, "world_size": self.world_size}
        try:
            _progress.append_record(self.progress_path, record)
        except OSError as e:
            if not self._progress_failed:
                _log(f"cannot write progress to {self.progress_path}: {e} (training goes on)")
            self._progress_failed = True

    def _rate(self, now: float) -> float | None:
        elapsed = now - self._last_time
        steps = self.step - self._last_step
        if elapsed <= 0 or steps <= 0:
            return None
        return round(steps / elapsed, 6)

    def _measured(self, event: str, **fields) -> None:
        now = time.monotonic()
        self._record(event, steps_per_second=self._rate(now), **fields)
        self._last_time, self._last_step = now, self.step

    # -- iteration ----------------------------------------------------------------
    def __iter__(self):
        return self

    def _set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        loader = self.data_loader
        for obj in (loader, getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None),
                    getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
            if obj is not None and callable(getattr(obj, "set_epoch", None)):
                obj.set_epoch(epoch)
                return

    def _epoch_length(self) -> int | None:
        try:
            return len(self.data_loader)
        except TypeError:
            return None

    def _new_epoch_iterator(self):
        # A torch DataLoader draws its workers' base seed from torch's global RNG
        # each time an epoch's iterator is made. Keep the global RNG as it was, so
        # that the random numbers training draws (dropout, ...) do not depend on
        # whether this run started the epoch or resumed in its middle.
        torch = sys.modules.get("torch")
        if torch is None:
            return iter(self.data_loader)
        state = torch.get_rng_state()
        try:
            return iter(self.data_loader)
        finally:
            torch.set_rng_state(state)

    def _start_data(self) -> None:
        length = self._epoch_length()
        if length == 0:
            raise ValueError("the data loader yields no batches")
        epoch, skip = (divmod(self.start_step, length) if length
                       else (0, self.start_step))
        self._set_epoch(epoch)
        self._inner = self._new_epoch_iterator()
        for _ in range(skip):         # the batches of this epoch already trained on
            self._fetch(allow_end=False)
        self._last_time, self._last_step = time.monotonic(), self.step

    def _fetch(self, allow_end: bool = True):
        try:
            return next(self._inner)
        except StopIteration:
            if self.total_steps is None:
                if allow_end:
                    raise
                raise ValueError("the data loader has fewer batches than the checkpoint's "
                                 "step") from None
        self._set_epoch(self.epoch + 1)
        self._inner = self._new_epoch_iterator()
        try:
            return next(self._inner)
        except StopIteration:
            raise ValueError("the data loader yields no batches") from None

    def _stop_requested(self) -> bool:
        if self._dist and self.managed:
            if self.step % self.sync_every:
                return False
            return bool(self._dist.max(1 if self._flag else 0))
        return self._flag

    def __next__(self):
        if self._finished:
            raise StopIteration
        if self.total_steps is not None and self.step >= self.total_steps:
            self._finish()
            raise StopIteration
        if self._inner is None:
            self._start_data()
        if self._stop_requested():
            self._preempt()
        if self.progress_path is not None and self.step > self._last_step and \
                time.monotonic() - self._last_time >= self.progress_interval:
            self._measured("progress")
        try:
            batch = self._fetch()
        except StopIteration:           # no total_steps and a loader without a length
            self._finish()
            raise
        self.step += 1
        return batch

    def _finish(self) -> None:
        # The signal handler stays installed: a signal that comes after the last
        # step is ignored (the job is about to exit 0), not fatal.
        self._finished = True
        self._measured("done")

    def _preempt(self) -> None:
        signame = _signal.Signals(self._signum).name if self._signum else "request"
        if self.checkpoint_dir is None:       # request_stop() off Slurm without a directory
            raise RuntimeError("stop requested but there is no checkpoint_dir to save to")
        path = self.checkpoint()
        if self.rank == 0:
            self._measured("checkpoint", save_seconds=round(self.save_seconds, 6))
            _log(f"{signame}: checkpoint of step {self.step} saved to {path} in "
                 f"{self.save_seconds:.2f} s; exiting {self.requeue_exit_code} (requeue held)")
        # The handler stays: a second signal while exiting must not kill the process
        # (killed by a signal, the job would not be requeued held).
        sys.stdout.flush()
        sys.stderr.flush()
        sys.exit(self.requeue_exit_code)

    @property
    def remaining(self) -> int | None:
        return None if self.total_steps is None else max(0, self.total_steps - self.step)

"""GavelIterator: makes a PyTorch training loop preemptible by slurm-gavel.

The in-job half of Gavel's contract between the scheduler and a training job.
Wrap the training data loader, give two checkpoint callbacks, and the job can be
stopped at any step, moved to another GPU type and resumed without losing or
repeating a step: a resumed run trains exactly what an uninterrupted one would.
The change to pytorch/examples' MNIST (examples/mnist/; 9 changed lines by
``diff -u | grep -c '^[+-][^+-]'``)::

    +from slurm_gavel.iterator import GavelIterator, catch_signal_early
     def main():
    +    catch_signal_early()
         ...
    +    def save(path): torch.save({"model": model.state_dict(), "opt": optimizer.state_dict(), "sched": scheduler.state_dict()}, path)
    +    def load(path): ck = torch.load(path); model.load_state_dict(ck["model"]); optimizer.load_state_dict(ck["opt"]); scheduler.load_state_dict(ck["sched"])
    +    it = GavelIterator(train_loader, load, save, epochs=args.epochs)
    -    for epoch in range(1, args.epochs + 1):
    -        train(args, model, device, train_loader, optimizer, epoch)
    +    for epoch in it.epochs(start=1):
    +        train(args, model, device, it, optimizer, epoch)
             test(model, device, test_loader)
             scheduler.step()

A script with one loop over the steps needs only ``for batch in
GavelIterator(loader, load, save, total_steps=N):``. The iterator stands in for
the loader: ``len(it)`` and the loader's attributes (``it.dataset``, ...) work.
The sbatch script ends with ``exec python train.py ...`` (so that
``scancel --batch --signal=USR2``, which signals only the batch process, reaches
Python), with ``#SBATCH --requeue`` and ``#SBATCH --open-mode=append``. The
templates in ``job_templates/`` do all of this.

What it does under Slurm (``SLURM_JOB_ID`` set):

- Construction installs a handler for ``signal_name`` (default USR2) that only
  sets a flag, then loads the newest checkpoint in ``checkpoint_dir``, if any, by
  calling ``load_checkpoint(path)``, and continues from the step it was saved at.
  Call `catch_signal_early()` first thing in the script: before it (or the
  iterator), the signal's default action (end the process) applies.
- Step boundary: the next ``next()``. When the flag is set (on any rank, see
  below), the iterator saves the steps trained so far: ``save_checkpoint(tmp)``
  writes a temporary path in ``checkpoint_dir``, the iterator fsyncs it and
  renames it to ``step-<N>`` (atomic), removes older checkpoints, appends a
  ``checkpoint`` progress record and exits with ``requeue_exit_code`` (85), which
  ``RequeueExitHold=85`` turns into "requeue held" (``sys.exit``: ``finally``
  blocks and context managers of the script run).
- A step counts as trained when the consumer asks for the batch after the next
  ``prefetch`` ones (default 0: a plain loop trains a batch before it asks for the
  next). A consumer that fetches ahead (Lightning fetches one batch before it
  trains the current one) passes ``prefetch=1``: a checkpoint then holds only the
  steps really trained, and on resume the batches fetched but not trained are
  handed out again, drawn as they were. A new ``iter(it)`` (a new pass) marks
  everything handed out before as trained.
- It iterates the loader epoch after epoch and stops (StopIteration, ``done``
  record) after ``total_steps`` steps in all (``epochs=E``: E epochs), counted
  across restarts; the script then ends normally (exit 0). Without either: one
  epoch (``len(data_loader)`` steps; a loader without a length: until it is
  exhausted). A signal after the last step is ignored. No checkpoint is saved at
  the end: save the final model yourself. With the ``done`` record the iterator
  removes the checkpoints it wrote (they only serve to resume), and the default
  directory when that empties it; ``keep_final_checkpoint=True`` (or
  ``GAVEL_KEEP_CHECKPOINTS=1`` in the job's environment) keeps the last one.
  With ``prefetch`` the ``done`` record
  waits for ``close()`` (or the next request). Asking for a batch after the end
  raises RuntimeError: a loop that outlives the iterator (an epoch loop longer
  than ``total_steps``, a framework without ``max_steps``) is a bug, not a spin.
- ``for epoch in it.epochs(start=1):`` yields the epoch numbers still to train
  (from the one a resumed run stopped in); while it runs, each ``for batch in
  it`` is (the rest of) one epoch, so that work after an epoch (evaluation, a
  scheduler step) runs once per epoch. A signal in an epoch's last step is acted
  on at the next epoch's first batch, after that work.
- Progress: JSON lines appended to ``$GAVEL_PROGRESS_DIR/<jobid>.jsonl``, else
  ``$SLURM_SUBMIT_DIR/.gavel/<jobid>.jsonl`` (see `slurm_gavel.job.progress`).
- Default ``checkpoint_dir``: ``$GAVEL_CHECKPOINT_DIR/<jobid>`` when set, else
  ``$SLURM_SUBMIT_DIR/.gavel/<jobid>.ckpt``. It must be on a filesystem that
  every node the job may run on sees (the job moves between GPU types).

The checkpoint contract:

- ``save_checkpoint(path)`` writes the training state (model, optimizer, LR
  scheduler, GradScaler) to ``path``, a file or a directory it creates; it does
  not need to store the step or random-number state. If it raises (or the
  process dies while it runs), the temporary path is discarded and the previous
  checkpoint stays the newest: the exception propagates (the job fails rather
  than loop on a broken save).
- ``load_checkpoint(path)`` restores that state. Its return value is ignored:
  the iterator records the step itself, in the checkpoint's name. ``it.step`` is
  the steps handed out (inside a plain loop's body the number of the current
  step, counted from 1), ``it.trained`` the steps a checkpoint would hold.
- Next to each checkpoint the iterator writes its own state, one file per rank
  (``step-<N>.rank-<R>.gavel``, see `slurm_gavel.job.rngstate`): the global
  random-number generators (torch's, CUDA's when initialized, numpy's when
  imported, python's ``random``) as they were at the step boundary, restored at
  the first ``next()`` of the resumed run (``restore_rng=False``: leave them to
  ``load_checkpoint``); and what the data order was drawn from.
- Data order, exact on resume. A loader with ``set_epoch`` (on it, its
  ``sampler`` or ``batch_sampler``, e.g. ``DistributedSampler``, also in a single
  process with ``num_replicas=1, rank=0``) gets it before each epoch. A shuffled
  loader without it (``DataLoader(shuffle=True)``: a RandomSampler that draws
  its permutation from torch's global RNG, or from a ``generator``; torchdata's
  ``StatefulDataLoader`` alike) draws its order from the generators' state as the
  epoch began: the iterator keeps that
  state, and on resume sets it again, makes the epoch's iterator and skips the
  batches already trained by iterating over them (data loading only, at most one
  epoch), then restores the step boundary's RNG. Making a torch DataLoader's
  epoch iterator draws its workers' base seed from torch's global RNG; the
  iterator restores that RNG around it, so that training's random numbers do not
  depend on where a run resumed. Not covered (not exact after a resume): a
  sampler or dataset with a random source of its own (a ``numpy.random.Generator``,
  an IterableDataset's shuffle buffer); random augmentation in loader workers
  is exact only when seeded from the epoch and sample index.

Distributed jobs (``torch.distributed`` initialized before construction): the
flag is all-reduced (MAX of a one-element tensor; on the current CUDA device with
NCCL) every ``sync_every`` steps, at the same steps on every rank, so all ranks
stop after the same step and run the same number of steps whichever rank got the
signal. Every rank writes its iterator state, then rank 0 saves
(``checkpoint_dir`` must be shared by the ranks); all-reduces tell every rank
whether both succeeded; all ranks then exit 85 together. At construction rank 0
picks the checkpoint and broadcasts its step; every rank loads it (and its own
state, or rank 0's when the job now has more ranks). Only rank 0 writes progress
records. The cost is one tiny collective per step (tens of microseconds on NCCL,
about 0.1 ms on gloo on one host); raise ``sync_every`` when steps are shorter
than a millisecond. A signal then waits at most ``sync_every`` steps.

Without Slurm (no ``SLURM_JOB_ID``, e.g. a laptop): no signal handler, no
progress file, never exits by itself. It still loads the newest checkpoint in
``checkpoint_dir`` when one is given explicitly (``GAVEL_CHECKPOINT_DIR`` is not
used), skips to its step, and stops after ``total_steps``; ``it.checkpoint()``
saves one on request. With neither, it is a plain pass-through of the loader
(one epoch, or ``total_steps`` steps over repeated epochs).

One GavelIterator per process at a time (the signal handler is per process).
This module needs only the standard library; torch is used when the job has
imported it.
"""
from __future__ import annotations

import os
import re
import shutil
import signal as _signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from . import progress as _progress
from . import rngstate

REQUEUE_EXIT_CODE = 85
DEFAULT_PROGRESS_INTERVAL = 30.0
CHECKPOINT_DIR_ENV = _progress.CHECKPOINT_DIR_ENV
PROGRESS_INTERVAL_ENV = "GAVEL_PROGRESS_INTERVAL"
KEEP_ENV = "GAVEL_KEEP_CHECKPOINTS"     # "1": keep the last checkpoint when the job is done
_CKPT = re.compile(r"step-([0-9]+)\Z")
_TMP = re.compile(r"\.step-[0-9]+(\.rank-[0-9]+\.gavel)?\.tmp-[0-9]+\Z")
_STATE = re.compile(r"step-([0-9]+)\.rank-[0-9]+\.gavel\Z")
STATE_VERSION = 1


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


def state_name(step: int, rank: int) -> str:
    """The iterator's own state file of a checkpoint (RNG, data order), one per rank."""
    return f"{checkpoint_name(step)}.rank-{rank}.gavel"


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

    See the module docstring for the whole contract. Attributes: ``step`` (batches
    handed out, counted across restarts: inside a plain loop's body, the number of
    the current step), ``trained`` (steps known trained: what a checkpoint saves),
    ``start_step`` (where this run started), ``total_steps``, ``epoch``,
    ``checkpoint_dir`` (a Path or None), ``managed`` (running under Slurm),
    ``rank``/``world_size``, ``progress_path``.
    """

    def __init__(self, data_loader: Iterable, load_checkpoint: Callable[[str], Any],
                 save_checkpoint: Callable[[str], Any], checkpoint_dir=None,
                 total_steps: int | None = None, signal_name="USR2",
                 requeue_exit_code: int = REQUEUE_EXIT_CODE, progress: bool = True,
                 progress_interval: float | None = None, sync_every: int = 1,
                 keep_checkpoints: int = 1, *, epochs: int | None = None, prefetch: int = 0,
                 restore_rng: bool = True, keep_final_checkpoint: bool | None = None):
        if total_steps is not None and (int(total_steps) != total_steps or total_steps < 0):
            raise ValueError(f"total_steps must be a whole number >= 0, got {total_steps!r}")
        if sync_every < 1 or keep_checkpoints < 1:
            raise ValueError("sync_every and keep_checkpoints must be >= 1")
        if prefetch < 0 or int(prefetch) != prefetch:
            raise ValueError(f"prefetch must be a whole number >= 0, got {prefetch!r}")
        self.data_loader = data_loader
        self.load_checkpoint, self.save_checkpoint = load_checkpoint, save_checkpoint
        if epochs is not None:
            if total_steps is not None:
                raise ValueError("give total_steps or epochs, not both")
            if self._epoch_length() is None or int(epochs) != epochs or epochs < 0:
                raise ValueError("epochs needs a whole number >= 0 and a data loader with a "
                                 "length")
            total_steps = int(epochs) * self._epoch_length()
        self.total_steps = None if total_steps is None else int(total_steps)
        self.prefetch, self.restore_rng = int(prefetch), bool(restore_rng)
        self.requeue_exit_code = int(requeue_exit_code)
        if keep_final_checkpoint is None:
            keep_final_checkpoint = os.environ.get(KEEP_ENV, "").strip().lower() in (
                "1", "true", "yes")
        self.keep_final_checkpoint = bool(keep_final_checkpoint)
        self.sync_every, self.keep_checkpoints = int(sync_every), int(keep_checkpoints)
        env = os.environ
        self.job_id = env.get("SLURM_JOB_ID") or None
        self.managed = self.job_id is not None
        self._dist = _distributed()
        self.rank = self._dist.rank if self._dist else 0
        self.world_size = self._dist.world_size if self._dist else 1

        if checkpoint_dir is None and self.managed:
            checkpoint_dir = _progress.default_checkpoint_dir(self.job_id, env)
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
        self._finished = self._done_recorded = False
        self._per_epoch = self._epoch_end = False
        self._epoch_starts: dict[int, dict] = {}   # epoch -> RNG/generators as it began
        self._fetch_rngs: deque = deque(maxlen=self.prefetch)   # RNG before recent fetches
        self._buffer: deque = deque()      # on resume: the prefetched batches, fetched again
        self._resume_state = None
        self.load_seconds = None
        self.step = self.start_step = self._floor = self._load()
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
        """Say that training is over: records ``done`` once every step was handed out
        (a prefetching consumer trains its last batches after the iterator ended),
        and restores the previous signal handler.

        The handler is not restored automatically: after the last step, or while
        exiting 85, a further signal must be ignored rather than end the process (a
        job killed by a signal is not requeued held)."""
        if self._finished:
            self._record_done()
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
        self._resume_state = self._read_state(step)
        if self.rank == 0 and self.managed:
            _log(f"resumed from {path} (step {step}) in {self.load_seconds:.2f} s")
        return step

    def _read_state(self, step: int) -> dict | None:
        """This rank's iterator state of checkpoint `step` (rank 0's when the job has
        more ranks than when it was saved), or None for a checkpoint without one."""
        for rank in dict.fromkeys((self.rank, 0)):
            path = self.checkpoint_dir / state_name(step, rank)
            if path.exists():
                state = rngstate.read(path)
                if state.get("version") == STATE_VERSION and state.get("step") == step:
                    return state
        _log(f"checkpoint {checkpoint_name(step)} has no iterator state (RNG, data order) "
             f"for rank {self.rank}: resuming with the loader's set_epoch order only")
        return None

    def _clean_temporaries(self) -> None:
        try:
            entries = os.listdir(self.checkpoint_dir)
        except FileNotFoundError:
            return
        kept = {s for s, _ in list_checkpoints(self.checkpoint_dir)}
        for entry in entries:
            state = _STATE.match(entry)
            # temporaries, and states of a checkpoint that was never completed
            if _TMP.match(entry) or (state and int(state.group(1)) not in kept):
                _remove(self.checkpoint_dir / entry)

    @property
    def trained(self) -> int:
        """Steps known trained: all handed out but the `prefetch` latest of this pass."""
        return max(self._floor, self.step - self.prefetch)

    def checkpoint(self) -> Path | None:
        """Save a checkpoint of the steps trained so far now (rank 0 saves the
        checkpoint, every rank its iterator state; collective when distributed).

        Returns its path on rank 0, None elsewhere. Raises when the save failed on
        any rank (on every rank); the previous checkpoint is then still the newest.
        """
        if self.checkpoint_dir is None:
            raise RuntimeError("no checkpoint_dir: nowhere to save a checkpoint")
        step = self.trained
        error, path = None, None
        try:
            self._write_state(step)
        except BaseException as e:  # noqa: BLE001 -- told to the other ranks, then re-raised
            error = e
        if self._dist and self._dist.max(1 if error is not None else 0) and error is None:
            error = RuntimeError(f"another rank failed to save its state of step {step}")
        if error is None and self.rank == 0:
            try:
                path = self._save(step)
            except BaseException as e:  # noqa: BLE001 -- told to the other ranks, then re-raised
                error = e
        if self._dist:
            ok = self._dist.max(1 if (self.rank == 0 and error is None) else 0)
            if not ok and error is None:
                error = RuntimeError(f"rank 0 failed to save the checkpoint of step {step}")
        if error is not None:
            if self.rank != 0 or not (self.checkpoint_dir / checkpoint_name(step)).exists():
                _remove(self.checkpoint_dir / state_name(step, self.rank))
            raise error
        return path

    def _write_state(self, step: int) -> None:
        """The iterator's part of the checkpoint: RNG now, the data order's RNG at the
        start of the checkpoint's epoch, and the RNG before each fetch of the batches
        handed out but not yet trained (a prefetching consumer's)."""
        length = self._epoch_length()
        epoch = step // length if length else 0
        pending = self.step - step
        state = {"version": STATE_VERSION, "step": step, "rng": rngstate.capture(),
                 "generators": rngstate.capture_generators(self.data_loader),
                 "epoch_starts": {e: s for e, s in self._epoch_starts.items() if e == epoch},
                 "pending": list(self._fetch_rngs)[len(self._fetch_rngs) - pending:]
                 if pending else []}
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        rngstate.write(self.checkpoint_dir / state_name(step, self.rank), state)

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
        kept = {s for s, _ in list_checkpoints(directory)}
        for entry in os.listdir(directory):
            m = _STATE.match(entry)
            if m and int(m.group(1)) not in kept:
                _remove(directory / entry)
        return final

    # -- progress -----------------------------------------------------------------
    def _record(self, event: str, **fields) -> None:
        if self.progress_path is None:
            return
        record = _progress.job_record(self.job_id, event, self.trained, self.total_steps, self.world_size,
                                      **fields)
        try:
            _progress.write_record(self.progress_path, record)
        except OSError as e:
            if not self._progress_failed:
                _log(f"cannot write progress to {self.progress_path}: {e} (training goes on)")
            self._progress_failed = True

    def _rate(self, now: float) -> float | None:
        elapsed = now - self._last_time
        steps = self.trained - self._last_step
        if elapsed <= 0 or steps <= 0:
            return None
        return round(steps / elapsed, 6)

    def _measured(self, event: str, **fields) -> None:
        now = time.monotonic()
        self._record(event, steps_per_second=self._rate(now), **fields)
        self._last_time, self._last_step = now, self.trained

    # -- iteration ----------------------------------------------------------------
    def __len__(self) -> int:
        """Batches an epoch, as the data loader's ``len()`` (a TypeError without one)."""
        return len(self.data_loader)

    def __bool__(self) -> bool:
        return True

    def __getattr__(self, name: str):
        # A drop-in for the loader in code that reads its attributes
        # (``loader.dataset``, ``loader.batch_size``).
        loader = self.__dict__.get("data_loader")
        if name.startswith("_") or loader is None:
            raise AttributeError(name)
        return getattr(loader, name)

    def __iter__(self):
        # A new pass over the iterator: the consumer trained everything it was
        # handed before (a prefetching consumer drains its buffer at a pass's end).
        self._floor = max(self._floor, self.step)
        return self

    def epochs(self, start: int = 0):
        """The epoch numbers still to train, from the one a resumed run stopped in;
        while it runs, each ``for batch in it`` is (the rest of) one epoch.

        For scripts that do something after every epoch (evaluate, step a
        scheduler): ``for epoch in it.epochs(start=1): train(it, ...); test(...);
        scheduler.step()``. A preemption signalled in an epoch's last step
        checkpoints at the next epoch's first batch, after that work."""
        length = self._epoch_length()
        if not length:
            raise ValueError("epochs() needs a data loader with a length")
        self._per_epoch = True
        count = -(-self.total_steps // length)
        for epoch in range(self.step // length, count):
            yield start + epoch

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

    def _begin_epoch(self, epoch: int) -> None:
        self._set_epoch(epoch)
        # The order of a shuffled loader without set_epoch (DataLoader(shuffle=True))
        # comes from these generators as the epoch begins: kept so that a resume in
        # this epoch can draw the same order again.
        self._epoch_starts = {e: s for e, s in self._epoch_starts.items() if e >= epoch - 1}
        self._epoch_starts[epoch] = {"rng": rngstate.capture(),
                                     "generators": rngstate.capture_generators(self.data_loader)}
        self._inner = self._new_epoch_iterator()

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
        saved = self._resume_state
        if skip == 0 and (saved is None or not saved["pending"]):
            # At an epoch's start: an uninterrupted run began this epoch at this very
            # boundary, with the RNG and generators as they were saved.
            if saved is not None:
                self._restore_rng(saved["rng"])
                rngstate.restore_generators(self.data_loader, saved["generators"])
            self._begin_epoch(epoch)
        else:
            now = rngstate.capture()
            if saved is not None:
                began = saved["epoch_starts"].get(epoch)
                if began is not None:        # replay the epoch's data as it was drawn
                    rngstate.restore(began["rng"])
                    rngstate.restore_generators(self.data_loader, began["generators"])
                elif self.rank == 0:
                    _log(f"no record of how epoch {epoch} began: its order on resume comes "
                         f"from set_epoch only")
            self._begin_epoch(epoch)
            for _ in range(skip):         # the batches of this epoch already trained on
                self._fetch(allow_end=False)
            for before in saved["pending"] if saved is not None else ():
                # handed out but not trained: fetched again, as they were drawn
                rngstate.restore(before)
                self._fetch_rngs.append(before)
                self._buffer.append(self._fetch(allow_end=False))
            # replaying drew nothing that training would have
            rngstate.restore(now)
            if saved is not None:
                self._restore_rng(saved["rng"])
        self._last_time, self._last_step = time.monotonic(), self.trained

    def _restore_rng(self, state: dict) -> None:
        if not self.restore_rng:
            return
        missed = rngstate.restore(state)
        if missed and self.rank == 0:
            _log(f"RNG not restored: {', '.join(missed)} (another GPU count)")

    def _fetch(self, allow_end: bool = True):
        try:
            return next(self._inner)
        except StopIteration:
            if self.total_steps is None:
                if allow_end:
                    raise
                raise ValueError("the data loader has fewer batches than the checkpoint's "
                                 "step") from None
        self._begin_epoch(self.epoch + 1)
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
            self._asked_after_done()
        if self.total_steps is not None and self.step >= self.total_steps:
            self._finish()
            raise StopIteration
        if self._epoch_end:           # epochs(): one epoch per pass
            self._epoch_end = False
            raise StopIteration
        if self._inner is None:
            self._start_data()
        if self._stop_requested():
            self._preempt()
        if self.progress_path is not None and self.trained > self._last_step and \
                time.monotonic() - self._last_time >= self.progress_interval:
            self._measured("progress")
        if self._buffer:
            batch = self._buffer.popleft()
        else:
            if self.prefetch:
                self._fetch_rngs.append(rngstate.capture())
            try:
                batch = self._fetch()
            except StopIteration:           # no total_steps and a loader without a length
                self._finish()
                raise
        self.step += 1
        if self._per_epoch and self.step % self._epoch_length() == 0:
            self._epoch_end = True
        return batch

    def _finish(self) -> None:
        # The signal handler stays installed: a signal that comes after the last
        # step is ignored (the job is about to exit 0), not fatal.
        self._finished = True
        if self.trained >= self.step:    # else a prefetching consumer still trains
            self._record_done()

    def _record_done(self) -> None:
        if not self._done_recorded:
            self._done_recorded = True
            self._floor = self.step
            self._measured("done")
            if self.rank == 0 and not self.keep_final_checkpoint:
                self._drop_checkpoints()

    def _drop_checkpoints(self) -> None:
        # A checkpoint is only for resuming this job, and a done job does not resume:
        # left behind, every finished job would keep a model's worth of disk. Only what
        # the iterator wrote goes; the directory too when that leaves it empty.
        directory = self.checkpoint_dir
        if directory is None or not directory.is_dir():
            return
        for _step, path in list_checkpoints(directory):
            _remove(path)
        for entry in os.listdir(directory):
            if _STATE.match(entry) or _TMP.match(entry):
                _remove(directory / entry)
        try:
            directory.rmdir()
        except OSError:
            pass                      # the user's own files are in it

    def _asked_after_done(self):
        self._record_done()           # asking again: everything handed out was trained
        raise RuntimeError(
            f"GavelIterator: all {self.step} steps are done, but the training loop asked for "
            f"another batch. End the loop when the iterator ends: one `for batch in it`, or "
            f"`for epoch in it.epochs()` around it; a framework must stop after total_steps "
            f"(e.g. Lightning's Trainer(max_steps=...)).")

    def _preempt(self) -> None:
        signame = _signal.Signals(self._signum).name if self._signum else "request"
        if self.checkpoint_dir is None:       # request_stop() off Slurm without a directory
            raise RuntimeError("stop requested but there is no checkpoint_dir to save to")
        path = self.checkpoint()
        if self.rank == 0:
            self._measured("checkpoint", save_seconds=round(self.save_seconds, 6))
            _log(f"{signame}: checkpoint of step {self.trained} saved to {path} in "
                 f"{self.save_seconds:.2f} s; exiting {self.requeue_exit_code} (requeue held)")
        # The handler stays: a second signal while exiting must not kill the process
        # (killed by a signal, the job would not be requeued held).
        sys.stdout.flush()
        sys.stderr.flush()
        sys.exit(self.requeue_exit_code)

    @property
    def remaining(self) -> int | None:
        return None if self.total_steps is None else max(0, self.total_steps - self.trained)

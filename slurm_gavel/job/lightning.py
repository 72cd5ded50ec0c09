"""GavelCallback: makes a PyTorch Lightning training job preemptible by slurm-gavel.

The Lightning counterpart of `slurm_gavel.job.iterator.GavelIterator`: it works through
Lightning's own hooks and checkpoint format, so the model, optimizers, LR schedulers,
AMP scaler, loops (epoch, batch, global step), callbacks and stateful data loaders are
saved and restored by Lightning itself. The lines a script adds (docs/lightning.md)::

    +from slurm_gavel.job.lightning import GavelCallback, catch_signal_early
    +catch_signal_early()                        # first thing: a signal during setup is kept
    +gavel = GavelCallback()
    -trainer = L.Trainer(max_epochs=10)
    +trainer = L.Trainer(max_epochs=10, callbacks=[gavel])
    -trainer.fit(model, datamodule=dm)
    +trainer.fit(model, datamodule=dm, ckpt_path=gavel.resume_path())

and the training DataLoader is a `torchdata.stateful_dataloader.StatefulDataLoader`.

What it does under Slurm (``SLURM_JOB_ID`` set):

- `catch_signal_early()` or the callback's construction installs a handler for the
  preemption signal (default USR2) that only sets a flag.
- After each trained step (``on_train_batch_end`` of a batch after which the optimizer
  stepped: never in the middle of gradient accumulation, never a batch only fetched;
  not the last step of an epoch nor one a validation follows, from which Lightning does
  not resume exactly: then after the next step), when the flag is set (on any rank),
  ``trainer.save_checkpoint`` writes the Lightning checkpoint (plus this callback's
  state: the RNG states of torch, CUDA, Python and NumPy) to a temporary file in
  ``checkpoint_dir``, which is fsynced and renamed to ``step-<N>`` (N =
  ``trainer.global_step``); older ones are removed; a ``checkpoint`` progress record is
  written and ``SystemExit(85)`` is raised from the hook. Lightning tears down
  (``on_exception`` hooks run) and re-raises it, so ``trainer.fit`` does not return and
  the script exits 85, which ``RequeueExitHold=85`` turns into "requeued held". Code
  after ``fit`` runs only when training is complete.
- `resume_path()` is the newest checkpoint (None on the first start); given to
  ``trainer.fit(ckpt_path=...)``, Lightning restores everything and this callback puts
  the RNG states back when training starts. Starting without it while a checkpoint
  exists is refused (training would silently start over).
- Exact mid-epoch resume needs the loader's position: every training DataLoader must
  be stateful (``state_dict``/``load_state_dict``, as torchdata's StatefulDataLoader),
  which Lightning saves in its loop state; another loader is refused when training
  starts, with a message saying what to use.
- Progress records (`slurm_gavel.job.progress`): ``start``, ``progress`` (every
  ``GAVEL_PROGRESS_INTERVAL`` seconds, with steps/s), ``checkpoint`` and ``done`` (when
  ``fit`` ends normally). ``step`` is ``trainer.global_step`` (optimizer steps) and
  ``total_steps`` is ``trainer.estimated_stepping_batches``: Lightning's ``max_steps`` /
  ``max_epochs`` decide when training ends. When it is done, the checkpoints are removed
  (``keep_checkpoint=True`` keeps the last).
- Lightning's own SLURM auto-requeue (``SLURMEnvironment(auto_requeue=True)``, its
  default, on SIGUSR1) calls ``scontrol requeue`` itself, which would take the job out
  of the scheduler's hands: the callback turns it off in its ``setup`` hook, before
  Lightning installs its signal handlers (pass ``SLURMEnvironment(auto_requeue=False)``
  to say so explicitly).

Off Slurm: no signal handler, no progress records, never stops by itself;
``resume_path()`` still finds checkpoints in an explicit ``checkpoint_dir``.

The framework is imported only when the callback is created (``lightning.pytorch`` or
``pytorch_lightning``, whichever the script imported; ``lightning.pytorch`` when both or
neither), so this module imports with the standard library only.
"""
from __future__ import annotations

import math
import os
import random
import re
import shutil
import signal as _signal
import sys
import threading
import time
from pathlib import Path

from . import progress as _progress
from .iterator import (DEFAULT_PROGRESS_INTERVAL, PROGRESS_INTERVAL_ENV,
                       REQUEUE_EXIT_CODE, checkpoint_name, list_checkpoints, newest_checkpoint,
                       signal_number)

_TMP = re.compile(r"\.step-[0-9]+\.tmp-[0-9]+\Z")
_caught = {"signum": None, "received": False}


def _log(message: str) -> None:
    print(f"gavel: {message}", file=sys.stderr, flush=True)


def _on_signal(_signum, _frame) -> None:
    _caught["received"] = True           # nothing else: acted on after the next trained step


def catch_signal_early(signal_name="USR2") -> None:
    """Under Slurm, catch the preemption signal from now on (the handler only sets a flag).

    Call it first thing in the script: a signal during imports and setup is then kept
    and acted on after the first trained step. Without it, a signal before the callback
    exists ends the process. Does nothing without ``SLURM_JOB_ID``.
    """
    if not os.environ.get("SLURM_JOB_ID"):
        return
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("the preemption signal can be caught in the main thread only")
    signum = signal_number(signal_name)
    if _caught["signum"] != signum or _signal.getsignal(signum) is not _on_signal:
        _signal.signal(signum, _on_signal)
        _caught["signum"] = signum


def _framework(name: str | None):
    """The Lightning package the script uses: ``lightning.pytorch`` or ``pytorch_lightning``."""
    import importlib
    if name is None:
        imported = [n for n in ("lightning.pytorch", "pytorch_lightning") if sys.modules.get(n)]
        names = imported[:1] or ["lightning.pytorch", "pytorch_lightning"]
    elif name in ("lightning.pytorch", "pytorch_lightning"):
        names = [name]
    else:
        raise ValueError(f"framework must be 'lightning.pytorch' or 'pytorch_lightning', got {name!r}")
    errors = []
    for candidate in names:
        try:
            return importlib.import_module(candidate)
        except ImportError as e:
            errors.append(f"{candidate}: {e}")
    raise ImportError(f"GavelCallback needs {' or '.join(names)} (pip install 'slurm-gavel[lightning]'); "
                      + "; ".join(errors))


_classes: dict = {}


# -- files (the same atomic-save discipline as the iterator) ------------------------------
def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def _fsync(path: Path, directory: bool = False) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0))
    except OSError:
        if not directory:
            raise
        return
    try:
        os.fsync(fd)
    except OSError:      # some filesystems refuse fsync on directories
        if not directory:
            raise
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    """fsync a file, or (sharded strategies save a directory) every file and directory under it."""
    if not path.is_dir():
        _fsync(path)
        return
    for root, _dirs, files in os.walk(path):
        for f in files:
            _fsync(Path(root) / f)
        _fsync(Path(root), directory=True)


# -- RNG states -----------------------------------------------------------------------
def _rng_states() -> dict:
    import torch
    states = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        # plain ints and strings: Lightning may load checkpoints with torch.load(weights_only=True)
        name, keys, pos, has_gauss, gauss = numpy.random.get_state()
        states["numpy"] = (str(name), [int(k) for k in keys], int(pos), int(has_gauss), float(gauss))
    return states


def _set_rng_states(states: dict) -> None:
    import torch
    torch.set_rng_state(states["torch"])
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    if "numpy" in states:
        import numpy
        name, keys, pos, has_gauss, gauss = states["numpy"]
        numpy.random.set_state((name, numpy.array(keys, dtype=numpy.uint32), pos, has_gauss, gauss))


def _stateful(loader) -> bool:
    return callable(getattr(loader, "state_dict", None)) and \
        callable(getattr(loader, "load_state_dict", None))


def _unresumable_shards(loader) -> str | None:
    """The sampler whose order a resumed DDP run cannot restore, None when there is none.

    With DDP, Lightning wraps a loader's own shuffling sampler in its
    ``DistributedSamplerWrapper``, which draws that sampler's order anew each epoch:
    the loader's saved position then counts batches of an order the restarted run does
    not draw again. A ``DistributedSampler`` (seeded by epoch) or a sequential order is
    restored exactly."""
    sampler = getattr(getattr(loader, "batch_sampler", None), "sampler", None) or getattr(loader, "sampler", None)
    if type(sampler).__name__ != "DistributedSamplerWrapper":
        return None
    inner = getattr(getattr(sampler, "dataset", None), "_sampler", None)
    if inner is None or type(inner).__name__ == "SequentialSampler":
        return None
    return type(inner).__name__


class GavelCallback:
    """A Lightning Callback that checkpoints and exits 85 when slurm-gavel preempts the job.

    See the module docstring. Arguments: ``checkpoint_dir`` (default
    ``$GAVEL_CHECKPOINT_DIR/<jobid>``, else ``$SLURM_SUBMIT_DIR/.gavel/<jobid>.ckpt``),
    ``signal_name`` (USR2), ``requeue_exit_code`` (85), ``keep_checkpoint`` (keep the last
    checkpoint when training is done), ``progress`` (write progress records),
    ``progress_interval`` (seconds), ``framework`` (``"lightning.pytorch"`` or
    ``"pytorch_lightning"``; by default the one the script imported).

    The object is an instance of that framework's ``Callback``.
    """

    def __new__(cls, *args, framework: str | None = None, **kwargs):
        pl = _framework(framework)
        klass = _classes.get(pl.__name__)
        if klass is None:
            klass = _classes[pl.__name__] = type("GavelCallback", (GavelCallback, pl.Callback),
                                                  {"__module__": __name__, "_pl": pl})
        return object.__new__(klass)

    def __init__(self, checkpoint_dir=None, signal_name="USR2",
                 requeue_exit_code: int = REQUEUE_EXIT_CODE, keep_checkpoint: bool | None = None,
                 progress: bool = True, progress_interval: float | None = None,
                 framework: str | None = None):
        env = os.environ
        self.job_id = env.get("SLURM_JOB_ID") or None
        self.managed = self.job_id is not None
        if checkpoint_dir is None and self.managed:
            checkpoint_dir = _progress.default_checkpoint_dir(self.job_id, env)
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self.requeue_exit_code = int(requeue_exit_code)
        if keep_checkpoint is None:       # the job's environment decides: GAVEL_KEEP_CHECKPOINTS=1
            keep_checkpoint = os.environ.get("GAVEL_KEEP_CHECKPOINTS", "").strip().lower() in (
                "1", "true", "yes")
        self.keep_checkpoint = bool(keep_checkpoint)
        self.progress = bool(progress)
        if progress_interval is None:
            progress_interval = float(env.get(PROGRESS_INTERVAL_ENV) or DEFAULT_PROGRESS_INTERVAL)
        self.progress_interval = float(progress_interval)
        self.signum = signal_number(signal_name)
        if self.managed:
            catch_signal_early(self.signum)
        self.progress_path = None
        self.save_seconds = None
        self._resumed_step = None         # the step of the checkpoint Lightning restored
        self._rng_to_restore = None
        self._last_global_step = None
        self._last_time = self._last_step = None
        self._total_steps = None
        self._world_size = 1
        self._progress_failed = False

    # -- the user's calls -------------------------------------------------------------------
    def resume_path(self) -> str | None:
        """The newest checkpoint to resume from, for ``trainer.fit(..., ckpt_path=...)``."""
        if self.checkpoint_dir is None:
            return None
        self._clean_temporaries()
        found = newest_checkpoint(self.checkpoint_dir)
        return str(found[1]) if found else None

    def request_stop(self) -> None:
        """Checkpoint and exit after the next trained step, as if the signal had come."""
        _caught["received"] = True

    @property
    def stop_requested(self) -> bool:
        return bool(_caught["received"])

    # -- checkpoint state (Lightning stores it in checkpoint["callbacks"]) ------------------
    def state_dict(self) -> dict:
        return {"rng": _rng_states(), "step": self._global_step}

    def load_state_dict(self, state_dict: dict) -> None:
        self._resumed_step = state_dict.get("step")
        self._rng_to_restore = state_dict.get("rng")

    # -- hooks ------------------------------------------------------------------------------
    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage != "fit":
            return
        self._trainer = trainer
        environment = getattr(getattr(trainer, "_accelerator_connector", None), "cluster_environment", None)
        import importlib
        slurm_env = importlib.import_module(f"{self._pl.__name__}.plugins.environments").SLURMEnvironment
        if isinstance(environment, slurm_env) and getattr(environment, "auto_requeue", False):
            # Lightning's SIGUSR1 handler would `scontrol requeue` the job itself (not held).
            environment.auto_requeue = False
            if trainer.is_global_zero and self.managed:
                _log("turned Lightning's SLURM auto-requeue off: slurm-gavel requeues this job")
        self._world_size = trainer.world_size
        if self.managed and self.progress and trainer.is_global_zero:
            self.progress_path = _progress.progress_path(_progress.job_key() or self.job_id)

    def on_train_start(self, trainer, pl_module) -> None:
        self._refuse_inexact(trainer)
        newest = newest_checkpoint(self.checkpoint_dir) if self.checkpoint_dir else None
        if newest is not None and self._resumed_step != newest[0]:
            raise RuntimeError(
                f"gavel: a checkpoint of step {newest[0]} is in {self.checkpoint_dir} but the trainer "
                f"did not resume from it: pass ckpt_path=gavel.resume_path() to trainer.fit")
        if self._rng_to_restore is not None:
            # After Lightning made the loader's iterator (which draws from torch's RNG):
            # training goes on with the random numbers of the uninterrupted run.
            _set_rng_states(self._rng_to_restore)
            self._rng_to_restore = None
        total = trainer.estimated_stepping_batches
        self._total_steps = int(total) if isinstance(total, (int, float)) and math.isfinite(total) else None
        self._last_global_step = trainer.global_step
        self._last_time, self._last_step = time.monotonic(), trainer.global_step
        self._record("start", trainer.global_step, steps_per_second=None)
        if trainer.is_global_zero and self.managed and self._resumed_step is not None:
            _log(f"resumed from step {self._resumed_step} ({self.resume_path()})")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step == self._last_global_step:
            return                  # gradients accumulating: no step was trained
        self._last_global_step = step
        stop = bool(_caught["received"])
        if trainer.world_size > 1:
            stop = trainer.strategy.reduce_boolean_decision(stop, all=False)
        if stop and not self._training_done(trainer) and not self._epoch_end_or_validation_next(trainer):
            self._preempt(trainer)
        if self.progress_path is not None and time.monotonic() - self._last_time >= self.progress_interval:
            self._measured("progress", step)

    def on_fit_end(self, trainer, pl_module) -> None:
        self._measured("done", trainer.global_step)
        if trainer.is_global_zero and self.checkpoint_dir is not None and not self.keep_checkpoint:
            for _step, path in list_checkpoints(self.checkpoint_dir):
                _remove(path)
            self._clean_temporaries()
            try:
                self.checkpoint_dir.rmdir()
            except OSError:
                pass

    # -- internals --------------------------------------------------------------------------
    @property
    def _global_step(self):
        trainer = getattr(self, "_trainer", None)
        return trainer.global_step if trainer is not None else None

    @staticmethod
    def _epoch_end_or_validation_next(trainer) -> bool:
        """Whether the epoch's end or a validation follows this step.

        Lightning resumes exactly from a step in the middle of an epoch, but from the
        last step of an epoch its loops count the epoch twice and the loader starts an
        empty epoch, and a validation after the step (which draws from torch's RNG)
        would be skipped: the stop then waits for the next step."""
        loop = trainer.fit_loop.epoch_loop
        if loop.batch_progress.is_last_batch:
            return True
        batches = trainer.num_training_batches
        if math.isfinite(batches) and loop.batch_idx + 1 >= batches:
            return True
        if not trainer.enable_validation:
            return False
        every = trainer.check_val_every_n_epoch
        if every is not None and (trainer.current_epoch + 1) % every:
            return False
        val_every = trainer.val_check_batch
        if val_every is None or not math.isfinite(val_every):
            return False
        done = (loop.total_batch_idx if every is None else loop.batch_idx) + 1
        return done % int(val_every) == 0

    @staticmethod
    def _training_done(trainer) -> bool:
        return 0 <= trainer.max_steps <= trainer.global_step

    @staticmethod
    def _train_loaders(trainer) -> list:
        loaders = trainer.train_dataloader
        flattened = getattr(loaders, "flattened", None)
        if flattened is None:
            flattened = list(loaders.values()) if isinstance(loaders, dict) else \
                list(loaders) if isinstance(loaders, (list, tuple)) else [loaders]
        return flattened

    def _refuse_inexact(self, trainer) -> None:
        for loader in self._train_loaders(trainer):
            if trainer.world_size > 1 and (inner := _unresumable_shards(loader)):
                raise RuntimeError(
                    f"gavel: with {trainer.world_size} ranks Lightning splits the training loader's "
                    f"{inner} with its DistributedSamplerWrapper, which draws a new order when a "
                    f"preempted job restarts, so it would not resume exactly: give the loader "
                    f"torchdata.stateful_dataloader.sampler.StatefulDistributedSampler (made in "
                    f"train_dataloader(), where trainer.world_size and global_rank are known) and "
                    f"Trainer(use_distributed_sampler=False); see docs/lightning.md")
            if not _stateful(loader):
                raise RuntimeError(
                    f"gavel: the training loader ({type(loader).__name__}) cannot tell its position, so a "
                    f"job preempted in the middle of an epoch would not resume exactly: use "
                    f"torchdata.stateful_dataloader.StatefulDataLoader (same arguments as DataLoader)")
            try:
                len(loader)
            except TypeError:
                # Lightning fetches one batch ahead from a loader without a length: the
                # saved position would count that batch as trained, and a resume skip it.
                raise RuntimeError(
                    f"gavel: the training loader ({type(loader).__name__}) has no length, so Lightning "
                    f"fetches a batch ahead and a preempted job would skip it when it resumes: give "
                    f"the dataset a __len__") from None

    def _clean_temporaries(self) -> None:
        try:
            entries = os.listdir(self.checkpoint_dir)
        except (FileNotFoundError, TypeError):
            return
        for entry in entries:
            if _TMP.match(entry):
                _remove(self.checkpoint_dir / entry)

    def _preempt(self, trainer) -> None:
        if self.checkpoint_dir is None:
            raise RuntimeError("gavel: stop requested but there is no checkpoint_dir to save to")
        step = trainer.global_step
        directory = self.checkpoint_dir
        final = directory / checkpoint_name(step)
        # one name on every rank: trainer.save_checkpoint is collective (rank 0 writes)
        tmp = Path(trainer.strategy.broadcast(str(directory / f".{checkpoint_name(step)}.tmp-{os.getpid()}")))
        t0 = time.perf_counter()
        if trainer.is_global_zero:
            directory.mkdir(parents=True, exist_ok=True)
            _remove(tmp)
        try:
            trainer.save_checkpoint(str(tmp))
            if trainer.is_global_zero:
                if not os.path.lexists(tmp):
                    raise RuntimeError(f"trainer.save_checkpoint({str(tmp)!r}) wrote nothing")
                _fsync_tree(tmp)
                if tmp.is_dir() and final.exists():
                    _remove(tmp)          # a directory cannot replace another atomically
                else:
                    os.replace(tmp, final)
                _fsync(directory, directory=True)
        except BaseException:
            if trainer.is_global_zero:
                _remove(tmp)
            raise
        self.save_seconds = time.perf_counter() - t0
        if trainer.is_global_zero:
            for _old, path in list_checkpoints(directory)[:-1]:
                _remove(path)
            self._measured("checkpoint", step, save_seconds=round(self.save_seconds, 6))
            signame = _signal.Signals(self.signum).name if _caught["received"] else "request"
            _log(f"{signame}: checkpoint of step {step} saved to {final} in {self.save_seconds:.2f} s; "
                 f"exiting {self.requeue_exit_code} (requeue held)")
        trainer.strategy.barrier("gavel-checkpoint")
        sys.stdout.flush()
        sys.stderr.flush()
        # Lightning runs on_exception hooks, tears down and re-raises: fit() does not return.
        raise SystemExit(self.requeue_exit_code)

    def _record(self, event: str, step: int, **fields) -> None:
        if self.progress_path is None:
            return
        record = _progress.job_record(self.job_id, event, step, self._total_steps, self._world_size,
                                      **fields)
        try:
            _progress.write_record(self.progress_path, record)
        except OSError as e:
            if not self._progress_failed:
                _log(f"cannot write progress to {self.progress_path}: {e} (training goes on)")
            self._progress_failed = True

    def _measured(self, event: str, step: int, **fields) -> None:
        now = time.monotonic()
        rate = None
        if self._last_time is not None and now > self._last_time and step > self._last_step:
            rate = round((step - self._last_step) / (now - self._last_time), 6)
        self._record(event, step, steps_per_second=rate, **fields)
        self._last_time, self._last_step = now, step

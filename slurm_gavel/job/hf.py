"""GavelCallback: makes a Hugging Face `Trainer` job preemptible by slurm-gavel.

The lines a training script adds (docs/huggingface.md)::

    +from slurm_gavel.job.iterator import catch_signal_early
    +catch_signal_early()                 # first thing: a signal during setup is kept
     ...
    +from slurm_gavel.job.hf import GavelCallback, resume_checkpoint
    -trainer = Trainer(model=model, args=args, train_dataset=data)
    +trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[GavelCallback()])
    -trainer.train()
    +trainer.train(resume_from_checkpoint=resume_checkpoint(args.output_dir))

and the sbatch script ends with ``exec python train.py ...`` (``#SBATCH --requeue``,
``#SBATCH --open-mode=append``), as for `slurm_gavel.job.iterator.GavelIterator`.

What happens under Slurm (``SLURM_JOB_ID`` set):

- The callback's construction installs a handler for the preemption signal (USR2)
  that only sets a flag; a signal caught earlier by `catch_signal_early` counts.
- At the next step boundary (``on_step_end``: after an optimizer step, so never in
  the middle of gradient accumulation) it sets ``control.should_save`` and
  ``control.should_training_stop``: the Trainer writes its own checkpoint
  ``<output_dir>/checkpoint-<step>`` (model, optimizer, LR scheduler, GradScaler,
  RNG states, trainer_state.json), then ``on_save`` fsyncs it, appends a
  ``checkpoint`` progress record and exits with 85 (``sys.exit``), which
  ``RequeueExitHold=85`` turns into "requeued held". In a distributed job the
  flag is all-reduced every step (all ranks stop after the same step) and every
  rank waits at a barrier after the save before exiting, so a launcher that kills
  the others when one rank exits cannot interrupt the save.
- On the next start `resume_checkpoint` finds the newest complete checkpoint
  and ``trainer.train(resume_from_checkpoint=...)`` restores it; the Trainer
  skips the batches of the current epoch already trained on and restores the RNG
  states after that, so losses, data order (shuffled by Accelerate's seedable
  sampler, a function of the seed and the epoch) and dropout continue exactly as
  in an uninterrupted run (tests/cluster/test_hf_trainer.py compares bitwise).
- A signal that comes after the last step is ignored (the job ends with 0).
- Progress records (`slurm_gavel.job.progress`, rank 0): ``start`` at the
  beginning of training, ``progress`` with steps/s at most every
  ``GAVEL_PROGRESS_INTERVAL`` seconds, ``checkpoint`` and ``done``. ``step`` is
  the Trainer's ``global_step`` (optimizer steps), ``total_steps`` its
  ``max_steps``.
- When training ends, the checkpoints this callback wrote for preemptions are
  removed (``keep_checkpoint=True`` keeps them); checkpoints the Trainer wrote
  by itself (``save_steps``) are the user's and stay.

Settings that would make a resume inexact are refused when training starts:
``save_only_model`` (no optimizer or RNG state), ``ignore_data_skip`` (replays
the epoch's first batches), ``enable_jit_checkpoint`` together with a gavel
signal of TERM (Transformers' own SIGTERM handler would take over the signal,
save before the optimizer step and let the script go on to exit 0). With the
default USR2 the JIT handler and this callback do not meet: Slurm's TERM at a
time limit or ``scancel`` still goes to the JIT handler.

A Trainer script started by ``accelerate launch`` (several
ranks) runs under ``python -m slurm_gavel.job.accelerate launch ...`` (see
`slurm_gavel.job.accelerate`): the wrapper passes the signal on to every rank
and exits 85 for them.

Without Slurm the callback does nothing except refuse those settings.
Transformers is imported only when `GavelCallback` is first used.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal as _signal
import socket
import sys
import threading
import time
from pathlib import Path

from . import progress as _progress
from .accelerate import REQUEUE_FILE_ENV, _early_signal, _fsync_tree
from .iterator import (DEFAULT_PROGRESS_INTERVAL, PROGRESS_INTERVAL_ENV,
                       REQUEUE_EXIT_CODE, catch_signal_early, signal_number)

PREEMPTED_MARKER = "gavel-preempted"     # in a checkpoint this callback wrote
TRAINER_STATE = "trainer_state.json"     # the Trainer writes it after everything else
JIT_INCOMPLETE = "checkpoint-is-incomplete.txt"   # Transformers' JIT checkpoint sentinel
_CHECKPOINT = re.compile(r"checkpoint-([0-9]+)\Z")

__all__ = ["GavelCallback", "catch_signal_early", "checkpoint_dir", "complete_checkpoints",
           "resume_checkpoint"]


def _log(message: str) -> None:
    print(f"gavel: {message}", file=sys.stderr, flush=True)


def checkpoint_dir(default=None):
    """Where gavel keeps this job's checkpoints: ``$GAVEL_CHECKPOINT_DIR/<jobid>``,
    else ``$SLURM_SUBMIT_DIR/.gavel/<jobid>.ckpt`` under Slurm; `default` outside
    Slurm. For ``TrainingArguments(output_dir=checkpoint_dir("out"))`` when the
    output directory should be per job."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return default
    return str(_progress.default_checkpoint_dir(job))


def _complete(path: Path) -> bool:
    if (path / JIT_INCOMPLETE).exists():
        return False
    try:
        state = json.loads((path / TRAINER_STATE).read_text())
    except (OSError, ValueError):     # not written yet, or torn by a crash
        return False
    return isinstance(state, dict) and "global_step" in state


def complete_checkpoints(output_dir) -> list[tuple[int, Path]]:
    """(step, path) of the complete ``checkpoint-<step>`` directories in `output_dir`, oldest first.

    Complete: its ``trainer_state.json``, which the Trainer writes last, parses
    (a save cut short by a kill lacks it or has it torn), and it has no
    Transformers JIT "incomplete" sentinel."""
    try:
        entries = os.listdir(output_dir)
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for entry in entries:
        m = _CHECKPOINT.match(entry)
        path = Path(output_dir) / entry
        if m and path.is_dir() and _complete(path):
            found.append((int(m.group(1)), path))
    return sorted(found)


def resume_checkpoint(output_dir) -> str | None:
    """The newest complete checkpoint in `output_dir` for ``trainer.train(resume_from_checkpoint=...)``,
    or None (start from scratch).

    Unlike ``resume_from_checkpoint=True`` (Transformers' ``get_last_checkpoint``,
    which takes the highest-numbered directory even when its save was cut short,
    and raises when there is none), this skips incomplete ones."""
    found = complete_checkpoints(output_dir)
    if not found:
        return None
    if os.environ.get("SLURM_JOB_ID"):
        _log(f"resuming from {found[-1][1]} (step {found[-1][0]})")
    return str(found[-1][1])


class _Collective:
    """MAX all-reduce and barrier over torch.distributed, when the job initialized it."""

    def __init__(self):
        torch = sys.modules.get("torch")
        dist = getattr(torch, "distributed", None) if torch else None
        self.active = bool(dist is not None and dist.is_available() and dist.is_initialized())
        if not self.active:
            return
        self.torch, self.dist = torch, dist
        self.device = torch.device("cpu")
        if str(dist.get_backend()).lower() == "nccl":
            self.device = torch.device("cuda", torch.cuda.current_device())

    def max(self, value: int) -> int:
        if not self.active:
            return int(value)
        t = self.torch.tensor([int(value)], dtype=self.torch.int64, device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return int(t.item())

    def barrier(self) -> None:
        if self.active:
            self.dist.barrier()


class _GavelCallbackMixin:
    """The callback's behaviour; `GavelCallback` adds transformers' TrainerCallback as a base."""

    def __init__(self, signal_name="USR2", requeue_exit_code: int = REQUEUE_EXIT_CODE,
                 keep_checkpoint: bool | None = None, progress: bool = True,
                 progress_interval: float | None = None):
        self.requeue_exit_code = int(requeue_exit_code)
        if keep_checkpoint is None:       # the job's environment decides: GAVEL_KEEP_CHECKPOINTS=1
            keep_checkpoint = os.environ.get("GAVEL_KEEP_CHECKPOINTS", "").strip().lower() in (
                "1", "true", "yes")
        self.keep_checkpoint = bool(keep_checkpoint)
        self.job_id = os.environ.get("SLURM_JOB_ID") or None
        self.managed = self.job_id is not None
        self.signum = signal_number(signal_name)
        self._want_progress = bool(progress)
        if progress_interval is None:
            progress_interval = float(os.environ.get(PROGRESS_INTERVAL_ENV) or DEFAULT_PROGRESS_INTERVAL)
        self.progress_interval = float(progress_interval)
        self.progress_path = None
        self._flag = False
        self._saving_step = None
        self._collective = None
        self._last_time, self._last_step = time.monotonic(), 0
        self._progress_failed = False
        if self.managed:
            if threading.current_thread() is not threading.main_thread():
                raise RuntimeError("GavelCallback must be created in the main thread under Slurm "
                                   "(Python delivers signals to the main thread only)")
            _signal.signal(self.signum, self._on_signal)
            if _early_signal(self.signum):
                self._flag = True          # came during the script's setup

    def _on_signal(self, signum, frame) -> None:
        self._flag = True               # nothing else: acted on at the next step boundary

    def request_stop(self) -> None:
        """Checkpoint and exit 85 after the next optimizer step, as if the signal had come."""
        self._flag = True

    # -- checks -------------------------------------------------------------------
    def _refuse_inexact(self, args) -> None:
        problems = []
        if getattr(args, "save_only_model", False):
            problems.append("save_only_model=True (the checkpoint would lack the optimizer, "
                            "scheduler and RNG states)")
        if getattr(args, "ignore_data_skip", False):
            problems.append("ignore_data_skip=True (a resumed epoch would replay its first batches)")
        if getattr(args, "enable_jit_checkpoint", False) and self.signum == _signal.SIGTERM:
            problems.append("enable_jit_checkpoint=True with the gavel signal TERM (Transformers' "
                            "SIGTERM handler would take it over and end the job with 0)")
        if problems:
            raise ValueError("slurm-gavel cannot resume this Trainer exactly: "
                             + "; ".join(problems))

    # -- progress -----------------------------------------------------------------
    def _record(self, event: str, state, **fields) -> None:
        if self.progress_path is None:
            return
        env = os.environ
        try:
            restart = int(env.get("SLURM_RESTART_COUNT") or 0)
        except ValueError:
            restart = 0
        world = 1
        if self._collective is not None and self._collective.active:
            world = self._collective.dist.get_world_size()
        record = {"job": self.job_id, "time": round(time.time(), 3), "event": event,
                  "step": int(state.global_step), "total_steps": int(state.max_steps or 0) or None,
                  **fields, "partition": env.get("SLURM_JOB_PARTITION"),
                  "node": env.get("SLURMD_NODENAME") or socket.gethostname(),
                  "restart": restart, "world_size": world}
        try:
            _progress.write_record(self.progress_path, record)
        except OSError as e:
            if not self._progress_failed:
                _log(f"cannot write progress to {self.progress_path}: {e} (training goes on)")
            self._progress_failed = True

    def _measured(self, event: str, state, **fields) -> None:
        now = time.monotonic()
        elapsed, steps = now - self._last_time, state.global_step - self._last_step
        rate = round(steps / elapsed, 6) if elapsed > 0 and steps > 0 else None
        self._record(event, state, steps_per_second=rate, **fields)
        self._last_time, self._last_step = now, state.global_step

    # -- Trainer events -------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):
        self._refuse_inexact(args)
        self._collective = _Collective()
        if self.managed and self._want_progress and state.is_world_process_zero:
            self.progress_path = _progress.progress_path(_progress.job_key() or self.job_id)
        self._last_time, self._last_step = time.monotonic(), state.global_step
        self._record("start", state, steps_per_second=None)

    def on_step_end(self, args, state, control, **kwargs):
        if not self.managed:
            return
        stop = self._collective.max(1 if self._flag else 0) if self._collective else self._flag
        if stop and state.global_step < state.max_steps:
            control.should_save = True
            control.should_training_stop = True
            self._saving_step = state.global_step
            self._save_started = time.perf_counter()
        elif self.progress_path is not None and state.global_step > self._last_step and \
                time.monotonic() - self._last_time >= self.progress_interval:
            self._measured("progress", state)

    def on_save(self, args, state, control, **kwargs):
        if self._saving_step is None or state.global_step != self._saving_step:
            return                        # the Trainer's own save_steps checkpoint
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero:
            (path / PREEMPTED_MARKER).write_text(f"{state.global_step}\n")
            _fsync_tree(path)
        self._collective.barrier()         # every rank's part of the checkpoint is on disk
        save_seconds = time.perf_counter() - self._save_started
        self._measured("checkpoint", state, save_seconds=round(save_seconds, 6))
        if state.is_world_process_zero:
            name = _signal.Signals(self.signum).name
            _log(f"{name}: checkpoint of step {state.global_step} saved to {path} in "
                 f"{save_seconds:.2f} s; exiting {self.requeue_exit_code} (requeue held)")
        marker = os.environ.get(REQUEUE_FILE_ENV)     # set by the accelerate launch wrapper
        if marker:
            Path(marker).write_text(f"{state.global_step}\n")
        sys.stdout.flush()
        sys.stderr.flush()
        # The handler stays: a second signal while exiting must not kill the process.
        sys.exit(self.requeue_exit_code)

    def on_train_end(self, args, state, control, **kwargs):
        if state.global_step < state.max_steps:
            return
        self._measured("done", state)
        if self.keep_checkpoint or not state.is_world_process_zero:
            return
        for _step, path in complete_checkpoints(args.output_dir):
            if (path / PREEMPTED_MARKER).exists():
                shutil.rmtree(path, ignore_errors=True)


_classes: dict = {}


def __getattr__(name):
    # GavelCallback subclasses transformers' TrainerCallback: made on first use, so
    # that importing this module does not import transformers.
    if name != "GavelCallback":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _classes:
        from transformers import TrainerCallback

        class GavelCallback(_GavelCallbackMixin, TrainerCallback):
            """Checkpoint through the Trainer and exit 85 on slurm-gavel's preemption signal.

            Arguments: ``signal_name`` (USR2), ``requeue_exit_code`` (85),
            ``keep_checkpoint`` (keep the preemption checkpoints when training
            ends), ``progress`` (write progress records), ``progress_interval``
            (seconds; default ``$GAVEL_PROGRESS_INTERVAL`` or 30). See the module
            docstring."""
            __module__ = __name__
        _classes[name] = GavelCallback
    return _classes[name]

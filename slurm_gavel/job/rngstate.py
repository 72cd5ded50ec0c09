"""The random-number state a training run depends on, for GavelIterator's checkpoints.

Owns capturing and restoring the process's global generators (torch's CPU
generator, CUDA's when CUDA is already initialized, numpy's legacy global one
when numpy is imported, python's `random`), the `torch.Generator` objects a data
loader draws its order from (the loader's, its sampler's, its batch sampler's
sampler's), and the iterator's state file next to each checkpoint.

Only the standard library; torch and numpy are used when the job imported them
(never imported here, so that a job without numpy does not load it).
"""
from __future__ import annotations

import os
import pickle
import random
import sys
from pathlib import Path


def capture() -> dict:
    """The global generators' states, now."""
    state = {"python": random.getstate()}
    torch = sys.modules.get("torch")
    if torch is not None:
        state["torch"] = torch.get_rng_state()
        # Never initialize CUDA here: a job that has not touched it draws nothing from it.
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        state["numpy"] = numpy.random.get_state()
    return state


def restore(state: dict) -> list[str]:
    """Set the global generators to `state`; returns what could not be restored."""
    missed = []
    random.setstate(state["python"])
    torch = sys.modules.get("torch")
    if "torch" in state and torch is not None:
        torch.set_rng_state(state["torch"])
    cuda = state.get("cuda")
    if cuda is not None and torch is not None:
        if torch.cuda.is_available() and torch.cuda.device_count() == len(cuda):
            torch.cuda.set_rng_state_all(cuda)
        else:
            missed.append(f"CUDA ({len(cuda)} devices saved)")
    if "numpy" in state:
        numpy = sys.modules.get("numpy")
        if numpy is None:
            import numpy  # the checkpoint's job used it; so will this one
        numpy.random.set_state(state["numpy"])
    return missed


def loader_generators(loader) -> list:
    """The distinct torch.Generator objects `loader`'s order and worker seeds come from."""
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    batch_sampler = getattr(loader, "batch_sampler", None)
    found, seen = [], set()
    for owner in (loader, getattr(loader, "sampler", None), batch_sampler,
                  getattr(batch_sampler, "sampler", None)):
        g = getattr(owner, "generator", None)
        if isinstance(g, torch.Generator) and id(g) not in seen:
            seen.add(id(g))
            found.append(g)
    return found


def capture_generators(loader) -> list:
    return [g.get_state() for g in loader_generators(loader)]


def restore_generators(loader, states: list) -> None:
    generators = loader_generators(loader)
    if len(generators) != len(states):
        raise ValueError(f"the data loader has {len(generators)} torch.Generator(s), the "
                         f"checkpoint {len(states)}: build it as the checkpointed run did")
    for g, s in zip(generators, states):
        g.set_state(s)


def write(path: Path, data: dict) -> None:
    """Write `data` to `path` atomically (temporary file, fsync, rename)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            pickle.dump(data, f, protocol=pickle.HIGHEST_PROTOCOL)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
        raise


def read(path: Path) -> dict:
    # The job's own file in its own checkpoint directory, as trusted as the
    # checkpoint that load_checkpoint reads.
    with open(path, "rb") as f:
        return pickle.load(f)

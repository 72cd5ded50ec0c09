"""cvxpy and scipy.sparse, imported on first use.

Importing cvxpy takes about a second (scipy.stats comes with it), and most
runs never need it: the LPs of a simulation on Gavel's workloads go to HiGHS
directly (direct.py), and commands that only read or print never solve.  The
policy modules take `cvxpy` from here; the real module is imported the first
time one of its names is read, and its names are then kept on the stand-in.
"""
from __future__ import annotations

import importlib
from types import ModuleType


class _Deferred:
    """Stands for module `name` until a name of it is first read."""

    def __init__(self, name: str):
        self.__dict__["_name"] = name

    def _load(self) -> ModuleType:
        module = importlib.import_module(self.__dict__["_name"])
        self.__dict__.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
        return module

    def __getattr__(self, attr: str):
        # only for names not kept yet (the first read, or a submodule imported later)
        return getattr(self._load(), attr)

    def __setattr__(self, attr, value):
        raise AttributeError(f"{self.__dict__['_name']} (deferred) is read-only here")


cvxpy = _Deferred("cvxpy")
scipy_sparse = _Deferred("scipy.sparse")     # the cvxpy route's matrices (program.py)

__all__ = ["cvxpy", "scipy_sparse"]

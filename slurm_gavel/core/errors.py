"""Errors that reach users: each names what is wrong in one line."""
from __future__ import annotations


class GavelError(Exception):
    """Base class of every error slurm-gavel reports to a user."""


class InputError(GavelError, ValueError):
    """Bad input: `field` names the offending field (dotted path), `problem` says why."""

    def __init__(self, field: str, problem: str):
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")

    def __reduce__(self):   # survives the trip back from a worker process
        return (type(self), (self.field, self.problem))


class SolverError(GavelError, RuntimeError):
    """The solver did not reach an optimal solution; no allocation is returned."""


class UnknownPolicyError(GavelError, KeyError):
    def __init__(self, name: str, known: list[str]):
        self.name = name
        self.known = list(known)
        super().__init__(f"unknown policy {name!r}; known policies: {', '.join(known)}")

    def __reduce__(self):
        return (type(self), (self.name, self.known))

    def __str__(self):
        return self.args[0]

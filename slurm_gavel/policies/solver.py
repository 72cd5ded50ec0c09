"""Solving: which solver, with what options, and what counts as an answer.

HiGHS for LPs (its interior point), Clarabel as the fallback (and the solver for conic
problems such as finish-time fairness).  A status other than optimal raises
`SolverError`: a wrong X never leaves this module.  Also the cache of compiled
problems that lets a policy refill numbers instead of rebuilding.
"""
from __future__ import annotations

import os
import sys
import warnings
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from .lazy import cvxpy as cp
from ..core.errors import SolverError
from .program import AllocationProgram

# Options per solver.  HiGHS' interior point (with crossover, so X is a vertex)
# is 5-20x faster than its simplex on these LPs past a few hundred jobs; on
# small ones (the simulator solves thousands of them) its simplex is faster.
HIGHS_LP = ("HIGHS", {"highs_options": {"solver": "ipm"}})
HIGHS_SIMPLEX_BELOW = 2000     # variables
CLARABEL = ("CLARABEL", {})
LP_SOLVERS = (HIGHS_LP, CLARABEL)
CONIC_SOLVERS = (CLARABEL,)


_highs_banner_done = False


def _silence_highs_banner():
    """HiGHS prints a copyright banner on stdout the first time a solver is made.

    That would corrupt `--json` output; make the first one with stdout pointed
    at /dev/null (later ones print nothing).
    """
    global _highs_banner_done
    if _highs_banner_done:
        return
    _highs_banner_done = True
    try:
        import highspy
    except ImportError:
        return
    sys.stdout.flush()
    saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(devnull)
        os.close(saved)


def match_scheduler_threads(h) -> None:
    """Set HiGHS instance `h`'s `threads` option to the thread count of HiGHS' global scheduler.

    With `threads` at 0 (its default) every `run` of HiGHS 1.16 counts the
    machine's physical cores twice, reading /sys for each CPU (about a tenth
    of the run of the simulator's small LPs); with the scheduler's own count
    it does that once.  The scheduler is made once per process (on the first
    run, of any instance), so the count is found by trying: a `threads` that
    differs from it makes `run` fail at once.  Nothing else changes: the
    scheduler is the one the process has anyway.
    """
    import highspy
    h.passModel(1, 0, 0, int(highspy.MatrixFormat.kColwise), int(highspy.ObjSense.kMinimize), 0.0,
                np.zeros(1), np.zeros(1), np.ones(1), np.zeros(0), np.zeros(0),
                np.zeros(1, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0),
                np.zeros(1, dtype=np.int32))
    h.run()                                     # makes the scheduler if nothing did yet
    for threads in range(1, (os.cpu_count() or 1) + 1):
        h.setOptionValue("threads", threads)
        if h.run() != highspy.HighsStatus.kError:
            break
    else:
        h.setOptionValue("threads", 0)
    h.clearModel()


# cvxpy compiles a problem with Parameters once and then only refills the
# numbers (DPP).  That compilation grows with the square of the parameters'
# size here (multiply(parameter, variable) over every entry of X):
# bench/dpp_compile.py measured 0.04 s at 3,600 entries, 0.61 s at 14,000 and
# 2.9 s at 40,000, against 0.01-0.04 s to compile the same problems with the
# values as constants.  So problems up to this many parameter entries are
# compiled once and reused; larger ones are compiled with constants on every
# solve (ignore_dpp), which is faster.
DPP_PARAMETER_LIMIT = 4096


def parameter_entries(problem: cp.Problem) -> int:
    return sum(int(np.prod(p.shape)) for p in problem.parameters())


def solve(problem: cp.Problem, solvers, what: str) -> float:
    """Solve with the first solver that reaches optimality; raise SolverError otherwise."""
    _silence_highs_banner()
    ignore_dpp = parameter_entries(problem) > DPP_PARAMETER_LIMIT
    small = sum(v.size for v in problem.variables()) < HIGHS_SIMPLEX_BELOW
    tried = []
    for name, options in solvers:
        if name == "HIGHS" and small:
            options = {"highs_options": {"solver": "simplex"}}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                problem.solve(solver=name, ignore_dpp=ignore_dpp, **options)
        except (cp.error.SolverError, ValueError) as err:
            # cvxpy raises ValueError when a solver stops without a status
            # (HiGHS "unknown"): a failure of that solver, not of the input.
            tried.append(f"{name}: {str(err).splitlines()[0] if str(err) else type(err).__name__}")
            continue
        if problem.status == cp.OPTIMAL:
            return float(problem.value)
        tried.append(f"{name}: status {problem.status}")
    raise SolverError(f"{what}: no optimal solution ({'; '.join(tried)})")


@dataclass
class Compiled:
    """A built problem and the handles a policy needs to refill and read it."""

    program: AllocationProgram
    problem: cp.Problem
    params: dict


class ProgramCache:
    """Recently compiled problems of one policy, by structure.

    The simulator re-solves after every arrival and departure, and the
    number of job classes moves up and down by one: keeping a few dozen
    small compiled problems saves a compile (10-20 ms) on most solves.
    Large problems are kept only while they fit `max_entries` X entries in
    all (a compiled problem at 2,048 jobs holds tens of MB).
    """

    def __init__(self, size: int = 32, max_entries: int = 200_000):
        self.size = size
        self.max_entries = max_entries
        self._entries: OrderedDict = OrderedDict()

    @staticmethod
    def _weight(entry) -> int:
        program = getattr(entry, "program", None)
        if program is None:
            return 0
        return program.n_jobs * program.n_types + program.n_pairs * program.n_types

    def _evict(self):
        while len(self._entries) > 1 and (
                len(self._entries) > self.size
                or sum(self._weight(e) for e in self._entries.values()) > self.max_entries):
            self._entries.popitem(last=False)

    def get(self, key, build):
        entry = self._entries.get(key)
        if entry is None:
            entry = build()
            self._entries[key] = entry
            self._evict()
        else:
            self._entries.move_to_end(key)
        return entry

    def put(self, key, entry):
        self._entries[key] = entry
        self._entries.move_to_end(key)
        self._evict()
        return entry


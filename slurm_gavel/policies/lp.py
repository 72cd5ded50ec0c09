"""The allocation LP shared by every optimizing policy: variables, constraints (1)-(3), solving.

`AllocationProgram` holds the cvxpy variables for one problem *structure*
(number of jobs, worker types, scale factors and the list of job pairs) and
exposes two vector expressions over all jobs at once:

* ``throughput``  -- effective throughput of every job, steps/s
  (seed 1.2 and 1.3: single rows plus both members' share of pair rows);
* ``time``        -- total time share of every job (constraint 2).

Throughputs, capacities and feasibility masks are cvxpy Parameters, so a
policy that is asked again with the same structure but new numbers (a new
throughput estimate, a node lost) re-solves the compiled problem instead of
building it again.  Policies add an objective over these expressions; they
never index single entries of X.

Solving: HiGHS for LPs and MILPs, Clarabel as the fallback (and the solver for
conic problems such as finish-time fairness).  A status other than optimal
raises `SolverError`: a wrong X never leaves this module.
"""
from __future__ import annotations

import os
import sys
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass, replace

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

from ..errors import SolverError
from ..model import Allocation, PolicyInput

# Options per solver.  HiGHS' interior point (with crossover, so X is a vertex)
# is 5-20x faster than its simplex on these LPs past a few hundred jobs.
HIGHS_LP = ("HIGHS", {"highs_options": {"solver": "ipm"}})
HIGHS_MILP = ("HIGHS", {})
CLARABEL = ("CLARABEL", {})
LP_SOLVERS = (HIGHS_LP, CLARABEL)
MILP_SOLVERS = (HIGHS_MILP,)
CONIC_SOLVERS = (CLARABEL,)


@dataclass(frozen=True)
class Structure:
    """What fixes the shape of a compiled problem (the numbers excluded).

    `multiplicity[c]` > 1 makes row c stand for that many identical jobs
    (see symmetry.py): its GPU use counts that many times, and a pair row's
    time and throughput are shared among them.  A pair may then join a row
    with itself (two jobs of the same kind).
    """

    n_jobs: int
    n_types: int
    scale_factors: np.ndarray
    pair_jobs: np.ndarray
    multiplicity: np.ndarray

    @classmethod
    def of(cls, inp: PolicyInput) -> "Structure":
        return cls(inp.n_jobs, inp.n_types, inp.scale_factors, inp.pair_jobs, np.ones(inp.n_jobs))

    def key(self) -> tuple:
        return (self.n_jobs, self.n_types, self.scale_factors.tobytes(), self.pair_jobs.tobytes(),
                self.multiplicity.tobytes())


def structure_key(inp: PolicyInput) -> tuple:
    """What fixes the shape of the compiled problem (numbers excluded)."""
    return Structure.of(inp).key()


@dataclass(frozen=True)
class Numbers:
    """The numbers the base program needs; `of(inp)` or picked rows of it."""

    solo: np.ndarray           # (n, k)
    feasible: np.ndarray       # (n, k) bool
    counts: np.ndarray         # (k,)
    shared: np.ndarray         # (P, k, 2)
    pair_feasible: np.ndarray  # (P, k) bool, or an upper bound per entry

    @classmethod
    def of(cls, inp: PolicyInput) -> "Numbers":
        return cls(inp.solo_throughputs, inp.feasible, inp.counts, inp.shared_throughputs,
                   inp.pair_feasible)


class AllocationProgram:
    """Variables, parameters and base constraints (1)-(3) for one structure."""

    def __init__(self, inp: PolicyInput | None = None, *, structure: Structure | None = None):
        st = structure or Structure.of(inp)
        n, k, npair = st.n_jobs, st.n_types, len(st.pair_jobs)
        self.structure = st
        self.n_jobs, self.n_types, self.n_pairs = n, k, npair
        self.multiplicity = np.asarray(st.multiplicity, dtype=float)
        sf = st.scale_factors.astype(float)
        # X is kept flat, job-major (entry i*k + j), so that every linear map
        # below is one constant sparse matrix and the parameters enter
        # element-wise; this keeps cvxpy's parameter compilation linear in n.
        self.x = cp.Variable(n * k, nonneg=True, name="x")
        self.solo_cap = cp.Parameter(n * k, nonneg=True, name="feasible")
        self.capacity = cp.Parameter(k, nonneg=True, name="counts")
        self._per_job = sp.kron(sp.eye(n, format="csr"), np.ones((1, k)), format="csr")
        time_share = self._per_job @ self.x
        gpus = sp.kron((sf * self.multiplicity)[None, :], sp.eye(k), format="csr") @ self.x
        constraints = [self.x <= self.solo_cap]
        self.x_pairs = None
        if npair:
            a, b = st.pair_jobs[:, 0], st.pair_jobs[:, 1]
            entries = np.arange(npair * k)
            self.x_pairs = cp.Variable(npair * k, nonneg=True, name="x_pairs")
            self.pair_cap = cp.Parameter(npair * k, nonneg=True, name="pair_feasible")
            # A pair row's time and throughput go to each member, shared among
            # the identical jobs a row stands for.
            self._to_a = sp.csr_matrix((np.repeat(1 / self.multiplicity[a], k), (np.repeat(a, k), entries)),
                                       shape=(n, npair * k))
            self._to_b = sp.csr_matrix((np.repeat(1 / self.multiplicity[b], k), (np.repeat(b, k), entries)),
                                       shape=(n, npair * k))
            time_share = time_share + (self._to_a + self._to_b) @ self.x_pairs
            gpus = gpus + sp.kron(sf[a][None, :], sp.eye(k), format="csr") @ self.x_pairs
            constraints.append(self.x_pairs <= self.pair_cap)
        self.time = time_share
        self.gpus = gpus
        self.time_limit = time_share <= 1
        self.gpu_limit = gpus <= self.capacity
        self.constraints = constraints + [self.time_limit, self.gpu_limit]
        self._rates: dict[str, tuple] = {}
        self.throughput = self.rate("throughputs")

    def rate(self, name: str) -> cp.Variable:
        """A per-job rate r_m = sum_j R_mj X_mj (+ pair rows), R a parameter.

        `throughput` is the rate with R = T; a policy may add others (value per
        dollar, say) and fill them with `set_rate`.  Each rate is a variable
        tied to X by an equality constraint, whose dual is the marginal value
        of that rate to the objective: what pricing pair rows needs.
        """
        solo = cp.Parameter(self.n_jobs * self.n_types, nonneg=True, name=name)
        expr = self._per_job @ cp.multiply(solo, self.x)
        shared = None
        if self.n_pairs:
            shared = (cp.Parameter(self.n_pairs * self.n_types, nonneg=True, name=name + "_a"),
                      cp.Parameter(self.n_pairs * self.n_types, nonneg=True, name=name + "_b"))
            expr = (expr + self._to_a @ cp.multiply(shared[0], self.x_pairs)
                    + self._to_b @ cp.multiply(shared[1], self.x_pairs))
        variable = cp.Variable(self.n_jobs, name=name + "_rate")
        definition = variable == expr
        self.constraints.append(definition)
        self._rates[name] = (solo, shared, definition)
        return variable

    def set_rate(self, name: str, solo: np.ndarray, shared: np.ndarray | None = None):
        """Fill rate `name`: solo (n, k) and, with pairs, shared (P, k, 2)."""
        solo_param, shared_params, _ = self._rates[name]
        solo_param.value = np.asarray(solo, dtype=float).ravel()
        if shared_params is not None:
            shared_params[0].value = shared[:, :, 0].ravel()
            shared_params[1].value = shared[:, :, 1].ravel()

    def total(self, expr):
        """Sum of a per-row expression over all jobs (rows count their multiplicity)."""
        return self.multiplicity @ expr

    def set_numbers(self, inp: PolicyInput | Numbers):
        """Load the numbers of `inp` (same structure) into the parameters."""
        numbers = inp if isinstance(inp, Numbers) else Numbers.of(inp)
        self.set_rate("throughputs", numbers.solo, numbers.shared)
        self.solo_cap.value = numbers.feasible.astype(float).ravel()
        self.capacity.value = numbers.counts.astype(float)
        if self.n_pairs:
            self.pair_cap.value = numbers.pair_feasible.astype(float).ravel()

    def reduced_costs(self, pair_jobs: np.ndarray, scale_factors: np.ndarray,
                      shared: dict[str, np.ndarray]) -> np.ndarray:
        """(P, k) gain per unit of each candidate pair row, from the last solve's duals.

        A row of pair (a, b) on type j yields R_a, R_b of every rate and costs
        one unit of a's and b's time and sf GPUs of type j.  With the duals as
        marginal values (cvxpy reports them as improvement per unit, for
        maximization and minimization alike), its reduced cost is
            sum_rates (pi_a R_a + pi_b R_b) - alpha_a - alpha_b - sf * beta_j;
        a positive one would improve the objective (seed 6.2: "only pairs
        that perform well need rows", made exact).
        """
        a, b = pair_jobs[:, 0], pair_jobs[:, 1]
        alpha = np.asarray(self.time_limit.dual_value).reshape(-1)
        beta = np.asarray(self.gpu_limit.dual_value).reshape(-1)
        gain = -(alpha[a] + alpha[b])[:, None] - scale_factors[a][:, None] * beta[None, :]
        for name, (_, _, definition) in self._rates.items():
            pi = np.asarray(definition.dual_value).reshape(-1)
            coef = shared[name]
            gain = gain + pi[a][:, None] * coef[:, :, 0] + pi[b][:, None] * coef[:, :, 1]
        return gain

    def values(self) -> tuple[np.ndarray, np.ndarray]:
        """The solved X (n, k) and pair X (P, k), cleaned of solver noise."""
        x = np.clip(self.x.value.reshape(self.n_jobs, self.n_types), 0.0, None)
        x = np.minimum(x, self.solo_cap.value.reshape(x.shape))
        xp = np.zeros((self.n_pairs, self.n_types))
        if self.n_pairs:
            xp = np.clip(self.x_pairs.value.reshape(self.n_pairs, self.n_types), 0.0, None)
            xp = np.minimum(xp, self.pair_cap.value.reshape(xp.shape))
        # Interior-point solvers leave ~1e-9 where the answer is 0; a share of
        # 1e-7 is 36 microseconds of a 6-minute round.  Call both zero.
        x[x < 1e-7] = 0.0
        xp[xp < 1e-7] = 0.0
        return x, xp


def repair(inp: PolicyInput, x: np.ndarray, xp: np.ndarray,
           pair_jobs: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Scale away the solver's tolerance-sized violations of constraints (2) and (3).

    `pair_jobs` are the jobs of the rows of `xp` (default: inp's pairs).
    """
    pair_jobs = inp.pair_jobs if pair_jobs is None else pair_jobs
    alloc = Allocation(inp.job_ids, inp.worker_types, x, "", pair_jobs=pair_jobs, x_pairs=xp)
    over = alloc.time_fractions()
    row = np.where(over > 1.0, 1.0 / np.maximum(over, 1e-300), 1.0)
    x = x * row[:, None]
    if len(xp):
        xp = xp * np.minimum(row[pair_jobs[:, 0]], row[pair_jobs[:, 1]])[:, None]
    alloc = Allocation(inp.job_ids, inp.worker_types, x, "", pair_jobs=pair_jobs, x_pairs=xp)
    used = alloc.gpus_used(inp.scale_factors.astype(float))
    col = np.where(used > inp.counts, inp.counts / np.maximum(used, 1e-300), 1.0)
    return x * col[None, :], xp * col[None, :]


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


# cvxpy compiles a problem with Parameters once and then only refills the
# numbers (DPP).  That compilation grows with the square of the parameters'
# size here (multiply(parameter, variable) over n*k entries): measured 0.15 s
# at 3,000 entries, 0.65 s at 6,000, 12 s at 24,000, against 0.02-0.08 s to
# compile the same problem with the values as constants.  So problems up to
# this many parameter entries are compiled once and reused; larger ones are
# compiled with constants on every solve (ignore_dpp), which is faster.
DPP_PARAMETER_LIMIT = 4096


def parameter_entries(problem: cp.Problem) -> int:
    return sum(int(np.prod(p.shape)) for p in problem.parameters())


def solve(problem: cp.Problem, solvers, what: str) -> float:
    """Solve with the first solver that reaches optimality; raise SolverError otherwise."""
    _silence_highs_banner()
    ignore_dpp = parameter_entries(problem) > DPP_PARAMETER_LIMIT
    tried = []
    for name, options in solvers:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                problem.solve(solver=name, ignore_dpp=ignore_dpp, **options)
        except cp.error.SolverError as err:
            tried.append(f"{name}: {str(err).splitlines()[0]}")
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
    """The few most recent compiled problems of one policy, by structure."""

    def __init__(self, size: int = 4):
        self.size = size
        self._entries: OrderedDict = OrderedDict()

    def get(self, key, build):
        entry = self._entries.get(key)
        if entry is None:
            entry = build()
            self._entries[key] = entry
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(key)
        return entry


class LinearPolicy:
    """Base of the policies that are one optimization over the allocation program.

    A subclass gives `formulate(program) -> (problem, params)`,
    `parameters(inp) -> {name: value}` and, for rates other than throughput,
    `rates(inp) -> {name: (solo (n, k), shared (P, k, 2))}`; this class
    compiles once per structure, refills, solves and checks the status.
    `objective_value` may turn the solver's value into the policy's own unit
    (e.g. seconds of makespan).

    With pair rows (space sharing) it prices them: it solves over a few
    promising pairs, computes every other pair's reduced cost from the duals,
    adds those that would improve the objective and solves again, until none
    would (column generation).  The result is the optimum over *all* pairs
    while the LP holds only the pairs that matter.
    """

    name = ""
    summary = ""
    supports_space_sharing = True
    takes_all_pairs = True          # it prices pair rows itself
    solvers = LP_SOLVERS
    # Pricing: pairs per job to start from, pairs per job added per round, rounds.
    initial_partners = 2
    max_pricing_rounds = 30
    # Solve identical jobs as one row (exact; see symmetry.py).
    use_symmetry = True
    pricing_batch = 4

    def __init__(self):
        self._cache = ProgramCache()

    def formulate(self, program: AllocationProgram):
        raise NotImplementedError

    def parameters(self, inp: PolicyInput) -> dict:
        return {}

    def rates(self, inp: PolicyInput) -> dict:
        return {}

    def check(self, inp: PolicyInput):
        """Raise InputError when `inp` lacks what this policy needs."""

    def objective_value(self, value: float, inp: PolicyInput) -> float:
        return value

    def solve(self, compiled: Compiled, inp: PolicyInput) -> float:
        return solve(compiled.problem, self.solvers, self.name)

    def info(self, allocation: Allocation, inp: PolicyInput) -> dict:
        """Extra facts for the caller (e.g. SLOs that cannot be met)."""
        return {}

    def allocate(self, inp: PolicyInput) -> Allocation:
        from .space_sharing import prune_pairs
        from .symmetry import find_classes

        self.check(inp)
        started = time.perf_counter()
        if inp.n_jobs == 0:
            return Allocation(inp.job_ids, inp.worker_types, np.zeros((0, inp.n_types)), self.name)
        # Pairs that can never help (seed 6.2) go first; that loses nothing.
        work = prune_pairs(inp, per_job=None) if inp.n_pairs else inp
        classes = find_classes(work, self._per_job_numbers(work)) if self.use_symmetry else None
        if classes is not None:
            allocation = self._solve_classes(work, classes)
            extra = {"job_classes": classes.n_classes}
        elif work.n_pairs:
            allocation, extra = self._priced(work)
        else:
            allocation, _ = self._solve_once(work)
            extra = {}
        extra.update(self.info(allocation, inp))
        return replace(allocation, solve_seconds=time.perf_counter() - started,
                       info={**allocation.info, **extra})

    def _per_job_numbers(self, inp: PolicyInput) -> list:
        """Everything per job this policy looks at, to tell identical jobs apart."""
        numbers = [np.asarray(v, dtype=float) for v in self.parameters(inp).values()]
        numbers += [solo for solo, _ in self.rates(inp).values()]
        return [v for v in numbers if v.ndim and v.shape[0] == inp.n_jobs]

    def _run(self, structure: Structure, numbers: Numbers, rates: dict, params: dict,
             inp: PolicyInput) -> tuple[float, Compiled]:
        """Compile (or reuse) the problem of `structure`, fill in the numbers, solve."""
        def build():
            program = AllocationProgram(structure=structure)
            problem, handles = self.formulate(program)
            return Compiled(program, problem, handles)

        compiled = self._cache.get(structure.key(), build)
        compiled.program.set_numbers(numbers)
        for name, (solo, shared) in rates.items():
            compiled.program.set_rate(name, solo, shared)
        for name, value in params.items():
            compiled.params[name].value = value
        return self.solve(compiled, inp), compiled

    def _solve_once(self, inp: PolicyInput) -> tuple[Allocation, Compiled]:
        value, compiled = self._run(Structure.of(inp), Numbers.of(inp), self.rates(inp),
                                    self.parameters(inp), inp)
        x, xp = repair(inp, *compiled.program.values())
        allocation = Allocation(inp.job_ids, inp.worker_types, x, self.name,
                                objective=self.objective_value(value, inp),
                                pair_jobs=inp.pair_jobs, x_pairs=xp)
        return allocation, compiled

    def _solve_classes(self, inp: PolicyInput, classes) -> Allocation:
        """Solve with one row per class of identical jobs, then give every job its class's row."""
        from .symmetry import class_pair_numbers, expand

        reps, n = classes.representatives, inp.n_jobs
        structure = Structure(classes.n_classes, inp.n_types, inp.scale_factors[reps],
                              classes.pair_classes, classes.sizes.astype(float))
        # A class pair row holds the total time of many job pairs: it is
        # bounded by its members' time, not by 1.
        qa, qb = classes.pair_classes[:, 0], classes.pair_classes[:, 1]
        bound = np.minimum(classes.sizes[qa], classes.sizes[qb]).astype(float)
        pair_feasible = inp.pair_feasible[classes.pair_rows] * bound[:, None]
        numbers = Numbers(inp.solo_throughputs[reps], inp.feasible[reps], inp.counts,
                          class_pair_numbers(inp, classes, inp.shared_throughputs), pair_feasible)
        rates = {name: (solo[reps], class_pair_numbers(inp, classes, shared))
                 for name, (solo, shared) in self.rates(inp).items()}
        params = {name: (np.asarray(v)[reps] if np.ndim(v) and np.shape(v)[0] == n else v)
                  for name, v in self.parameters(inp).items()}
        value, compiled = self._run(structure, numbers, rates, params, inp)
        y, z = compiled.program.values()
        x, pair_jobs, x_pairs = expand(inp, classes, y, z)
        x, x_pairs = repair(inp, x, x_pairs, pair_jobs)
        return Allocation(inp.job_ids, inp.worker_types, x, self.name,
                          objective=self.objective_value(value, inp),
                          pair_jobs=pair_jobs, x_pairs=x_pairs)

    def _priced(self, full: PolicyInput) -> tuple[Allocation, dict]:
        from .space_sharing import initial_pairs, top_per_job

        shared = {"throughputs": full.shared_throughputs}
        shared.update({name: pair for name, (_, pair) in self.rates(full).items()})
        feasible = full.pair_feasible
        active = initial_pairs(full, self.initial_partners)
        for rounds in range(1, self.max_pricing_rounds + 1):
            rows = np.flatnonzero(active)
            allocation, compiled = self._solve_once(full.pairs_subset(rows))
            gain = compiled.program.reduced_costs(full.pair_jobs, full.scale_factors, shared)
            gain = np.where(feasible, gain, -np.inf).max(axis=1)
            # Improvements below this are solver noise, not better pairs.
            tolerance = 1e-7 * max(1.0, abs(float(compiled.problem.value)))
            score = np.where(active | (gain <= tolerance), -np.inf, gain)
            if not np.isfinite(score).any():
                break
            # Each job takes its few most improving partners this round: the
            # best columns are often many copies of one kind of pair, and a
            # few per job is what the next LP can use.
            active |= top_per_job(full.pair_jobs, score, self.pricing_batch) & np.isfinite(score)
        return allocation, {"pair_rows": int(active.sum()), "pricing_rounds": rounds}


class CoefficientPolicy(LinearPolicy):
    """A policy whose numbers are one coefficient per job, `coefficients(inp)`."""

    def coefficients(self, inp: PolicyInput) -> np.ndarray:
        raise NotImplementedError

    def parameters(self, inp: PolicyInput) -> dict:
        return {"coef": self.coefficients(inp)}


class MaxMinPolicy(CoefficientPolicy):
    """maximize_X min_m c_m * throughput(m, X)."""

    def formulate(self, program: AllocationProgram):
        coef = cp.Parameter(program.n_jobs, nonneg=True, name="coef")
        objective = cp.Maximize(cp.min(cp.multiply(coef, program.throughput)))
        return cp.Problem(objective, program.constraints), {"coef": coef}


class MaxSumPolicy(CoefficientPolicy):
    """maximize_X sum_m c_m * throughput(m, X)."""

    def formulate(self, program: AllocationProgram):
        coef = cp.Parameter(program.n_jobs, nonneg=True, name="coef")
        objective = cp.Maximize(program.total(cp.multiply(coef, program.throughput)))
        return cp.Problem(objective, program.constraints), {"coef": coef}

"""The allocation program: cvxpy variables and constraints (1)-(3) over all of X at once.

`AllocationProgram` holds the variables for one problem *structure* (number
of jobs, worker types, scale factors, pair rows, and how many identical jobs a
row stands for) and exposes vector expressions over all jobs:

* ``throughput``  -- effective throughput of every job, steps/s
  (its single row plus its share of every pair row it is a member of);
* ``time``        -- total time share of every job (constraint 2);
* ``gpus``        -- GPUs used per type (constraint 3).

Throughputs, capacities and feasibility masks are cvxpy Parameters, so the
same compiled problem can be refilled with new numbers.  Policies add an
objective over these expressions; they never index single entries of X.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.model import Allocation, PolicyInput
from .lazy import cvxpy as cp
from .lazy import scipy_sparse as sp


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

    def key(self, multiplicity: bool = True) -> tuple:
        key = (self.n_jobs, self.n_types, self.scale_factors.tobytes(), self.pair_jobs.tobytes())
        return key + (self.multiplicity.tobytes(),) if multiplicity else key


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
        # How many jobs a row stands for is a parameter where it only scales
        # GPU use, so that a compiled problem serves every class size (the
        # simulator re-solves after each arrival, and sizes change each time).
        self._multiplicity = cp.Parameter(n * k, nonneg=True, name="multiplicity")
        self._multiplicity.value = np.repeat(self.multiplicity, k)
        gpus = sp.kron(sf[None, :], sp.eye(k), format="csr") @ cp.multiply(self._multiplicity, self.x)
        # Pair rows and `total` use it as a constant: such problems are
        # compiled per multiplicity (see `fixed_multiplicity`).
        self.fixed_multiplicity = npair > 0
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

    def rate_values(self, name: str) -> np.ndarray:
        """(n, k) the solo numbers rate `name` was last filled with."""
        return np.asarray(self._rates[name][0].value, dtype=float).reshape(self.n_jobs, self.n_types)

    def total(self, expr):
        """Sum of a per-row expression over all jobs (rows count their multiplicity)."""
        self.fixed_multiplicity = True
        return self.multiplicity @ expr

    def set_multiplicity(self, multiplicity: np.ndarray):
        """New class sizes for a program whose multiplicity is not fixed."""
        multiplicity = np.asarray(multiplicity, dtype=float)
        if self.fixed_multiplicity and not np.array_equal(multiplicity, self.multiplicity):
            raise ValueError("this program was compiled for other class sizes")
        self.multiplicity = multiplicity
        self._multiplicity.value = np.repeat(multiplicity, self.n_types)

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
        a positive one would improve the objective (a pair row with a
        reduced cost <= 0 would get no share, so it needs no row).
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
        x = clean(self.x.value.reshape(self.n_jobs, self.n_types),
                  self.solo_cap.value.reshape(-1, self.n_types))
        xp = np.zeros((self.n_pairs, self.n_types))
        if self.n_pairs:
            xp = clean(self.x_pairs.value.reshape(self.n_pairs, self.n_types),
                       self.pair_cap.value.reshape(-1, self.n_types))
        return x, xp


def clean(x: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """A solver's X clipped to [0, cap], with solver noise set to 0.

    Interior-point solvers leave ~1e-9 where the answer is 0; a share of
    1e-7 is 36 microseconds of a 6-minute round.  Call both zero.
    """
    # np.maximum, not np.clip (same numbers: -0.0 and noise become 0.0 below; clip's
    # argument handling costs more than the arithmetic on these small arrays)
    x = np.minimum(np.maximum(x, 0.0), cap)
    x[x < 1e-7] = 0.0
    return x


def repair(inp: PolicyInput, x: np.ndarray, xp: np.ndarray,
           pair_jobs: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Scale away the solver's tolerance-sized violations of constraints (2) and (3).

    `pair_jobs` are the jobs of the rows of `xp` (default: inp's pairs).
    """
    pair_jobs = inp.pair_jobs if pair_jobs is None else pair_jobs
    if not len(xp) and not len(pair_jobs):
        # no pair rows: the same arithmetic as below, without the Allocation views
        over = x.sum(axis=1)
        x = x * np.where(over > 1.0, 1.0 / np.maximum(over, 1e-300), 1.0)[:, None]
        used = x.T @ inp.scale_factors.astype(float)
        col = np.where(used > inp.counts, inp.counts / np.maximum(used, 1e-300), 1.0)
        return x * col[None, :], xp * col[None, :]
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


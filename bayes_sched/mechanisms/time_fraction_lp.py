"""The Gavel family's programs over time fractions, built as sparse matrices and handed to the
solver directly.

Every Gavel LP here allocates time fractions to *entries* (a combination of jobs — one job, or a
pair sharing GPUs — on one GPU type) under the same constraints: entries non-negative, each
job's time at most 1, each type's GPUs at most its count. :class:`CombinationTerms` holds that
structure (:func:`dense_terms`: every job alone on every type, the ``(J, T)`` fractions of the
policies without packing; the packing policies build theirs in
:mod:`bayes_sched.policies.gavel.packing`), and the builders below state each objective once over
it.

Why not through cvxpy: at ~100 jobs cvxpy's canonicalisation took longer per LP than the solve
and than the budget per decision (``experiments/
bench_gavel_decisions.py``); the LP structure changes with the job set, so a parametrised cvxpy
problem (DPP) could not be reused across recomputations. The programs are the ones the cvxpy
formulations stated (same variables, constraints and objective), solved by the same open-source
solvers: CLARABEL (interior point; answers inside the optimal face) through its own API, HiGHS
(simplex; answers at a vertex) through :func:`scipy.optimize.linprog`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from bayes_sched.mechanisms.highs_process import HIGHS_THREADS, quiet_stdout
from bayes_sched.mechanisms.solver_pool import run_solver

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class CombinationTerms:
    """The sparse structure of a time-fraction program over ``V`` (combination, type) entries.

    Attributes:
        rates: ``(J, V)``: job ``j``'s steps/s in the entry's combination on its type (0 where
            ``j`` is not in it).
        membership: ``(J, V)``: the time job ``j`` spends in the entry per unit of it (1 where
            ``j`` is in the entry's combination).
        gpus: ``(T, V)``: GPUs the entry occupies on its type (its scale factor).
        combination: ``(V,)`` row of the entry in the allocation.
        gpu_type: ``(V,)`` column of the entry.
        coupling_upper: optional ``(K, V)``: rows ``coupling_upper @ v <= 0`` that the entries
            must also satisfy (the per-partner-class reduction's same-class rows).
        coupling_equal: optional ``(E, V)``: rows ``coupling_equal @ v == 0`` (its pair totals).
    """

    rates: sp.csr_matrix
    membership: sp.csr_matrix
    gpus: sp.csr_matrix
    combination: np.ndarray
    gpu_type: np.ndarray
    coupling_upper: sp.csr_matrix | None = None
    coupling_equal: sp.csr_matrix | None = None

    @property
    def num_entries(self) -> int:
        return len(self.combination)

    def unflatten(self, values: np.ndarray, num_combinations: int, num_types: int) -> np.ndarray:
        """Entry values ``(V,)`` as an allocation ``(num_combinations, T)``."""
        out = np.zeros((num_combinations, num_types))
        out[self.combination, self.gpu_type] = values
        return out


def dense_terms(throughputs: np.ndarray, scale_factors: np.ndarray) -> CombinationTerms:
    """Every job alone on every type (also where it cannot run, as Gavel's ``(J, T)`` variable
    does): entry ``j * T + t``."""
    num_jobs, num_types = throughputs.shape
    num_entries = num_jobs * num_types
    entries = np.arange(num_entries)
    job_rows = np.arange(0, num_entries + 1, num_types)  # CSR row pointers: job j's T entries
    by_type = entries.reshape(num_jobs, num_types).T.ravel()  # type t's entries, job by job
    return CombinationTerms(
        rates=sp.csr_matrix((throughputs.ravel(), entries, job_rows),
                            shape=(num_jobs, num_entries)),
        membership=sp.csr_matrix((np.ones(num_entries), entries, job_rows),
                                 shape=(num_jobs, num_entries)),
        gpus=sp.csr_matrix((np.tile(scale_factors, num_types), by_type,
                            np.arange(0, num_entries + 1, num_jobs)),
                           shape=(num_types, num_entries)),
        combination=entries // num_types, gpu_type=entries % num_types)


def effective_rates(allocation: np.ndarray, throughputs: np.ndarray, pairs: np.ndarray,
                    pair_throughputs: np.ndarray) -> np.ndarray:
    """Each job's steps/s ``(J,)`` under an ``allocation`` ``(J + P, T)`` of time fractions:
    alone (``throughputs`` ``(J, T)``) and in each of its ``pairs`` ``(P, 2)`` (each member at
    its rate in ``pair_throughputs`` ``(P, 2, T)``)."""
    num_jobs = len(throughputs)
    out = (throughputs * allocation[:num_jobs]).sum(axis=1)
    shared = allocation[num_jobs:num_jobs + len(pairs)]
    for member in (0, 1):
        np.add.at(out, pairs[:, member], (pair_throughputs[:, member] * shared).sum(axis=1))
    return out


@dataclass(frozen=True)
class ConicProgram:
    """``minimise cost @ z`` subject to ``upper @ z <= upper_bound``, ``equal @ z == 0`` (when
    given), ``z[i] >= 0`` where ``nonnegative[i]``, and for each row ``k`` of the optional
    hyperbolic constraints
    ``(first[k] @ z - first_offset[k]) * (second[k] @ z - second_offset[k]) >= product[k]`` with
    both factors non-negative (a rotated second-order cone; only CLARABEL solves those).

    The first ``num_entries`` variables are the entries' time fractions.
    """

    cost: np.ndarray
    upper: sp.csr_matrix
    upper_bound: np.ndarray
    nonnegative: np.ndarray
    num_entries: int
    first: sp.csr_matrix | None = None
    first_offset: np.ndarray | None = None
    second: sp.csr_matrix | None = None
    second_offset: np.ndarray | None = None
    product: np.ndarray | None = None
    equal: sp.csr_matrix | None = None


def _column(values: np.ndarray) -> sp.csr_matrix:
    return sp.csr_matrix(np.asarray(values, dtype=float).reshape(-1, 1))


def _bounds(terms: CombinationTerms, capacities: np.ndarray) -> np.ndarray:
    """Right-hand sides of :func:`_base_rows`."""
    coupled = 0 if terms.coupling_upper is None else terms.coupling_upper.shape[0]
    return np.concatenate([np.ones(terms.membership.shape[0]), capacities, np.zeros(coupled)])


def _base_rows(terms: CombinationTerms) -> list[sp.csr_matrix]:
    """The rows every program shares over the entries: each job's time, each type's GPUs, and
    the terms' own coupling rows (``<= 0``)."""
    rows = [terms.membership, terms.gpus]
    if terms.coupling_upper is not None:
        rows.append(terms.coupling_upper)
    return rows


def _equal(terms: CombinationTerms, extra_columns: int) -> sp.csr_matrix | None:
    """The terms' equality rows over the program's variables (entries, then ``extra_columns``)."""
    if terms.coupling_equal is None or terms.coupling_equal.shape[0] == 0:
        return None
    return sp.hstack([terms.coupling_equal,
                      sp.csr_matrix((terms.coupling_equal.shape[0], extra_columns))],
                     format="csr")


def _largest_floor(rows: sp.csr_matrix, weights: np.ndarray, terms: CombinationTerms,
                   capacities: np.ndarray, floor_nonnegative: bool) -> ConicProgram:
    """Maximise ``f`` (variable last) such that ``weights_j * f <= rows_j @ v`` for every job."""
    num_jobs, num_entries = rows.shape
    upper = sp.bmat([[-rows, _column(weights)], *([r, None] for r in _base_rows(terms))],
                    format="csr")
    cost = np.zeros(num_entries + 1)
    cost[-1] = -1.0
    nonnegative = np.ones(num_entries + 1, dtype=bool)
    nonnegative[-1] = floor_nonnegative
    return ConicProgram(cost=cost, upper=upper,
                        upper_bound=np.concatenate([np.zeros(num_jobs),
                                                    _bounds(terms, capacities)]),
                        nonnegative=nonnegative, num_entries=num_entries,
                        equal=_equal(terms, 1))


def max_min_program(scores: sp.csr_matrix, terms: CombinationTerms,
                    capacities: np.ndarray) -> ConicProgram:
    """Maximise the least ``scores @ v`` (one row per job, ``(J, V)``) over the entries ``v``,
    with a free epigraph variable last."""
    return _largest_floor(scores, np.ones(scores.shape[0]), terms, capacities, False)


def max_sum_program(terms: CombinationTerms, capacities: np.ndarray) -> ConicProgram:
    """Maximise the summed steps/s of all jobs."""
    return ConicProgram(cost=-np.asarray(terms.rates.sum(axis=0)).ravel(),
                        upper=sp.vstack(_base_rows(terms), format="csr"),
                        upper_bound=_bounds(terms, capacities),
                        nonnegative=np.ones(terms.num_entries, dtype=bool),
                        num_entries=terms.num_entries, equal=_equal(terms, 0))


def fastest_finish_program(terms: CombinationTerms, capacities: np.ndarray,
                           remaining: np.ndarray) -> ConicProgram:
    """Maximise ``s >= 0`` (variable last) such that every job's steps/s is at least
    ``remaining * s``: ``1 / s`` is the shortest horizon in which every job can finish."""
    return _largest_floor(terms.rates, remaining, terms, capacities, True)


def finish_by_program(terms: CombinationTerms, capacities: np.ndarray,
                      remaining: np.ndarray, horizon: float) -> ConicProgram:
    """Any allocation (constant objective) under which every job's steps/s is at least
    ``remaining / horizon``."""
    num_entries = terms.num_entries
    return ConicProgram(cost=np.zeros(num_entries),
                        upper=sp.vstack([-terms.rates, *_base_rows(terms)], format="csr"),
                        upper_bound=np.concatenate([-remaining / horizon,
                                                    _bounds(terms, capacities)]),
                        nonnegative=np.ones(num_entries, dtype=bool), num_entries=num_entries,
                        equal=_equal(terms, 0))


def min_max_ratio_program(terms: CombinationTerms, capacities: np.ndarray, elapsed: np.ndarray,
                          remaining: np.ndarray, denominator: np.ndarray) -> ConicProgram:
    """Finish-time fairness: minimise ``r`` (variable last) such that ``elapsed_j + remaining_j
    / (rates_j @ v) <= r * denominator_j`` for every job: ``(rates_j @ v) * (r * denominator_j -
    elapsed_j) >= remaining_j``, a rotated second-order cone per job, stated scaled as
    ``(denominator_j / remaining_j * rates_j @ v) * (r - elapsed_j / denominator_j) >= 1`` (the
    same set; both factors of order one, where steps and seconds of order 1e5-1e7 made
    CLARABEL stop with InsufficientProgress on loaded snapshots that cvxpy's form solved)."""
    num_jobs, num_entries = terms.rates.shape
    declared = remaining > 0
    scale = np.where(declared, denominator / np.where(declared, remaining, 1.0), 1.0)
    cost = np.zeros(num_entries + 1)
    cost[-1] = 1.0
    upper = sp.bmat([[terms.membership, _column(np.zeros(num_jobs))],
                     *([r, None] for r in _base_rows(terms)[1:])], format="csr")
    return ConicProgram(cost=cost, upper=upper, upper_bound=_bounds(terms, capacities),
                        nonnegative=np.arange(num_entries + 1) < num_entries,
                        num_entries=num_entries, equal=_equal(terms, 1),
                        first=sp.bmat([[sp.diags(scale) @ terms.rates,
                                        _column(np.zeros(num_jobs))]], format="csr"),
                        first_offset=np.zeros(num_jobs),
                        second=sp.bmat([[sp.csr_matrix((num_jobs, num_entries)),
                                         _column(np.ones(num_jobs))]], format="csr"),
                        second_offset=elapsed / denominator,
                        product=declared.astype(float))


def solve_program(program: ConicProgram, solver: str) -> np.ndarray | None:
    """All variables of the optimum ``(n,)``, or ``None`` when the program is infeasible,
    unbounded or the solver fails (logged; the caller keeps its previous answer). Solved in a
    worker process inside :func:`~bayes_sched.mechanisms.solver_pool.map_concurrently`."""
    if solver not in ("HIGHS", "CLARABEL"):
        raise ValueError(f"solver is {solver!r}: expected CLARABEL or HIGHS")
    values, problem = run_solver(_solve_here, program, solver)
    if problem is not None:
        LOG.warning("%s", problem)
    return values


def _solve_here(program: ConicProgram, solver: str) -> tuple[np.ndarray | None, str | None]:
    """:func:`solve_program`'s solve in this process: the variables, or ``None`` and why (the
    message is logged by the caller's process)."""
    return _solve_highs(program) if solver == "HIGHS" else _solve_clarabel(program)


def highs_result(program: ConicProgram) -> Any:
    """scipy's HiGHS result (``OptimizeResult``: primal, and the rows' marginals) for a linear
    ``program`` (one without second-order cones)."""
    from scipy.optimize import linprog

    bounds = [(0.0, None) if keep else (None, None) for keep in program.nonnegative]
    equal = program.equal
    return linprog(program.cost, A_ub=program.upper, b_ub=program.upper_bound,
                   A_eq=equal, b_eq=None if equal is None else np.zeros(equal.shape[0]),
                   bounds=bounds, method="highs")


class HighsModel:
    """A linear ``program`` (no second-order cones) held in HiGHS through highspy, for a caller
    that solves it, then changes a few coefficients and solves again from the last basis
    (HiGHS skips presolve and starts the simplex there).

    The first solve is :func:`highs_result`'s: the same HiGHS options as scipy's ``linprog``
    (``method="highs"``: dual simplex, presolve on) on the same rows in the same order (the
    ``upper`` rows, then the ``equal`` rows), without ``linprog``'s input checks and result
    conversion (a large share of each call on the packed max-min programs). Its primal, duals
    and optimum are bitwise ``linprog``'s (``tests/test_value_of_information.py`` checks one).
    ``presolve=False`` skips HiGHS's presolve: the optimum's value is the same, the vertex
    returned may differ (for a caller that reads the value only).
    """

    def __init__(self, program: ConicProgram, presolve: bool = True) -> None:
        import highspy

        if program.product is not None:
            raise ValueError("HiGHS solves linear programs only; this one has second-order "
                             "cones")
        rows = program.upper if program.equal is None else sp.vstack([program.upper,
                                                                      program.equal])
        matrix = sp.csc_matrix(rows)
        num_rows, num_cols = matrix.shape
        infinity = highspy.kHighsInf
        self.num_upper = program.upper.shape[0]
        lower = np.full(num_rows, -infinity)
        lower[self.num_upper:] = 0.0
        upper = np.zeros(num_rows)
        upper[:self.num_upper] = program.upper_bound
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = num_cols, num_rows
        lp.col_cost_ = np.asarray(program.cost, dtype=float)
        lp.col_lower_ = np.where(program.nonnegative, 0.0, -infinity)
        lp.col_upper_ = np.full(num_cols, infinity)
        lp.row_lower_, lp.row_upper_ = lower, upper
        lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = num_cols, num_rows
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = matrix.indptr
        lp.a_matrix_.index_ = matrix.indices
        lp.a_matrix_.value_ = matrix.data
        with quiet_stdout():  # HiGHS's banner, printed from C++ on a first instance
            self.highs = highspy.Highs()
        # Simplex iterations per solve are bounded: a re-solve from a changed basis took at
        # most 23 on a 15 x 55 packed program (a cold solve 31), so at this bound a solve has
        # cycled or stalled, and reports no optimum (the caller solves afresh or goes without)
        # instead of running on.
        self.iteration_limit = 10 * (num_rows + num_cols) + 1000
        for option, value in (("output_flag", False), ("log_to_console", False),
                              ("presolve", "on" if presolve else "off"),
                              ("highs_debug_level", 0),
                              ("simplex_strategy", 1),  # 1: dual simplex, as scipy asks
                              ("threads", HIGHS_THREADS),
                              ("simplex_iteration_limit", self.iteration_limit)):
            self.highs.setOptionValue(option, value)
        self.highs.passModel(lp)
        self._optimal = highspy.HighsModelStatus.kOptimal
        #: The rows (``upper``, then ``equal``) as a CSC matrix: each column's coefficients.
        self.matrix = matrix

    def solve(self) -> bool:
        """Solve (from the last basis, if any); whether an optimum was found within
        ``iteration_limit`` simplex iterations."""
        self.highs.run()
        return bool(self.highs.getModelStatus() == self._optimal)

    @property
    def objective(self) -> float:
        """The last solve's optimum of ``cost @ z``."""
        return float(self.highs.getInfo().objective_function_value)

    @property
    def primal(self) -> np.ndarray:
        """The last solve's variables ``(n,)``."""
        return np.asarray(self.highs.getSolution().col_value, dtype=float)

    @property
    def upper_duals(self) -> np.ndarray:
        """The last solve's duals of the ``upper`` rows (``linprog``'s ``ineqlin.marginals``:
        ``<= 0`` for a minimisation)."""
        return np.asarray(self.highs.getSolution().row_dual, dtype=float)[:self.num_upper]

    def change(self, rows: np.ndarray, column: int, values: np.ndarray) -> None:
        """Set the coefficients of ``column`` on ``rows`` (``upper`` rows) to ``values``."""
        for row, value in zip(rows.tolist(), values.tolist(), strict=True):
            self.highs.changeCoeff(row, column, value)


def highs_optimum(program: ConicProgram, presolve: bool = True) -> np.ndarray | None:
    """All variables of a linear ``program``'s optimum ``(n,)`` through highspy
    (:class:`HighsModel`: dual simplex, one thread), or ``None`` (logged) where HiGHS reports
    no optimum."""
    values, problem = run_solver(_highs_optimum_here, program, presolve)
    if problem is not None:
        LOG.warning("%s", problem)
    return values


def _highs_optimum_here(program: ConicProgram, presolve: bool
                        ) -> tuple[np.ndarray | None, str | None]:
    model = HighsModel(program, presolve=presolve)
    if not model.solve():
        return None, "LP solver HIGHS: " + model.highs.modelStatusToString(
            model.highs.getModelStatus())
    return model.primal, None


def _solve_highs(program: ConicProgram) -> tuple[np.ndarray | None, str | None]:
    if program.product is not None:
        return None, "HIGHS solves linear programs only; this one has second-order cones"
    result = highs_result(program)
    if result.status != 0 or result.x is None:
        return None, f"LP solver HIGHS: {result.message}"
    return np.asarray(result.x, dtype=float), None


#: CLARABEL's factorisations of its linear systems, tried in turn until one solves: its default
#: (``"auto"``: QDLDL here), then faer's. QDLDL's steps can stall (status
#: ``InsufficientProgress``) on finish-time-fairness programs of 100-200 packed jobs that faer's
#: solve, to the optimum other settings reach (``tests/test_gavel_fairness.py``); the default
#: stays first, so every answer it gives is kept.
CLARABEL_FACTORISATIONS = ("auto", "faer")


def _solve_clarabel(program: ConicProgram) -> tuple[np.ndarray | None, str | None]:
    import clarabel

    num_vars = len(program.cost)
    nonnegative = np.flatnonzero(program.nonnegative)
    # Clarabel's form: A z + s = b, s in the cones (the equality rows first: the zero cone).
    blocks: list[sp.csr_matrix] = []
    offsets: list[np.ndarray] = []
    cones: list = []
    if program.equal is not None:
        blocks.append(program.equal)
        offsets.append(np.zeros(program.equal.shape[0]))
        cones.append(clarabel.ZeroConeT(program.equal.shape[0]))
    blocks += [program.upper,
              sp.csr_matrix((-np.ones(len(nonnegative)), (np.arange(len(nonnegative)),
                                                          nonnegative)),
                            shape=(len(nonnegative), num_vars))]
    offsets += [program.upper_bound, np.zeros(len(nonnegative))]
    cones.append(clarabel.NonnegativeConeT(program.upper.shape[0] + len(nonnegative)))
    if program.product is not None:
        assert program.first is not None and program.second is not None
        assert program.first_offset is not None and program.second_offset is not None
        # (a z - a0)(b z - b0) >= p, both >= 0  <=>  ((a+b) z - a0 - b0, (a-b) z - a0 + b0,
        # 2 sqrt(p)) in the second-order cone of dimension 3.
        total, difference = program.first + program.second, program.first - program.second
        rows = len(program.product)
        zero = sp.csr_matrix((rows, num_vars))
        interleaved = sp.vstack([-total, -difference, zero]).tocsr()
        order = np.arange(3 * rows).reshape(3, rows).T.ravel()  # row k's three lines together
        blocks.append(interleaved[order])
        offsets.append(np.stack([-program.first_offset - program.second_offset,
                                 program.second_offset - program.first_offset,
                                 2.0 * np.sqrt(np.maximum(program.product, 0.0))],
                                axis=1).ravel())
        cones.extend(clarabel.SecondOrderConeT(3) for _ in range(rows))
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    data = (sp.csc_matrix((num_vars, num_vars)), program.cost, sp.vstack(blocks, format="csc"),
            np.concatenate(offsets), cones)
    status = ""
    for method in CLARABEL_FACTORISATIONS:
        settings.direct_solve_method = method
        solution = clarabel.DefaultSolver(*data, settings).solve()
        status = str(solution.status)
        if status in ("Solved", "AlmostSolved"):
            return np.asarray(solution.x, dtype=float), None
    return None, f"LP solver CLARABEL: status {status}"


def solve_allocation(program: ConicProgram, terms: CombinationTerms, num_combinations: int,
                     solver: str) -> np.ndarray | None:
    """The program's entry values as an allocation ``(num_combinations, T)``; ``None`` when it
    has no answer."""
    values = solve_program(program, solver)
    if values is None:
        return None
    return terms.unflatten(values[:program.num_entries], num_combinations,
                           terms.gpus.shape[0])

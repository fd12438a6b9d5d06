"""Sia's integer program and its solves: at most one configuration per job, GPUs per type within
the type's capacity, the summed utility maximised (:mod:`bayes_sched.policies.sia` builds the
utilities from Sia's formulation; this module only solves).

* **Columns.** One boolean per (job, configuration) pair of positive utility
  (:class:`Configurations`); a configuration of non-positive utility is never worth choosing. When every
  job's best configuration fits at once, that choice is the optimum and no solver runs
  (:func:`best_if_all_fit`).
* **Solvers.** An open MILP solver (HiGHS by default, SCIP optional through cvxpy; Sia used CBC)
  at the caller's relative gap (Sia's ``1e-4``). HiGHS gets the program as cvxpy's HiGHS
  interface would pass it, its numbers built directly (:func:`assignment_highs_data`; cvxpy's
  compile cost more than the solve, and its interface sets up more than these programs need;
  ``tests/test_sia.py`` checks the numbers equal cvxpy's), with HiGHS's dual bound read back
  for :mod:`~bayes_sched.policies.sia_reuse`'s certificate. A failed solve is logged and gives
  ``None``.
* **Variants.** POP's sub-problems, each solved alone and the choices joined
  (:func:`partitioned_assignment`); the tenants' program, Sia's columns plus one per tenant
  (:func:`tenant_assignment`, its formula in :mod:`~bayes_sched.policies.sia_tenants`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bayes_sched.mechanisms.highs_process import HIGHS_THREADS, quiet_stdout
from bayes_sched.mechanisms.pop import Partition, labels
from bayes_sched.policies.sia_reuse import assignment_value
from bayes_sched.policies.sia_tenants import tenant_columns

LOG = logging.getLogger(__name__)

#: Open-source MILP solvers Sia may use (HiGHS directly, SCIP through cvxpy).
SIA_SOLVERS = ("HIGHS", "SCIP")


@dataclass(frozen=True)
class Configurations:
    """Candidate configurations of ``J`` jobs, ``C`` in all, grouped by job.

    Attributes:
        job: the job each configuration belongs to, ``(C,)`` (index into the round's jobs).
        gpu_type: the GPU type, ``(C,)`` (index into the round's types).
        num_gpus: GPUs it takes, ``(C,)``.
        goodput: the job's goodput there, ``(C,)`` (> 0; here steps/s of the whole job).
    """

    job: np.ndarray
    gpu_type: np.ndarray
    num_gpus: np.ndarray
    goodput: np.ndarray

    def __len__(self) -> int:
        return len(self.job)


def best_if_all_fit(utility: np.ndarray, configs: Configurations, capacities: np.ndarray,
                    num_jobs: int) -> np.ndarray | None:
    """:func:`solve_assignment`'s optimum without a solver where there is one: each job's
    best configuration of positive utility (ties: the first; none for a job without one),
    ``(J,)``, when they all fit in ``capacities`` at once; ``None`` when they do not."""
    chosen = np.full(num_jobs, -1, dtype=np.int64)
    useful = np.flatnonzero(utility > 0)
    if useful.size == 0:
        return chosen
    order = useful[np.lexsort((-utility[useful], configs.job[useful]))]
    jobs_in_order = configs.job[order]
    best = order[np.r_[True, jobs_in_order[1:] != jobs_in_order[:-1]]]
    used = np.bincount(configs.gpu_type[best], weights=configs.num_gpus[best],
                       minlength=len(capacities))
    if not np.all(used <= capacities):
        return None
    chosen[configs.job[best]] = best
    return chosen


def solve_assignment(utility: np.ndarray, configs: Configurations, capacities: np.ndarray,
                     num_jobs: int, solver: str = "HIGHS",
                     options: Mapping[str, object] | None = None) -> np.ndarray | None:
    """Sia's integer program: the configuration chosen for each job ``(J,)`` (an index into
    ``configs``, -1 for none) maximising the summed ``utility`` with at most one configuration
    per job and, per GPU type, the chosen GPUs within ``capacities`` ``(T,)``; ``None`` when the
    solver fails. Configurations of non-positive utility are never worth choosing and are left
    out; when every job's best configuration fits at once, that is the optimum (no solver)."""
    got = solve_assignment_bounded(utility, configs, capacities, num_jobs, solver, options)
    return None if got is None else got[0]


def solve_assignment_bounded(utility: np.ndarray, configs: Configurations,
                             capacities: np.ndarray, num_jobs: int, solver: str = "HIGHS",
                             options: Mapping[str, object] | None = None
                             ) -> tuple[np.ndarray, float] | None:
    """:func:`solve_assignment`'s answer ``(J,)`` with an upper bound on the program's optimum
    (summed utility): the answer's own value where no solver was needed, HiGHS's dual bound,
    ``inf`` from SCIP (not read); ``None`` when the solver fails."""
    chosen = best_if_all_fit(utility, configs, capacities, num_jobs)
    if chosen is not None:
        return chosen, assignment_value(utility, chosen)
    return solve_program(utility, configs, capacities, num_jobs, solver, options)


def solve_program(utility: np.ndarray, configs: Configurations, capacities: np.ndarray,
                  num_jobs: int, solver: str, options: Mapping[str, object] | None
                  ) -> tuple[np.ndarray, float] | None:
    """:func:`solve_assignment_bounded` by the solver, for a program whose best configurations
    do not all fit at once (:func:`best_if_all_fit` already asked): the configuration chosen per
    job ``(J,)`` (-1: none) and the solver's bound on the optimum (``inf`` from SCIP); ``None``
    when the solver fails (logged)."""
    chosen = np.full(num_jobs, -1, dtype=np.int64)
    useful = np.flatnonzero(utility > 0)

    if solver == "HIGHS":
        solved = _solve_highs(assignment_highs_data(utility[useful], configs.job[useful],
                                                    configs.gpu_type[useful],
                                                    configs.num_gpus[useful], capacities,
                                                    num_jobs), options)
        if solved is None:
            return None
        values, bound = solved
        picked = useful[np.round(values) > 0.5]
        chosen[configs.job[picked]] = picked
        return chosen, bound
    problem, x = assignment_problem(utility[useful], configs.job[useful],
                                    configs.gpu_type[useful], configs.num_gpus[useful],
                                    capacities, num_jobs)
    if not _solved(problem, x, solver, options):
        return None
    picked = useful[np.round(x.value) > 0.5]
    chosen[configs.job[picked]] = picked
    return chosen, float("inf")


#: A solve of one (sub-)problem for :func:`partitioned_assignment`: given its index among the
#: sub-problems, its configurations' ``utility`` and ``configs`` (jobs numbered within it), its
#: GPUs per type, the indices of its jobs and of its configurations in the whole problem, the
#: configuration chosen per job (-1: none), or ``None`` on a failure.
Assign = Callable[[int, np.ndarray, Configurations, np.ndarray, np.ndarray, np.ndarray],
                  np.ndarray | None]


def partitioned_assignment(utility: np.ndarray, configs: Configurations,
                           parts: Sequence[Partition], solver: str = "HIGHS",
                           options: Mapping[str, object] | None = None,
                           assign: Assign | None = None) -> np.ndarray | None:
    """:func:`solve_assignment` (or ``assign``) on each POP sub-problem of ``parts`` (its jobs'
    configurations, its GPUs per type), the choices joined ``(J,)`` (each within its
    sub-cluster's GPUs, so together within the cluster's); ``None`` when any sub-problem has no
    answer."""
    num_jobs = sum(len(part.jobs) for part in parts)
    chosen = np.full(num_jobs, -1, dtype=np.int64)
    config_part = labels(parts, num_jobs)[configs.job]
    local = np.empty(num_jobs, dtype=np.int64)
    for i, part in enumerate(parts):
        rows = np.flatnonzero(config_part == i)
        local[part.jobs] = np.arange(len(part.jobs))
        sub = Configurations(job=local[configs.job[rows]], gpu_type=configs.gpu_type[rows],
                             num_gpus=configs.num_gpus[rows], goodput=configs.goodput[rows])
        got = (solve_assignment(utility[rows], sub, part.capacities, len(part.jobs), solver,
                                options) if assign is None
               else assign(i, utility[rows], sub, part.capacities, part.jobs, rows))
        if got is None:
            return None
        picked = got >= 0
        chosen[part.jobs[picked]] = rows[got[picked]]
    return chosen


def tenant_assignment(utility: np.ndarray, normalized: np.ndarray, configs: Configurations,
                      capacities: np.ndarray, num_jobs: int, tenant: np.ndarray,
                      weights: np.ndarray, p: float, solver: str = "HIGHS",
                      options: Mapping[str, object] | None = None) -> np.ndarray | None:
    """The configuration chosen per job ``(J,)`` (-1: none) maximising Sia's objective with the
    per-tenant term of :mod:`~bayes_sched.policies.sia_tenants` (``normalized`` ``(C,)``: the
    configurations' normalised goodputs with re-allocation factors; ``tenant`` ``(J,)``: each
    job's tenant index; ``weights`` ``(K,)``: the tenants'; ``p < 1``). One tenant with jobs:
    Sia's own program (:func:`solve_assignment`). ``None`` when the solver fails."""
    if len(np.unique(tenant)) <= 1:
        return solve_assignment(utility, configs, capacities, num_jobs, solver, options)
    chosen = best_if_all_fit(utility, configs, capacities, num_jobs)
    if chosen is not None:  # every job at its best goodput: every tenant's S_k is maximal too
        return chosen
    import scipy.sparse as sp

    chosen = np.full(num_jobs, -1, dtype=np.int64)
    useful = np.flatnonzero(utility > 0)
    objective, tangents, rhs = tenant_columns(utility[useful], normalized[useful],
                                              configs.job[useful], num_jobs, tenant, weights,
                                              float(capacities.sum()), p)
    per_job, per_type = _assignment_rows(configs.job[useful], configs.gpu_type[useful],
                                         configs.num_gpus[useful], len(capacities), num_jobs)
    n = len(useful)
    base = sp.hstack([sp.vstack([per_job, per_type]),
                      sp.csr_matrix((num_jobs + len(capacities), len(weights)))])
    data = {"c": -objective, "A": sp.vstack([base, tangents], format="csc"),
            "b": np.concatenate([np.ones(num_jobs), capacities.astype(float), rhs]),
            "lower_bounds": np.zeros(len(objective)), "upper_bounds": None,
            "bool_vars_idx": list(range(n)), "int_vars_idx": [],
            "dims": _InequalityDims(base.shape[0] + len(rhs))}
    if solver == "HIGHS":
        solved = _solve_highs(data, options)
        values = None if solved is None else solved[0]
    else:
        values = _solve_cvxpy_data(data, solver, options)
    if values is None:
        return None
    picked = useful[np.round(values[:n]) > 0.5]
    chosen[configs.job[picked]] = picked
    return chosen


def _solved(problem: Any, x: Any, solver: str, options: Mapping[str, object] | None) -> bool:
    """Solve the cvxpy ``problem`` with ``solver``; whether ``x`` has a usable value (optimal,
    inaccurate-optimal or stopped at a limit), a failure logged otherwise."""
    import cvxpy as cp

    try:
        with quiet_stdout():
            problem.solve(solver=solver, **dict(options or {}))
    except cp.error.SolverError as error:
        LOG.warning("sia: solver %s failed: %s", solver, error)
        return False
    if x.value is None or problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE,
                                                 cp.USER_LIMIT):
        LOG.warning("sia: solver %s status %s", solver, problem.status)
        return False
    return True


def _solve_cvxpy_data(data: Mapping[str, Any], solver: str,
                      options: Mapping[str, object] | None) -> np.ndarray | None:
    """The columns' values of a program in :func:`assignment_highs_data`'s layout (its boolean
    columns, then continuous ones >= 0) from a cvxpy MILP solver (SCIP)."""
    import cvxpy as cp

    x = cp.Variable(len(data["bool_vars_idx"]), boolean=True)
    t = cp.Variable(len(data["c"]) - len(data["bool_vars_idx"]), nonneg=True)
    z = cp.hstack([x, t])
    problem = cp.Problem(cp.Minimize(data["c"] @ z), [data["A"] @ z <= data["b"]])
    if not _solved(problem, x, solver, options):
        return None
    return np.concatenate([x.value, t.value])


def _assignment_rows(job: np.ndarray, gpu_type: np.ndarray, num_gpus: np.ndarray,
                     num_types: int, num_jobs: int) -> tuple[Any, Any]:
    """The integer program's rows over its ``n`` columns: one per job (its configurations,
    ``(J, n)``) and one per GPU type (their GPUs, ``(T, n)``), as scipy CSR matrices."""
    import scipy.sparse as sp

    columns = np.arange(len(job))
    per_job = sp.csr_matrix((np.ones(len(job)), (job, columns)), shape=(num_jobs, len(job)))
    per_type = sp.csr_matrix((num_gpus.astype(float), (gpu_type, columns)),
                             shape=(num_types, len(job)))
    return per_job, per_type


def assignment_problem(utility: np.ndarray, job: np.ndarray, gpu_type: np.ndarray,
                       num_gpus: np.ndarray, capacities: np.ndarray, num_jobs: int
                       ) -> tuple[Any, Any]:
    """Sia's integer program over ``n`` configurations (their ``utility``, ``job``,
    ``gpu_type``, ``num_gpus``, each ``(n,)``) as a cvxpy problem and its boolean variable
    ``(n,)``: maximise ``utility @ x`` with at most one configuration per job and the GPUs per
    type within ``capacities``."""
    import cvxpy as cp

    per_job, per_type = _assignment_rows(job, gpu_type, num_gpus, len(capacities), num_jobs)
    x = cp.Variable(len(job), boolean=True)
    problem = cp.Problem(cp.Maximize(utility @ x),
                         [per_job @ x <= 1, per_type @ x <= capacities.astype(float)])
    return problem, x


def assignment_highs_data(utility: np.ndarray, job: np.ndarray, gpu_type: np.ndarray,
                          num_gpus: np.ndarray, capacities: np.ndarray, num_jobs: int
                          ) -> dict[str, Any]:
    """Sia's integer program over ``n`` configurations (their ``utility``, ``job``,
    ``gpu_type``, ``num_gpus``, each ``(n,)``) as the data cvxpy's HiGHS interface receives
    from ``get_problem_data`` for :func:`assignment_problem`, built directly: cvxpy's compile
    of that statement took ~3/4 of each Sia solve (``tests/test_sia.py`` checks the numbers
    equal cvxpy's). Each column holds two entries, 1 in its job's row and its GPUs in its
    type's row (after the ``J`` job rows), so the CSC arrays are written out."""
    import scipy.sparse as sp

    rows = num_jobs + len(capacities)
    n = len(job)
    indices = np.empty(2 * n, dtype=np.int32)
    indices[0::2], indices[1::2] = job, num_jobs + np.asarray(gpu_type)
    values = np.ones(2 * n)
    values[1::2] = num_gpus
    matrix = sp.csc_matrix((values, indices, np.arange(0, 2 * n + 1, 2, dtype=np.int32)),
                           shape=(rows, n))
    return {"c": -np.asarray(utility, dtype=float),
            "A": matrix,
            "b": np.concatenate([np.ones(num_jobs), capacities.astype(float)]),
            "lower_bounds": np.zeros(n), "upper_bounds": None,
            "bool_vars_idx": list(range(n)), "int_vars_idx": [],
            "dims": _InequalityDims(rows)}


class _InequalityDims:
    """The cone dimensions of a program of ``rows`` inequality rows only (what cvxpy's
    ``dims_to_solver_dict`` reads from its ``ConeDims``)."""

    def __init__(self, rows: int) -> None:
        self.zero, self.nonneg = 0, rows
        self.soc: list[int] = []
        self.exp = 0
        self.psd: list[int] = []
        self.p3d: list[float] = []
        self.pnd: list[float] = []


def _solve_highs(data: dict[str, Any], options: Mapping[str, object] | None
                 ) -> tuple[np.ndarray, float] | None:
    """The columns' values from HiGHS on ``data`` (cvxpy's HiGHS data, as
    :func:`assignment_highs_data` builds it: minimise ``c x`` subject to ``A x = b`` on the
    first ``dims.zero`` rows and ``A x <= b`` on the rest, within the columns' bounds, the
    boolean and integer columns integral), passed to HiGHS as cvxpy's HiGHS interface passes it
    for a new problem (the same model and options; no warm start, quiet) without that
    interface's per-call set-up, with HiGHS's bound on the maximum of ``-c x`` (``-`` its dual
    bound on the minimum it solved; ``inf`` where it has none); ``None`` where cvxpy would give
    no solution (logged)."""
    import highspy

    matrix = data["A"].tocsc()
    num_rows, num_cols = matrix.shape
    inf = highspy.kHighsInf
    equalities = int(data["dims"].zero)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = num_cols, num_rows
    lp.offset_ = 0
    lp.col_cost_ = data["c"]
    lp.row_lower_ = np.concatenate([data["b"][:equalities], np.full(num_rows - equalities, -inf)])
    lp.row_upper_ = data["b"]
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = matrix.indptr
    lp.a_matrix_.index_ = matrix.indices
    lp.a_matrix_.value_ = matrix.data
    lower, upper = data["lower_bounds"], data["upper_bounds"]
    col_lower = np.full(num_cols, -inf) if lower is None else np.array(lower, dtype=float)
    col_upper = np.full(num_cols, inf) if upper is None else np.array(upper, dtype=float)
    boolean, integer = list(data["bool_vars_idx"]), list(data["int_vars_idx"])
    if boolean or integer:
        integrality = [highspy.HighsVarType.kContinuous] * num_cols
        for column in boolean + integer:
            integrality[column] = highspy.HighsVarType.kInteger
        col_lower[boolean] = np.maximum(col_lower[boolean], 0.0)
        col_upper[boolean] = np.minimum(col_upper[boolean], 1.0)
        lp.integrality_ = integrality
    lp.col_lower_, lp.col_upper_ = col_lower, col_upper
    with quiet_stdout():
        solver = highspy.Highs()
        solver.setOptionValue("log_to_console", False)
        for name, value in {**(options or {}), "threads": HIGHS_THREADS}.items():
            if not isinstance(value, (bool, int, float, str)) or (
                    solver.setOptionValue(name, value) == highspy.HighsStatus.kError):
                LOG.warning("sia: HiGHS rejected option %s=%r", name, value)
                return None
        solver.passModel(lp)
        solver.run()
    status = solver.getModelStatus()
    if status not in _highs_answered():
        LOG.warning("sia: solver HIGHS status %s", status.name)
        return None
    solution = solver.getSolution()
    if not solution.value_valid:
        LOG.warning("sia: solver HIGHS stopped (%s) without a solution", status.name)
        return None
    dual_bound = float(solver.getInfo().mip_dual_bound)
    return (np.array(solution.col_value),
            -dual_bound if np.isfinite(dual_bound) else float("inf"))


@functools.cache
def _highs_answered() -> frozenset[Any]:
    """HiGHS's model statuses that cvxpy reads as a solution: optimal, or stopped at a limit
    (time, iterations, solutions, objective bound or target) with its best solution."""
    import highspy

    status = highspy.HighsModelStatus
    return frozenset({status.kOptimal, status.kObjectiveBound, status.kObjectiveTarget,
                      status.kTimeLimit, status.kIterationLimit, status.kSolutionLimit})


__all__ = ["SIA_SOLVERS", "Assign", "Configurations", "assignment_highs_data", "assignment_problem",
           "best_if_all_fit", "partitioned_assignment", "solve_assignment",
           "solve_assignment_bounded", "solve_program", "tenant_assignment"]

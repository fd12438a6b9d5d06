"""Sia's integer program with a concave per-tenant term (option ``tenant_weights`` of
:class:`~bayes_sched.policies.sia.SiaPolicy`; ours, issue 36).

**Why not per-job weights.** Weighting each job's term of Sia's objective by its tenant's weight
keeps the objective linear in the weights: a GPU goes wherever the weighted term per GPU is
highest, so the tenant whose jobs weigh most wins every contended GPU and the others starve.
Fairness between tenants needs a term that is *concave* in what each tenant receives.

**The objective.** Tenant ``k`` (weight ``w_k``) receives, in a choice ``x`` of configurations,
the summed normalised goodput of its jobs, ``S_k = sum_{j in k} sum_c x_jc g_jc`` (``g``: Sia's
normalised goodput, :func:`~bayes_sched.policies.sia.normalized_goodputs`, times the re-allocation
factor where the job would move; on one GPU type it is the GPUs the tenant runs). Its weighted
part of the ``G`` GPUs being scheduled is ``G_k = G w_k / W`` (``W``: the summed weight of the
tenants with jobs in the round) and ``s_k = S_k / G_k`` its allocation in units of that part.
The program maximises

    ``sum_k G_k phi_p(s_k) + (1 / J) sum_j sum_c x_jc u_jc``

where ``phi_p(s) = ((1 + s)^p - 1) / p`` (``p < 1``, ``p != 0``: Sia's exponent) is the
shifted power (alpha-fair, ``alpha = 1 - p``) utility, increasing, concave and ``0`` at ``s = 0``,
and ``u_jc = lambda_n + sign(p) g_jc^p`` is Sia's own term of the configuration
(:func:`~bayes_sched.policies.sia.config_utilities`), averaged over the round's ``J`` jobs.

* Between tenants: at the continuous optimum every tenant that is not capped by its jobs'
  demand has the same marginal ``(1 + s_k)^(p - 1)``, i.e. the same ``s_k``: ``S_k`` is in
  proportion to ``w_k`` (weighted proportional sharing, the allocation Pollux's power mean of
  ``p``-powered speedups gives between equally weighted jobs, here between tenants). The shift
  by 1 keeps ``phi_p(0)`` finite (a tenant without GPUs is not ``-inf``), and, being in units of
  the tenant's weighted part, does not bias the split; the scaling by ``G_k`` gives the term the
  units of GPUs, independent of the number of tenants and weights' scale.
* Within a tenant, and between allocations of nearly equal tenant value: Sia's term decides
  (which jobs run, on which type); its mean over jobs is below ``lambda_n``, so it never
  outweighs more than about one GPU-equivalent of a tenant's goodput at its fair part.
* One tenant with jobs in the round: nothing to balance; the program is Sia's
  (:func:`~bayes_sched.policies.sia.solve_assignment`), so its decisions are Sia's.

**The integer program.** ``phi_p`` is concave, so its hypograph is the intersection of its
tangent half-planes: one continuous variable ``t_k`` per tenant, maximised with coefficient
``G_k``, bounded by the tangents at breakpoints ``a_0 = 0 < a_1 < ... < a_m = s_k^max``
(``m = TANGENTS``, spaced quadratically, denser near 0 where ``phi_p`` bends most;
``s_k^max``: the tenant's jobs' best configurations together):
``t_k <= phi_p(a_i) + phi_p'(a_i) (s_k - a_i)``. This outer approximation is exact at the
breakpoints and above ``phi_p`` between them; the constraints stay linear, so the program is the
same kind of MILP as Sia's (its boolean ``x``, its rows per job and per GPU type, plus the
tangent rows), solved by the same solver.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from bayes_sched.policies.sia import (
    Configurations,
    _assignment_rows,
    _InequalityDims,
    _solve_highs,
    best_if_all_fit,
    solve_assignment,
)

LOG = logging.getLogger(__name__)

#: Tangent points of each tenant's ``phi_p`` in the program (breakpoints ``a_0..a_m``).
TANGENTS = 24


def tenant_utility(s: np.ndarray, p: float) -> np.ndarray:
    """``phi_p(s) = ((1 + s)^p - 1) / p``, the concave tenant utility (see the module)."""
    return (np.power(1.0 + np.asarray(s, dtype=float), p) - 1.0) / p


def tenant_marginal(s: np.ndarray, p: float) -> np.ndarray:
    """``phi_p'(s) = (1 + s)^(p - 1)``."""
    return np.power(1.0 + np.asarray(s, dtype=float), p - 1.0)


def tenant_parts(tenant: np.ndarray, weights: np.ndarray, gpus: float) -> np.ndarray:
    """``G_k = G w_k / W`` per tenant ``(K,)``: ``weights`` ``(K,)`` of the tenants, ``tenant``
    ``(J,)`` each job's tenant index; ``W`` sums the weights of the tenants with jobs (a tenant
    without jobs gets 0)."""
    present = np.zeros(len(weights), dtype=bool)
    present[tenant] = True
    total = float(weights[present].sum())
    return np.where(present, gpus * weights / total, 0.0) if total > 0 else np.zeros(len(weights))


def tenant_objective(chosen: np.ndarray, utility: np.ndarray, normalized: np.ndarray,
                     configs: Configurations, tenant: np.ndarray, weights: np.ndarray,
                     gpus: float, p: float) -> float:
    """The module's objective (with ``phi_p`` exact, not its tangents) of ``chosen`` ``(J,)``
    (configuration per job, -1 for none)."""
    picked = chosen[chosen >= 0]
    parts = tenant_parts(tenant, weights, gpus)
    received = np.bincount(tenant[configs.job[picked]], weights=normalized[picked],
                           minlength=len(weights))
    live = parts > 0
    value = float((parts[live] * tenant_utility(received[live] / parts[live], p)).sum())
    return value + float(utility[picked].sum()) / max(len(chosen), 1)


def tenant_assignment(utility: np.ndarray, normalized: np.ndarray, configs: Configurations,
                      capacities: np.ndarray, num_jobs: int, tenant: np.ndarray,
                      weights: np.ndarray, p: float, solver: str = "HIGHS",
                      options: Mapping[str, object] | None = None) -> np.ndarray | None:
    """The configuration chosen per job ``(J,)`` (-1: none) maximising the module's objective.

    Args:
        utility: Sia's term per configuration ``(C,)`` (unweighted).
        normalized: normalised goodput per configuration ``(C,)`` (with re-allocation factors).
        configs: the configurations; capacities: GPUs per type ``(T,)``.
        tenant: each job's tenant index ``(J,)``; weights: each tenant's weight ``(K,)``.
        p: Sia's exponent (``p < 1``, nonzero).

    Returns ``None`` when the solver fails. One tenant with jobs: Sia's own program."""
    if len(np.unique(tenant)) <= 1:
        return solve_assignment(utility, configs, capacities, num_jobs, solver, options)
    chosen = best_if_all_fit(utility, configs, capacities, num_jobs)
    if chosen is not None:  # every job at its best goodput: every tenant's S_k is maximal too
        return chosen
    chosen = np.full(num_jobs, -1, dtype=np.int64)
    useful = np.flatnonzero(utility > 0)
    program = tenant_program(utility[useful], normalized[useful], configs.job[useful],
                             configs.gpu_type[useful], configs.num_gpus[useful], capacities,
                             num_jobs, tenant, weights, p)
    values = (_solve_highs(program, options) if solver == "HIGHS"
              else _solve_cvxpy(program, solver, options))
    if values is None:
        return None
    picked = useful[np.round(values[:len(useful)]) > 0.5]
    chosen[configs.job[picked]] = picked
    return chosen


def tenant_program(utility: np.ndarray, normalized: np.ndarray, job: np.ndarray,
                   gpu_type: np.ndarray, num_gpus: np.ndarray, capacities: np.ndarray,
                   num_jobs: int, tenant: np.ndarray, weights: np.ndarray, p: float
                   ) -> dict[str, Any]:
    """The MILP of the module over ``n`` configurations (each argument ``(n,)`` but
    ``capacities`` ``(T,)``, ``tenant`` ``(J,)``, ``weights`` ``(K,)``) in the data layout of
    cvxpy's HiGHS interface (minimise ``c @ z`` subject to ``A @ z <= b``, ``z >= 0``): columns
    ``x`` ``(n,)`` boolean, then ``t`` ``(K,)`` continuous; rows: one per job, one per GPU type,
    ``TANGENTS + 1`` per tenant with jobs."""
    import scipy.sparse as sp

    n, num_tenants = len(job), len(weights)
    parts = tenant_parts(tenant, weights, float(capacities.sum()))
    per_job, per_type = _assignment_rows(job, gpu_type, num_gpus, len(capacities), num_jobs)
    owner = tenant[job]  # (n,)
    best = np.zeros(num_jobs)
    np.maximum.at(best, job, normalized)
    rows, cols, vals, rhs = [], [], [], []
    row = 0
    grid = (np.arange(TANGENTS + 1) / TANGENTS) ** 2
    for k in map(int, np.flatnonzero(parts > 0)):
        mine = np.flatnonzero(owner == k)
        top = best[tenant == k].sum() / parts[k]
        for a in grid * max(top, 1e-9):
            slope = float(tenant_marginal(np.array(a), p))
            # t_k - slope / G_k * sum_{c of k} g_c x_c <= phi(a) - slope * a
            rows += [row] * (len(mine) + 1)
            cols += [*mine.tolist(), n + k]
            vals += [*(-slope * normalized[mine] / parts[k]).tolist(), 1.0]
            rhs.append(float(tenant_utility(np.array(a), p)) - slope * a)
            row += 1
    tangents = sp.csr_matrix((vals, (rows, cols)), shape=(row, n + num_tenants))
    pad = sp.csr_matrix((num_jobs + len(capacities), num_tenants))
    matrix = sp.vstack([sp.hstack([sp.vstack([per_job, per_type]), pad]), tangents],
                       format="csc")
    total_rows = num_jobs + len(capacities) + row
    return {"c": -np.concatenate([np.asarray(utility, dtype=float) / max(num_jobs, 1), parts]),
            "A": matrix,
            "b": np.concatenate([np.ones(num_jobs), capacities.astype(float), rhs]),
            "lower_bounds": np.zeros(n + num_tenants), "upper_bounds": None,
            "bool_vars_idx": list(range(n)), "int_vars_idx": [],
            "dims": _InequalityDims(total_rows)}


def _solve_cvxpy(program: Mapping[str, Any], solver: str,
                 options: Mapping[str, object] | None) -> np.ndarray | None:
    """:func:`tenant_program`'s columns' values from a cvxpy MILP solver (SCIP)."""
    import cvxpy as cp

    from bayes_sched.mechanisms.highs_process import quiet_stdout

    n = len(program["bool_vars_idx"])
    x = cp.Variable(n, boolean=True)
    t = cp.Variable(len(program["c"]) - n, nonneg=True)
    z = cp.hstack([x, t])
    problem = cp.Problem(cp.Minimize(program["c"] @ z), [program["A"] @ z <= program["b"]])
    try:
        with quiet_stdout():
            problem.solve(solver=solver, **dict(options or {}))
    except cp.error.SolverError as error:
        LOG.warning("sia: solver %s failed: %s", solver, error)
        return None
    if x.value is None or problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE,
                                                 cp.USER_LIMIT):
        LOG.warning("sia: solver %s status %s", solver, problem.status)
        return None
    return np.concatenate([x.value, t.value])


__all__ = ["TANGENTS", "tenant_assignment", "tenant_marginal", "tenant_objective",
           "tenant_parts", "tenant_program", "tenant_utility"]

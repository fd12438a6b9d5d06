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
  (:func:`~bayes_sched.policies.sia_program.solve_assignment`), so its decisions are Sia's.

The program is solved by :func:`~bayes_sched.policies.sia_program.tenant_assignment`; this module holds
its mathematics (:func:`tenant_columns`: the tenant columns, objective and tangent rows).

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

from typing import Any

import numpy as np

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
                     config_job: np.ndarray, tenant: np.ndarray, weights: np.ndarray,
                     gpus: float, p: float) -> float:
    """The module's objective (with ``phi_p`` exact, not its tangents) of ``chosen`` ``(J,)``
    (configuration per job, -1 for none; ``config_job`` ``(C,)``: each configuration's job,
    ``utility`` and ``normalized`` ``(C,)``: Sia's term and normalised goodput)."""
    picked = chosen[chosen >= 0]
    parts = tenant_parts(tenant, weights, gpus)
    received = np.bincount(tenant[config_job[picked]], weights=normalized[picked],
                           minlength=len(weights))
    live = parts > 0
    value = float((parts[live] * tenant_utility(received[live] / parts[live], p)).sum())
    return value + float(utility[picked].sum()) / max(len(chosen), 1)


def tenant_columns(utility: np.ndarray, normalized: np.ndarray, job: np.ndarray,
                   num_jobs: int, tenant: np.ndarray, weights: np.ndarray, gpus: float,
                   p: float) -> tuple[np.ndarray, Any, np.ndarray]:
    """The module's program's part beyond Sia's, over ``n`` configurations (``utility``,
    ``normalized``, ``job``: each ``(n,)``) of ``num_jobs`` jobs (``tenant`` ``(J,)``, their
    tenants' ``weights`` ``(K,)``) on ``gpus`` GPUs: the objective to *maximise* over the
    columns ``[x (n,), t (K,)]`` (``(n + K,)``), and the tangent rows ``T @ [x, t] <= r`` as a
    scipy CSR matrix ``(R, n + K)`` and ``r`` ``(R,)`` (``TANGENTS + 1`` rows per tenant with
    jobs). ``t >= 0`` is implied (``phi_p >= 0`` and its tangents lie above it)."""
    import scipy.sparse as sp

    n, num_tenants = len(job), len(weights)
    parts = tenant_parts(tenant, weights, gpus)
    owner = tenant[job]
    best = np.zeros(num_jobs)
    np.maximum.at(best, job, normalized)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    rhs: list[float] = []
    grid = (np.arange(TANGENTS + 1) / TANGENTS) ** 2
    for k in map(int, np.flatnonzero(parts > 0)):
        mine = np.flatnonzero(owner == k)
        top = max(float(best[tenant == k].sum()) / parts[k], 1e-9)
        for a in grid * top:
            slope = float(tenant_marginal(np.array(a), p))
            # t_k - slope / G_k * sum_{c of k} g_c x_c <= phi(a) - slope * a
            row = len(rhs)
            rows += [row] * (len(mine) + 1)
            cols += [*mine.tolist(), n + k]
            vals += [*(-slope * normalized[mine] / parts[k]).tolist(), 1.0]
            rhs.append(float(tenant_utility(np.array(a), p)) - slope * a)
    tangents = sp.csr_matrix((vals, (rows, cols)), shape=(len(rhs), n + num_tenants))
    objective = np.concatenate([np.asarray(utility, dtype=float) / max(num_jobs, 1), parts])
    return objective, tangents, np.array(rhs)


__all__ = ["TANGENTS", "tenant_columns", "tenant_marginal", "tenant_objective", "tenant_parts",
           "tenant_utility"]

"""Pollux with per-tenant weights (``pollux_tenants``; ours, issue 36): Pollux's search and
speedups unchanged, its fitness a power mean over tenants instead of over jobs.

Pollux scores an allocation by the power mean of the jobs' speedups,
``F = ((1/J) sum_j s_j^p)^(1/p)`` (``p = -1`` by default; :mod:`bayes_sched.policies.pollux`).
Between tenants of weights ``w_k`` (normalised over the tenants with jobs: ``v_k = w_k / W``),
with ``n_k`` jobs each, the fitness here is

    ``F_T = (1/J) (sum_k v_k (S_k / v_k)^p)^(1/p)``, with ``S_k = n_k ((1/n_k) sum_{j in k} s_j^p)^(1/p)``

``S_k`` is the tenant's jobs' power mean times their number: Pollux's own fitness within the
tenant, made extensive (it grows with the jobs the tenant runs, as a sum does). Across tenants,
``F_T`` is the ``v``-weighted power mean of each tenant's ``S_k`` per unit of weight; maximised
(with ``p < 1``, concave), every tenant not capped by its jobs has the same marginal
``(S_k / v_k)^(p - 1)``, i.e. ``S_k`` in proportion to ``w_k``: with speedups linear in GPUs,
GPUs split between tenants in proportion to their weights, however many jobs each has. (Weighting
each job's term of Pollux's mean by ``w_k / n_k`` instead would give tenant ``k`` GPUs in
proportion to ``w_k^(1/(1 - p)) n_k^(-p/(1 - p))``, ``sqrt(w_k n_k)`` at ``p = -1``: a tenant
with more jobs would still get more.)

Tenants of equal weight and equal job counts at equal speedups score Pollux's ``F`` (the
``1/J`` keeps its scale). With one tenant ``F_T`` is Pollux's fitness exactly (computed as
Pollux computes it), so the decisions are Pollux's. Only the fitness changes: the search's
other objective (NSGA-II's cluster utility), its mutation, repair and speedup tables are Pollux's
(:class:`~bayes_sched.mechanisms.genetic_allocation.search.AllocationProblem`, whose subclass
hook for an own fitness this uses). Tenants' weights come from the cluster's ``[[tenants]]``
(1 for a tenant it does not list).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bayes_sched.cluster import ClusterState
from bayes_sched.jobs import JobView
from bayes_sched.mechanisms.genetic_allocation.search import AllocationProblem
from bayes_sched.mechanisms.genetic_allocation.sparse import power_mean
from bayes_sched.policies.pollux import PolluxPolicy


def tenant_power_mean(speedups: np.ndarray, tenant: np.ndarray, weights: np.ndarray, p: float
                      ) -> np.ndarray:
    """``F_T`` of the module for each row of ``speedups`` ``(P, J)`` (> 0): ``tenant`` ``(J,)``
    each job's tenant index, ``weights`` ``(K,)`` the tenants' (> 0); shape ``(P,)``. One tenant
    with jobs: Pollux's power mean."""
    present = np.unique(tenant)
    if present.size <= 1:
        return power_mean(speedups, p)
    member = (tenant[:, None] == present[None, :]).astype(float)  # (J, K')
    count = member.sum(axis=0)
    share = weights[present] / weights[present].sum()
    within = count * ((speedups ** p) @ member / count) ** (1.0 / p)  # S_k, (P, K')
    return (((within / share) ** p) @ share) ** (1.0 / p) / len(tenant)


class TenantPowerMeanProblem(AllocationProblem):
    """Pollux's search problem of one round with :func:`tenant_power_mean` as its fitness."""

    def __init__(self, problem: AllocationProblem, cluster: ClusterState, tenant: np.ndarray,
                 weights: np.ndarray) -> None:
        super().__init__(problem.base, problem.tables, problem.max_replicas, problem.penalty,
                         cluster, problem.p, problem.avoid_interference, problem.max_nodes,
                         problem.rng, problem.compiled)
        self.tenant, self.weights = tenant, weights

    def fitness(self, states: np.ndarray) -> np.ndarray:
        """:func:`tenant_power_mean` of the penalised, scaled speedups (plus Pollux's 1e-3),
        shape ``(P,)``."""
        return tenant_power_mean(self.speedups(states) + 1e-3, self.tenant, self.weights, self.p)


class PolluxTenantPolicy(PolluxPolicy):
    """Pollux whose fitness weighs tenants (see the module); every option is Pollux's."""

    name = "pollux_tenants"
    # Pollux's own, named here: the registry reads a class's options from its own ``__init__``.
    __init__ = PolluxPolicy.__init__

    def problem(self, cluster: ClusterState, jobs: Sequence[JobView]
                ) -> tuple[AllocationProblem, list[str]]:
        problem, names = super().problem(cluster, jobs)
        by_name = {job.name: job.tenant for job in jobs}
        tenants = list(dict.fromkeys(by_name[name] for name in names))
        if len(tenants) <= 1:
            return problem, names
        listed = {t.name: t.weight for t in cluster.spec.tenant_table().tenants}
        tenant = np.array([tenants.index(by_name[name]) for name in names], dtype=np.int64)
        weights = np.array([listed.get(name, 1.0) for name in tenants])
        return TenantPowerMeanProblem(problem, cluster, tenant, weights), names


__all__ = ["PolluxTenantPolicy", "TenantPowerMeanProblem", "tenant_power_mean"]

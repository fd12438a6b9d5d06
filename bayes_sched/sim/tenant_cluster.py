"""The throughput-table cluster with tenants: what each tenant held and asked for, each round.

:class:`TenantTableCluster` runs jobs exactly as
:class:`~bayes_sched.sim.table_cluster.TableCluster` does; it also shows each job's declared steps
(:func:`~bayes_sched.sim.tenant_workload.declared_view`: a job that will end early still declares its
full length) and records, per round, the GPU-seconds each tenant's jobs received (their attained
service's growth), the GPUs its active jobs asked for (its demand at the round's start) and its
fair share of them (:func:`~bayes_sched.fair_shares.tenant_shares` of the cluster's tenants),
and per job the fair GPU-seconds it was owed (its tenant's share split among the tenant's active
jobs, :func:`~bayes_sched.fair_shares.job_shares`): the inputs of the long-term GPU-time
fairness (:mod:`bayes_sched.sim.tenant_metrics`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from bayes_sched.cluster_spec import ClusterSpec
from bayes_sched.errors import InputError
from bayes_sched.fair_shares import job_shares, tenant_shares
from bayes_sched.jobs import JobView
from bayes_sched.sim.gavel_jobs import TableJobSpec
from bayes_sched.sim.table_cluster import TableCluster
from bayes_sched.sim.tenant_workload import declared_view


class TenantTableCluster(TableCluster):
    """A :class:`TableCluster` that records per-tenant service and demand per round.

    Attributes:
        tenant_names: the tenants in order of first arrival.
        round_seconds: each round's length, shape ``(rounds,)`` (list).
        received: GPU-seconds per tenant per round (list of dicts).
        demand: GPUs asked for per tenant at each round's start (list of dicts).
        fair: each tenant's fair share of GPUs in each round (list of dicts).
        job_fair: fair GPU-seconds each job was owed while active, by job name.
    """

    def __init__(self, jobs: Iterable[TableJobSpec], spec: ClusterSpec, *args: Any,
                 **kwargs: Any) -> None:
        self._tenant_table = spec.tenant_table()  # read by _check as the first jobs arrive
        super().__init__(jobs, spec, *args, **kwargs)
        self.tenant_names: list[str] = []
        self.round_seconds: list[float] = []
        self.received: list[dict[str, float]] = []
        self.demand: list[dict[str, float]] = []
        self.fair: list[dict[str, float]] = []
        self.job_fair: dict[str, float] = {}

    def _check(self, job: TableJobSpec) -> None:
        """Also refuse a job whose tenant the cluster does not list, naming it and the trace."""
        super()._check(job)
        if job.tenant not in self._tenant_table.names:
            raise InputError(f"job '{job.name}' names tenant '{job.tenant}': expected one of "
                             f"{', '.join(sorted(self._tenant_table.names))} (the cluster's "
                             "[[tenants]])", self.source or None, column="tenant")

    def job_views(self) -> list[JobView]:
        return [declared_view(view, self.jobs[view.name].spec) for view in super().job_views()]

    def advance(self, seconds: float) -> None:
        demand: dict[str, float] = {}
        before: dict[str, float] = {}
        active = list(self._active.values())
        for job in active:
            tenant = job.spec.tenant
            if tenant not in demand and tenant not in self.tenant_names:
                self.tenant_names.append(tenant)
            demand[tenant] = demand.get(tenant, 0.0) + job.spec.scale_factor
            before[tenant] = before.get(tenant, 0.0) + job.attained_service
        super().advance(seconds)
        received: dict[str, float] = {}
        for job in active:
            tenant = job.spec.tenant
            received[tenant] = received.get(tenant, 0.0) + job.attained_service
        self.round_seconds.append(float(seconds))
        self.received.append({t: float(np.round(received[t] - before[t], 9)) for t in received})
        self.demand.append(demand)
        fair = tenant_shares(self._tenant_table, demand)
        self.fair.append({t: fair.get(t, 0.0) for t in demand})
        for tenant in demand:
            requests = {job.spec.name: float(job.spec.scale_factor) for job in active
                        if job.spec.tenant == tenant}
            for name, share in job_shares(fair.get(tenant, 0.0), requests).items():
                self.job_fair[name] = self.job_fair.get(name, 0.0) + share * seconds

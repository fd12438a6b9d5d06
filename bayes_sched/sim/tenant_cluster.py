"""The throughput-table cluster with tenants: what each tenant held and asked for, each round.

:class:`TenantTableCluster` runs jobs exactly as
:class:`~bayes_sched.sim.table_cluster.TableCluster` does; it also shows each job's declared steps
(:func:`~bayes_sched.sim.tenant_workload.declared_view`: a job that will end early still declares its
full length) and records, per round, what the per-tenant metrics read
(:class:`~bayes_sched.sim.tenant_rounds.TenantRounds`: the GPU-seconds each tenant's jobs
received, their attained service's growth; the GPUs its active jobs asked for, their
``scale_factor``; its fair share and each job's), the inputs of the long-term GPU-time fairness
(:mod:`bayes_sched.sim.tenant_metrics`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from bayes_sched.cluster_spec import ClusterSpec
from bayes_sched.errors import InputError
from bayes_sched.jobs import JobView
from bayes_sched.sim.gavel_jobs import TableJobSpec
from bayes_sched.sim.table_cluster import TableCluster
from bayes_sched.sim.tenant_rounds import TenantRounds
from bayes_sched.sim.tenant_workload import declared_view


class TenantTableCluster(TableCluster):
    """A :class:`TableCluster` that records per-tenant service and demand per round.

    Attributes:
        rounds: the per-round tenant records (:class:`TenantRounds`).
    """

    def __init__(self, jobs: Iterable[TableJobSpec], spec: ClusterSpec, *args: Any,
                 **kwargs: Any) -> None:
        self._tenant_table = spec.tenant_table()  # read by _check as the first jobs arrive
        super().__init__(jobs, spec, *args, **kwargs)
        self.rounds = TenantRounds(self._tenant_table)

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
        active = list(self._active.values())
        requests = {job.spec.name: (job.spec.tenant, float(job.spec.scale_factor))
                    for job in active}
        before = {job.spec.name: job.attained_service for job in active}
        super().advance(seconds)
        received: dict[str, float] = {}
        for job in active:
            tenant = job.spec.tenant
            received[tenant] = (received.get(tenant, 0.0) + job.attained_service
                                - before[job.spec.name])
        self.rounds.record(seconds, requests, received)

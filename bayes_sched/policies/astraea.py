"""ASTRAEA (Ye et al., IEEE TPDS 2022, "ASTRAEA: A Fair Deep Learning Scheduler for Multi-tenant
GPU Clusters"): long-term GPU-time fairness between tenants and between jobs, enforced at lease
ends by a two-phase scheduler.

What is implemented, as the paper describes its design (the formulas are written out here as
this module computes them; the paper's own notation was not at hand, so symbols are ours):

* **Long-Term GPU-time Fairness (LTGF).** GPU-time is the fairness currency (GPUs x time, so a
  job asking for more GPUs spends more of it). Each round of ``dt`` seconds tenant ``k`` is owed
  its fair share ``s_k`` of GPUs (:func:`~bayes_sched.fair_shares.tenant_shares`: its
  entitlement, quota or weight's part of the cluster, up to its demand, plus idle quota lent by
  weight), and each of its jobs ``j`` its part ``s_j`` of ``s_k``
  (:func:`~bayes_sched.fair_shares.job_shares`). Over time ``F_k = sum s_k dt`` and
  ``F_j = sum s_j dt`` accumulate; ``G_k`` and ``G_j`` are the GPU-seconds actually received
  (attained service). ``LTGF_k = G_k / F_k`` and ``LTGF_j = G_j / F_j`` (1: fair; a tenant or job
  not yet owed anything counts as 1).
* **Lease-based training.** A job that starts gets a lease of ``lease`` seconds; it is never
  preempted before its lease ends. At a lease end its GPUs go back to the pool and it competes
  again with the waiting jobs; chosen again, it keeps its GPUs (a renewed lease, no restart).
  Long jobs so become a sequence of leases at whose ends fairness is restored.
* **Two-phase scheduler.** When GPUs are free (at lease ends, completions and arrivals), phase one
  picks the tenant with the lowest projected LTGF,
  ``(G_k + lease * a_k) / (F_k + lease * s_k)`` with ``a_k`` the GPUs it holds under running
  leases plus those already granted to it this round; phase two picks that tenant's job with
  the lowest ``LTGF_j`` (ties: earlier submission) whose GPUs fit in the free ones. Repeat until
  no waiting job fits (work conserving: a tenant above its share still gets GPUs nobody below
  it can use).
* Placement: a new job takes GPUs of one type, consolidated on the nodes with most free GPUs
  (:func:`~bayes_sched.policies.elas.pack_on_one_type`); a renewed one keeps its own. A chosen
  job that fits on no single type waits for the next decision.

Left out: the paper's placement (topology) and any preference between GPU types (selection
counts GPUs of every type together), and its sub-job checkpoint cost model (the cluster charges
its own restart delay).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated

import numpy as np

from bayes_sched.cluster import Allocations, ClusterState
from bayes_sched.estimates import Estimates
from bayes_sched.fair_shares import job_shares, tenant_shares
from bayes_sched.jobs import JobSettings, JobSpec, JobView
from bayes_sched.policies.elas import pack_on_one_type
from bayes_sched.registry import Range
from bayes_sched.tenants import TenantTable


class AstraeaPolicy:
    """Two-phase LTGF scheduling with leases of ``lease`` seconds."""

    name = "astraea"
    needs: tuple[str, ...] = ()

    def __init__(self, lease: Annotated[float, Range(1.0, 7 * 86400.0, unit="s")] = 1800.0
                 ) -> None:
        self.lease = float(lease)
        self._table: TenantTable | None = None
        self._spec: object = None
        self._last_now: float | None = None
        self._owed_tenant: dict[str, float] = {}
        self._owed_job: dict[str, float] = {}
        self._got_tenant: dict[str, float] = {}
        self._got_job: dict[str, float] = {}  # attained service last seen, per job
        self._shares: dict[str, float] = {}
        self._job_shares: dict[str, float] = {}
        self._lease_end: dict[str, float] = {}
        self.renewals = 0
        self.preemptions = 0

    def stats(self) -> Mapping[str, float]:
        return {"lease_renewals": float(self.renewals), "lease_preemptions": float(self.preemptions)}

    def job_settings(self, spec: JobSpec) -> JobSettings:
        return JobSettings(batch_size=spec.batch_size, max_replicas=spec.num_replicas)

    def ltgf(self, tenant: str) -> float:
        """``G_k / F_k`` so far (1 before the tenant was owed anything)."""
        owed = self._owed_tenant.get(tenant, 0.0)
        return self._got_tenant.get(tenant, 0.0) / owed if owed > 1e-9 else 1.0

    def _account(self, cluster: ClusterState, jobs: Sequence[JobView]) -> None:
        """Add the last round's owed GPU-seconds (at last round's shares) and the service the
        jobs received since; then this round's shares."""
        if self._table is None or self._spec is not cluster.spec:
            self._table, self._spec = cluster.spec.tenant_table(), cluster.spec
        dt = 0.0 if self._last_now is None else cluster.now - self._last_now
        self._last_now = cluster.now
        for tenant, share in self._shares.items():
            self._owed_tenant[tenant] = self._owed_tenant.get(tenant, 0.0) + share * dt
        for name, share in self._job_shares.items():
            self._owed_job[name] = self._owed_job.get(name, 0.0) + share * dt
        for job in jobs:
            gained = job.attained_service - self._got_job.get(job.name, 0.0)
            self._got_job[job.name] = job.attained_service
            self._got_tenant[job.tenant] = self._got_tenant.get(job.tenant, 0.0) + gained
        demand: dict[str, float] = {}
        for job in jobs:
            demand[job.tenant] = demand.get(job.tenant, 0.0) + job.requested_replicas
        self._shares = tenant_shares(self._table, demand)
        self._job_shares = {}
        for tenant, share in self._shares.items():
            requests = {j.name: float(j.requested_replicas) for j in jobs if j.tenant == tenant}
            self._job_shares.update(job_shares(share, requests))

    def _job_ltgf(self, job: JobView) -> float:
        owed = self._owed_job.get(job.name, 0.0)
        return job.attained_service / owed if owed > 1e-9 else 1.0

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView],
               estimates: Estimates) -> Allocations:
        self._account(cluster, jobs)
        now = cluster.now
        names = {job.name for job in jobs}
        self._lease_end = {n: t for n, t in self._lease_end.items() if n in names}
        held = {job.name: job.allocation for job in jobs
                if job.num_gpus > 0 and self._lease_end.get(job.name, now) > now}
        free = cluster.total_gpus - sum(int(c.sum()) for c in held.values())
        waiting: dict[str, list[JobView]] = {}
        for job in jobs:
            if job.name not in held:
                waiting.setdefault(job.tenant, []).append(job)
        for queue in waiting.values():
            queue.sort(key=lambda j: (self._job_ltgf(j), j.submit_time, j.name))
        granted = dict.fromkeys(waiting, 0.0)  # GPUs held under a running lease, then new
        for job in jobs:
            if job.name in held and job.tenant in granted:
                granted[job.tenant] += job.num_gpus
        chosen: list[JobView] = []
        while waiting and free > 0:
            def projected(tenant: str) -> float:
                owed = self._owed_tenant.get(tenant, 0.0) + self.lease * self._shares.get(tenant,
                                                                                          0.0)
                got = self._got_tenant.get(tenant, 0.0) + self.lease * granted[tenant]
                return got / owed if owed > 1e-9 else 0.0
            tenant = min(waiting, key=lambda t: (projected(t), t))
            queue = waiting[tenant]
            fitting = [j for j in queue if j.requested_replicas <= free]
            if not fitting:
                del waiting[tenant]
                continue
            job = fitting[0]
            queue.remove(job)
            if not queue:
                del waiting[tenant]
            chosen.append(job)
            granted[tenant] += job.requested_replicas
            free -= job.requested_replicas
        return self._place(cluster, jobs, held, chosen)

    def _place(self, cluster: ClusterState, jobs: Sequence[JobView], held: Allocations,
               chosen: Sequence[JobView]) -> Allocations:
        """Renewed leases keep their GPUs; new ones are packed into the rest."""
        now = cluster.now
        allocations = dict(held)
        chosen_names = {job.name for job in chosen}
        for job in jobs:
            if job.num_gpus > 0 and job.name not in held:
                if job.name in chosen_names:
                    allocations[job.name] = job.allocation
                    self._lease_end[job.name] = now + self.lease
                    self.renewals += 1
                else:
                    self.preemptions += 1
                    self._lease_end.pop(job.name, None)
        free = cluster.capacity() - sum((c for c in allocations.values()),
                                        np.zeros(cluster.num_nodes, dtype=np.int64))
        for job in chosen:
            if job.name in allocations:
                continue
            counts = pack_on_one_type(job.requested_replicas, free, cluster.gpu_types)
            if counts is not None:
                allocations[job.name] = counts
                self._lease_end[job.name] = now + self.lease
        return allocations

"""Quotas for any policy: an admission stage around it (Blox's split of admission, scheduling
and placement), so that no policy is edited to honour tenants.

Each round :class:`QuotaStage` lets the wrapped policy decide over every job (a stateful policy
such as Tiresias keeps its queues whole), then enforces the tenants' quotas on its decision:

1. **Own quota.** Per tenant, jobs are admitted while the GPUs they asked for fit in its
   entitlement (:mod:`bayes_sched.tenants`; GPUs of any type): jobs the policy chose first, then
   jobs holding GPUs, then by submission time.
2. **Lending.** The GPUs left are those no entitlement holds, plus the unused entitlement of
   tenants that lend (a tenant with ``lend = false`` keeps its idle quota idle). They go to the
   not-yet-admitted jobs of tenants that borrow, one job at a time to the tenant that has borrowed
   least per unit of weight (in the same order), while they fit.
3. **Reclaim.** Nothing is remembered between rounds: when an owner's jobs arrive its entitlement
   is used by them in step 1, the GPUs left for step 2 shrink, and a borrower's job that no longer
   fits is not admitted: its allocation is dropped (the checkpoint, stop and restart a real
   cluster's preemption takes). ``quota_reclaimed`` counts such preemptions.
4. **Check and backfill.** Allocations of jobs not admitted are dropped; a tenant whose admitted
   jobs still hold more GPUs than it was admitted (an elastic policy such as Pollux may scale a
   job past its request) loses its latest-submitted jobs' allocations until it is within them
   (``quota_clipped``). GPUs so freed go to admitted jobs the policy left waiting, in admission
   order, each with the GPUs it asked for, of one type, packed on the nodes with most free GPUs
   (``quota_backfilled``): within its quota a tenant's queue is served first-come first-served.

So a tenant never holds more than its entitlement unless the lending rule gave it GPUs another
tenant does not use. Left out: per-GPU-type quotas are parsed and enter the entitlements as
totals, but admission counts GPUs of any type; a policy's internal accounting (Tiresias's
executed time) still counts a job whose allocation the stage dropped as admitted.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np

from bayes_sched.cluster import Allocations, ClusterState, PackedAllocations, shared_pairs
from bayes_sched.estimates import Estimates
from bayes_sched.jobs import JobSettings, JobSpec, JobView
from bayes_sched.mechanisms.placement import free_gpus
from bayes_sched.policies.base import Policy
from bayes_sched.policies.elas import pack_on_one_type
from bayes_sched.tenants import TenantTable


def admit(table: TenantTable, jobs: Sequence[JobView], chosen: Collection[str] = ()
          ) -> tuple[list[JobView], dict[str, int]]:
    """The jobs admitted this round (steps 1-2 of the module docstring), in admission order, and
    the GPUs admitted per tenant; ``chosen``: the jobs the wrapped policy allocated (admitted
    first). Jobs of a tenant the table does not list are not admitted."""
    known = set(table.names)
    order = sorted((job for job in jobs if job.tenant in known),
                   key=lambda j: (j.name not in chosen, j.num_gpus == 0, j.submit_time, j.name))
    budget = {name: int(table.entitlement[name] + 1e-9) for name in table.names}
    used = dict.fromkeys(table.names, 0)
    admitted: list[JobView] = []
    waiting: list[JobView] = []
    for job in order:
        need = job.requested_replicas
        if used[job.tenant] + need <= budget[job.tenant]:
            used[job.tenant] += need
            admitted.append(job)
        else:
            waiting.append(job)
    spare = table.total_gpus - sum(budget.values())
    spare += sum(budget[t.name] - used[t.name] for t in table.tenants if t.lend)
    borrowed = dict.fromkeys(table.names, 0)
    candidates = [job for job in waiting if table[job.tenant].borrow]
    while candidates and spare > 0:
        fitting = [job for job in candidates if job.requested_replicas <= spare]
        if not fitting:
            break
        job = min(fitting, key=lambda j: (borrowed[j.tenant] / table[j.tenant].weight,
                                          j.name not in chosen, j.num_gpus == 0, j.submit_time,
                                          j.name))
        candidates.remove(job)
        borrowed[job.tenant] += job.requested_replicas
        used[job.tenant] += job.requested_replicas
        spare -= job.requested_replicas
        admitted.append(job)
    return admitted, used


class QuotaStage:
    """``policy`` with tenant quotas (see the module docstring): a
    :class:`~bayes_sched.policies.base.Policy` itself, named ``"<policy>+quota"``."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.name = f"{policy.name}+quota"
        self.needs = policy.needs
        self.default_estimators = dict(getattr(policy, "default_estimators", {}))
        own = getattr(policy, "estimators", None)
        if own is not None:  # transitional: a policy that still builds its own estimators
            self.estimators = own
        self._table: TenantTable | None = None
        self._spec: object = None
        self.reclaimed = 0
        self.clipped = 0
        self.backfilled = 0

    def job_settings(self, spec: JobSpec) -> JobSettings:
        return self.policy.job_settings(spec)

    def stats(self) -> Mapping[str, float]:
        return {**self.policy.stats(), "quota_reclaimed": float(self.reclaimed),
                "quota_clipped": float(self.clipped), "quota_backfilled": float(self.backfilled)}

    def tenants(self, cluster: ClusterState) -> TenantTable:
        if self._table is None or self._spec is not cluster.spec:
            self._table, self._spec = cluster.spec.tenant_table(), cluster.spec
        return self._table

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView],
               estimates: Estimates) -> Allocations:
        table = self.tenants(cluster)
        decision = self.policy.decide(cluster, jobs, estimates)
        chosen = {name for name, counts in decision.items() if counts.sum() > 0}
        admitted, budget = admit(table, jobs, chosen)
        names = {job.name for job in admitted}
        self.reclaimed += sum(1 for job in jobs if job.num_gpus > 0 and job.name not in names)
        kept = self._check(decision, admitted, budget)
        return self._backfill(cluster, kept, admitted)

    def _check(self, decision: Allocations, admitted: Sequence[JobView],
               budget: Mapping[str, int]) -> Allocations:
        """Step 4: drop the allocations of jobs not admitted, then the latest-submitted ones of
        a tenant over its admitted GPUs."""
        by_name = {job.name: job for job in admitted}
        kept = {name: counts for name, counts in decision.items() if name in by_name}
        held: dict[str, int] = {}
        for name, counts in kept.items():
            tenant = by_name[name].tenant
            held[tenant] = held.get(tenant, 0) + int(counts.sum())
        for tenant, gpus in held.items():
            mine = sorted((n for n in kept if by_name[n].tenant == tenant),
                          key=lambda n: (by_name[n].submit_time, n), reverse=True)
            for name in mine:
                if gpus <= budget[tenant]:
                    break
                gpus -= int(kept.pop(name).sum())
                self.clipped += 1
        pairs = [p for p in shared_pairs(decision) if p[0] in kept and p[1] in kept]
        return PackedAllocations(kept, pairs) if isinstance(decision, PackedAllocations) else kept

    def _backfill(self, cluster: ClusterState, kept: Allocations,
                  admitted: Sequence[JobView]) -> Allocations:
        """Step 4's backfill: admitted jobs without GPUs get their request where it fits."""
        free = free_gpus(cluster, kept)
        for pair in shared_pairs(kept):  # a shared GPU is counted once
            free += kept[pair[1]]
        free = np.maximum(free, 0)
        for job in admitted:
            if job.name in kept and kept[job.name].sum() > 0:
                continue
            counts = pack_on_one_type(job.requested_replicas, free, cluster.gpu_types)
            if counts is not None:
                kept[job.name] = counts
                self.backfilled += 1
        return kept


def with_quotas(policy: Policy) -> QuotaStage:
    """``policy`` wrapped in a :class:`QuotaStage`."""
    return QuotaStage(policy)

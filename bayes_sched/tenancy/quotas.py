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

**Per-GPU-type quotas** (``quota = { v100 = 8, k80 = 8 }``: :func:`admit_typed`, used when any
tenant has one). A job's type is that of the GPUs the policy gave it (else of those it holds;
a job with neither may take any type, the one with most room first, and is backfilled on it).
Step 1 admits a typed tenant's job while the tenant's GPUs *of that type* fit its quota of that
type; a tenant without a typed quota is admitted against its entitlement in GPUs, as above, and
only on the GPUs of the type that no typed quota reserves (``room``). Step 2 lends on top of the
GPUs left in all (the scalar rule above) only what is free on the job's type: the type's room,
plus the idle typed quota of tenants that lend. So a typed tenant never holds GPUs of a type
beyond its quota there unless it borrowed them, and its idle typed quota comes back to it as in
step 3.

So a tenant never holds more than its entitlement unless the lending rule gave it GPUs another
tenant does not use. Left out: a policy's internal accounting (Tiresias's executed time) still
counts a job whose allocation the stage dropped as admitted; an elastic job that grows past its
request is clipped against its tenant's GPUs in all, not per type.
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
from bayes_sched.tenants import ANY_TYPE, TenantTable


def admit(table: TenantTable, jobs: Sequence[JobView], chosen: Collection[str] = ()
          ) -> tuple[list[JobView], dict[str, int]]:
    """The jobs admitted this round (steps 1-2 of the module docstring), in admission order, and
    the GPUs admitted per tenant; ``chosen``: the jobs the wrapped policy allocated (admitted
    first). Jobs of a tenant the table does not list are not admitted."""
    order = _order(jobs, set(table.names), chosen)
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


def _order(jobs: Sequence[JobView], known: Collection[str], chosen: Collection[str]
           ) -> list[JobView]:
    """Admission order: the policy's chosen jobs first, then jobs holding GPUs, then by
    submission time (jobs of tenants not in ``known`` are left out)."""
    return sorted((job for job in jobs if job.tenant in known),
                  key=lambda j: (j.name not in chosen, j.num_gpus == 0, j.submit_time, j.name))


def typed_quotas(table: TenantTable) -> dict[str, dict[str, int]]:
    """The tenants with a quota per GPU type: ``{tenant: {type: GPUs}}`` (empty where every
    quota is of GPUs of any type)."""
    return {t.name: dict(t.quota) for t in table.tenants
            if t.quota is not None and ANY_TYPE not in t.quota}


def admit_typed(table: TenantTable, jobs: Sequence[JobView], gpus_by_type: Mapping[str, int],
                job_types: Mapping[str, str], chosen: Collection[str] = ()
                ) -> tuple[list[JobView], dict[str, int], dict[str, str]]:
    """:func:`admit` with per-GPU-type quotas (the module docstring): the admitted jobs, the
    GPUs admitted per tenant and the type each admitted job was admitted on; ``gpus_by_type``:
    the cluster's GPUs per type, ``job_types``: the type of each job that has one (given or
    held GPUs)."""
    typed = typed_quotas(table)
    types = list(gpus_by_type)
    room = {t: gpus_by_type[t] - sum(q.get(t, 0) for q in typed.values()) for t in types}
    budget = {name: int(table.entitlement[name] + 1e-9) for name in table.names}
    used = dict.fromkeys(table.names, 0)
    on_type = {name: dict.fromkeys(types, 0) for name in typed}
    admitted: list[JobView] = []
    placed: dict[str, str] = {}

    def candidates(job: JobView, free: Mapping[str, int], moving: bool = True) -> list[str]:
        """The job's given type first, then (``moving``) the others, most ``free`` first."""
        given = job_types.get(job.name)
        first = [given] if given is not None and given in free else []
        if not moving and first:
            return first
        return first + sorted((t for t in types if t != given), key=lambda t: -free[t])

    def own(job: JobView, moving: bool) -> bool:
        need, tenant = job.requested_replicas, job.tenant
        if tenant in typed:
            left = {t: typed[tenant].get(t, 0) - on_type[tenant][t] for t in types}
        else:
            left = room if used[tenant] + need <= budget[tenant] else dict.fromkeys(types, 0)
        where = next((t for t in candidates(job, left, moving) if left[t] >= need), None)
        if where is None:
            return False
        if tenant in typed:
            on_type[tenant][where] += need
        else:
            room[where] -= need
        used[tenant] += need
        placed[job.name] = where
        admitted.append(job)
        return True

    # Jobs on their given type first (no move where its quota allows), then the rest anywhere.
    order = _order(jobs, set(table.names), chosen)
    first = [job for job in order if job.name not in job_types or not own(job, False)]
    waiting = [job for job in first if not own(job, True)]
    spare = table.total_gpus - sum(budget.values())
    spare += sum(budget[t.name] - used[t.name] for t in table.tenants if t.lend)
    lendable = {t: room[t] + sum(typed[k].get(t, 0) - on_type[k][t] for k in typed
                                 if table[k].lend) for t in types}
    borrowed = dict.fromkeys(table.names, 0)
    rest = [job for job in waiting if table[job.tenant].borrow]
    while rest and spare > 0:
        fitting = [(job, where) for job in rest if job.requested_replicas <= spare
                   for where in [next((t for t in candidates(job, lendable)
                                       if lendable[t] >= job.requested_replicas), None)]
                   if where is not None]
        if not fitting:
            break
        job, where = min(fitting, key=lambda pair: (
            borrowed[pair[0].tenant] / table[pair[0].tenant].weight, pair[0].name not in chosen,
            pair[0].num_gpus == 0, pair[0].submit_time, pair[0].name))
        rest.remove(job)
        need = job.requested_replicas
        borrowed[job.tenant] += need
        used[job.tenant] += need
        spare -= need
        lendable[where] -= need
        placed[job.name] = where
        admitted.append(job)
    return admitted, used, placed


def _without(decision: Allocations, names: Collection[str]) -> Allocations:
    """``decision`` less the allocations of ``names`` (and the GPU pairs they share)."""
    if not names:
        return decision
    kept = {name: counts for name, counts in decision.items() if name not in names}
    if isinstance(decision, PackedAllocations):
        return PackedAllocations(kept, [p for p in shared_pairs(decision)
                                        if p[0] in kept and p[1] in kept])
    return kept


def job_types(cluster: ClusterState, jobs: Sequence[JobView], decision: Allocations
              ) -> dict[str, str]:
    """The GPU type of each job the decision gives GPUs (else that holds GPUs): the type of most
    of its GPUs."""
    node_types = np.asarray(cluster.gpu_types)
    out: dict[str, str] = {}
    for job in jobs:
        counts = decision.get(job.name)
        if counts is None or counts.sum() == 0:
            counts = job.allocation
        if counts.sum() > 0:
            per_type = {t: int(counts[node_types == t].sum()) for t in dict.fromkeys(node_types)}
            out[job.name] = str(max(per_type, key=lambda t: per_type[t]))
    return out


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
        placed: Mapping[str, str] = {}
        if typed_quotas(table):
            given = job_types(cluster, jobs, decision)
            admitted, budget, placed = admit_typed(
                table, jobs, {t: cluster.spec.gpus_of_type(t) for t in cluster.spec.types},
                given, chosen)
            # A job admitted on another type than the policy gave it moves (backfilled there).
            decision = _without(decision, [name for name, t in placed.items()
                                           if given.get(name, t) != t])
        else:
            admitted, budget = admit(table, jobs, chosen)
        names = {job.name for job in admitted}
        self.reclaimed += sum(1 for job in jobs if job.num_gpus > 0 and job.name not in names)
        kept = self._check(decision, admitted, budget)
        return self._backfill(cluster, kept, admitted, placed)

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
                  admitted: Sequence[JobView], placed: Mapping[str, str]) -> Allocations:
        """Step 4's backfill: admitted jobs without GPUs get their request where it fits (on
        the type they were admitted on, where ``placed`` names one)."""
        free = free_gpus(cluster, kept)
        for pair in shared_pairs(kept):  # a shared GPU is counted once
            free += kept[pair[1]]
        free = np.maximum(free, 0)
        for job in admitted:
            if job.name in kept and kept[job.name].sum() > 0:
                continue
            where = placed.get(job.name)
            excluded = [] if where is None else [t for t in cluster.spec.types if t != where]
            counts = pack_on_one_type(job.requested_replicas, free, cluster.gpu_types, excluded)
            if counts is not None:
                kept[job.name] = counts
                self.backfilled += 1
        return kept


def with_quotas(policy: Policy) -> QuotaStage:
    """``policy`` wrapped in a :class:`QuotaStage`."""
    return QuotaStage(policy)

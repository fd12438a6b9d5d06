"""Gandiva-fair with tenants as its users (Chaudhary et al., EuroSys 2020): tickets per tenant,
fast-GPU share traded for slow-GPU share between tenants whose jobs' speedups differ.

The job-level policy (:mod:`bayes_sched.policies.gandiva_fair`) treats every job as its own user.
Here the users are the cluster's tenants (:mod:`bayes_sched.tenants`):

* **Tickets.** Each tenant with runnable jobs holds tickets in proportion to its weight ``w_k``,
  and so the share ``G_t * w_k / sum_active w`` of each GPU type ``t``'s ``G_t`` GPUs, capped at
  the GPUs its jobs ask for with the rest water-filled over the others by weight
  (:func:`~bayes_sched.fair_shares.water_fill`, type by type in Gavel's order).
* **Trading** between tenants, by Gandiva-fair's rule
  (:func:`~bayes_sched.policies.gandiva_fair.trade_shares`): a tenant's steps/s on a type is the
  mean over its runnable jobs of theirs (so its speedup between two types is the ratio of those
  means), and its room is the GPUs its jobs ask for together.
* **Within a tenant** its share of each type is water-filled equally over its runnable jobs, none
  above its scale factor over all types; a job's
  time fraction on a type is its GPUs there over its scale factor, each job's fractions scaled
  down to sum at most 1. Gavel's round mechanism turns the fractions into rounds and gives GPUs a
  share leaves idle to other jobs with a share there (as in the job-level policy).

Everything else (solver, reset interval, throughput source) is the job-level policy's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bayes_sched.cluster import Allocations, ClusterState
from bayes_sched.estimates import Estimates
from bayes_sched.fair_shares import water_fill
from bayes_sched.jobs import DEFAULT_TENANT, JobView
from bayes_sched.policies.gandiva_fair import GandivaFairPolicy, trade_shares
from bayes_sched.policies.gavel.time_sharing import AllocationInputs


class GandivaFairTenantPolicy(GandivaFairPolicy):
    """Gandiva-fair whose users are tenants (see the module docstring)."""

    name = "gandiva_fair_tenant"

    _tenant_of: dict[str, str]
    _weight: dict[str, float]

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView],
               estimates: Estimates) -> Allocations:
        table = cluster.spec.tenant_table()
        self._tenant_of = {job.name: job.tenant for job in jobs}
        self._weight = {t.name: t.weight for t in table.tenants}
        return super().decide(cluster, jobs, estimates)

    def allocate_combinations(self, inputs: AllocationInputs) -> np.ndarray | None:
        if self.split == "time":
            return super().allocate_combinations(inputs)
        tenant_of = getattr(self, "_tenant_of", {})
        weights = getattr(self, "_weight", {})
        tenants = list(dict.fromkeys(tenant_of.get(n, DEFAULT_TENANT) for n in inputs.names))
        member = np.array([tenants.index(tenant_of.get(n, DEFAULT_TENANT))
                           for n in inputs.names])
        sizes = inputs.scale_factors.astype(float)
        rates = np.where(inputs.throughputs > 0, inputs.throughputs, 0.0)
        room = np.bincount(member, weights=sizes, minlength=len(tenants))
        shares = _filled(inputs.capacities.astype(float), room,
                         np.array([weights.get(t, 1.0) for t in tenants]))  # (K, T) GPUs
        tenant_rates = np.stack([rates[member == k].mean(axis=0) for k in range(len(tenants))])
        num_types = len(inputs.capacities)
        order = [(fast, slow) for fast in range(num_types) for slow in range(fast + 1, num_types)]
        shares = trade_shares(shares, tenant_rates, room, order)
        job_gpus = np.zeros((inputs.num_jobs, num_types))
        for k in range(len(tenants)):
            mine = np.flatnonzero(member == k)
            job_gpus[mine] = _filled(shares[k], sizes[mine], np.ones(len(mine)))
        fractions = job_gpus / sizes[:, None]
        fractions[inputs.throughputs <= 0] = 0.0
        return fractions / np.maximum(fractions.sum(axis=1), 1.0)[:, None]


def _filled(gpus: np.ndarray, room: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Each type's ``gpus`` (``(T,)``) water-filled over users by ``weights``, a user's GPUs
    over all types at most its ``room`` (``(U,)``): ``(U, T)``, types in order."""
    out = np.zeros((len(room), len(gpus)))
    left = room.astype(float).copy()
    keys = [str(u) for u in range(len(room))]
    for t, amount in enumerate(gpus.tolist()):
        parts = water_fill(amount, dict(zip(keys, left.tolist(), strict=True)),
                           dict(zip(keys, weights.tolist(), strict=True)))
        out[:, t] = [parts[key] for key in keys]
        left -= out[:, t]
    return out

"""Fair shares between tenants, in GPUs: one round's water-filling, the definition every tenant
policy, the quota stage and the metrics share.

Given the cluster's ``C`` GPUs and, per tenant ``k``, its demand ``d_k`` (GPUs its active jobs
asked for), entitlement ``e_k`` (:func:`bayes_sched.tenants.entitlements`), weight ``w_k`` and
lend/borrow flags:

1. ``own_k = min(d_k, e_k)``: every tenant first gets what it asks for within its entitlement;
2. ``spare = C - sum_k e_k + sum_{k lends} (e_k - own_k)``: GPUs no entitlement holds plus the idle
   entitlement of lenders (a tenant that does not lend keeps its idle entitlement idle);
3. ``spare`` is water-filled over the tenants that borrow and still want GPUs, in proportion to
   ``w_k`` and capped at ``d_k - own_k``: ``extra_k = min(d_k - own_k, lambda * w_k)`` with the
   largest ``lambda`` whose extras sum to at most ``spare``.

``fair_k = own_k + extra_k`` (may be fractional). Job-level shares split a tenant's fair share among
its jobs the same way (equal weights, each capped at its request): :func:`job_shares`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from bayes_sched.tenants import TenantTable


def water_fill(amount: float, caps: Mapping[str, float], weights: Mapping[str, float]
               ) -> dict[str, float]:
    """Split ``amount`` over the keys of ``caps`` in proportion to ``weights``, none above its
    cap (the classic progressive filling); returns each key's part (sums to
    ``min(amount, sum of caps)``)."""
    parts = dict.fromkeys(caps, 0.0)
    open_keys = {k for k, cap in caps.items() if cap > 0 and weights.get(k, 0.0) > 0}
    left = max(0.0, float(amount))
    while open_keys and left > 1e-12:
        total_weight = sum(weights[k] for k in open_keys)
        step = left / total_weight
        # The keys that reach their cap at this level take their cap; the rest take the level.
        capped = {k for k in open_keys if caps[k] - parts[k] <= step * weights[k]}
        if not capped:
            for k in open_keys:
                parts[k] += step * weights[k]
            break
        for k in capped:
            left -= caps[k] - parts[k]
            parts[k] = caps[k]
        open_keys -= capped
    return parts


def tenant_shares(table: TenantTable, demand: Mapping[str, float]) -> dict[str, float]:
    """Each tenant's fair share of GPUs this round (see the module docstring); tenants with no
    demand get 0. ``demand``: GPUs asked for by tenant (missing: 0)."""
    own: dict[str, float] = {}
    spare = float(table.total_gpus) - sum(table.entitlement.values())
    for tenant in table.tenants:
        wanted = float(demand.get(tenant.name, 0.0))
        own[tenant.name] = min(wanted, table.entitlement[tenant.name])
        if tenant.lend:
            spare += table.entitlement[tenant.name] - own[tenant.name]
    caps = {t.name: float(demand.get(t.name, 0.0)) - own[t.name]
            for t in table.tenants if t.borrow}
    extra = water_fill(spare, caps, {t.name: t.weight for t in table.tenants})
    return {name: own[name] + extra.get(name, 0.0) for name in own}


def job_shares(share: float, requests: Mapping[str, float]) -> dict[str, float]:
    """A tenant's ``share`` of GPUs split among its jobs (``requests``: GPUs each asked for),
    equal weights, none above its request."""
    return water_fill(share, requests, dict.fromkeys(requests, 1.0))


def tenant_job_weights(tenants: Sequence[str], weights: Mapping[str, float]) -> list[float]:
    """Each job's weight in an objective summed over jobs: ``omega_j = J w_k / (n_k W)`` for a job
    of tenant ``k`` (``tenants``: each of the ``J`` jobs' tenant), ``w_k`` its tenant's weight
    (``weights``; 1 for a tenant not listed), ``n_k`` its tenant's jobs among them and ``W`` the
    summed weights of the tenants present: every tenant's jobs together weigh ``J w_k / W``, and
    with one tenant, or tenants of equal weight and equal job counts, every job weighs 1."""
    counts = Counter(tenants)
    total = sum(weights.get(k, 1.0) for k in counts)
    return [len(tenants) * weights.get(k, 1.0) / (counts[k] * total) for k in tenants]

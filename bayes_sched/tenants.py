"""Tenants as data: the teams that share a cluster, their GPU quotas, weights and lending rules.

A cluster file lists them in a ``[[tenants]]`` table (see :mod:`bayes_sched.cluster_spec`)::

    [[tenants]]
    name = "vision"
    quota = 16                  # GPUs of any type, or per GPU type: quota = { v100 = 8, k80 = 8 }
    weight = 2.0                # share of what no quota reserves, and of lent GPUs (default 1)
    lend = true                 # its idle quota may run other tenants' jobs (default true)
    borrow = true               # its jobs may run on other tenants' idle quota (default true)

A tenant without ``quota`` is entitled to a weight-proportional part of the GPUs no quota
reserves (:func:`entitlements`). A cluster without tenants has one, :data:`DEFAULT_TENANT`, with
every GPU. Jobs name their tenant (a ``tenant`` column in the workload and trace formats); a job
that names none belongs to :data:`DEFAULT_TENANT`.

Refused, one line naming the entry: a missing or repeated name, a quota that is not a whole
number of GPUs >= 0 or names a GPU type the cluster lacks, quotas summing above the cluster's
GPUs (with both totals), a weight that is negative, zero, NaN or infinite, an unknown field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from bayes_sched.errors import InputError

#: The tenant of a job whose submission names none (a workload or trace without a tenant
#: column, a job file without ``tenant``, a cluster without ``[[tenants]]``). Defined here, in a
#: module of the standard library alone, so that ``submit`` reads it without loading numpy.
DEFAULT_TENANT = "default"

#: Most tenants in one cluster file (each is a row of every per-tenant table and metric).
MAX_TENANTS = 4096
#: Largest weight accepted (weights are relative; beyond this they only lose precision).
MAX_WEIGHT = 1e6


@dataclass(frozen=True)
class TenantSpec:
    """One tenant.

    Attributes:
        name: the tenant's name (what jobs carry in ``JobSpec.tenant``).
        quota: GPUs reserved for it, per GPU type (read-only mapping; a type it lists none of
            reserves nothing there), or ``None`` for a weight-proportional part of the GPUs no
            quota reserves; a quota of GPUs "of any type" is stored under :data:`ANY_TYPE`.
        weight: its relative share of the unreserved GPUs and of idle quota lent out (> 0).
        lend: whether other tenants' jobs may run on its quota while it does not use it.
        borrow: whether its jobs may run beyond its quota on GPUs other tenants lend.
    """

    name: str
    quota: Mapping[str, int] | None = None
    weight: float = 1.0
    lend: bool = True
    borrow: bool = True

    def __post_init__(self) -> None:
        if self.quota is not None and not isinstance(self.quota, MappingProxyType):
            object.__setattr__(self, "quota", MappingProxyType(dict(self.quota)))

    def __reduce__(self) -> tuple[Any, ...]:
        # A mappingproxy does not pickle; run drivers send cluster specs to worker processes.
        quota = None if self.quota is None else dict(self.quota)
        return (TenantSpec, (self.name, quota, self.weight, self.lend, self.borrow))

    @property
    def quota_gpus(self) -> int | None:
        """Its explicit quota in GPUs, all types together (``None`` where it has none)."""
        return None if self.quota is None else sum(self.quota.values())


#: The key of a quota that reserves GPUs of any type (``quota = 16``).
ANY_TYPE = "*"

_FIELDS = ("name", "quota", "weight", "lend", "borrow")


def parse_tenants(raw: Any, gpus_by_type: Mapping[str, int], fail: Any) -> tuple[TenantSpec, ...]:
    """The tenants of a cluster file's ``tenants`` list, checked against the cluster's GPUs
    (``gpus_by_type``: GPUs per type); ``fail(key, message)`` builds the one-line error."""
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        raise fail("tenants", "expected a list of tenant tables ([[tenants]])")
    if len(raw) > MAX_TENANTS:
        raise fail("tenants", f"{len(raw)} tenants; expected at most {MAX_TENANTS}")
    tenants = [_tenant(entry, index, gpus_by_type, fail) for index, entry in enumerate(raw)]
    check_tenants(tenants, gpus_by_type, fail)
    return tuple(tenants)


def _tenant(entry: Any, index: int, gpus_by_type: Mapping[str, int], fail: Any) -> TenantSpec:
    where = f"tenants[{index}]"
    if not isinstance(entry, Mapping):
        raise fail(where, f"expected a table with {', '.join(_FIELDS)}")
    unknown = sorted(set(entry) - set(_FIELDS))
    if unknown:
        raise fail(f"{where}.{unknown[0]}", f"unknown field; expected {', '.join(_FIELDS)}")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        raise fail(f"{where}.name", f"{name!r}: expected a non-empty name without surrounding "
                   "spaces")
    weight = entry.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, int | float) \
            or not math.isfinite(weight) or not 0 < weight <= MAX_WEIGHT:
        raise fail(f"{where}.weight", f"{weight!r}: expected a finite weight in (0, {MAX_WEIGHT:g}]")
    flags = {}
    for key in ("lend", "borrow"):
        value = entry.get(key, True)
        if not isinstance(value, bool):
            raise fail(f"{where}.{key}", f"{value!r}: expected true or false")
        flags[key] = value
    quota = _quota(entry.get("quota"), f"{where}.quota", gpus_by_type, fail)
    return TenantSpec(name, quota, float(weight), flags["lend"], flags["borrow"])


def _quota(raw: Any, where: str, gpus_by_type: Mapping[str, int], fail: Any
           ) -> dict[str, int] | None:
    if raw is None:
        return None
    total = sum(gpus_by_type.values())
    if isinstance(raw, Mapping):
        quota = {}
        for gpu, count in raw.items():
            if str(gpu).lower() not in gpus_by_type:
                raise fail(f"{where}.{gpu}", f"GPU type {gpu!r} is not in the cluster; expected "
                           f"one of {', '.join(gpus_by_type)}")
            quota[str(gpu).lower()] = _gpus(count, f"{where}.{gpu}",
                                            gpus_by_type[str(gpu).lower()], fail)
        return quota
    return {ANY_TYPE: _gpus(raw, where, total, fail)}


def _gpus(value: Any, where: str, bound: int, fail: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= bound:
        raise fail(where, f"{value!r}: expected a whole number of GPUs in [0, {bound}]")
    return int(value)


def check_tenants(tenants: Sequence[TenantSpec], gpus_by_type: Mapping[str, int],
                  fail: Any) -> None:
    """Refuse repeated names and quotas that sum above the cluster's GPUs, in all or of one
    type (naming both totals)."""
    seen: set[str] = set()
    for index, tenant in enumerate(tenants):
        if tenant.name in seen:
            raise fail(f"tenants[{index}].name", f"{tenant.name!r} repeats an earlier tenant; "
                       "expected unique names")
        seen.add(tenant.name)
    total = sum(gpus_by_type.values())
    reserved = sum(t.quota_gpus or 0 for t in tenants)
    if reserved > total:
        raise fail("tenants", f"quotas sum to {reserved} GPUs, the cluster has {total}: expected "
                   f"at most {total}")
    for gpu, count in gpus_by_type.items():
        typed = sum((t.quota or {}).get(gpu, 0) for t in tenants)
        if typed > count:
            raise fail("tenants", f"quotas of {gpu} GPUs sum to {typed}, the cluster has {count}: "
                       f"expected at most {count}")


@dataclass(frozen=True)
class TenantTable:
    """The tenants of a cluster with what each is entitled to, in GPUs.

    Attributes:
        tenants: every tenant, in the file's order (one :data:`DEFAULT_TENANT` holding every GPU
            where the cluster names none).
        entitlement: GPUs each tenant is entitled to (its quota, or its weight's part of the GPUs
            no quota reserves; may be fractional), by name.
        total_gpus: GPUs in the cluster.
    """

    tenants: tuple[TenantSpec, ...]
    entitlement: Mapping[str, float] = field(hash=False)
    total_gpus: int

    def __getitem__(self, name: str) -> TenantSpec:
        for tenant in self.tenants:
            if tenant.name == name:
                return tenant
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tenants)

    def quota_fraction(self, name: str) -> float:
        """The tenant's entitlement as a fraction of the cluster's GPUs."""
        return self.entitlement[name] / self.total_gpus


def entitlements(tenants: Sequence[TenantSpec], total_gpus: int) -> TenantTable:
    """Each tenant's entitlement (see :class:`TenantTable`): an explicit quota as written; the
    GPUs no quota reserves split among the tenants without one by weight,
    ``e_k = (C - sum of quotas) * w_k / sum of their weights``. No tenants: one
    :data:`DEFAULT_TENANT` entitled to all ``C`` GPUs."""
    if not tenants:
        tenants = (TenantSpec(DEFAULT_TENANT),)
    reserved = sum(t.quota_gpus or 0 for t in tenants)
    free = max(0, total_gpus - reserved)
    open_weight = sum(t.weight for t in tenants if t.quota is None)
    entitled = {t.name: (float(t.quota_gpus) if t.quota_gpus is not None
                         else free * t.weight / open_weight) for t in tenants}
    return TenantTable(tuple(tenants), MappingProxyType(entitled), total_gpus)


def check_job_tenants(jobs: Sequence[Any], tenants: Sequence[TenantSpec],
                      source: str | None = None, first_row: int = 1) -> None:
    """Refuse a job whose tenant the cluster does not list (one line naming the job and its row
    in ``source``, the jobs read one per row from ``first_row``: 2 for a CSV with its header, 1
    for a trace); a cluster without tenants takes every job as :data:`DEFAULT_TENANT`'s and
    refuses jobs naming another. A tenant with no jobs is fine."""
    known = {t.name for t in tenants} or {DEFAULT_TENANT}
    for row, job in enumerate(jobs, start=first_row):
        if job.tenant not in known:
            raise InputError(f"job '{job.name}' names tenant '{job.tenant}': expected one of "
                             f"{', '.join(sorted(known))} (the cluster's [[tenants]])",
                             source, row, "tenant")

"""Tenants in ``serve``: the teams a service's quotas are for, what each holds, and the borrowed
GPUs taken back from them.

``serve --tenants FILE`` reads the ``[[tenants]]`` tables of a TOML or JSON file (the cluster
file's, :mod:`bayes_sched.tenants`; its other keys, such as ``nodes``, are not read here: serve's
nodes are its backend's) and checks them against the backend's GPUs (:func:`read_tenants_file`).
With tenants, the service

* records them in its state (:func:`tenants_meta`, the ``meta`` key ``serve_tenants``), so that
  ``submit`` refuses a job of a tenant the service does not serve and ``status`` shows each
  tenant's quota without asking a running service;
* decides through the quota stage the simulator uses
  (:class:`~bayes_sched.tenancy.quotas.QuotaStage` around the chosen policy:
  :class:`bayes_sched.service.serve.ServeQuotas`): a tenant holds GPUs beyond its entitlement
  only where others lend their idle quota, and a borrowed GPU goes back to its owner when the
  owner's jobs arrive, through the cluster's checkpoint -> stop -> restart path;
* names each such reclaim (:func:`reclaims`): the job whose GPUs were taken back and the tenants
  they went to, which the service's events report (``reclaimed``).

Per-tenant use (:func:`tenant_usage`) is what ``status`` prints and the Prometheus endpoint
serves: GPUs held, entitlement, GPUs borrowed beyond it, jobs by state. Only the standard
library and :mod:`bayes_sched.tenants` are loaded here (``submit`` and ``status`` read it).
"""

from __future__ import annotations

import json
import math
import tomllib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bayes_sched.errors import InputError
from bayes_sched.tenants import TenantSpec, TenantTable, entitlements, parse_tenants

if TYPE_CHECKING:
    from bayes_sched.cluster import Allocations
    from bayes_sched.cluster_spec import ClusterSpec
    from bayes_sched.jobs import JobView

#: Job states whose allocation counts as held (a job being stopped still holds its GPUs).
HOLDING = ("running", "pending", "backoff")
#: Job states counted as waiting in ``status``'s tenant lines (``submitted``: not taken up yet).
WAITING = ("pending", "backoff", "submitted")
#: Slack on GPU counts compared with fractional entitlements.
_EPSILON = 1e-9


def read_tenants_file(path: str | Path, spec: ClusterSpec) -> ClusterSpec:
    """``spec`` (the backend's cluster) with the tenants of the file at ``path``: its
    ``[[tenants]]`` tables, checked as a cluster file's are (a quota of a GPU type the backend
    lacks, quotas summing above its GPUs: one line naming the file and the entry)."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError("no such tenants file: expected a TOML file with [[tenants]] "
                         "tables", path) from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read the tenants file ({error})", path) from None
    try:
        raw = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as error:
        kind = "JSON" if path.suffix == ".json" else "TOML"
        raise InputError(f"not {kind} ({error})", path) from None
    if not isinstance(raw, Mapping) or "tenants" not in raw:
        raise InputError("no [[tenants]] table: expected one per tenant (name, quota, weight, "
                         "lend, borrow)", path, column="tenants")

    def fail(key: str, message: str) -> InputError:
        return InputError(message, path, column=key)

    gpus = {gpu_type: spec.gpus_of_type(gpu_type) for gpu_type in spec.types}
    return replace(spec, tenants=parse_tenants(raw["tenants"], gpus, fail))


def tenants_meta(spec: ClusterSpec) -> str:
    """The tenants of ``spec`` and its GPU count as the JSON the state's ``meta`` keeps."""
    return json.dumps({"total_gpus": spec.total_gpus, "tenants": [
        {"name": t.name, "quota": None if t.quota is None else dict(t.quota),
         "weight": t.weight, "lend": t.lend, "borrow": t.borrow} for t in spec.tenants]})


def served_tenants(text: str | None, where: str | Path) -> TenantTable | None:
    """The tenants :func:`tenants_meta` recorded, with their entitlements (``None``: the service
    serves no tenants). Raises :class:`InputError` naming ``where`` for text it did not write."""
    if text is None:
        return None
    try:
        data = json.loads(text)
        tenants = tuple(TenantSpec(str(t["name"]), t["quota"], float(t["weight"]),
                                   bool(t["lend"]), bool(t["borrow"])) for t in data["tenants"])
        total = int(data["total_gpus"])
    except (ValueError, TypeError, KeyError) as error:
        raise InputError(f"is damaged (its served tenants do not read: {error!r}); start "
                         "'bayes-sched serve' again to record them", where) from None
    return entitlements(tenants, total) if tenants else None


def unknown_tenant(name: str, table: TenantTable) -> str:
    """The one-line refusal of a tenant the service does not serve, naming those it does."""
    return (f"tenant '{name}' is not one the service serves: expected one of "
            f"{', '.join(table.names)} (its --tenants file)")


@dataclass(frozen=True)
class TenantUsage:
    """What one tenant holds.

    Attributes:
        name: the tenant.
        gpus: GPUs its jobs hold.
        quota: GPUs it is entitled to (its quota, or its weight's part of the unreserved ones;
            may be fractional), ``None`` for a tenant the service does not serve (a label only).
        borrowed: GPUs it holds beyond its entitlement (``None`` with no entitlement).
        jobs: its jobs per state.
    """

    name: str
    gpus: int
    quota: float | None
    borrowed: float | None
    jobs: Mapping[str, int] = field(default_factory=dict)

    @property
    def waiting(self) -> int:
        return sum(self.jobs.get(state, 0) for state in WAITING)

    def line(self) -> str:
        """``tenant NAME: G GPUs held of quota Q (B borrowed); R running, P pending``."""
        held = f"{self.gpus} GPU{'' if self.gpus == 1 else 's'} held"
        if self.quota is None:
            quota = " (no quota: not a tenant the service serves)"
        else:
            quota = f" of quota {self.quota:g}"
            if self.borrowed:
                quota += f" ({self.borrowed:g} borrowed)"
        return (f"tenant {self.name}: {held}{quota}; {self.jobs.get('running', 0)} running, "
                f"{self.waiting} pending")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "gpus": self.gpus, "quota": self.quota,
                "borrowed": self.borrowed, "jobs": dict(self.jobs)}


def tenant_usage(table: TenantTable | None, jobs: Iterable[tuple[str, str, int]]
                 ) -> list[TenantUsage]:
    """Per tenant of ``table`` (in its order), then per other tenant a job names (by name):
    GPUs held, entitlement, borrowed GPUs, jobs per state. ``jobs``: ``(tenant, status, GPUs
    of its allocation)`` of each job."""
    held: Counter[str] = Counter()
    states: dict[str, Counter[str]] = {}
    for tenant, status, gpus in jobs:
        states.setdefault(tenant, Counter())[status] += 1
        if status in HOLDING:
            held[tenant] += gpus
    served = list(table.names) if table is not None else []
    names = served + sorted(set(states) - set(served))
    usage = []
    for name in names:
        quota = table.entitlement[name] if table is not None and name in served else None
        borrowed = None if quota is None else max(0.0, held[name] - quota)
        if borrowed is not None and borrowed < _EPSILON:
            borrowed = 0.0
        usage.append(TenantUsage(name, held[name], quota, borrowed,
                                 dict(states.get(name, Counter()))))
    return usage


def reclaims(table: TenantTable, jobs: Sequence[JobView], decision: Allocations
             ) -> dict[str, tuple[str, ...]]:
    """Jobs whose borrowed GPUs ``decision`` takes back, each with the tenants they go to.

    A job is reclaimed where it held GPUs and the decision gives it none, its tenant held more
    than its entitlement before (it borrowed), and other tenants gain GPUs within their own
    entitlements (the owners taking their quota back). A job preempted while its tenant was
    within its quota is the policy's own preemption, not a reclaim."""
    before: Counter[str] = Counter()
    after: Counter[str] = Counter()
    for job in jobs:
        before[job.tenant] += job.num_gpus
        counts = decision.get(job.name)
        after[job.tenant] += 0 if counts is None else int(counts.sum())
    entitled = table.entitlement
    owners = tuple(name for name in table.names if after[name] > before[name]
                   and after[name] <= entitled[name] + _EPSILON)
    found = {}
    for job in jobs:
        counts = decision.get(job.name)
        if job.num_gpus == 0 or (counts is not None and counts.sum() > 0):
            continue
        if before[job.tenant] <= entitled.get(job.tenant, math.inf) + _EPSILON:
            continue
        to = tuple(name for name in owners if name != job.tenant)
        if to:
            found[job.name] = to
    return found


def reclaim_reason(tenants: Sequence[str]) -> str:
    """Why a reclaimed job was stopped: ``reclaimed for tenant NAME``."""
    return f"reclaimed for tenant {', '.join(tenants)}"

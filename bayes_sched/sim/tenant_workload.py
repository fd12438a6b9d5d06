"""Tenant workloads for the throughput-table world: teams with unequal demands, and jobs that end
early at times no scheduler knows.

**Unequal demands.** ASTRAEA's study of the Venus cluster found tenants whose demands differ in
kind: some submit a few long multi-GPU jobs, others many short small ones, so a scheduler fair to
jobs is unfair to tenants. :data:`DEFAULT_PROFILES` builds that imbalance from Gavel's
Philly-derived draws (:mod:`bayes_sched.sim.gavel_jobs`): a ``large`` tenant submitting 4- and
8-GPU jobs of Philly's long mode (``60 * 10**U(3, 3.5)`` s on a V100, 17-53 h), and two ``small``
tenants submitting 1- and 2-GPU jobs of Philly's short mode (``60 * 10**U(1.5, 3)`` s, 0.5-17 h).
Each tenant's jobs arrive as a Poisson process of its own rate; a job type is drawn uniformly
from Gavel's job types (one that runs distributed when the job has several GPUs), and its steps
are its duration times the type's V100 steps/s. The mix and rates are this module's choice, not
numbers from the paper (which publishes no per-tenant generator).

**Early exits.** Each job draws an outcome: cancelled with probability ``cancel_rate``, failed
with ``fail_rate``, else completed. The defaults are the Venus cluster's shares of jobs
(Hu et al., SC 2021, the Helios study of SenseTime's clusters, whose Venus trace ASTRAEA
studies): 27.9 % cancelled and 19.9 % failed. Venus is the cluster behind ASTRAEA, so its rates
go with its imbalance. The study publishes the shares, not when within a run the jobs end; here a
cancelled job ends after a fraction ``U(0, 1)`` of its declared steps (a user may stop it at
any point), a failed one after ``U(0, 1)**3`` (median 1/8: failures cluster early, as the
Philly and Helios studies both report, the exact law being this module's assumption). The job
still declares its full steps (``target_steps`` in its views, the input of finish-time fairness
and min total duration); only the simulator knows where it stops.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from bayes_sched.errors import InputError
from bayes_sched.jobs import JobView
from bayes_sched.sim.gavel_jobs import TableJobSpec, make_job
from bayes_sched.throughputs import ThroughputTable, gavel_job_types, load_gavel_throughputs

#: Venus's shares of cancelled and failed jobs (Helios study, SC 2021).
VENUS_CANCEL_RATE = 0.279
VENUS_FAIL_RATE = 0.199

OUTCOMES = ("completed", "cancelled", "failed")


@dataclass(frozen=True)
class TenantProfile:
    """What one tenant submits.

    Attributes:
        name: the tenant.
        jobs_per_hour: Poisson arrival rate (> 0).
        scale_factors: GPUs per job, drawn uniformly from these.
        log10_minutes: a job's duration on a V100 is ``60 * 10**U(low, high)`` seconds.
    """

    name: str
    jobs_per_hour: float
    scale_factors: tuple[int, ...]
    log10_minutes: tuple[float, float]


#: A large tenant with long multi-GPU jobs and two small ones with short jobs (module docstring).
DEFAULT_PROFILES: tuple[TenantProfile, ...] = (
    TenantProfile("large", 0.5, (4, 8), (3.0, 3.5)),
    TenantProfile("small-a", 2.0, (1, 1, 2), (1.5, 3.0)),
    TenantProfile("small-b", 2.0, (1, 1, 2), (1.5, 3.0)),
)


@dataclass(frozen=True)
class TenantJobSpec(TableJobSpec):
    """A Gavel job with a tenant that may end early.

    Attributes:
        declared_steps: the steps its user declared (what policies see as ``target_steps``);
            ``total_steps`` is where it really stops (the simulator's truth).
        outcome: ``"completed"``, ``"cancelled"`` or ``"failed"``.
    """

    declared_steps: float = 1.0
    outcome: str = "completed"


def generate_tenant_jobs(num_jobs: int, seed: int = 0,
                         profiles: Sequence[TenantProfile] = DEFAULT_PROFILES,
                         cancel_rate: float = VENUS_CANCEL_RATE,
                         fail_rate: float = VENUS_FAIL_RATE,
                         table: ThroughputTable | None = None) -> tuple[TenantJobSpec, ...]:
    """``num_jobs`` jobs of the tenants of ``profiles``, merged in arrival order and named by
    index (``"0"``, ...); each tenant's draws come from its own ``random.Random`` seeded by
    ``seed`` and its index, so adding a tenant does not change another's jobs.

    Raises:
        InputError: ``num_jobs`` < 1, rates outside [0, 1] or summing above 1, a profile with
            a rate <= 0 or no scale factors.
    """
    if num_jobs < 1 or num_jobs > 10**6:
        raise InputError(f"num_jobs is {num_jobs}: expected 1 to 1000000")
    if not (0 <= cancel_rate <= 1 and 0 <= fail_rate <= 1 and cancel_rate + fail_rate <= 1):
        raise InputError(f"cancel_rate {cancel_rate} and fail_rate {fail_rate}: expected "
                         "shares in [0, 1] summing to at most 1")
    for profile in profiles:
        if not (math.isfinite(profile.jobs_per_hour) and profile.jobs_per_hour > 0) \
                or not profile.scale_factors:
            raise InputError(f"tenant profile '{profile.name}': expected a rate > 0 and at "
                             "least one scale factor")
    table = table or load_gavel_throughputs()
    streams = [_tenant_stream(p, seed * 1009 + i, cancel_rate, fail_rate, table)
               for i, p in enumerate(profiles)]
    heads = [next(s) for s in streams]
    jobs: list[TenantJobSpec] = []
    while len(jobs) < num_jobs:
        k = min(range(len(heads)), key=lambda i: heads[i][0])
        arrival, draw = heads[k]
        jobs.append(draw(str(len(jobs))))
        heads[k] = next(streams[k])
    return tuple(jobs)


def _tenant_stream(profile: TenantProfile, seed: int, cancel_rate: float, fail_rate: float,
                   table: ThroughputTable) -> Iterator[tuple[float, Any]]:
    """``(arrival, make(name))`` pairs of one tenant, without end."""
    rng = random.Random(seed)
    templates = gavel_job_types()
    arrival = 0.0
    while True:
        arrival += -math.log(1.0 - rng.random()) * 3600.0 / profile.jobs_per_hour
        scale = rng.choice(profile.scale_factors)
        while True:
            job_type, distributed = rng.choice(templates)
            if (scale == 1 or distributed) and table.steps_per_second(job_type, scale, "v100"):
                break
        seconds = 60 * 10 ** rng.uniform(*profile.log10_minutes)
        declared = seconds * float(table.steps_per_second(job_type, scale, "v100") or 0.0)
        u = rng.random()
        outcome = "cancelled" if u < cancel_rate else \
            "failed" if u < cancel_rate + fail_rate else "completed"
        fraction = {"completed": 1.0, "cancelled": rng.random(),
                    "failed": rng.random() ** 3}[outcome]
        steps = max(1.0, math.floor(declared * fraction))
        yield arrival, _maker(arrival, job_type, scale, steps, declared, outcome, profile.name)


def _maker(arrival: float, job_type: str, scale: int, steps: float, declared: float,
           outcome: str, tenant: str) -> Any:
    def make(name: str) -> TenantJobSpec:
        base = make_job(name, arrival, job_type, scale, steps, tenant=tenant)
        return TenantJobSpec(base.name, base.submit_time, base.application, base.num_replicas,
                             base.batch_size, base.total_steps, base.priority_weight,
                             declared, outcome, tenant=tenant)
    return make


def declared_view(view: JobView, spec: TableJobSpec) -> JobView:
    """``view`` with the steps its user declared as ``target_steps`` (for a
    :class:`TenantJobSpec`; other jobs declare their true length)."""
    if isinstance(spec, TenantJobSpec) and view.target_steps != spec.declared_steps:
        return view.updated(target_steps=spec.declared_steps)
    return view


def outcomes(jobs: Iterable[TableJobSpec]) -> dict[str, str]:
    """Job name -> outcome (``"completed"`` for jobs that cannot end early)."""
    return {job.name: job.outcome if isinstance(job, TenantJobSpec) else "completed"
            for job in jobs}

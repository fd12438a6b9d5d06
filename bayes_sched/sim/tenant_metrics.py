"""Per-tenant metrics of a run: GPU-time share against quota over time, long-term GPU-time
fairness, tenant-level finish-time fairness, slowdown and starved jobs.

Definitions (``G``: GPU-seconds received, ``F``: fair GPU-seconds owed, both summed over rounds;
the fair share of a round is :func:`~bayes_sched.fair_shares.tenant_shares`):

* **LTGF** (ASTRAEA's long-term GPU-time fairness) of tenant ``k`` up to time ``T``:
  ``LTGF_k(T) = G_k(T) / F_k(T)``; 1 is fair, below 1 the tenant received less GPU-time than its
  share of the rounds in which it had jobs. A job's is ``G_j / F_j`` with ``F_j`` its part of its
  tenant's share (:func:`~bayes_sched.fair_shares.job_shares`). ``ltgf_spread`` is
  ``max_k LTGF_k - min_k LTGF_k`` over the tenants owed any GPU-time (0: perfectly fair),
  ``ltgf_min`` the worst tenant's.
* **Share vs quota**: tenant ``k``'s GPU-seconds received over those its quota alone would have
  given it, ``G_k / sum_t min(d_k, e_k) dt`` (``d_k`` its demand, ``e_k`` its entitlement;
  ``quota_satisfaction``, above 1 where it borrowed); ``worst_share_vs_quota`` is the smallest
  over tenants with jobs. ``share`` is its part of all GPU-time received and ``share_over_quota``
  that over its entitlement's part of the cluster (demand ignored: a tenant asking less than its
  quota scores below 1 without unfairness).
* **Contended share**: tenant ``k``'s part of the GPU-seconds received in the rounds where every
  tenant with jobs in the run had active jobs (``contended_share``; NaN where no round was),
  against its entitlement's part of the cluster (its weight's part where no tenant has a quota):
  ``worst_contended_share_vs_quota`` is the smallest ``contended_share_k / quota_fraction_k``
  (1: every tenant got at least its part while all competed; a tenant whose jobs cannot use
  more GPUs than they hold scores below 1 without unfairness).
* **Tenant FTF**: the mean finish-time fairness rho of the tenant's finished jobs (JCT over the
  job's time alone; :mod:`bayes_sched.sim.fairness`).
* **Slowdown** of a job: ``(pending + running) / running = JCT / running``, running being the
  seconds it held GPUs (its GPU-seconds over its GPU count), bounded as Feitelson et al. bound it
  (JSSPP 1997) so that a job that ran a few seconds (one that failed at once) does not dominate
  a mean: ``max(1, JCT / max(running, SLOWDOWN_FLOOR))``. ``slowdown_mean``, ``_median`` and
  ``_p99`` summarise it over the finished jobs.
* **Starved**: jobs that waited (JCT or age minus running time) longer than ``starved_hours``.

Jobs that ended early (cancelled or failed: :mod:`bayes_sched.sim.tenant_workload`) count like
completed ones: the cluster spent GPU-time on them and their users waited.

Every world feeds the same formulas: its per-round records
(:class:`~bayes_sched.sim.tenant_rounds.TenantRounds`) and its job table with each job's
``tenant`` and ``running_time`` (:func:`tenant_report`); :func:`run_tenant_report` builds them for
the throughput-table world, :func:`pollux_tenant_report` for the Pollux world (whose jobs change
GPU counts: running time is the seconds a job held any GPU, demand its user's requested GPUs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from bayes_sched.sim.tenant_rounds import TenantRounds
from bayes_sched.sim.tenant_workload import outcomes

if TYPE_CHECKING:
    import xarray as xr

    from bayes_sched.cluster_spec import ClusterSpec
    from bayes_sched.jobs import JobSpec
    from bayes_sched.sim.tenant_cluster import TenantTableCluster

#: Running seconds below which a job's slowdown is taken against this floor instead (the bounded
#: slowdown's threshold, 10 s as Feitelson et al. use it).
SLOWDOWN_FLOOR = 10.0

#: Waiting longer than this makes a job starved (hours; a day, the span after which users of
#: shared clusters escalate, and Tiresias's starvation knob's order of magnitude).
DEFAULT_STARVED_HOURS = 24.0


@dataclass
class TenantReport:
    """Per-tenant outcomes of one run.

    Attributes:
        tenants: one row per tenant: ``tenant, jobs, finished, gpu_hours, share,
            quota_fraction, share_over_quota, quota_satisfaction, contended_share, ltgf,
            avg_jct, ftf, slowdown, starved``.
        timeline: one row per round and tenant: ``time`` (s, the round's end), ``tenant``,
            ``share`` (its part of the GPU-seconds received so far), ``quota_fraction``,
            ``ltgf`` and ``quota_satisfaction`` (so far; NaN before it was owed any).
        jobs: the job table with ``tenant, outcome, running_time, slowdown, ltgf`` added.
        summary: ``ltgf_spread, ltgf_min, ltgf_max, worst_share_vs_quota,
            worst_contended_share_vs_quota, job_ltgf_p10, slowdown_mean, slowdown_median,
            slowdown_p99, starved_jobs``.
    """

    tenants: pd.DataFrame
    timeline: pd.DataFrame
    jobs: pd.DataFrame
    summary: dict[str, float]


def tenant_report(rounds: TenantRounds, jobs: pd.DataFrame,
                  outcome: Mapping[str, str] | None = None,
                  starved_hours: float = DEFAULT_STARVED_HOURS) -> TenantReport:
    """The report of a finished run from its per-round records and its job table (every world's
    columns, :class:`~bayes_sched.sim.result.RunResult`, with ``tenant`` and ``running_time``,
    the seconds the job held GPUs); ``outcome``: each job's end (default: completed)."""
    jobs = jobs.copy()
    table = rounds.table
    jobs["outcome"] = [(outcome or {}).get(name, "completed") for name in jobs["job"]]
    end = jobs["completion_time"].fillna(rounds.end)
    waited = end - jobs["submit_time"] - jobs["running_time"]
    with np.errstate(divide="ignore", invalid="ignore"):
        jobs["slowdown"] = np.maximum(
            1.0, jobs["jct"] / np.maximum(jobs["running_time"], SLOWDOWN_FLOOR))
        fair = np.array([rounds.job_fair.get(name, 0.0) for name in jobs["job"]])
        jobs["ltgf"] = np.where(fair > 0, jobs["gpu_time"] / fair, np.nan)
    jobs["starved"] = waited > starved_hours * 3600.0
    timeline = _timeline(rounds)
    received = jobs.groupby("tenant")["gpu_time"].sum()
    total = float(received.sum()) or 1.0
    last = timeline.groupby("tenant").last() if len(timeline) else None
    contended = _contended_shares(rounds, set(jobs["tenant"]))
    rows = []
    for name in table.names:
        mine = jobs[jobs["tenant"] == name]
        share = float(received.get(name, 0.0)) / total
        quota = table.quota_fraction(name)
        rows.append({
            "tenant": name, "jobs": len(mine), "finished": int(mine["jct"].notna().sum()),
            "gpu_hours": float(mine["gpu_time"].sum()) / 3600.0, "share": share,
            "quota_fraction": quota, "share_over_quota": share / quota if quota > 0 else np.nan,
            "quota_satisfaction": (float(last.loc[name, "quota_satisfaction"])
                                   if last is not None and name in last.index else np.nan),
            "contended_share": contended.get(name, np.nan),
            "ltgf": (float(last.loc[name, "ltgf"]) if last is not None and name in last.index
                     else np.nan),
            "avg_jct": float(mine["jct"].mean()), "ftf": float(mine["ftf"].mean()),
            "slowdown": float(mine["slowdown"].mean()), "starved": int(mine["starved"].sum())})
    tenants = pd.DataFrame(rows)
    return TenantReport(tenants, timeline, jobs, _summary(tenants, jobs))


def _timeline(rounds: TenantRounds) -> pd.DataFrame:
    table = rounds.table
    names = table.names
    times = np.cumsum(rounds.round_seconds)
    seconds = np.array(rounds.round_seconds)[:, None]
    received = np.array([[r.get(t, 0.0) for t in names] for r in rounds.received]).reshape(
        len(times), len(names))
    fair = np.array([[f.get(t, 0.0) for t in names] for f in rounds.fair]).reshape(
        len(times), len(names)) * seconds
    entitled = np.array([table.entitlement[t] for t in names])
    quota = np.array([[min(d.get(t, 0.0), e) for t, e in zip(names, entitled, strict=True)]
                      for d in rounds.demand]).reshape(len(times), len(names)) * seconds
    got, owed, quota = np.cumsum(received, axis=0), np.cumsum(fair, axis=0), np.cumsum(quota, 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = got / got.sum(axis=1, keepdims=True)
        ltgf = np.where(owed > 1e-9, got / owed, np.nan)
        satisfied = np.where(quota > 1e-9, got / quota, np.nan)
    return pd.DataFrame({
        "time": np.repeat(times, len(names)), "tenant": np.tile(names, len(times)),
        "share": share.ravel(), "quota_fraction": np.tile([table.quota_fraction(t)
                                                           for t in names], len(times)),
        "ltgf": ltgf.ravel(), "quota_satisfaction": satisfied.ravel()})


def _contended_shares(rounds: TenantRounds, present: set[str]) -> dict[str, float]:
    """Each tenant's part of the GPU-seconds received in the rounds where every tenant of
    ``present`` had active jobs (the module docstring); empty where no round had them all."""
    got: dict[str, float] = {}
    for demand, received in zip(rounds.demand, rounds.received, strict=True):
        if present and present <= demand.keys():
            for tenant, seconds in received.items():
                got[tenant] = got.get(tenant, 0.0) + seconds
    total = sum(got.values())
    return {t: g / total for t, g in got.items()} if total > 0 else {}


def _summary(tenants: pd.DataFrame, jobs: pd.DataFrame) -> dict[str, float]:
    ltgf = tenants["ltgf"].dropna()
    active = tenants[tenants["jobs"] > 0]
    contended = active["contended_share"] / active["quota_fraction"]
    slowdown = jobs["slowdown"].dropna()
    return {
        "ltgf_spread": float(ltgf.max() - ltgf.min()) if len(ltgf) else np.nan,
        "ltgf_min": float(ltgf.min()) if len(ltgf) else np.nan,
        "ltgf_max": float(ltgf.max()) if len(ltgf) else np.nan,
        "worst_share_vs_quota": float(active["quota_satisfaction"].min()),
        "worst_contended_share_vs_quota": float(contended.min()),
        "job_ltgf_p10": float(jobs["ltgf"].quantile(0.1)),
        "slowdown_mean": float(slowdown.mean()) if len(slowdown) else np.nan,
        "slowdown_median": float(slowdown.median()) if len(slowdown) else np.nan,
        "slowdown_p99": float(np.percentile(slowdown, 99)) if len(slowdown) else np.nan,
        "starved_jobs": float(jobs["starved"].sum()),
    }


def run_tenant_report(cluster: TenantTableCluster, jobs: pd.DataFrame) -> TenantReport:
    """:func:`tenant_report` of a throughput-table run of ``cluster`` (its records, its jobs'
    tenants and outcomes; a job's running time its GPU-seconds over its fixed GPU count), for
    a run driver's result."""
    specs = {name: job.spec for name, job in cluster.jobs.items()}
    jobs = jobs.assign(tenant=[specs[name].tenant for name in jobs["job"]],
                       running_time=jobs["gpu_time"] / jobs["scale_factor"])
    return tenant_report(cluster.rounds, jobs, outcomes(specs.values()))


def pollux_tenant_report(spec: ClusterSpec, specs: Sequence[JobSpec], jobs: pd.DataFrame,
                         timeline: xr.Dataset) -> TenantReport:
    """:func:`tenant_report` of a Pollux-world run on ``spec`` (with ``[[tenants]]``) of the
    jobs ``specs``, from its job table ``jobs`` (a row per spec, in their order) and its
    timeline (``gpus`` per round and job): the records are read from the GPUs each job held
    (:meth:`~bayes_sched.sim.tenant_rounds.TenantRounds.from_held`), a job's demand is its
    requested replicas."""
    by_name = {job.name: job for job in specs}
    order = [by_name[str(name)] for name in timeline["job"].values]
    done = dict(zip(jobs["job"], jobs["completion_time"], strict=True))
    rounds, _, running = TenantRounds.from_held(
        spec.tenant_table(), timeline["time"].values, timeline["gpus"].values,
        [(job.name, job.tenant, float(job.num_replicas)) for job in order],
        np.array([job.submit_time for job in order], dtype=float),
        np.array([done[job.name] for job in order], dtype=float))
    ran = dict(zip((job.name for job in order), running.tolist(), strict=True))
    jobs = jobs.assign(tenant=[by_name[name].tenant for name in jobs["job"]],
                       running_time=[ran[name] for name in jobs["job"]])
    return tenant_report(rounds, jobs)

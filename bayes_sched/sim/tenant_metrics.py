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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bayes_sched.sim.tenant_cluster import TenantTableCluster
from bayes_sched.sim.tenant_workload import outcomes
from bayes_sched.tenants import TenantTable

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
            quota_fraction, share_over_quota, quota_satisfaction, ltgf, avg_jct, ftf, slowdown,
            starved``.
        timeline: one row per round and tenant: ``time`` (s, the round's end), ``tenant``,
            ``share`` (its part of the GPU-seconds received so far), ``quota_fraction``,
            ``ltgf`` and ``quota_satisfaction`` (so far; NaN before it was owed any).
        jobs: the job table with ``tenant, outcome, running_time, slowdown, ltgf`` added.
        summary: ``ltgf_spread, ltgf_min, ltgf_max, worst_share_vs_quota, job_ltgf_p10,
            slowdown_mean, slowdown_median, slowdown_p99, starved_jobs``.
    """

    tenants: pd.DataFrame
    timeline: pd.DataFrame
    jobs: pd.DataFrame
    summary: dict[str, float]


def tenant_report(cluster: TenantTableCluster, jobs: pd.DataFrame, table: TenantTable,
                  outcome: Mapping[str, str] | None = None,
                  starved_hours: float = DEFAULT_STARVED_HOURS) -> TenantReport:
    """The report of a finished run: ``jobs`` is its job table
    (:func:`~bayes_sched.sim.table_run.table_job_rows`), ``table`` its tenants, ``outcome`` each
    job's end (default: completed)."""
    jobs = jobs.copy()
    specs = {name: job.spec for name, job in cluster.jobs.items()}
    jobs["tenant"] = [specs[name].tenant for name in jobs["job"]]
    jobs["outcome"] = [(outcome or {}).get(name, "completed") for name in jobs["job"]]
    jobs["running_time"] = jobs["gpu_time"] / jobs["scale_factor"]
    end = jobs["completion_time"].fillna(cluster.state.now)
    waited = end - jobs["submit_time"] - jobs["running_time"]
    with np.errstate(divide="ignore", invalid="ignore"):
        jobs["slowdown"] = np.maximum(
            1.0, jobs["jct"] / np.maximum(jobs["running_time"], SLOWDOWN_FLOOR))
        fair = np.array([cluster.job_fair.get(name, 0.0) for name in jobs["job"]])
        jobs["ltgf"] = np.where(fair > 0, jobs["gpu_time"] / fair, np.nan)
    jobs["starved"] = waited > starved_hours * 3600.0
    timeline = _timeline(cluster, table)
    received = jobs.groupby("tenant")["gpu_time"].sum()
    total = float(received.sum()) or 1.0
    last = timeline.groupby("tenant").last() if len(timeline) else None
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
            "ltgf": (float(last.loc[name, "ltgf"]) if last is not None and name in last.index
                     else np.nan),
            "avg_jct": float(mine["jct"].mean()), "ftf": float(mine["ftf"].mean()),
            "slowdown": float(mine["slowdown"].mean()), "starved": int(mine["starved"].sum())})
    tenants = pd.DataFrame(rows)
    return TenantReport(tenants, timeline, jobs, _summary(tenants, jobs))


def _timeline(cluster: TenantTableCluster, table: TenantTable) -> pd.DataFrame:
    names = table.names
    times = np.cumsum(cluster.round_seconds)
    received = np.array([[r.get(t, 0.0) for t in names] for r in cluster.received]).reshape(
        len(times), len(names))
    fair = np.array([[f.get(t, 0.0) for t in names] for f in cluster.fair]).reshape(
        len(times), len(names)) * np.array(cluster.round_seconds)[:, None]
    entitled = np.array([table.entitlement[t] for t in names])
    quota = np.array([[min(d.get(t, 0.0), e) for t, e in zip(names, entitled, strict=True)]
                      for d in cluster.demand]).reshape(len(times), len(names))
    quota = quota * np.array(cluster.round_seconds)[:, None]
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


def _summary(tenants: pd.DataFrame, jobs: pd.DataFrame) -> dict[str, float]:
    ltgf = tenants["ltgf"].dropna()
    active = tenants[tenants["jobs"] > 0]
    slowdown = jobs["slowdown"].dropna()
    return {
        "ltgf_spread": float(ltgf.max() - ltgf.min()) if len(ltgf) else np.nan,
        "ltgf_min": float(ltgf.min()) if len(ltgf) else np.nan,
        "ltgf_max": float(ltgf.max()) if len(ltgf) else np.nan,
        "worst_share_vs_quota": float(active["quota_satisfaction"].min()),
        "job_ltgf_p10": float(jobs["ltgf"].quantile(0.1)),
        "slowdown_mean": float(slowdown.mean()) if len(slowdown) else np.nan,
        "slowdown_median": float(slowdown.median()) if len(slowdown) else np.nan,
        "slowdown_p99": float(np.percentile(slowdown, 99)) if len(slowdown) else np.nan,
        "starved_jobs": float(jobs["starved"].sum()),
    }


def run_tenant_report(cluster: TenantTableCluster, jobs: pd.DataFrame) -> TenantReport:
    """:func:`tenant_report` of a run of ``cluster`` (its spec's tenants, its jobs' outcomes),
    for a run driver's result."""
    specs = [job.spec for job in cluster.jobs.values()]
    return tenant_report(cluster, jobs, cluster.spec.tenant_table(), outcomes(specs))

"""One run in a throughput-table world: Gavel or Shockwave jobs, a policy, a typed cluster -> a
:class:`~bayes_sched.sim.result.RunResult`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from bayes_sched.cluster_spec import ClusterSpec
from bayes_sched.estimation import Estimator
from bayes_sched.estimation.choose import Choices, policy_estimators
from bayes_sched.loop import run_loop
from bayes_sched.policies.base import Policy
from bayes_sched.sim.fairness import contention_factor, ftf_rho
from bayes_sched.sim.gavel_jobs import TableJobSpec
from bayes_sched.sim.metrics import summarize, utilization_timeline
from bayes_sched.sim.oracles import world_oracles
from bayes_sched.sim.result import RunResult
from bayes_sched.sim.table_cluster import DEFAULT_MEASUREMENT_NOISE, STALL_LIMIT, TableCluster
from bayes_sched.sim.tenant_cluster import TenantTableCluster
from bayes_sched.sim.tenant_metrics import run_tenant_report
from bayes_sched.throughputs import ThroughputTable, load_gavel_throughputs

LOG = logging.getLogger(__name__)


def table_job_rows(cluster: TableCluster) -> pd.DataFrame:
    rows = []
    contention = contention_factor(len(cluster.jobs), cluster.spec.total_gpus)
    for job in cluster.jobs.values():
        spec = job.spec
        done = job.completion_time is not None
        jct = (job.completion_time - spec.submit_time) if job.completion_time is not None \
            else np.nan
        alone = cluster.standalone_seconds(spec)
        rows.append({
            "job": spec.name, "job_type": spec.job_type, "scale_factor": spec.scale_factor,
            "submit_time": spec.submit_time,
            "start_time": np.nan if job.start_time is None else job.start_time,
            "completion_time": job.completion_time if done else np.nan,
            "jct": jct,
            "queueing_delay": (np.nan if job.start_time is None
                               else job.start_time - spec.submit_time),
            "restarts": job.num_restarts or 0, "gpu_time": job.attained_service,
            "standalone_time": alone, "ftf": float(ftf_rho(jct, alone, contention))})
    return pd.DataFrame(rows)


def run_table_simulation(jobs: Iterable[TableJobSpec], policy: Policy, spec: ClusterSpec,
                         table: ThroughputTable | None = None,
                         jobs_to_complete: Iterable[str] | None = None,
                         max_time: float = 1e9, source: str = "",
                         on_round: Callable[[TableCluster], None] | None = None,
                         cluster_type: type[TableCluster] = TableCluster,
                         measurement_noise: float = DEFAULT_MEASUREMENT_NOISE,
                         noise_seed: int = 0,
                         clock: Callable[[], float] = time.perf_counter,
                         stall_limit: float = STALL_LIMIT, world: str = "gavel",
                         seed: int = 0, estimators: Choices | Sequence[Estimator] | None = None,
                         estimator_seed: int = 0) -> RunResult:
    """Simulate ``jobs`` under ``policy`` on ``spec`` in rounds of ``spec.round_interval`` s
    until the jobs of ``jobs_to_complete`` (default: all jobs) finish or ``max_time``;
    ``cluster_type`` is the job physics (Gavel's fixed jobs, or
    :class:`~bayes_sched.sim.shockwave_cluster.ShockwaveCluster` for dynamic batch sizes);
    ``measurement_noise`` and ``noise_seed``: the noise on what jobs report
    (:class:`~bayes_sched.sim.table_cluster.TableCluster`); ``clock``: what the loop times
    estimation and decisions with (:func:`~bayes_sched.loop.run_loop`); ``stall_limit``:
    simulated seconds of jobs waiting with no GPU held after which the run is given up (logged,
    and ``stalled_at`` in the summary); ``world`` and ``seed`` label the result;
    ``estimators``: the user's choices of estimators (:mod:`bayes_sched.estimation.choose`;
    default the policy's defaults; or estimators already made), the world's oracles knowing ``table``
    (:func:`~bayes_sched.sim.oracles.world_oracles`), ``estimator_seed`` to the estimators that
    take a seed.

    The summary holds every world's :func:`~bayes_sched.sim.metrics.summarize` (finish-time
    fairness here with Shockwave's contention factor max(1, jobs / GPUs),
    :mod:`bayes_sched.sim.fairness`) and ``rounds``, then the policy's
    :meth:`~bayes_sched.policies.base.Policy.stats` and its estimators' (for a throughput
    learner: ``profiling_gpu_hours``, GPU-hours jobs spent in the cells their learner had them
    profiled in, ``first_visit_gpu_hours``, in cells nobody had reported from before,
    ``rejected_reports``, ``fits`` and ``fit_seconds`` in total). A cluster with ``[[tenants]]``
    runs Gavel's jobs on a :class:`~bayes_sched.sim.tenant_cluster.TenantTableCluster` (the same
    physics, recording each tenant's service) and the summary gains the per-tenant figures
    (:func:`~bayes_sched.sim.tenant_metrics.run_tenant_report`, whole in the result's
    ``tenants``).

    Raises:
        InputError: a bad choice of estimators (one line)."""
    start = time.perf_counter()
    truth = table or load_gavel_throughputs()
    if spec.tenants and cluster_type is TableCluster:
        cluster_type = TenantTableCluster
    cluster = cluster_type(jobs, spec, truth, jobs_to_complete,
                           max_time, source, measurement_noise=measurement_noise,
                           noise_seed=noise_seed, stall_limit=stall_limit)
    # A world whose jobs change batch sizes knows their true remaining work too.
    oracles = world_oracles(truth, getattr(cluster, "true_remaining_seconds", None),
                            cluster.true_remaining_steps)
    chosen = policy_estimators(policy, estimators, oracles, estimator_seed)
    each_round = None if on_round is None else (lambda _: on_round(cluster))
    stats = run_loop(cluster, policy, spec.round_interval, on_round=each_round, clock=clock,
                     estimators=chosen)
    rows = table_job_rows(cluster)
    timeline = table_timeline(cluster)
    summary: dict[str, float] = {**summarize(rows, timeline), "rounds": int(stats.rounds)}
    if cluster.stalled_at is not None:
        summary["stalled_at"] = cluster.stalled_at
        LOG.warning("%s: no job held a GPU from %.0f s to %.0f s of simulated time while jobs "
                    "waited: the policy stalled (solver failures: %s); run given up",
                    policy.name, cluster.stalled_at, cluster.state.now,
                    policy.stats().get("solver_failures", "not counted"))
    tenants = run_tenant_report(cluster, rows) if isinstance(cluster, TenantTableCluster) else None
    if tenants is not None:
        summary.update(tenants.summary)
    policy_stats = dict(policy.stats())
    summary.update(policy_stats)
    summary.update(stats.estimator_stats)
    return RunResult(world=world, workload=Path(source).stem if source else "", policy=policy.name,
                     spec=spec, jobs=rows, timeline=timeline, summary=summary,
                     decision_seconds=np.array(stats.decision_seconds),
                     decision_jobs=np.array(stats.decision_jobs),
                     estimate_seconds=np.array(stats.estimate_seconds), rejected=stats.rejected,
                     wall_seconds=time.perf_counter() - start, seed=seed,
                     policy_stats=policy_stats, estimator_stats=dict(stats.estimator_stats),
                     estimates_from=dict(stats.estimates_from),
                     setting={"measurement_noise": measurement_noise}, tenants=tenants)


def table_timeline(cluster: TableCluster) -> xr.Dataset:
    """The run's timeline (:func:`~bayes_sched.sim.metrics.utilization_timeline`) from the
    cluster's record of GPUs busy per type each round."""
    types = cluster.busy_types
    rounds = len(cluster.timeline_time)
    return utilization_timeline(
        np.array(cluster.timeline_time, dtype=np.float64), types,
        np.array(cluster.timeline_busy, dtype=np.float64).reshape(rounds, len(types)),
        np.array([cluster.spec.gpus_of_type(t) for t in types], dtype=float),
        np.array(cluster.timeline_active),
        attrs={"cluster": cluster.spec.describe(), "interval_s": cluster.spec.round_interval})

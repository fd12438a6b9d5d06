"""One run in the throughput-table world: Gavel jobs, a policy, a typed cluster -> a result."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from bayes_sched.cluster_spec import ClusterSpec
from bayes_sched.estimation.choose import Choices, policy_estimators
from bayes_sched.loop import run_loop
from bayes_sched.policies.base import Policy
from bayes_sched.sim.fairness import contention_factor, ftf_rho, ftf_summary
from bayes_sched.sim.gavel_jobs import TableJobSpec
from bayes_sched.sim.oracles import world_oracles
from bayes_sched.sim.table_cluster import DEFAULT_MEASUREMENT_NOISE, STALL_LIMIT, TableCluster
from bayes_sched.throughputs import ThroughputTable, load_gavel_throughputs

LOG = logging.getLogger(__name__)


@dataclass
class TableResult:
    """The outcome of one run.

    Attributes:
        policy: policy name.
        jobs: one row per job that arrived: ``job, job_type, scale_factor, submit_time,
            start_time, completion_time, jct`` (seconds; NaN where unfinished), ``restarts``,
            ``gpu_time`` (GPU-seconds), ``standalone_time`` (s alone on its GPUs) and ``ftf``
            (finish-time fairness rho with Shockwave's contention factor max(1, jobs / GPUs);
            :mod:`bayes_sched.sim.fairness`).
        summary: ``jobs, finished, avg_jct, median_jct, makespan`` (s), ``utilization`` per
            GPU type (busy GPU-rounds over all GPU-rounds), ``rounds``, the finish-time fairness
            distribution (``ftf_worst``, ``ftf_p25`` ... ``ftf_p99``) and ``unfair_fraction``
            (rho > 1.05), then the policy's :meth:`~bayes_sched.policies.base.Policy.stats`
            (e.g. ``solver_failures``, ``fallback_allocations``, ``allocation_updates``) and its
            estimators' (for a throughput learner: ``profiling_gpu_hours``, GPU-hours jobs spent
            in the cells their learner had them profiled in, ``first_visit_gpu_hours``, in
            cells nobody had reported from before, ``rejected_reports``, ``fits`` and
            ``fit_seconds`` in total).
        decision_seconds: wall time of each decision, shape ``(rounds with jobs,)``.
        estimate_seconds: wall time of the estimation stage before each decision, same shape.
        wall_seconds: wall time of the whole run.
        policy_stats: the policy's :meth:`~bayes_sched.policies.base.Policy.stats` at the end.
        estimates_from: ``{need: estimator}`` the decisions read (``oracle``: the world's truth;
            empty for a policy that reads the job views only).
    """

    policy: str
    jobs: pd.DataFrame
    summary: dict[str, float]
    decision_seconds: np.ndarray
    rejected: list[tuple[float, str]] = field(default_factory=list)
    wall_seconds: float = 0.0
    estimate_seconds: np.ndarray = field(default_factory=lambda: np.zeros(0))
    policy_stats: dict[str, float] = field(default_factory=dict)
    estimates_from: dict[str, str] = field(default_factory=dict)


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
            "jct": jct, "restarts": job.num_restarts or 0, "gpu_time": job.attained_service,
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
                         stall_limit: float = STALL_LIMIT,
                         estimators: Choices | None = None,
                         estimator_seed: int = 0) -> TableResult:
    """Simulate ``jobs`` under ``policy`` on ``spec`` in rounds of ``spec.round_interval`` s
    until the jobs of ``jobs_to_complete`` (default: all jobs) finish or ``max_time``;
    ``cluster_type`` is the job physics (Gavel's fixed jobs, or
    :class:`~bayes_sched.sim.shockwave_cluster.ShockwaveCluster` for dynamic batch sizes);
    ``measurement_noise`` and ``noise_seed``: the noise on what jobs report
    (:class:`~bayes_sched.sim.table_cluster.TableCluster`); ``clock``: what the loop times
    estimation and decisions with (:func:`~bayes_sched.loop.run_loop`); ``stall_limit``:
    simulated seconds of jobs waiting with no GPU held after which the run is given up (logged,
    and ``stalled_at`` in the summary); ``estimators``: the user's choices of estimators
    (:mod:`bayes_sched.estimation.choose`; default the policy's defaults), the world's oracles
    knowing ``table`` (:func:`~bayes_sched.sim.oracles.world_oracles`), ``estimator_seed`` to
    the estimators that take a seed.

    Raises:
        InputError: a bad choice of estimators (one line)."""
    start = time.perf_counter()
    truth = table or load_gavel_throughputs()
    cluster = cluster_type(jobs, spec, truth, jobs_to_complete,
                           max_time, source, measurement_noise=measurement_noise,
                           noise_seed=noise_seed, stall_limit=stall_limit)
    # A world whose jobs change batch sizes knows their true remaining work too.
    oracles = world_oracles(truth, getattr(cluster, "true_remaining_seconds", None))
    chosen = policy_estimators(policy, estimators, oracles, estimator_seed)
    each_round = None if on_round is None else (lambda _: on_round(cluster))
    stats = run_loop(cluster, policy, spec.round_interval, on_round=each_round, clock=clock,
                     estimators=chosen)
    rows = table_job_rows(cluster)
    jct = rows["jct"].dropna()
    busy = np.array(cluster.timeline_busy) if cluster.timeline_busy else np.zeros((0, 1))
    summary: dict[str, float] = {
        "jobs": len(rows), "finished": int(jct.size),
        "avg_jct": float(jct.mean()) if jct.size else np.nan,
        "median_jct": float(jct.median()) if jct.size else np.nan,
        "makespan": float(rows["completion_time"].max()) if jct.size else np.nan,
        "rounds": int(stats.rounds),
        **ftf_summary(rows["ftf"].to_numpy()),
    }
    if cluster.stalled_at is not None:
        summary["stalled_at"] = cluster.stalled_at
        LOG.warning("%s: no job held a GPU from %.0f s to %.0f s of simulated time while jobs "
                    "waited: the policy stalled (solver failures: %s); run given up",
                    policy.name, cluster.stalled_at, cluster.state.now,
                    policy.stats().get("solver_failures", "not counted"))
    for i, gpu in enumerate(cluster.busy_types):
        summary[f"utilization_{gpu}"] = (float(busy[:, i].mean() / spec.gpus_of_type(gpu))
                                         if len(busy) else 0.0)
    policy_stats = dict(policy.stats())
    summary.update(policy_stats)
    summary.update(stats.estimator_stats)
    return TableResult(policy=policy.name, jobs=rows, summary=summary,
                       decision_seconds=np.array(stats.decision_seconds),
                       rejected=stats.rejected, wall_seconds=time.perf_counter() - start,
                       estimate_seconds=np.array(stats.estimate_seconds),
                       policy_stats=policy_stats, estimates_from=dict(stats.estimates_from))

"""One Pollux-world simulation end to end: a workload, a policy, a cluster -> a
:class:`~bayes_sched.sim.result.RunResult`."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from bayes_sched.cluster_spec import ClusterSpec
from bayes_sched.estimation import Estimator
from bayes_sched.estimation.choose import Choices, policy_estimators
from bayes_sched.loop import LoopStats, run_loop
from bayes_sched.policies import make_policy
from bayes_sched.policies.base import Policy
from bayes_sched.sim.metrics import job_table, summarize, timeline_dataset
from bayes_sched.sim.physics import GPU_TYPE
from bayes_sched.sim.result import RunResult
from bayes_sched.sim.simulator import SimConfig, SimulatedCluster
from bayes_sched.sim.tenant_metrics import pollux_tenant_report
from bayes_sched.sim.typed_profiles import TypeProfiles
from bayes_sched.sim.workload import Workload, read_workload
from bayes_sched.tenants import check_job_tenants
from perfmodel.throughput import single_thread


def profile_setting(spec: ClusterSpec, profiles: TypeProfiles, applications: Sequence[str]
                    ) -> dict[str, object]:
    """``{"profiles": "v100: measured; k80: derived"}``: where each GPU type's step times came from
    for ``applications`` (:meth:`~bayes_sched.sim.typed_profiles.TypeProfiles.
    sources_by_type`); empty on the artifact's T4-only world."""
    if spec.types == (GPU_TYPE,) and not profiles:
        return {}
    sources = profiles.sources_by_type(spec.types, applications)
    return {"profiles": "; ".join(f"{t}: {s}" for t, s in sources.items())}


def run_simulation(workload: Workload | str | Path, policy: Policy | str,
                   config: SimConfig | None = None, max_jobs: int | None = None,
                   on_round: Callable[[SimulatedCluster], None] | None = None,
                   clock: Callable[[], float] = time.perf_counter,
                   estimators: Choices | Sequence[Estimator] | None = None) -> RunResult:
    """Simulate ``workload`` under ``policy`` on the cluster ``config`` describes.

    Args:
        workload: a :class:`Workload`, a CSV path, or a shipped name (``"workload-1"``).
        policy: a policy object or a name in :data:`bayes_sched.policies.POLICIES`.
        config: cluster shape, round interval, restart delay, interference.
        max_jobs: keep only the first jobs of the workload.
        on_round: called after every round with the cluster (e.g. to drive a progress bar).
        clock: what the loop times estimation and decisions with
            (:func:`~bayes_sched.loop.run_loop`).
        estimators: the user's choices of estimators (:mod:`bayes_sched.estimation.choose`;
            default the policy's defaults; or estimators already made); ``config.seed`` goes
            to those that take a seed. This world supplies no oracle.

    On a cluster with ``[[tenants]]`` the result carries the per-tenant report
    (:func:`~bayes_sched.sim.tenant_metrics.pollux_tenant_report`) and its summary the report's
    figures (``ltgf_spread``, ...).

    Raises:
        InputError: a bad choice of estimators, or (on a cluster with ``[[tenants]]``) a job
            whose tenant the cluster does not list (one line naming it and its row).
    """
    config = config or SimConfig()
    if not isinstance(workload, Workload):
        workload = read_workload(workload)
    if max_jobs is not None:
        workload = workload.head(max_jobs)
    if isinstance(policy, str):
        policy = make_policy(policy)
    if config.cluster.tenants:
        check_job_tenants(workload.jobs, config.cluster.tenants, workload.source or None,
                          first_row=2)
    chosen = policy_estimators(policy, estimators, None, config.seed)
    start = time.perf_counter()
    cluster = SimulatedCluster(workload, config, policy.job_settings)
    # One thread (torch and BLAS): the small fits and searches run several times faster without
    # threads contending (runs are parallelised across processes instead).
    with single_thread():
        # The loop hands back the cluster it drives: this simulated one.
        each_round = (None if on_round is None
                      else lambda _: on_round(cluster))
        stats: LoopStats = run_loop(cluster, policy, config.interval, on_round=each_round,
                                    refit=config.refit_rule, clock=clock, estimators=chosen)
        # The job table's standalone times interpolate the physics' profiles, whose first
        # use per application solves a small system per simplex: with BLAS threads on a busy
        # machine that took seconds per application instead of milliseconds.
        jobs = job_table(cluster)
    timeline = timeline_dataset(cluster)
    timeline.attrs.update(workload=workload.name, policy=policy.name)
    summary = summarize(jobs, timeline)
    tenants = (pollux_tenant_report(config.cluster, workload.jobs, jobs, timeline)
               if config.cluster.tenants else None)
    if tenants is not None:
        summary.update(tenants.summary)
    return RunResult(
        world="pollux", workload=workload.name, policy=policy.name, spec=config.cluster,
        jobs=jobs, timeline=timeline, summary=summary,
        decision_seconds=np.array(stats.decision_seconds),
        decision_jobs=np.array(stats.decision_jobs),
        estimate_seconds=np.array(stats.estimate_seconds), rejected=stats.rejected,
        wall_seconds=time.perf_counter() - start, seed=config.seed,
        policy_stats=dict(policy.stats()), estimator_stats=dict(stats.estimator_stats),
        estimates_from=dict(stats.estimates_from), refits=cluster.refit_count,
        setting={"interference": config.interference,
                 "hidden": "none" if config.hidden is None else config.hidden.name,
                 **profile_setting(config.cluster, config.profiles,
                                   [job.application for job in workload.jobs])},
        config=config, tenants=tenants,
    )

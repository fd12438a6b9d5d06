"""The outcome of one simulated run, in any world: :class:`RunResult`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import xarray as xr

if TYPE_CHECKING:
    from bayes_sched.cluster_spec import ClusterSpec
    from bayes_sched.sim.simulator import SimConfig
    from bayes_sched.sim.tenant_metrics import TenantReport


@dataclass
class RunResult:
    """One run of a policy on a world's jobs.

    Attributes:
        world: the world's name (:data:`bayes_sched.worlds.WORLDS`).
        workload: the jobs' name (a workload's, or a trace's file stem).
        policy: the policy's name.
        spec: the cluster the run simulated (with its round interval).
        jobs: one row per job that arrived; every world's table has ``job, submit_time,
            start_time, completion_time, jct`` (s; NaN where unfinished), ``restarts``,
            ``gpu_time`` (GPU-seconds), ``standalone_time`` (s alone on its GPUs) and ``ftf``
            (finish-time fairness rho), then the world's own columns.
        timeline: per round (dim ``time``, seconds at the round's end): ``utilization`` (the
            fraction of the cluster's GPUs held), ``type_utilization`` (dims ``time, gpu_type``)
            and ``active_jobs`` (submitted, unfinished); the Pollux world adds ``gpus`` per job
            (dims ``time, job``).
        summary: JCT statistics, makespan (s), utilisation
            (:func:`~bayes_sched.sim.metrics.utilization_summary`), fairness, then the policy's
            and the estimators' figures.
        decision_seconds: time of each decision, ``(rounds with jobs,)``.
        decision_jobs: active jobs at each decision, same shape.
        estimate_seconds: time of the estimation stage before each decision, same shape.
        rejected: the decisions the cluster rejected, ``(time, reason)``.
        wall_seconds: wall time of the whole run.
        seed: the run's seed (the simulator's stream; the CLI gives it to the policy too).
        policy_stats: the policy's :meth:`~bayes_sched.policies.base.Policy.stats` at the end.
        estimator_stats: the estimators' figures (:meth:`~bayes_sched.estimation.Estimator.stats`).
        estimates_from: ``{need: estimator}`` the decisions read.
        refits: throughput-model refits done by the jobs' own agents (Pollux world).
        setting: the run's settings besides the cluster, as a report names them (the Pollux
            world's ``interference`` and ``hidden`` law; a table world's
            ``measurement_noise``).
        config: the Pollux world's :class:`~bayes_sched.sim.simulator.SimConfig` (``None`` in
            the table worlds).
        tenants: the per-tenant report of a run on a cluster with ``[[tenants]]``
            (:class:`~bayes_sched.sim.tenant_metrics.TenantReport`; every world), else
            ``None``.
    """

    world: str
    workload: str
    policy: str
    spec: ClusterSpec
    jobs: pd.DataFrame
    timeline: xr.Dataset
    summary: dict[str, float]
    decision_seconds: np.ndarray
    decision_jobs: np.ndarray
    estimate_seconds: np.ndarray
    rejected: list[tuple[float, str]] = field(default_factory=list)
    wall_seconds: float = 0.0
    seed: int = 0
    policy_stats: dict[str, float] = field(default_factory=dict)
    estimator_stats: dict[str, float] = field(default_factory=dict)
    estimates_from: dict[str, str] = field(default_factory=dict)
    refits: int = 0
    setting: dict[str, object] = field(default_factory=dict)
    config: SimConfig | None = None
    tenants: TenantReport | None = None

    @property
    def unfinished(self) -> list[str]:
        """The jobs that did not finish within the run, in arrival order."""
        return self.jobs.loc[self.jobs["completion_time"].isna(), "job"].astype(str).tolist()


__all__ = ["RunResult"]

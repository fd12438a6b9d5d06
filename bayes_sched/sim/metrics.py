"""Per-run results: per-job outcomes, the summary table and the allocation timeline (xarray)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import xarray as xr

from bayes_sched.sim.fairness import ftf_rho, ftf_summary
from bayes_sched.sim.physics import GPU_TYPE
from bayes_sched.sim.simulator import SimulatedCluster
from bayes_sched.sim.typed_profiles import TypedApplication


def baseline_gpu_type(types: tuple[str, ...], gpus: list[int]) -> str:
    """The GPU type a job's time alone is measured on (the fairness baseline): the profiles'
    type where the cluster has it, else the type the cluster has most GPUs of (the first on ties)."""
    if GPU_TYPE in types:
        return GPU_TYPE
    return types[int(np.argmax(gpus))]


def job_table(cluster: SimulatedCluster) -> pd.DataFrame:
    """One row per job: times in seconds, GPU-time in GPU-seconds.

    Columns: ``job, application, submit_time, start_time, completion_time, jct, queueing_delay,
    restarts, gpu_time, standalone_time, ftf`` where ``ftf`` (finish-time fairness) is the JCT over
    the job's run time alone on the GPUs and batch its user asked for (``> 1``: slower than that);
    on a typed cluster on GPUs of :func:`baseline_gpu_type`.
    """
    rows = []
    cluster_spec = cluster.config.cluster
    gpus = int(cluster_spec.capacity().max())  # alone: packed on the largest nodes
    baseline = baseline_gpu_type(cluster_spec.types,
                                 [cluster_spec.gpus_of_type(t) for t in cluster_spec.types])
    for job in cluster.jobs.values():
        spec = job.spec
        app = (job.app if baseline == GPU_TYPE and not job.profiles
               else TypedApplication(job.app, (baseline,), job.profiles))
        alone = app.standalone_runtime(spec.num_replicas, spec.batch_size, gpus)
        done = job.completion_time is not None
        jct = job.completion_time - spec.submit_time if job.completion_time is not None else np.nan
        rows.append({
            "job": spec.name, "application": spec.application,
            "submit_time": spec.submit_time,
            "start_time": np.nan if job.start_time is None else job.start_time,
            "completion_time": job.completion_time if done else np.nan,
            "jct": jct,
            "queueing_delay": (np.nan if job.start_time is None
                               else job.start_time - spec.submit_time),
            "restarts": job.num_restarts or 0,
            "gpu_time": job.attained_service,
            "standalone_time": alone,
            "ftf": float(ftf_rho(jct, alone)) if done else np.nan,
        })
    return pd.DataFrame(rows)


def utilization_summary(timeline: xr.Dataset) -> dict[str, float]:
    """The one utilisation of every world: the mean fraction of GPUs held over the rounds with
    jobs (submitted by the round's start and unfinished then; 0 with none), of the cluster
    (``utilization``) and of each GPU type (``utilization_<type>``), from a run's timeline
    (:func:`utilization_timeline`)."""
    busy = timeline["active_jobs"].values > 0
    util = timeline["utilization"].values
    per_type = timeline["type_utilization"].values  # (time, gpu_type)
    return {
        "utilization": float(util[busy].mean()) if busy.any() else 0.0,
        **{f"utilization_{gpu}": (float(per_type[busy, i].mean()) if busy.any() else 0.0)
           for i, gpu in enumerate(timeline["gpu_type"].values)},
    }


def jct_summary(jobs: pd.DataFrame) -> dict[str, float]:
    """``jobs``, ``finished``, ``avg_jct``, ``median_jct``, ``p99_jct`` and ``makespan`` (s; NaN
    with no job finished) of a run's job table."""
    jct = jobs["jct"].dropna()
    return {
        "jobs": int(len(jobs)),
        "finished": int(jct.size),
        "avg_jct": float(jct.mean()) if jct.size else np.nan,
        "median_jct": float(jct.median()) if jct.size else np.nan,
        "p99_jct": float(np.percentile(jct, 99)) if jct.size else np.nan,
        "makespan": float(jobs["completion_time"].max()) if jct.size else np.nan,
    }


def summarize(jobs: pd.DataFrame, timeline: xr.Dataset) -> dict[str, float]:
    """Summary of one run, in any world, from its job table (columns ``jct, completion_time,
    queueing_delay, restarts, gpu_time, ftf``) and timeline: :func:`jct_summary`,
    :func:`utilization_summary`, queueing, restarts, GPU-hours and finish-time fairness (mean,
    worst as ``ftf_max`` and ``ftf_worst``, quantiles ``ftf_p25`` ... ``ftf_p99``,
    ``ftf_over_1`` and ``unfair_fraction``, rho > 1.05)."""
    return {
        **jct_summary(jobs),
        "avg_queueing": float(jobs["queueing_delay"].mean()),
        "restarts_per_job": float(jobs["restarts"].mean()),
        "gpu_hours": float(jobs["gpu_time"].sum() / 3600.0),
        "ftf_mean": float(jobs["ftf"].mean()),
        "ftf_max": float(jobs["ftf"].max()),
        "ftf_over_1": float((jobs["ftf"] > 1).mean()),
        **ftf_summary(jobs["ftf"].to_numpy()),
        **utilization_summary(timeline),
    }


def utilization_timeline(time_s: np.ndarray, gpu_types: Sequence[str], type_gpus: np.ndarray,
                         type_total: np.ndarray, active_jobs: np.ndarray,
                         attrs: dict[str, object] | None = None) -> xr.Dataset:
    """A run's timeline, every world's form: per round ending at ``time_s`` ``(R,)`` seconds,
    the GPUs held per type ``type_gpus`` ``(R, T)`` of ``type_total`` ``(T,)``, and the jobs
    of the round ``active_jobs`` ``(R,)`` (submitted by its start, unfinished then);
    ``utilization`` is GPUs held over all GPUs."""
    time_s = np.asarray(time_s, dtype=np.float64)
    type_gpus = np.asarray(type_gpus, dtype=np.float64).reshape(len(time_s), len(gpu_types))
    type_total = np.asarray(type_total, dtype=np.float64)
    return xr.Dataset(
        {
            "utilization": (("time",), type_gpus.sum(axis=1) / type_total.sum(),
                            {"units": "1", "long_name": "fraction of the cluster's GPUs held"}),
            "active_jobs": (("time",), np.asarray(active_jobs, dtype=np.int32),
                            {"units": "jobs",
                             "long_name": "jobs submitted by the round's start, unfinished then"}),
            "type_utilization": (("time", "gpu_type"), type_gpus / type_total,
                                 {"units": "1", "long_name": "fraction of the type's GPUs held"}),
        },
        coords={
            "time": ("time", time_s, {"units": "s", "long_name": "end of scheduling round"}),
            "gpu_type": ("gpu_type", np.array(list(gpu_types), dtype=object)),
        },
        attrs=dict(attrs or {}),
    )


def timeline_dataset(cluster: SimulatedCluster) -> xr.Dataset:
    """The run's timeline (:func:`utilization_timeline`) with the GPUs each job held per round,
    dims ``(time, job)``."""
    names = list(cluster.jobs)
    time = np.array(cluster.timeline_time, dtype=np.float64)
    gpus = cluster.timeline_gpus()
    types = list(cluster.timeline_types)
    spec = cluster.config.cluster
    timeline = utilization_timeline(
        time, types, np.array(cluster.timeline_type_gpus, dtype=np.float64),
        np.array([spec.gpus_of_type(t) for t in types], dtype=float),
        np.array(cluster.timeline_active),
        attrs={"num_nodes": cluster.config.num_nodes,
               "gpus_per_node": int(spec.capacity().max()),
               "cluster": spec.describe(), "interval_s": cluster.config.interval})
    return timeline.assign(gpus=(("time", "job"), gpus.astype(np.int32),
                                 {"units": "GPUs",
                                  "long_name": "GPUs held during the round ending at time"})
                           ).assign_coords(job=("job", np.array(names, dtype=object)))
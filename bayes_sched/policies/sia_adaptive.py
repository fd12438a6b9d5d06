"""Sia in its natural setting: adaptive jobs on typed GPUs (the Pollux world on a typed cluster).

:class:`~bayes_sched.policies.sia.SiaPolicy` holds Sia's formulation (normalised goodput to the
power ``p``, ``lambda_n``, the re-allocation factor, the integer program, placement on one GPU type)
and runs rigid jobs from a throughput table. This module feeds the same program with *adaptive*
jobs (Pollux's: they tune their batch, their goodput is throughput times statistical efficiency)
whose goodput per GPU type comes from the job's own fitted models, as Sia's paper describes:

* **Configurations** of a job: on every GPU type, ``n`` GPUs for ``n`` in 1, 2, 4, ... up to a
  node's GPUs, then whole nodes, up to twice the most GPUs it was measured on over all types
  (Sia's ``share_max_replicas``), at most 64 and what its batch limits allow; ``n`` GPUs span
  ``ceil(n / gpus_per_node)`` nodes. Goodput is the job model's (examples at ``B0`` per second at
  the best batch, :meth:`~bayes_sched.jobs.JobModel.goodput`).
* **Models per type.** A job reports the measurements of the type it runs on
  (:meth:`~bayes_sched.agent.JobAgent.use_gpu_type`); the policy keeps the last model it saw per
  job and type. On a type with no model of the job, Sia *projects* a model of another type by the
  ratio of the two types' one-GPU throughputs (``project_throughputs``). Sia profiles every new
  job on one GPU of each type to get that ratio; no job here is profiled outside its allocation,
  so the policy learns the ratio per application from what it has seen: the median, over the
  jobs of that application it watched on a type, of the model's one-GPU throughput at the
  application's initial micro-batch. Where an application was never seen on one of the two types
  the ratio is 1 (the types taken as alike, Sia's rule for a job it knows nothing of).
* **Bootstrapping.** A job with no model on any type offers one GPU on every type, goodput 1
  (Sia's rule).

Job settings are Pollux's (the artifact's NCF override included), so both policies run the same
jobs. Everything else (objective, restart factor, solver, placement) is
:class:`~bayes_sched.policies.sia.SiaPolicy`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

from bayes_sched.cluster import Allocations, ClusterState
from bayes_sched.estimation import Estimator, JobModelEstimator
from bayes_sched.jobs import JobModel, JobSettings, JobSpec, JobView
from bayes_sched.policies.pollux import ARTIFACT_JOB_SETTINGS
from bayes_sched.policies.sia import Configurations, SiaPolicy

#: Sia's cap on GPUs per job.
MAX_GPUS_PER_JOB = 64


def gpu_counts(max_gpus: int, gpus_per_node: int) -> np.ndarray:
    """Sia's GPU counts up to ``max_gpus``: powers of two up to a node, then whole nodes."""
    counts = []
    n = 1
    while n < gpus_per_node and n <= max_gpus:
        counts.append(n)
        n *= 2
    counts += list(range(gpus_per_node, max_gpus + 1, gpus_per_node))
    return np.array(counts or [1], dtype=np.int64)


class SiaAdaptivePolicy(SiaPolicy):
    """Sia for adaptive jobs on typed GPUs (see the module docstring).

    Args:
        p: the exponent of normalised goodput (Sia: -0.5).
        lambda_n: the penalty per job left without GPUs (Sia: 1.1).
        solver: the cvxpy MILP solver, ``"HIGHS"`` or ``"SCIP"``.
        mip_rel_gap: relative optimality gap (Sia: 1e-4).
        time_limit: seconds a solve may take.
        seed: the solver's random seed.
        job_overrides: per-application fixed settings (default: Pollux's artifact's).
    """

    name = "sia_adaptive"

    def __init__(self, p: float = -0.5, lambda_n: float = 1.1,
                 solver: Literal["HIGHS", "SCIP"] = "HIGHS", mip_rel_gap: float = 1e-4,
                 time_limit: float = 10.0, seed: int = 0,
                 job_overrides: Mapping[str, JobSettings] = ARTIFACT_JOB_SETTINGS) -> None:
        super().__init__(p, lambda_n, solver, mip_rel_gap, time_limit, seed)
        self.job_overrides = dict(job_overrides)
        self.job_models = JobModelEstimator()
        self._models: dict[tuple[str, str], JobModel] = {}   # (job, type) -> last model seen
        self._max_profiled: dict[str, int] = {}
        # (application, type) -> {job: one-GPU throughput of its model, steps/s}
        self._one_gpu: dict[tuple[str, str], dict[str, float]] = {}

    def estimators(self) -> Sequence[Estimator]:
        return (self.job_models,)

    def job_settings(self, spec: JobSpec) -> JobSettings:
        return self.job_overrides.get(spec.application, JobSettings())

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView]) -> Allocations:
        names = {job.name for job in jobs}
        for key in [k for k in self._models if k[0] not in names]:
            del self._models[key]
        for name in [n for n in self._max_profiled if n not in names]:
            del self._max_profiled[name]
        for job in jobs:
            self._max_profiled[job.name] = max(self._max_profiled.get(job.name, 0),
                                               job.max_profiled_replicas)
            for gpu_type, model in job.models.items():
                self._models[job.name, gpu_type] = model
                local = _initial_local_bsz(job)
                step = float(model.step_time(np.array([1]), np.array([1]),
                                             np.array([local]))[0])
                if step > 0:
                    self._one_gpu.setdefault((job.application, gpu_type), {})[job.name] = \
                        1.0 / step
        return super().decide(cluster, jobs)

    def type_ratio(self, application: str, to_type: str, from_type: str) -> float:
        """Learned one-GPU throughput of ``application`` on ``to_type`` over ``from_type`` (1
        where either was never seen)."""
        to = self._one_gpu.get((application, to_type))
        frm = self._one_gpu.get((application, from_type))
        if not to or not frm:
            return 1.0
        return float(np.median(list(to.values())) / np.median(list(frm.values())))

    def max_gpus(self, job: JobView) -> int:
        """Twice the most GPUs ``job`` was measured on over all types (at least 1), at most 64,
        its batch limits and its own cap."""
        limit = min(max(2 * self._max_profiled.get(job.name, 0), 1), MAX_GPUS_PER_JOB,
                    job.limits.max_batch_size // job.limits.min_local_bsz)
        if job.settings.max_replicas is not None:
            limit = min(limit, job.settings.max_replicas)
        return max(limit, 1)

    def configurations(self, cluster: ClusterState, jobs: Sequence[JobView],
                       types: Sequence[str], capacity: np.ndarray | None = None
                       ) -> Configurations:
        """Each job's configurations per type and GPU count with its (projected) goodput, within
        ``capacity`` GPUs per type (default the cluster's)."""
        job_index, type_index, num_gpus, goodput = [], [], [], []
        for j, job in enumerate(jobs):
            known = {t: self._models[job.name, t] for t in types
                     if (job.name, t) in self._models}
            for k, gpu_type in enumerate(types):
                room = (cluster.gpus_of_type(gpu_type) if capacity is None
                        else int(capacity[k]))
                nodes = cluster.spec.nodes_of_type(gpu_type)
                per_node = int(cluster.capacity()[nodes].max()) if nodes.size else 0
                if room < 1:
                    continue
                if not known:
                    counts, rates = np.array([1]), np.array([1.0])
                else:
                    source = gpu_type if gpu_type in known else next(iter(known))
                    counts = gpu_counts(min(self.max_gpus(job), room), per_node)
                    model = known[source]
                    rates = model.goodput(np.ceil(counts / per_node).astype(np.int64), counts)
                    rates = rates * (1.0 if source == gpu_type
                                     else self.type_ratio(job.application, gpu_type, source))
                ok = rates > 0
                job_index += [j] * int(ok.sum())
                type_index += [k] * int(ok.sum())
                num_gpus += counts[ok].tolist()
                goodput += rates[ok].tolist()
        return Configurations(job=np.array(job_index, dtype=np.int64),
                              gpu_type=np.array(type_index, dtype=np.int64),
                              num_gpus=np.array(num_gpus, dtype=np.int64),
                              goodput=np.array(goodput, dtype=float))


def _initial_local_bsz(job: JobView) -> int:
    """The job's initial batch on one GPU, within its micro-batch limits."""
    limits = job.limits
    return int(min(max(limits.init_batch_size, limits.min_local_bsz), limits.max_local_bsz))


__all__ = ["MAX_GPUS_PER_JOB", "SiaAdaptivePolicy", "gpu_counts"]

"""Optimus (Peng et al., EuroSys 2018): greedy allocation by marginal gain in remaining time.

Jobs run at their users' batch sizes. Every active job first gets one GPU (in submission order,
while GPUs last); then GPUs go one at a time to the job whose estimated remaining time drops most
with one more GPU: ``(T(r) - T(r + 1)) * remaining steps``, with ``T(r)`` the step time the job
agent's fitted throughput model predicts for ``r`` consolidated GPUs at the user's batch, and the
remaining steps estimated from the job's remaining progress and its measured gradient statistics.
A job without a fitted model gets no more than its first GPU (Optimus profiles a job before scaling
it). Jobs whose GPU count is unchanged keep their placement; others are placed consolidated.

The Pollux artifact's variant (Optimus+Oracle) read true step times and remaining iterations from
the simulator; this one uses only what a real scheduler could know.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from bayes_sched.cluster import Allocations, ClusterState, consolidated_placement
from bayes_sched.jobs import JobSettings, JobSpec, JobView, split_batch
from bayes_sched.policies.base import free_gpus, pack
from perfmodel.throughput import predict_step_time

#: The artifact ran NCF on one GPU under every policy that sizes jobs.
ARTIFACT_MAX_REPLICAS: Mapping[str, int] = {"ncf": 1}


class OptimusPolicy:
    name = "optimus"
    uses_models = True  # the loop lets job agents refit before each decision

    def __init__(self, max_replicas: Mapping[str, int] = ARTIFACT_MAX_REPLICAS) -> None:
        self.max_replicas_by_app = dict(max_replicas)

    def job_settings(self, spec: JobSpec) -> JobSettings:
        return JobSettings(batch_size=spec.batch_size,
                           max_replicas=self.max_replicas_by_app.get(spec.application))

    def _max_replicas(self, job: JobView, total: int) -> int:
        assert job.settings.batch_size is not None
        limit = job.settings.batch_size // job.limits.min_local_bsz
        if job.settings.max_replicas is not None:
            limit = min(limit, job.settings.max_replicas)
        return max(1, min(limit, total))

    def step_times(self, job: JobView, max_r: int, gpus_per_node: int) -> np.ndarray | None:
        """Predicted seconds per step on ``r = 1..max_r + 1`` consolidated GPUs, shape
        ``(max_r + 1,)``; ``None`` without a fitted model."""
        params = job.agent.params
        if params is None or job.settings.batch_size is None:
            return None
        r = np.arange(1, max_r + 2)
        nodes = np.array([len(consolidated_placement(int(k), gpus_per_node)) for k in r])
        split = np.array([split_batch(job.settings.batch_size, int(k), job.limits) for k in r])
        return predict_step_time(params, nodes, r, split[:, 0], split[:, 1])

    def remaining_steps(self, job: JobView) -> float:
        """Steps left at the user's batch: remaining progress over the progress of one step."""
        assert job.settings.batch_size is not None
        remaining = max(job.target_progress - job.progress, 0.0)
        sqr, var = job.agent.grad_sqr, job.agent.grad_var
        if sqr is None or var is None:
            return remaining
        scale = job.settings.batch_size / job.limits.init_batch_size
        gain = (var + sqr) / (var / scale + sqr) if var / scale + sqr > 0 else 1.0
        return remaining / gain

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView]) -> Allocations:
        jobs = sorted(jobs, key=lambda j: (j.submit_time, j.name))
        available = cluster.total_gpus
        replicas: dict[str, int] = {}
        curves: dict[str, np.ndarray | None] = {}
        steps: dict[str, float] = {}
        limit: dict[str, int] = {}
        for job in jobs:
            if available < 1:
                replicas[job.name] = 0
                continue
            replicas[job.name] = 1
            available -= 1
            limit[job.name] = self._max_replicas(job, cluster.total_gpus)
            curves[job.name] = self.step_times(job, limit[job.name], cluster.gpus_per_node)
            steps[job.name] = self.remaining_steps(job)

        def gain(name: str) -> float:
            r, curve = replicas[name], curves.get(name)
            if curve is None or r + 1 > limit[name]:
                return -math.inf
            return float(curve[r - 1] - curve[r]) * steps[name]

        gains = {name: gain(name) for name in limit}
        while available > 0 and gains:
            name = max(gains, key=gains.__getitem__)
            if not gains[name] > 0:
                break
            replicas[name] += 1
            available -= 1
            gains[name] = gain(name)
        # Placement: unchanged jobs stay; the rest are packed, smallest first.
        allocations = {job.name: job.allocation for job in jobs
                       if job.num_gpus > 0 and job.num_gpus == replicas[job.name]}
        free = free_gpus(cluster, allocations)
        for job in sorted(jobs, key=lambda j: replicas[j.name]):
            if replicas[job.name] > 0 and job.name not in allocations:
                counts = pack(replicas[job.name], free)
                if counts is not None:
                    allocations[job.name] = counts
        return allocations

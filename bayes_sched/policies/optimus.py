"""Optimus (Peng et al., EuroSys 2018): greedy allocation by marginal gain in remaining time.

Jobs run at their users' batch sizes. Every active job first gets one GPU (in submission order,
while GPUs last); then GPUs go one at a time to the job whose estimated remaining time drops most
with one more GPU: ``(T(r) - T(r + 1)) * remaining steps``. ``T(r)`` is the step time on ``r``
consolidated GPUs at the user's batch: measured, where the job has run in that shape and
micro-batch, and otherwise predicted by the job's fitted throughput model (the estimation stage
fits it from the reported step times). The remaining steps are the job's remaining training over
its batch size: the epochs its user asked for less those it reports done, times its examples per
epoch, over its batch. A job without a fitted
model gets no more than its first GPU (Optimus profiles a job before scaling it). Jobs whose GPU
count is unchanged keep their placement; others are placed consolidated.

The Pollux artifact's variant (Optimus+Oracle) read true step times and remaining iterations from
the simulator; this one uses only what a real scheduler could know. Two choices bring it close to
the artifact (measured: docs/results/fidelity.md):

* Measured step times beat the model. Real step times are not smooth in ``r`` (a third node, an
  uneven split): the artifact's true profile makes its greedy stop where one more GPU is no faster,
  while a smooth fit kept granting GPUs that bought nothing.
* Remaining steps from the training length, not from the current gradient noise. Early in
  training the gradient noise is small, so the current statistical efficiency understates the
  later one; dividing by it made new jobs look many times longer than they were and drew GPUs
  to them until the estimate fell, moving GPUs back and forth (restarts).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Annotated

import numpy as np

from bayes_sched.cluster import Allocations, ClusterState, consolidated_placement
from bayes_sched.estimates import Estimates
from bayes_sched.jobs import JobSettings, JobSpec, JobView, split_batch
from bayes_sched.mechanisms.placement import free_gpus, pack
from bayes_sched.registry import GPU_COUNT
from perfmodel.throughput import seconds_per_step

#: The artifact ran NCF on one GPU under every policy that sizes jobs.
ARTIFACT_MAX_REPLICAS: Mapping[str, int] = {"ncf": 1}


class OptimusPolicy:
    name = "optimus"
    needs: tuple[str, ...] = ("job_goodput",)
    default_estimators: Mapping[str, str] = {"job_goodput": "job_models"}

    def __init__(self, max_replicas: Mapping[str, Annotated[int, GPU_COUNT]] = ARTIFACT_MAX_REPLICAS
                 ) -> None:
        self.max_replicas_by_app = dict(max_replicas)

    def stats(self) -> Mapping[str, float]:
        return {}

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
        """Seconds per step on ``r = 1..max_r + 1`` consolidated GPUs, shape ``(max_r + 1,)``:
        measured where the job ran in that shape and micro-batch, otherwise predicted by the
        fitted model; ``None`` without a fitted model."""
        model = job.model
        if model is None or job.settings.batch_size is None:
            return None
        r = np.arange(1, max_r + 2)
        nodes = np.array([len(consolidated_placement(int(k), gpus_per_node)) for k in r])
        split = np.array([split_batch(job.settings.batch_size, int(k), job.limits) for k in r])
        times = model.step_time(nodes, r, split[:, 0], split[:, 1])
        observations = job.observations
        for i, (n, k, (local_bsz, accum_steps)) in enumerate(zip(nodes, r, split, strict=True)):
            measured = observations.get((int(n), int(k), int(local_bsz)))
            if measured is not None:
                times[i] = seconds_per_step(measured.step_time, measured.sync_time,
                                            int(accum_steps))
        return times

    def remaining_steps(self, job: JobView) -> float:
        """Steps left at the user's batch size ``B``: the epochs left (those its user asked for
        less those the job reports done) times its examples per epoch, over ``B``."""
        assert job.settings.batch_size is not None
        remaining = max(job.target_epochs - job.epochs, 0.0) * job.examples_per_epoch
        return remaining / job.settings.batch_size

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView],
               estimates: Estimates) -> Allocations:
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

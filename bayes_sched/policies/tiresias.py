"""Tiresias (Gu et al., NSDI 2019): discretised two-dimensional least-attained-service (2D-LAS).

Jobs run with their users' GPU count and batch size. A job's attained service is its executed time
times its GPUs; jobs sit in priority queues by attained service (thresholds in GPU-seconds; the
Pollux artifact used two queues split at 16 GPU-hours), FIFO within a queue. Each round, jobs are
admitted in queue order while their GPUs fit (a job that does not fit is skipped, so smaller ones
may start); running jobs that fall out are preempted. Newly started jobs are placed consolidated on
the nodes with most free GPUs. Starvation handling (promotion after waiting) is off, as in the
artifact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated

from bayes_sched.cluster import Allocations, ClusterState
from bayes_sched.estimates import Estimates
from bayes_sched.jobs import JobSettings, JobSpec, JobView
from bayes_sched.mechanisms.placement import free_gpus, pack
from bayes_sched.registry import Increasing, Range


class TiresiasPolicy:
    """2D-LAS with queue thresholds ``thresholds`` (GPU-seconds, increasing)."""

    name = "tiresias"
    needs: tuple[str, ...] = ()
    default_estimators: Mapping[str, str] = {}  # it reads the job views alone

    def __init__(self, thresholds: Annotated[
            Sequence[Annotated[float, Range(0.0, min_open=True, unit="GPU-seconds")]],
            Increasing()] = (16 * 3600.0,)) -> None:
        self.thresholds = tuple(float(t) for t in thresholds)
        self._queues: list[list[str]] = [[] for _ in range(len(self.thresholds) + 1)]
        self._level: dict[str, int] = {}
        self._running: set[str] = set()
        self._executed: dict[str, float] = {}  # seconds run (while admitted)
        self._last_check: dict[str, float] = {}

    def stats(self) -> Mapping[str, float]:
        return {}

    def job_settings(self, spec: JobSpec) -> JobSettings:
        return JobSettings(batch_size=spec.batch_size, max_replicas=spec.num_replicas)

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView],
               estimates: Estimates) -> Allocations:
        now = cluster.now
        by_name = {job.name: job for job in jobs}
        for queue in self._queues:
            queue[:] = [name for name in queue if name in by_name]
        self._running &= by_name.keys()
        for job in jobs:
            if job.name not in self._level:
                self._level[job.name] = 0
                self._queues[0].append(job.name)
                self._executed[job.name] = 0.0
                self._last_check[job.name] = now
        # Account executed time of admitted jobs and demote those past a threshold.
        for job in jobs:
            elapsed = now - self._last_check[job.name]
            self._last_check[job.name] = now
            if job.name not in self._running:
                continue
            self._executed[job.name] += elapsed
            gpu_time = self._executed[job.name] * job.requested_replicas
            level = self._level[job.name]
            while level < len(self.thresholds) and gpu_time >= self.thresholds[level]:
                self._queues[level].remove(job.name)
                level += 1
                self._queues[level].append(job.name)
            self._level[job.name] = level
        # Admit in queue order while GPUs last.
        available = cluster.total_gpus
        admitted: list[str] = []
        for queue in self._queues:
            for name in queue:
                need = by_name[name].requested_replicas
                if need <= available:
                    admitted.append(name)
                    available -= need
        self._running = set(admitted)
        allocations = {name: by_name[name].allocation for name in admitted
                       if by_name[name].num_gpus > 0}
        free = free_gpus(cluster, allocations)
        for name in admitted:
            if name not in allocations:
                counts = pack(by_name[name].requested_replicas, free)
                if counts is not None:
                    allocations[name] = counts
        return allocations

"""FIFO: jobs start in submission order with the GPUs and batch size their users asked for.

No preemption and no resizing: a running job keeps its GPUs until it finishes; the head of the
queue waits until its GPUs are free (no backfilling), placed on as few nodes as possible.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bayes_sched.cluster import Allocations, ClusterState
from bayes_sched.estimates import Estimates
from bayes_sched.jobs import JobSettings, JobSpec, JobView
from bayes_sched.mechanisms.placement import free_gpus, pack


class FifoPolicy:
    name = "fifo"
    needs: tuple[str, ...] = ()
    default_estimators: Mapping[str, str] = {}  # it reads the job views alone

    def stats(self) -> Mapping[str, float]:
        return {}

    def job_settings(self, spec: JobSpec) -> JobSettings:
        return JobSettings(batch_size=spec.batch_size, max_replicas=spec.num_replicas)

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView],
               estimates: Estimates) -> Allocations:
        allocations = {job.name: job.allocation for job in jobs if job.num_gpus > 0}
        free = free_gpus(cluster, allocations)
        for job in sorted(jobs, key=lambda j: (j.submit_time, j.name)):
            if job.name in allocations:
                continue
            counts = pack(job.requested_replicas, free)
            if counts is None:
                break  # strict FIFO: the head of the queue blocks the rest
            allocations[job.name] = counts
        return allocations

"""Fewest epochs left first: jobs start in order of the epochs they have left (an estimate the
estimation stage supplies), with the GPUs their users asked for; no preemption, with backfill."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bayes_sched.cluster import Allocations, ClusterState
from bayes_sched.estimates import Estimates
from bayes_sched.jobs import JobSettings, JobSpec, JobView
from bayes_sched.mechanisms.placement import free_gpus, pack
from bayes_sched_example_plugin import EPOCHS_LEFT


class FewestEpochsLeftPolicy:
    """Start the jobs with the fewest epochs left first (their users' GPUs and batch)."""

    name = "fewest_epochs_left"
    needs: tuple[str, ...] = ("remaining_work",)
    default_estimators: Mapping[str, str] = {"remaining_work": "epochs_left"}
    #: The worlds this policy runs in (bayes_sched.worlds).
    worlds = ("pollux",)

    def __init__(self) -> None:
        self.started = 0

    def stats(self) -> Mapping[str, float]:
        return {"started": self.started}

    def job_settings(self, spec: JobSpec) -> JobSettings:
        return JobSettings(batch_size=spec.batch_size, max_replicas=spec.num_replicas)

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView],
               estimates: Estimates) -> Allocations:
        left = estimates.require(EPOCHS_LEFT)
        allocations = {job.name: job.allocation for job in jobs if job.num_gpus > 0}
        free = free_gpus(cluster, allocations)
        for job in sorted(jobs, key=lambda j: (left.get(j.name, float("inf")), j.submit_time)):
            if job.name in allocations:
                continue
            counts = pack(job.requested_replicas, free)
            if counts is not None:
                allocations[job.name] = counts
                self.started += 1
        return allocations

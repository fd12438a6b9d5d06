"""E-LAS (Sultana et al., ICPP 2020, "E-LAS: design and analysis of completion-time agnostic
scheduling for distributed deep learning clusters"): least attained service weighted by each job's
epoch progress.

What is implemented, from the paper's description (its abstract and design summary: the paper's
text and code were not available to read here, so the exact priority formula is our reading of
it, not a copy):

* A job's **attained service** in the temporal and spatial domains is its GPU-seconds (GPUs held
  times seconds run; Tiresias' two-dimensional attained service, :attr:`JobView.
  attained_service`).
* Its **epoch progress rate** is the fraction of its declared training done: epochs completed
  over the epochs its user asked for (completion-time agnostic: the epoch count is declared at
  submission, the running time is never estimated); where the job declares steps instead (the
  throughput-table world) the steps done over the steps done plus those left, read from the
  ``remaining_steps`` estimate (by default ``declared``: the steps done over the steps declared;
  ``ignored`` leaves them unknown, and then the epochs rule holds: plain LAS for a job that
  declares no epochs).
* **Priority:** attained service times the fraction of training left, ``service * (1 -
  progress)``, lowest first (ties: earlier submission). A new job (no service) comes first, as
  in LAS; of two jobs with equal service, the one nearer its declared end runs first, which
  shortens the average completion time that LAS alone cannot see.
* Each round, jobs are admitted in priority order while their GPUs (the user's count) fit in the
  cluster (a job that does not fit is skipped, so smaller ones may start); admitted jobs already
  running keep their GPUs, the others are placed consolidated on nodes of one GPU type (the type
  with the most free GPUs that fits them); the rest are preempted.
* **Failed launches:** a job that reports it did not fit in memory on a GPU type (a launch that
  fails, as a real cluster shows it) is not placed on that type again, nor is any job of its
  model and GPU count; a job held where it failed gives its GPUs back. Without this, a job
  placed on a type it cannot run on keeps its GPUs for ever (it holds them, so it stays
  admitted, and it gains no service, so its priority never falls).

Left out: the paper's own placement algorithm (the consolidated placement above stands in for
it), any discretisation of priorities into queues, and starvation handling. A job that declares
neither epochs nor steps has progress 0 and is scheduled by plain LAS.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import ClassVar

import numpy as np

from bayes_sched.cluster import Allocations, ClusterState
from bayes_sched.estimates import Estimates
from bayes_sched.jobs import JobSettings, JobSpec, JobView
from bayes_sched.mechanisms.placement import pack
from bayes_sched.remaining_work import REMAINING_STEPS, RemainingStepsPredictor


def epoch_progress(job: JobView, steps_left: RemainingStepsPredictor | None = None) -> float:
    """The fraction of its training the job has done, in [0, 1]: its steps done over its
    declared steps, or with ``steps_left`` (the round's remaining-steps estimate) over its steps
    done plus those predicted left; where neither says, its epochs done over those declared."""
    left = math.nan if steps_left is None else steps_left.remaining_steps(job)
    if steps_left is None and job.target_steps:
        done = job.progress / job.target_steps
    elif math.isfinite(left):
        total = job.progress + left
        done = job.progress / total if total > 0 else 0.0
    elif job.target_epochs > 0:
        done = job.epochs / job.target_epochs
    else:
        done = 0.0
    return float(min(max(done, 0.0), 1.0))


def elas_priority(job: JobView, steps_left: RemainingStepsPredictor | None = None) -> float:
    """E-LAS's priority value (lower runs first): GPU-seconds attained times the fraction of the
    training left (:func:`epoch_progress`)."""
    return float(job.attained_service) * (1.0 - epoch_progress(job, steps_left))


def pack_on_one_type(num_gpus: int, free: np.ndarray, gpu_types: Sequence[str],
                     excluded: Collection[str] = ()) -> np.ndarray | None:
    """:func:`~bayes_sched.mechanisms.placement.pack` within the nodes of one GPU type: the type with
    the most free GPUs among those that fit ``num_gpus`` and are not ``excluded`` (ties: the
    first type by node order). ``free`` is updated in place when the GPUs fit."""
    node_types = np.asarray(gpu_types)
    best, best_free = None, -1
    for gpu in dict.fromkeys(gpu_types):
        if gpu in excluded:
            continue
        on_type = node_types == gpu
        available = int(free[on_type].sum())
        if available >= num_gpus and available > best_free:
            best, best_free = gpu, available
    if best is None:
        return None
    on_type = node_types == best
    subset = free[on_type].copy()
    counts = pack(num_gpus, subset)
    assert counts is not None
    out = np.zeros_like(free)
    out[on_type] = counts
    free[on_type] = subset
    return out


class ElasPolicy:
    """E-LAS: attained GPU-service times the fraction of declared epochs left, lowest first."""

    name = "elas"
    needs: tuple[str, ...] = ("remaining_steps",)
    default_estimators: ClassVar[Mapping[str, str]] = {"remaining_steps": "declared"}

    def __init__(self) -> None:
        #: The round's remaining-steps estimate (``None``: the declared steps are read).
        self.steps_left: RemainingStepsPredictor | None = None
        # GPU types where a job of (model, GPU count) failed to launch (out of memory).
        self._failed: dict[tuple[str, int], set[str]] = {}

    def failed_types(self, job: JobView) -> set[str]:
        """The GPU types where a job of ``job``'s model and GPU count failed to launch alone."""
        return self._failed.get((job.application, job.requested_replicas), set())

    def _learn_failures(self, jobs: Sequence[JobView]) -> None:
        for job in jobs:
            for report in job.cell_observations:
                if report.out_of_memory and report.cell.partner is None:
                    key = (report.cell.job_type, report.cell.scale_factor)
                    self._failed.setdefault(key, set()).add(report.cell.gpu_type)

    def stats(self) -> Mapping[str, float]:
        return {}

    def job_settings(self, spec: JobSpec) -> JobSettings:
        return JobSettings(batch_size=spec.batch_size, max_replicas=spec.num_replicas)

    def order(self, jobs: Sequence[JobView]) -> list[JobView]:
        """The jobs in E-LAS's priority order."""
        return sorted(jobs, key=lambda job: (elas_priority(job, self.steps_left),
                                             job.submit_time, job.name))

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView],
               estimates: Estimates) -> Allocations:
        self._learn_failures(jobs)
        self.steps_left = estimates.get(REMAINING_STEPS)
        node_types = np.asarray(cluster.gpu_types)
        available = cluster.total_gpus
        admitted: list[JobView] = []
        for job in self.order(jobs):
            if job.requested_replicas <= available:
                admitted.append(job)
                available -= job.requested_replicas
        free = cluster.capacity().copy()
        allocations: dict[str, np.ndarray] = {}
        for job in admitted:  # running jobs keep their GPUs (no restart)
            held = np.asarray(job.allocation)
            failed = self.failed_types(job)
            if (held.sum() == job.requested_replicas and np.all(held <= free)
                    and not failed.intersection(node_types[held > 0].tolist())):
                allocations[job.name] = held.copy()
                free -= held
        for job in admitted:
            if job.name not in allocations:
                counts = pack_on_one_type(job.requested_replicas, free, cluster.gpu_types,
                                          self.failed_types(job))
                if counts is not None:
                    allocations[job.name] = counts
        return allocations

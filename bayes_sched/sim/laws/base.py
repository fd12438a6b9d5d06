"""What every ground-truth interference law is: the :class:`HiddenInterference` protocol and
:class:`RunningJob`, what a law sees of one running job.

The simulator asks its law each round for every running job's slowdown (a fraction in ``[0, 1)``
of its progress lost) given where all jobs run. Policies only see what a real cluster shows: the
jobs' progress, and, where the law models resources, the per-node counters it emits.

Which GPUs of a node a job holds is not part of an allocation (GPUs per node); the laws give the
jobs on a node consecutive GPUs in job-name order, which decides who shares a PCIe switch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from bayes_sched.cluster_spec import ClusterSpec


@dataclass(frozen=True)
class RunningJob:
    """What a hidden law sees of one running job: its application, GPUs per node ``(N,)`` and
    per-GPU micro-batch."""

    application: str
    counts: np.ndarray
    local_bsz: int


class HiddenInterference(Protocol):
    """A ground-truth interference law (the simulator's side; policies never see it)."""

    name: str

    def slowdowns(self, jobs: Mapping[str, RunningJob]) -> dict[str, float]:
        """Fraction of progress each job loses this round, in ``[0, 1)``; absent means 0."""
        ...

    def check_cluster(self, cluster: ClusterSpec) -> None:
        """Raise :class:`InputError` (one line) if the law cannot model ``cluster``."""
        ...

"""An estimator of the ``remaining_work`` need: each job's epochs left, from its reports."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bayes_sched.cluster import ClusterState
from bayes_sched.estimates import Estimate
from bayes_sched.jobs import JobView
from bayes_sched_example_plugin import EPOCHS_LEFT


class EpochsLeftEstimator:
    """Publishes ``{job: target epochs - epochs done}`` every round.

    Args:
        floor: the least epochs left a job is given (a job about to end still counts).
    """

    name = "epochs_left"
    serves = ("remaining_work",)

    def __init__(self, floor: float = 0.0) -> None:
        if not floor >= 0:
            raise ValueError(f"floor is {floor}: expected epochs >= 0")
        self.floor = floor
        self.rounds = 0
        self._left: dict[str, float] = {}

    def estimate(self, cluster: ClusterState, jobs: Sequence[JobView]) -> list[JobView]:
        self.rounds += 1
        self._left = {job.name: max(job.target_epochs - job.epochs, self.floor) for job in jobs}
        return list(jobs)

    def published(self) -> Sequence[Estimate[Any]]:
        return (Estimate(EPOCHS_LEFT, self.name, dict(self._left)),)

    def stats(self) -> Mapping[str, float]:
        return {"epochs_left_rounds": self.rounds}

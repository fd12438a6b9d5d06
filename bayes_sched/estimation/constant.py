"""An estimator that learns nothing: it publishes one fixed value for one need every round (a
world's known truth, a predictor that answers from the policy's own questions)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar

from bayes_sched.cluster import ClusterState
from bayes_sched.estimates import Estimate, Need
from bayes_sched.jobs import JobView

T = TypeVar("T")


class ConstantEstimator(Generic[T]):
    """Publishes ``value`` for ``need``, labelled ``name`` (an
    :class:`~bayes_sched.estimation.Estimator` whose rounds change nothing: the job views pass
    through as they are).

    Args:
        need: the need it serves.
        name: the label of the estimate (``"oracle"`` for the truth a world supplies).
        value: what a policy reads for ``need``.
    """

    def __init__(self, need: Need[T], name: str, value: T) -> None:
        self.name = name
        self._published = (Estimate(need, name, value),)

    def estimate(self, cluster: ClusterState, jobs: Sequence[JobView]) -> list[JobView]:
        return list(jobs)

    def published(self) -> Sequence[Estimate[Any]]:
        return self._published

    def stats(self) -> Mapping[str, float]:
        return {}


__all__ = ["ConstantEstimator"]

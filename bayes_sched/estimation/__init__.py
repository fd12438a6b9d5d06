"""The loop's estimation stage: what the cluster reported -> fitted models a policy reads.

Every round the loop observes the cluster (job reports, counters), then runs the *estimators* the
policy declares (:meth:`Policy.estimators`), timed apart from the decision, then asks the policy to
decide. An estimator takes the round's job views and returns them as the decision sees them (e.g.
with fitted :class:`~bayes_sched.jobs.JobModel` s attached); estimators that learn something else
(the contention posterior from counters, the co-location posterior) keep it as a read-only result
their policy reads in ``decide``.

Nothing here imports the simulator: estimation sees only what a real cluster reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from bayes_sched.cluster import ClusterState
from bayes_sched.estimation.job_models import (
    JobModelEstimator,
    PosteriorSettings,
    RefitRule,
    ThroughputFitter,
    profile_of,
)
from bayes_sched.jobs import JobView


class Estimator(Protocol):
    """One estimation step of the loop."""

    name: str

    def estimate(self, cluster: ClusterState, jobs: Sequence[JobView]) -> list[JobView]:
        """Update the estimates from the round's reports; return the jobs as the decision sees
        them (the same views, or copies with models attached)."""
        ...


def set_refit_rule(estimators: Sequence[Estimator], refit: RefitRule) -> None:
    """Give every job-model estimator among ``estimators`` the refit rule ``refit`` (the cluster's
    setting, which the policy that made the estimators cannot know)."""
    for estimator in estimators:
        if isinstance(estimator, JobModelEstimator):
            estimator.refit = refit


def run_estimators(estimators: Sequence[Estimator], cluster: ClusterState,
                   jobs: Sequence[JobView]) -> list[JobView]:
    """Run ``estimators`` in order, each on the views the previous one returned."""
    views = list(jobs)
    for estimator in estimators:
        views = estimator.estimate(cluster, views)
    return views


__all__ = ["Estimator", "JobModelEstimator", "PosteriorSettings", "RefitRule", "ThroughputFitter",
           "profile_of", "run_estimators", "set_refit_rule"]

"""The loop's estimation stage: what the cluster reported -> the estimates a decision reads.

Every round the loop observes the cluster (job reports, counters), then runs the *estimators*
(:func:`estimate_round`; chosen outside the policy from its ``needs``:
:mod:`bayes_sched.estimation.choose`), timed apart
from the decision, then asks the policy to decide on the round's
:class:`~bayes_sched.estimates.Estimates`. An estimator takes the round's job views and returns
them as the decision sees them (e.g. with fitted :class:`~bayes_sched.jobs.JobModel` s attached),
and publishes what it learned in the bundle under the needs it serves
(:mod:`bayes_sched.estimation.posteriors` names them).

Nothing here imports the simulator: estimation sees only what a real cluster reports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from bayes_sched.cluster import ClusterState
from bayes_sched.estimates import Estimate, Estimates
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

    def published(self) -> Sequence[Estimate[Any]]:
        """What the last :meth:`estimate` learned, one entry per need it serves (read-only
        values; none before the first round)."""
        ...

    def stats(self) -> Mapping[str, float]:
        """What a run reports about the estimator (fits, their seconds, ...): named figures."""
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


def estimate_round(estimators: Sequence[Estimator], cluster: ClusterState,
                   jobs: Sequence[JobView]) -> tuple[list[JobView], Estimates]:
    """Run ``estimators`` in order (:func:`run_estimators`) and bundle what they published: the
    job views as the decision sees them and the round's estimates."""
    views = run_estimators(estimators, cluster, jobs)
    return views, Estimates(entry for estimator in estimators
                            for entry in estimator.published())


def estimator_stats(estimators: Sequence[Estimator]) -> dict[str, float]:
    """Every estimator's :meth:`Estimator.stats`, merged in order."""
    return {name: value for estimator in estimators
            for name, value in estimator.stats().items()}


__all__ = ["Estimator", "JobModelEstimator", "PosteriorSettings", "RefitRule", "ThroughputFitter",
           "estimate_round", "estimator_stats", "profile_of", "run_estimators", "set_refit_rule"]

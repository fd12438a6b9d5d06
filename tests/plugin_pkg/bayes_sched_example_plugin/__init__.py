"""An example bayes-sched plugin: :class:`~.policy.FewestEpochsLeftPolicy` (jobs with the fewest
epochs left start first) reading the estimate of :class:`~.estimator.EpochsLeftEstimator`."""

from bayes_sched.estimates import Need

#: The key both halves agree on: per job name, the epochs it has left.
EPOCHS_LEFT: Need[dict[str, float]] = Need("remaining_work")

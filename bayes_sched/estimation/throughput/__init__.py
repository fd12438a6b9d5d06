"""Throughput learners behind :class:`~bayes_sched.estimation.throughput_cells.ThroughputLearner`.

- :class:`GavelMatrixCompletionLearner`: Gavel's estimator (reference job types, partial profiling,
  matrix completion, nearest reference type);
- :class:`SiaBootstrapLearner`: Sia's one-GPU-per-type profile scaled by a known type's
  multi-GPU throughputs;
- :class:`BayesianThroughputLearner`: ours, one Gaussian-process model over alone and paired
  throughputs with a prior from submission-time features and joint posterior draws.

:mod:`bayes_sched.estimation.throughput.observations` holds what they share (checking and pooling
observations, the cells of a table).
"""

from bayes_sched.estimation.throughput.bayesian import (
    BayesianThroughputBelief,
    BayesianThroughputLearner,
)
from bayes_sched.estimation.throughput.gavel_pmf import (
    GavelMatrixCompletionBelief,
    GavelMatrixCompletionLearner,
)
from bayes_sched.estimation.throughput.observations import (
    job_cells,
    table_observations,
    usable_observations,
)
from bayes_sched.estimation.throughput.sia_bootstrap import SiaBootstrapBelief, SiaBootstrapLearner

__all__ = [
    "BayesianThroughputBelief",
    "BayesianThroughputLearner",
    "GavelMatrixCompletionBelief",
    "GavelMatrixCompletionLearner",
    "SiaBootstrapBelief",
    "SiaBootstrapLearner",
    "job_cells",
    "table_observations",
    "usable_observations",
]

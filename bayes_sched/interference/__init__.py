"""Interference: predict each job's slowdown in a co-location, with uncertainty.

Co-location slowdown predictors a scheduler composes share one protocol,
:class:`~bayes_sched.colocation.SlowdownPredictor` (:mod:`bayes_sched.colocation`), one per module:
the contention posterior's prior from counters (:mod:`.contention_prior`) and the pair table
learned from job progress by the estimation module's throughput learner (:mod:`.pairs`); import
them from their modules (importing this package loads no BoTorch).

The offline interference model (:mod:`.model`) learns from a pairs table and a solo-features table
(:mod:`.tables`); Gavel's measured pairs ship with the package (:mod:`.gavel`); :mod:`.evaluation`
has the splits and scores used to validate it. :mod:`.gp` is a Gaussian-process alternative
(ARD over the solo features of both jobs), :mod:`.gp_censored` the same for speeds recorded
capped at 1 (a censored likelihood), :mod:`.gpu_counters` turns counter logs into solo
features.
"""

from bayes_sched.interference.evaluation import (
    interval_coverage,
    leave_one_group_out,
    mean_absolute_error,
    pair_folds,
    random_pair_splits,
)
from bayes_sched.interference.gavel import load_gavel_pairs, load_gavel_solo_features
from bayes_sched.interference.model import (
    FitConfig,
    InterferenceFitError,
    InterferenceModel,
    SpeedPrediction,
    colocation_observations,
    interference_model,
)
from bayes_sched.interference.tables import (
    InterferenceInputError,
    check_pairs,
    check_pairs_known,
    check_solo_features,
    pair_observations,
    read_pairs_csv,
    read_solo_features_csv,
    select_feature_columns,
)

__all__ = [
    "FitConfig",
    "InterferenceFitError",
    "InterferenceInputError",
    "InterferenceModel",
    "SpeedPrediction",
    "check_pairs",
    "check_pairs_known",
    "check_solo_features",
    "colocation_observations",
    "interference_model",
    "interval_coverage",
    "leave_one_group_out",
    "load_gavel_pairs",
    "load_gavel_solo_features",
    "mean_absolute_error",
    "pair_folds",
    "pair_observations",
    "random_pair_splits",
    "read_pairs_csv",
    "read_solo_features_csv",
    "select_feature_columns",
]

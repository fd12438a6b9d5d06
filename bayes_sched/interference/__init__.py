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

The names below load on first use (:mod:`.model` imports torch and pyro), so that importing one
light part (a co-location predictor's module, as ``bayes-sched list estimators`` does) loads
neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bayes_sched.lazy_exports import lazy_exports

if TYPE_CHECKING:  # the exported names, for type checkers
    from bayes_sched.interference.evaluation import (
        interval_coverage,
        leave_one_group_out,
        mean_absolute_error,
        pair_folds,
        random_pair_splits,
    )
    from bayes_sched.interference.gavel import (
        load_gavel_pairs,
        load_gavel_solo_features,
    )
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

#: Public name -> module that defines it (imported on first use).
_EXPORTS: dict[str, str] = {
    "interval_coverage": "bayes_sched.interference.evaluation",
    "leave_one_group_out": "bayes_sched.interference.evaluation",
    "mean_absolute_error": "bayes_sched.interference.evaluation",
    "pair_folds": "bayes_sched.interference.evaluation",
    "random_pair_splits": "bayes_sched.interference.evaluation",
    "load_gavel_pairs": "bayes_sched.interference.gavel",
    "load_gavel_solo_features": "bayes_sched.interference.gavel",
    "FitConfig": "bayes_sched.interference.model",
    "InterferenceFitError": "bayes_sched.interference.model",
    "InterferenceModel": "bayes_sched.interference.model",
    "SpeedPrediction": "bayes_sched.interference.model",
    "colocation_observations": "bayes_sched.interference.model",
    "interference_model": "bayes_sched.interference.model",
    "InterferenceInputError": "bayes_sched.interference.tables",
    "check_pairs": "bayes_sched.interference.tables",
    "check_pairs_known": "bayes_sched.interference.tables",
    "check_solo_features": "bayes_sched.interference.tables",
    "pair_observations": "bayes_sched.interference.tables",
    "read_pairs_csv": "bayes_sched.interference.tables",
    "read_solo_features_csv": "bayes_sched.interference.tables",
    "select_feature_columns": "bayes_sched.interference.tables",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

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

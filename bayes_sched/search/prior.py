"""The surrogate's prior mean: perfmodel's goodput prediction for every candidate.

The prediction is log goodput from a fitted throughput model times statistical efficiency at the
candidate's total batch (for a shipped application,
:func:`bayes_sched.sim.trials.profiled_goodput_model` fits one the way a job would know itself
before any trial).
"""

from __future__ import annotations

import numpy as np

from bayes_sched.search.candidates import CandidateSet
from perfmodel.goodput import GoodputModel


def model_prior(candidates: CandidateSet, model: GoodputModel) -> np.ndarray:
    """Predicted log goodput (posterior mean over the model's draws) per candidate, shape ``(C,)``."""
    goodput = model.goodput(candidates.column("num_nodes"), candidates.column("num_gpus"),
                            candidates.column("local_bsz"), candidates.column("accum_steps"))
    return np.log(np.maximum(goodput.mean(axis=0), np.finfo(float).tiny))

"""The surrogate's prior mean: perfmodel's goodput prediction for every candidate.

The prediction is log goodput from the fitted throughput model times statistical efficiency at the
candidate's total batch. For a shipped application :func:`profiled_goodput_model` fits the model the
way a job would know itself before any trial: from a one-node profile (``placements.csv`` rows on a
single node) and the gradient noise it measures now, so multi-node behaviour is extrapolated.
"""

from __future__ import annotations

import numpy as np

from bayes_sched.search.candidates import CandidateSet
from bayes_sched.sim.physics import get_application
from perfmodel.datasets import pollux_model_dir
from perfmodel.goodput import GoodputModel
from perfmodel.profiles import read_placements_csv
from perfmodel.throughput import fit_throughput


def model_prior(candidates: CandidateSet, model: GoodputModel) -> np.ndarray:
    """Predicted log goodput (posterior mean over the model's draws) per candidate, shape ``(C,)``."""
    goodput = model.goodput(candidates.column("num_nodes"), candidates.column("num_gpus"),
                            candidates.column("local_bsz"), candidates.column("accum_steps"))
    return np.log(np.maximum(goodput.mean(axis=0), np.finfo(float).tiny))


def profiled_goodput_model(application: str, epoch: int) -> GoodputModel:
    """A shipped application's goodput model fitted on its single-node profile, with the gradient
    noise it measures at ``epoch`` at its initial batch size."""
    app = get_application(application)
    profile = read_placements_csv(pollux_model_dir(application) / "placements.csv", application)
    params = fit_throughput(profile.subset(profile.num_nodes == 1))
    sqr, var = app.grad_stats(app.limits.init_batch_size, epoch)
    return GoodputModel(params, sqr, var, app.limits.init_batch_size)

"""Pyro's NUTS on the step-time model: on its own (:func:`sample_nuts`, to check SVI) and as the
fallback where the SVI guide is not a usable posterior, whitened by that guide
(:func:`sample_nuts_whitened`); ArviZ's mixing diagnostics of one chain
(:func:`mcmc_diagnostics`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from pyro.infer import MCMC, NUTS
from pyro.infer.autoguide.initialization import init_to_value

from perfmodel.saved_fits import quiet_arviz
from perfmodel.throughput_bayes.model import StepTimeData, step_time_model
from perfmodel.throughput_bayes.prior import StepTimePrior
from perfmodel.throughput_bayes.svi import SviFit

#: NUTS warm-up steps and draws of the fallback (one chain): enough for ESS_USABLE when it mixes,
#: and a few minutes at most on the largest shipped profile.
FALLBACK_WARMUP = 300
FALLBACK_SAMPLES = 400


def sample_nuts_whitened(svi: SviFit, warmup: int, num_samples: int
                         ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Pyro's NUTS on the model's exact posterior, in coordinates whitened by the SVI guide:
    ``z = loc + L u``, so where the guide is roughly right ``u`` is roughly standard normal and
    NUTS takes short trajectories (the guide as a linear preconditioner, as in NeuTra HMC); where
    it is wrong (the reason for the fallback) NUTS still targets the true posterior. Returns
    constrained draws and :func:`mcmc_diagnostics`."""
    loc, tril = svi.loc, svi.scale_tril

    def potential(params: dict[str, torch.Tensor]) -> torch.Tensor:
        return -svi.log_density(loc + tril @ params["u"])

    kernel = NUTS(potential_fn=potential, max_tree_depth=6)
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup, disable_progbar=True,
                initial_params={"u": torch.zeros_like(loc)})
    mcmc.run()
    z = loc + mcmc.get_samples()["u"].detach() @ tril.T
    samples = svi.constrained(z)
    divergences = sum(len(v) for v in mcmc.diagnostics()["divergences"].values())
    return samples, mcmc_diagnostics(samples, divergences)


def mcmc_diagnostics(samples: dict[str, np.ndarray], divergences: int) -> dict[str, Any]:
    """ArviZ's bulk ESS (smallest over sites) and rank-normalised split R-hat (largest) of one
    chain of draws per site ``(S,)``, with the divergence count, as :class:`FitDiagnostics`
    fields. The chain's halves are passed as two chains (ArviZ needs two for R-hat; it splits
    each again, comparing the four quarters). A site whose draws never move within a quarter has
    no R-hat (ArviZ: NaN, no within-chain variance); it counts as infinite, the worst mixing, so
    that it is not lost in the maximum (``max`` over NaNs depends on the sites' order)."""
    half = min(len(v) for v in samples.values()) // 2
    with quiet_arviz() as az:
        idata = az.from_dict(posterior={n: v[: 2 * half].reshape(2, half)
                                        for n, v in samples.items()})
        ess = az.ess(idata, method="bulk")
        r_hat = az.rhat(idata)
    return {"divergences": int(divergences),
            "ess_bulk_min": min(float(ess[n]) for n in samples),
            "r_hat_max": max(math.inf if math.isnan(float(r_hat[n])) else float(r_hat[n])
                             for n in samples)}


def sample_nuts(data: StepTimeData, prior: StepTimePrior, init: dict[str, torch.Tensor],
                warmup: int, num_samples: int) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """One NUTS chain on the model, started at ``init``; its draws and
    :func:`mcmc_diagnostics`."""
    kernel = NUTS(step_time_model, init_strategy=init_to_value(values=init), max_tree_depth=6)
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup, disable_progbar=True)
    mcmc.run(data, prior)
    samples = {k: v.detach().numpy() for k, v in mcmc.get_samples().items()}
    divergences = sum(len(v) for v in mcmc.diagnostics()["divergences"].values())
    return samples, mcmc_diagnostics(samples, divergences)

"""Importance sampling with the SVI guide as proposal: Pareto-smoothed weights and their k-hat
(:func:`psis`), and the guide's affine part adapted to the posterior's PSIS-weighted moments
(:func:`adapt_proposal`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyro.distributions as dist
import torch
from pyro.distributions.transforms import Spline

from perfmodel.saved_fits import quiet_arviz
from perfmodel.throughput_bayes.guide import spline_guide

#: Draws of the PSIS check and of the moment matching: Vehtari et al. (2024) need at least
#: ``10 ** (1 / (1 - k))`` draws (2,155 at k = 0.7) for k-hat itself to be reliable near the
#: threshold; at 1,000 draws the k-hat of one guide scattered across the threshold from one batch
#: of fresh draws to the next (measured: docs/results/bench_perfmodel.md). Each draw costs a
#: model evaluation on every row.
PSIS_DRAWS = 4000
#: Rounds of moment matching (each tries a shift of the mean, then of the scales, then of the
#: covariance, and keeps the first that lowers k-hat; Paananen et al. 2021). Later rounds chase
#: the noise of the draws they are scored on: on deepspeech2 rounds past the third lowered k-hat
#: on those draws but not on fresh ones. Unlike loo's ``loo_moment_match``, which matches only
#: while k-hat is above its threshold (0.7), the rounds run below it too: here the proposal's
#: resampled draws are the posterior's, so a lower k-hat means more effective draws, and a guide
#: just under 0.7 on the draws it is scored on scatters across the threshold on fresh ones (and
#: would then call the NUTS fallback).
MOMENT_MATCH_ROUNDS = 3
#: Draws per model evaluation when scoring many draws (:func:`log_density_of_draws`): each
#: evaluation's temporaries are ``(chunk, N)`` arrays, which at this size stay in cache instead of
#: streaming through memory; the densities are the same whatever the chunk.
DENSITY_CHUNK = 250


def log_density_of_draws(log_density: Callable[[torch.Tensor], torch.Tensor], z: torch.Tensor
                         ) -> torch.Tensor:
    """``log_density(z)`` for draws ``z`` ``(S, D)``, shape ``(S,)``, evaluated
    :data:`DENSITY_CHUNK` draws at a time and without autograd (scoring draws needs no
    gradient)."""
    with torch.no_grad():
        return torch.cat([log_density(chunk) for chunk in z.split(DENSITY_CHUNK)])


def adapt_proposal(base: dist.Distribution, spline: Spline, loc: torch.Tensor,
                   scale_tril: torch.Tensor,
                   log_density: Callable[[torch.Tensor], torch.Tensor]
                   ) -> dist.TransformedDistribution:
    """The guide ``loc + scale_tril @ spline(u)``, ``u ~ base`` (all ``(D,)`` unconstrained),
    with its affine part adapted by implicitly adaptive importance sampling (Paananen et al.,
    2021, "Implicitly adaptive importance sampling"): its draws are moved by an affine map to
    the PSIS-weighted mean, then scales, then covariance of the posterior they estimate, and a
    map is kept where it lowers PSIS k-hat. The maps are lower triangular, so the result is the
    same family of guide.

    Why: the ELBO is mode-seeking, so its optimum is narrower than the posterior wherever the
    guide cannot follow the posterior's shape, and more SVI steps do not change that; the
    adaptation lowers k-hat on fresh draws (cifar10, deepspeech2: docs/results/bench_perfmodel.md).
    """
    q = spline_guide(base, spline, loc, scale_tril)
    z = q.sample((PSIS_DRAWS,))
    log_q = q.log_prob(z)
    smoothed, k = psis(log_density_of_draws(log_density, z) - log_q)
    for _ in range(MOMENT_MATCH_ROUNDS):
        for kind in ("mean", "scale", "covariance"):
            try:
                map_, shift = _moment_map(z, smoothed.exp(), kind)
            except torch.linalg.LinAlgError:  # weight on fewer draws than dimensions
                continue
            if not (torch.isfinite(map_).all() and (torch.diagonal(map_) > 0).all()):
                continue
            moved = shift + z @ map_.T
            moved_log_q = log_q - torch.log(torch.diagonal(map_)).sum()
            moved_smoothed, moved_k = psis(log_density_of_draws(log_density, moved)
                                          - moved_log_q)
            if moved_k < k:
                z, log_q, smoothed, k = moved, moved_log_q, moved_smoothed, moved_k
                loc, scale_tril = shift + map_ @ loc, map_ @ scale_tril
                break
        else:
            break
    return spline_guide(base, spline, loc, scale_tril)


def _moment_map(z: torch.Tensor, weights: torch.Tensor, kind: str
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Lower-triangular ``A`` ``(D, D)`` and shift ``b`` ``(D,)`` such that ``b + A z`` has the
    weighted mean of draws ``z`` ``(S, D)`` (normalised ``weights`` ``(S,)``) and, for ``kind``
    ``"scale"``, their weighted standard deviations, for ``"covariance"`` their weighted
    covariance (``"mean"``: ``A`` is the identity)."""
    mean, weighted_mean = z.mean(0), weights @ z
    if kind == "mean":
        map_ = torch.eye(z.shape[1], dtype=z.dtype)
    elif kind == "scale":
        map_ = torch.diag(((weights @ (z - weighted_mean) ** 2) / z.var(0)).sqrt())
    else:
        centred = z - weighted_mean
        weighted_cov = (centred * weights[:, None]).T @ centred
        map_ = torch.linalg.cholesky(weighted_cov) @ torch.linalg.inv(
            torch.linalg.cholesky(torch.cov(z.T)))
    return map_, weighted_mean - map_ @ mean


def psis(log_weights: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Pareto-smoothed, normalised log importance weights ``(S,)`` and their k-hat (ArviZ's
    ``psislw``; Vehtari et al.): below 0.5 the proposal is good, above 0.7 unreliable."""
    with quiet_arviz() as az:
        smoothed, k = az.psislw(log_weights.detach().numpy().astype(np.float64))
    return torch.as_tensor(smoothed), float(k)



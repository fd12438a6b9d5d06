"""Row likelihoods of the censored GP co-location model (:mod:`.gp_censored`): Gaussian or
Student-t noise around the latent log speed, each with a censored (Tobit) term for a row
recorded at the cap.

Each gives, at latent values ``f`` ``(N,)``, the log likelihood (scalar), its gradient in ``f``
and its negative curvature ``W`` (each ``(N,)``): what Newton's method for the Laplace mode and
the Laplace evidence need (Rasmussen & Williams, *Gaussian Processes for Machine Learning*,
2006, section 3.4). All are differentiable in the noise parameters (the evidence's gradient
goes through them).

- Gaussian, scale ``sigma``: a row below the cap has density ``N(y; f, sigma^2)``, a row at the
  cap ``u`` the probability ``Phi((f - u) / sigma)`` of a value at least ``u``. Log-concave in
  ``f``: ``W > 0``.
- Student-t, scale ``sigma`` and ``nu`` degrees of freedom: density
  ``Gamma((nu+1)/2) / (Gamma(nu/2) sqrt(nu pi) sigma) (1 + r^2 / nu)^(-(nu+1)/2)``,
  ``r = (y - f) / sigma``, and a row at the cap the t distribution function ``T_nu((f - u) /
  sigma)``. Why: a few measurements far from any smooth law (heavy tails) pull a Gaussian's
  noise level up, widening every interval, or are left outside narrow ones; the t density's
  tails let them lie far out at a small cost, so the bulk keeps a small scale and the tails
  wide intervals. Not log-concave: ``W = (nu+1) (nu - r^2) / (sigma^2 (nu + r^2)^2)`` is
  negative for a row further than ``sqrt(nu) sigma`` from ``f`` (and the censored term's far
  below the cap), so the caller's Newton steps must handle negative curvature (Vanhatalo,
  Jylänki & Vehtari, "Gaussian process regression with Student-t likelihood", NIPS 2009).

The t distribution function and its derivative in ``nu`` come from SciPy
(:func:`scipy.special.stdtr`; the derivative in ``nu`` by a central difference), its
derivative in ``z`` is the density: torch has no regularised incomplete beta function.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy.special import stdtr

#: Relative step of the central difference of ``log T_nu(z)`` in ``nu``.
DOF_STEP = 1e-5
#: Smallest value taken for ``T_nu(z)`` (its logarithm stays finite far below the cap).
TINY = 1e-300


@dataclass(frozen=True)
class RowNoise:
    """Each row's noise: scale ``scale`` ``(N,)`` (standardised units) and degrees of freedom
    ``dof`` ``(N,)`` of a Student-t, or ``None`` for Gaussian noise."""

    scale: torch.Tensor
    dof: torch.Tensor | None = None


def censored_terms(y: torch.Tensor, censored: torch.Tensor, upper: float, f: torch.Tensor,
                   noise: RowNoise) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log likelihood (scalar), its gradient in ``f`` and its negative curvature ``W`` (each
    ``(N,)``) of observations ``y`` ``(N,)`` at latent values ``f``: a row with ``censored``
    true was recorded at the cap ``upper`` (its ``y`` is ignored), the others measured."""
    if noise.dof is None:
        return _gaussian_terms(y, censored, upper, f, noise.scale)
    return _student_t_terms(y, censored, upper, f, noise.scale, noise.dof)


def _gaussian_terms(y: torch.Tensor, censored: torch.Tensor, upper: float, f: torch.Tensor,
                    sigma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`censored_terms` with Gaussian noise of scale ``sigma``."""
    residual = (y - f) / sigma
    z = (f - upper) / sigma
    log_tail = torch.special.log_ndtr(z)
    # Inverse Mills ratio phi(z) / Phi(z), computed in logs (Phi underflows far below).
    mills = torch.exp(-0.5 * z**2 - 0.5 * math.log(2 * math.pi) - log_tail)
    exact = -0.5 * residual**2 - torch.log(sigma) - 0.5 * math.log(2 * math.pi)
    log_lik = torch.where(censored, log_tail, exact).sum()
    gradient = torch.where(censored, mills / sigma, residual / sigma)
    curvature = torch.where(censored, mills * (z + mills) / sigma**2,
                            torch.ones_like(f) / sigma**2)
    return log_lik, gradient, curvature


def t_log_density(r: torch.Tensor, dof: torch.Tensor) -> torch.Tensor:
    """Log density of the standard Student-t with ``dof`` degrees of freedom at ``r``."""
    return (torch.lgamma(0.5 * (dof + 1)) - torch.lgamma(0.5 * dof)
            - 0.5 * torch.log(math.pi * dof) - 0.5 * (dof + 1) * torch.log1p(r**2 / dof))


def _student_t_terms(y: torch.Tensor, censored: torch.Tensor, upper: float, f: torch.Tensor,
                     sigma: torch.Tensor, dof: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`censored_terms` with Student-t noise of scale ``sigma`` and ``dof`` degrees of
    freedom."""
    r = (y - f) / sigma
    z = (f - upper) / sigma
    log_tail = t_log_cdf(z, dof)
    # The t's analogue of the inverse Mills ratio, t_nu(z) / T_nu(z), in logs.
    mills = torch.exp(t_log_density(z, dof) - log_tail)
    exact = t_log_density(r, dof) - torch.log(sigma)
    log_lik = torch.where(censored, log_tail, exact).sum()
    gradient = torch.where(censored, mills / sigma, (dof + 1) * r / (sigma * (dof + r**2)))
    # d/dz log t_nu(z) = -(nu+1) z / (nu + z^2): the censored curvature is
    # -(d/dz)^2 log T = mills ((nu+1) z / (nu + z^2) + mills).
    tail_curvature = mills * ((dof + 1) * z / (dof + z**2) + mills)
    exact_curvature = (dof + 1) * (dof - r**2) / (dof + r**2) ** 2
    curvature = torch.where(censored, tail_curvature, exact_curvature) / sigma**2
    return log_lik, gradient, curvature


def bounding_curvature(y: torch.Tensor, censored: torch.Tensor, f: torch.Tensor,
                       curvature: torch.Tensor, noise: RowNoise) -> torch.Tensor:
    """A non-negative curvature at least each row's ``curvature`` (:func:`censored_terms`'
    ``W``) ``(N,)``, for Newton steps where ``W``'s negative entries make the posterior's
    curvature indefinite. Student-t noise, a measured row: the scale-mixture (EM) weight
    ``(nu+1) / ((nu + r^2) sigma^2)``, the curvature of a quadratic that lies below the log
    density and touches it at ``f`` (``log(1 + r^2 / nu)`` is concave in ``r^2``), so a step on
    it raises the objective; a censored row: ``max(W, 0)``. Gaussian noise: ``W`` (positive
    already)."""
    if noise.dof is None:
        return curvature
    r2 = ((y - f) / noise.scale) ** 2
    weight = (noise.dof + 1) / ((noise.dof + r2) * noise.scale**2)
    return torch.where(censored, curvature.clamp_min(0), weight)


class _TLogCdf(torch.autograd.Function):
    """``log T_nu(z)`` with its derivatives in ``z`` (the density over the distribution
    function) and in ``nu`` (a central difference)."""

    @staticmethod
    def forward(ctx: Any, z: torch.Tensor, dof: torch.Tensor) -> torch.Tensor:
        value = _log_stdtr(z.detach().numpy(), dof.detach().numpy())
        out = torch.as_tensor(value, dtype=z.dtype)
        ctx.save_for_backward(z, dof, out)
        return out

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z, dof, out = ctx.saved_tensors
        grad = grads[0]
        dz = torch.exp(t_log_density(z, dof) - out)
        nu, x = dof.detach().numpy(), z.detach().numpy()
        step = DOF_STEP * nu
        dnu = (_log_stdtr(x, nu + step) - _log_stdtr(x, nu - step)) / (2 * step)
        return grad * dz, grad * torch.as_tensor(dnu, dtype=dof.dtype)


def _log_stdtr(z: np.ndarray, dof: np.ndarray) -> np.ndarray:
    """``log T_nu(z)`` in float64 (SciPy evaluates the lower tail directly, so far below zero
    it keeps its relative accuracy down to :data:`TINY`)."""
    return np.log(np.maximum(stdtr(dof, z), TINY))


def t_log_cdf(z: torch.Tensor, dof: torch.Tensor) -> torch.Tensor:
    """``log T_nu(z)``, the Student-t log distribution function with ``dof`` degrees of freedom
    (broadcast against ``z``), differentiable in both."""
    z, dof = torch.broadcast_tensors(z, dof)
    return _TLogCdf.apply(z, dof)


def standard_noise(rng: np.random.Generator, shape: tuple[int, int], dof: np.ndarray | None
                   ) -> np.ndarray:
    """Draws of unit-scale noise ``shape``: standard normal, or Student-t with ``dof``
    degrees of freedom (broadcast against ``shape``)."""
    if dof is None:
        return rng.standard_normal(shape)
    return rng.standard_t(np.broadcast_to(dof, shape))

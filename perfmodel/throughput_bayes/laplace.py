"""The posterior mode (:func:`posterior_mode`) and the Laplace approximation's scale there
(:func:`laplace_scale_tril`), no wider than the prior's spread (:func:`bound_marginals`), where
the SVI guide starts."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch


def posterior_mode(log_density: Callable[[torch.Tensor], torch.Tensor], start: torch.Tensor,
                   max_iter: int = 500) -> torch.Tensor:
    """The maximum of ``log_density`` (unconstrained coordinates, shape ``(D,)``) found by
    L-BFGS from ``start``; ``start`` itself where the search ends anywhere not finite or lower.

    A line-search trial can land where a parameter leaves its support in float64 (a scale
    ``exp(z)`` that underflows to 0), and the model's distributions then refuse it: the search
    stops there and the best point it had evaluated stands (which trial first leaves the support
    depends on the BLAS kernels, so one machine's search may meet it where another's does not)."""
    z = start.clone().requires_grad_(True)
    optimizer = torch.optim.LBFGS([z], max_iter=max_iter, line_search_fn="strong_wolfe",
                                  tolerance_grad=1e-7, tolerance_change=1e-10)
    best: list[tuple[float, torch.Tensor]] = []

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = -log_density(z)
        loss.backward()
        value = float(loss.detach())
        if np.isfinite(value) and (not best or value < best[0][0]):
            best[:] = [(value, z.detach().clone())]
        return loss

    try:
        optimizer.step(closure)
    except ValueError:  # a distribution's argument check: the trial point is outside the support
        if not best:
            return start.clone()
        with torch.no_grad():
            z.copy_(best[0][1])
    with torch.no_grad():
        found, before = log_density(z), log_density(start)
    if not torch.isfinite(found) or found < before or not torch.isfinite(z).all():
        return start.clone()
    return z.detach()


def laplace_scale_tril(log_density: Callable[[torch.Tensor], torch.Tensor],
                       z: torch.Tensor, bound: torch.Tensor | None = None) -> torch.Tensor:
    """Cholesky factor of the inverse Hessian of ``-log_density`` at ``z`` (shape ``(D, D)``),
    falling back to the diagonal of curvatures, and to 0.1, where it is not positive definite;
    with ``bound`` (shape ``(D,)``), each coordinate's spread no wider than its bound
    (:func:`bound_marginals`)."""
    hessian = torch.autograd.functional.hessian(lambda x: -log_density(x), z)
    hessian = 0.5 * (hessian + hessian.T)
    try:
        scale_tril = torch.linalg.cholesky(torch.linalg.inv(hessian))
    except RuntimeError:
        curvature = torch.diagonal(hessian)
        safe = torch.where(curvature > 0, curvature, torch.full_like(curvature, 100.0))
        scale_tril = torch.diag(safe.rsqrt())
    return scale_tril if bound is None else bound_marginals(scale_tril, bound)


def bound_marginals(scale_tril: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
    """``scale_tril`` (``(D, D)``, lower triangular) with each row scaled so that its
    coordinate's standard deviation (the row's norm) is at most ``bound`` (``(D,)``); rows within
    their bound are unchanged, and the correlations are kept (``D L`` is the Cholesky factor of
    ``D L L^T D`` for a positive diagonal ``D``).

    Why: the Laplace approximation reads the spread off the curvature at the mode, and where the
    log density is flat there only to second order, the inverse Hessian claims a spread the prior
    itself rules out a few units away. A profile of one row is such a case: the model predicts
    equal compute and step times on one GPU, so the measured gap between them can be laid on
    either noise series; the Hessian is near singular along "one noise scale up, the other down",
    and the inverse gave a standard deviation of 363 in each log noise scale, whose prior spread
    is about 1, so the guide drew noise scales of ``exp(hundreds)``, whose log densities overflow.
    The prior's spread is the ceiling because the posterior's variance, averaged over the data
    sets the model generates, is at most the prior's (law of total variance:
    ``Var z = E Var(z | y) + Var E(z | y)``). Where the data leave a coordinate to its prior, its
    Laplace spread and the bound (a Monte Carlo estimate) agree to within a few percent, and the
    start may shrink by that much.
    """
    spread = scale_tril.norm(dim=-1)
    shrink = torch.clamp(bound / spread, max=1.0)
    return shrink[:, None] * scale_tril

"""The posterior mode (:func:`posterior_mode`) and the Laplace approximation's scale there
(:func:`laplace_scale_tril`), where the SVI guide starts."""

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
                       z: torch.Tensor) -> torch.Tensor:
    """Cholesky factor of the inverse Hessian of ``-log_density`` at ``z`` (shape ``(D, D)``),
    falling back to the diagonal of curvatures, and to 0.1, where it is not positive definite."""
    hessian = torch.autograd.functional.hessian(lambda x: -log_density(x), z)
    hessian = 0.5 * (hessian + hessian.T)
    try:
        return torch.linalg.cholesky(torch.linalg.inv(hessian))
    except RuntimeError:
        curvature = torch.diagonal(hessian)
        safe = torch.where(curvature > 0, curvature, torch.full_like(curvature, 100.0))
        return torch.diag(safe.rsqrt())

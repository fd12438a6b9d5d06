"""The censored GP's row likelihoods (:mod:`bayes_sched.interference.likelihoods`): values
against SciPy's distributions, gradients and curvatures against automatic differentiation, and
finite values far in the tails."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import norm, t

from bayes_sched.interference.likelihoods import (
    RowNoise,
    bounding_curvature,
    censored_terms,
    t_log_cdf,
)

ROWS = 12


def _rows() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    y = torch.randn(ROWS, generator=generator, dtype=torch.float64)
    f = 2 * torch.randn(ROWS, generator=generator, dtype=torch.float64)
    censored = torch.arange(ROWS) % 3 == 0
    scale = 0.2 + torch.rand(ROWS, generator=generator, dtype=torch.float64)
    return y, f, censored, scale


@pytest.mark.parametrize("dof", [None, 1.5, 4.0, 30.0])
def test_terms_match_scipy_and_automatic_differentiation(dof: float | None) -> None:
    y, f, censored, scale = _rows()
    upper = 0.3
    noise = RowNoise(scale, None if dof is None else torch.full((ROWS,), dof,
                                                                dtype=torch.float64))
    log_lik, gradient, curvature = censored_terms(y, censored, upper, f, noise)
    z, r = ((f - upper) / scale).numpy(), ((y - f) / scale).numpy()
    distribution = norm() if dof is None else t(dof)
    expected = np.where(censored.numpy(), distribution.logcdf(z),
                        distribution.logpdf(r) - np.log(scale.numpy()))
    assert float(log_lik) == pytest.approx(expected.sum(), rel=1e-10)

    def rows(latent: torch.Tensor) -> torch.Tensor:
        return torch.stack([censored_terms(y[i:i + 1], censored[i:i + 1], upper,
                                           latent[i:i + 1], RowNoise(
                                               noise.scale[i:i + 1],
                                               None if noise.dof is None
                                               else noise.dof[i:i + 1]))[0]
                            for i in range(ROWS)])

    first = torch.autograd.functional.jacobian(lambda v: rows(v).sum(), f)
    second = torch.autograd.functional.hessian(lambda v: rows(v).sum(), f)
    torch.testing.assert_close(gradient, first, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(curvature, -torch.diagonal(second), rtol=1e-7, atol=1e-10)
    if dof is not None and dof < 10:
        # Rows far from their latent value: the Student-t is not log-concave there.
        assert (curvature < 0).any()


def test_t_log_cdf_gradients_and_far_tails() -> None:
    z = torch.tensor([-30.0, -2.0, 0.0, 3.0], dtype=torch.float64, requires_grad=True)
    dof = torch.tensor([1.5, 3.0, 7.0, 40.0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(t_log_cdf, (z, dof), atol=1e-6, rtol=1e-4)
    np.testing.assert_allclose(t_log_cdf(z, dof).detach().numpy(),
                               t.logcdf(z.detach().numpy(), dof.detach().numpy()), rtol=1e-10)
    # Far below the cap the distribution function underflows; its log stays finite.
    far = t_log_cdf(torch.tensor([-1e300], dtype=torch.float64),
                    torch.tensor([50.0], dtype=torch.float64))
    assert torch.isfinite(far).all()


def test_bounding_curvature_is_positive_and_lies_below_the_t_log_density() -> None:
    # Where W < 0 the Newton search steps on a quadratic with the bounding curvature: it must
    # be positive, at least W, and (measured rows) the quadratic touching the log density at
    # f must stay below it everywhere, so that a step on it raises the objective.
    y, f, censored, scale = _rows()
    dof = torch.full((ROWS,), 2.5, dtype=torch.float64)
    noise = RowNoise(scale, dof)
    _, gradient, curvature = censored_terms(y, censored, 0.3, f, noise)
    bound = bounding_curvature(y, censored, f, curvature, noise)
    assert (curvature < 0).any() and (bound >= 0).all() and (bound >= curvature).all()
    measured = ~censored
    for shift in torch.linspace(-20, 20, 81, dtype=torch.float64):
        moved = f + shift
        exact = censored_terms(y[measured], censored[measured], 0.3, moved[measured],
                               RowNoise(scale[measured], dof[measured]))[0]
        base = censored_terms(y[measured], censored[measured], 0.3, f[measured],
                              RowNoise(scale[measured], dof[measured]))[0]
        quadratic = (base + (gradient[measured] * shift).sum()
                     - 0.5 * (bound[measured] * shift**2).sum())
        assert float(quadratic) <= float(exact) + 1e-9
    gaussian = RowNoise(scale)
    w = censored_terms(y, censored, 0.3, f, gaussian)[2]
    assert torch.equal(bounding_curvature(y, censored, f, w, gaussian), w)

"""The GP surrogate: perfmodel's prediction as prior mean, a kernel over physical features for the
residual the trials reveal.

The prior mean looks a candidate's prediction up by its features (candidates are a known, discrete
set) and adds a learned constant, so a model that is off by a common factor is corrected after a
trial or two; the Matern kernel, whose output scale prior expects residuals of tens of percent,
learns how far an error at one configuration carries to others.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import gpytorch
import numpy as np
import torch
from botorch.exceptions import ModelFittingError
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from gpytorch.kernels import MaternKernel, ScaleKernel
from gpytorch.priors import GammaPrior, LogNormalPrior


class CandidatePriorMean(gpytorch.means.Mean):
    """``prior[c] + offset`` for inputs equal to candidate ``c``'s features.

    Args:
        features: candidate features, shape ``(C, D)``.
        prior: prior mean per candidate, shape ``(C,)`` (e.g. predicted log goodput).
    """

    def __init__(self, features: torch.Tensor, prior: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("features", features)
        self.register_buffer("prior", prior)
        self.register_parameter("offset", torch.nn.Parameter(torch.zeros(1, dtype=prior.dtype)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Nearest candidate: inputs are always candidates, so the distance is 0.
        index = torch.cdist(x, self.features.expand(*x.shape[:-2], *self.features.shape)).argmin(-1)
        return self.prior[index] + self.offset


@dataclass(frozen=True)
class FitStatus:
    """Whether the hyperparameter fit converged; ``message`` says what went wrong if not."""

    converged: bool
    message: str = ""


def fit_surrogate(train_x: np.ndarray, train_y: np.ndarray, features: np.ndarray,
                  prior: np.ndarray, noise: float) -> tuple[SingleTaskGP, FitStatus]:
    """A GP over candidates fitted to ``train_y`` (shape ``(N,)``) at ``train_x`` (``(N, D)``).

    ``noise`` is the measurement's standard deviation in the units of ``train_y``. A fit that
    fails or does not converge leaves the hyperparameters at their prior modes and says so.
    """
    dtype = torch.float64
    x = torch.as_tensor(train_x, dtype=dtype)
    y = torch.as_tensor(train_y, dtype=dtype).reshape(-1, 1)
    dims = x.shape[-1]
    kernel = ScaleKernel(
        MaternKernel(nu=2.5, ard_num_dims=dims,
                     lengthscale_prior=LogNormalPrior(0.0, 0.75)),
        outputscale_prior=GammaPrior(2.0, 20.0))
    kernel.base_kernel.lengthscale = 1.0
    kernel.outputscale = 0.1
    mean = CandidatePriorMean(torch.as_tensor(features, dtype=dtype),
                              torch.as_tensor(prior, dtype=dtype))
    model = SingleTaskGP(x, y, train_Yvar=torch.full_like(y, max(noise, 1e-3) ** 2),
                         covar_module=kernel, mean_module=mean, outcome_transform=None)
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fit_gpytorch_mll(mll)
        problems = [str(w.message) for w in caught if "converge" in str(w.message).lower()
                    or "fail" in str(w.message).lower()]
        status = FitStatus(not problems, "; ".join(problems)[:200])
    except (ModelFittingError, RuntimeError, ValueError) as error:
        model.load_state_dict(state)
        status = FitStatus(False, f"surrogate fit failed ({error}); prior hyperparameters kept")
    model.eval()
    return model, status

"""A Gaussian-process co-location model: log normalised speed of a job next to another as a smooth
function of what both show alone.

Input of one observation (``target`` next to ``other``): the target's solo features followed by
its neighbour's (:mod:`.tables`' solo-features table; whatever columns it has: throughputs,
counter means, log batch size, one-hot GPU type or job family), standardised on the training jobs.
Output: ``log(speed)``, standardised. Model::

    log speed = m + f(x_target, x_other) + eps,   f ~ GP(0, s^2 k_ARD),   eps ~ N(0, sigma^2)

with ``k_ARD`` a squared-exponential kernel with one length scale per input (automatic relevance
determination: an input that does not matter gets a long length scale). ``m``, ``s``, the length
scales and ``sigma`` are fitted by maximising the exact marginal likelihood (L-BFGS, GPyTorch);
the predictive distribution of a new pair is the GP's Gaussian conditional plus the noise, so a
pair unlike any measured one (a job family, GPU type or batch size never co-located) gets the
prior's spread back: its interval widens instead of collapsing. Speeds above 1 (a job faster next
to a neighbour than alone) are ordinary values of ``log speed > 0``; nothing caps them below
:data:`~.tables.MAX_SPEED`.

Cost: one Cholesky factor of an ``N x N`` matrix per optimiser step (``N`` training
observations; about 0.1 s at ``N`` = 1,600 on one core); :data:`MAX_OBSERVATIONS` bounds ``N``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import gpytorch
import numpy as np
import pandas as pd
import torch

from bayes_sched.interference.model import InterferenceFitError, SpeedPrediction
from bayes_sched.interference.tables import InterferenceInputError, check_solo_features
from perfmodel.errors import UnreliableFitWarning

#: Most training observations an exact GP is fitted to (its memory grows as N^2: 20,000 rows
#: are 3.2 GB of float64).
MAX_OBSERVATIONS = 20_000
#: L-BFGS iterations at most per round, rounds at most (a round whose line search stalls is
#: restarted from where it stopped, with a fresh curvature memory), and the gradient norm (of the
#: negative marginal log likelihood per observation, in the raw hyperparameters) below which the
#: fit counts as converged: there a step of 0.1 in every hyperparameter changes the loss, which
#: is of order 1, by at most about 1e-3.
MAX_ITERATIONS = 200
MAX_ROUNDS = 3
GRADIENT_TOLERANCE = 1e-2


class _ExactGP(gpytorch.models.ExactGP):
    def __init__(self, x: torch.Tensor, y: torch.Tensor,
                 likelihood: gpytorch.likelihoods.GaussianLikelihood) -> None:
        super().__init__(x, y, likelihood)
        self.mean_module = gpytorch.means.ConstantMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(
            gpytorch.kernels.RBFKernel(ard_num_dims=x.shape[1]))

    def forward(self, x: torch.Tensor) -> gpytorch.distributions.MultivariateNormal:
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                         self.covar_module(x))


@dataclass(frozen=True)
class GpFitReport:
    """How the hyperparameter fit ended: ``iterations`` of L-BFGS, final negative marginal log
    likelihood per observation ``loss``, its gradient norm ``gradient_norm``, ``converged``
    (gradient norm below :data:`GRADIENT_TOLERANCE`), and the fitted length scale per input
    (``lengthscales``, standardised units) and noise standard deviation (``noise``, log speed)."""

    iterations: int
    loss: float
    gradient_norm: float
    converged: bool
    lengthscales: dict[str, float]
    noise: float


class ColocationGP:
    """A fitted GP co-location model; build it with :meth:`fit`."""

    def __init__(self, model: _ExactGP, likelihood: gpytorch.likelihoods.GaussianLikelihood,
                 solo_features: pd.DataFrame, feature_mean: np.ndarray, feature_scale: np.ndarray,
                 target_mean: float, target_scale: float, fitted_jobs: frozenset[str],
                 report: GpFitReport) -> None:
        self._model, self._likelihood = model, likelihood
        self.solo_features = solo_features
        self._feature_mean, self._feature_scale = feature_mean, feature_scale
        self._target_mean, self._target_scale = target_mean, target_scale
        self.fitted_jobs = fitted_jobs
        self.report = report

    @classmethod
    def fit(cls, observations: pd.DataFrame, solo_features: pd.DataFrame, seed: int = 0
            ) -> ColocationGP:
        """Fit to ``observations`` (columns ``target``, ``other``, ``speed``:
        :func:`~.tables.pair_observations`) with ``solo_features`` indexed by job as
        :func:`~.tables.read_solo_features_csv` returns it, or with a ``job`` column (checked
        here); every job of the observations must have a row. Raises
        :class:`InterferenceFitError` where the fit goes non-finite; warns
        :class:`~perfmodel.errors.UnreliableFitWarning` where L-BFGS stopped before the
        gradient was small."""
        solo = (check_solo_features(solo_features, source="solo features")
                if "job" in solo_features.columns else solo_features)
        if len(observations) > MAX_OBSERVATIONS:
            raise InterferenceInputError(f"{len(observations)} observations: expected at most "
                                         f"{MAX_OBSERVATIONS} for an exact GP")
        if len(observations) < 2:
            raise InterferenceInputError("expected at least two observations to fit a GP")
        missing = sorted((set(observations["target"]) | set(observations["other"]))
                         - set(solo.index))
        if missing:
            raise InterferenceInputError(f"job {missing[0]!r} has no row in the solo features")
        speed = observations["speed"].to_numpy(np.float64)
        if not np.all(np.isfinite(speed) & (speed > 0)):
            raise InterferenceInputError("speed: expected positive finite normalised speeds")
        torch.manual_seed(seed)
        raw = _inputs(solo, observations["target"], observations["other"])
        mean, scale = raw.mean(axis=0), raw.std(axis=0)
        scale = np.where(scale > 0, scale, 1.0)
        y = np.log(speed)
        y_mean, y_scale = float(y.mean()), float(y.std()) or 1.0
        x_t = torch.as_tensor((raw - mean) / scale)
        y_t = torch.as_tensor((y - y_mean) / y_scale)
        likelihood = gpytorch.likelihoods.GaussianLikelihood().double()
        model = _ExactGP(x_t, y_t, likelihood).double()
        report = _maximise_evidence(model, likelihood, x_t, y_t, list(solo.columns))
        fitted = frozenset(observations["target"]) | frozenset(observations["other"])
        return cls(model, likelihood, solo, mean, scale, y_mean, y_scale, fitted,
                   replace_noise(report, y_scale))

    def predict_speed(self, targets: Sequence[str], others: Sequence[str],
                      num_samples: int = 2000, seed: int = 0) -> SpeedPrediction:
        """Predictive draws of each target's normalised speed next to its other, shape
        ``(num_samples, N)``; ``cold_start`` marks targets never seen in a fitted pair."""
        unknown = sorted((set(targets) | set(others)) - set(self.solo_features.index))
        if unknown:
            raise InterferenceInputError(f"job {unknown[0]!r} has no row in the solo features")
        mean, sd = self.log_speed_moments(targets, others)
        rng = np.random.default_rng(seed)
        draws = np.exp(mean + sd * rng.standard_normal((num_samples, len(mean))))
        cold = np.array([t not in self.fitted_jobs for t in targets])
        return SpeedPrediction(draws, cold)

    def log_speed_moments(self, targets: Sequence[str], others: Sequence[str]
                          ) -> tuple[np.ndarray, np.ndarray]:
        """Predictive mean and standard deviation of ``log(speed)`` (noise included), each
        ``(N,)``."""
        raw = _inputs(self.solo_features, pd.Series(list(targets)), pd.Series(list(others)))
        x = torch.as_tensor((raw - self._feature_mean) / self._feature_scale)
        self._model.eval()
        self._likelihood.eval()
        with torch.no_grad(), gpytorch.settings.fast_pred_var(False):
            predictive = self._likelihood(self._model(x))
            mean = predictive.mean.numpy() * self._target_scale + self._target_mean
            sd = predictive.variance.clamp_min(0).sqrt().numpy() * self._target_scale
        return mean, sd


def replace_noise(report: GpFitReport, y_scale: float) -> GpFitReport:
    """``report`` with its noise in log-speed units (the fit sees standardised targets)."""
    return GpFitReport(report.iterations, report.loss, report.gradient_norm, report.converged,
                       report.lengthscales, report.noise * y_scale)


def _inputs(solo: pd.DataFrame, targets: pd.Series, others: pd.Series) -> np.ndarray:
    # Target's solo features, then its neighbour's: (N, 2F).
    return np.hstack([solo.loc[list(targets)].to_numpy(np.float64),
                      solo.loc[list(others)].to_numpy(np.float64)])


def _maximise_evidence(model: _ExactGP, likelihood: gpytorch.likelihoods.GaussianLikelihood,
                       x: torch.Tensor, y: torch.Tensor, columns: list[str]) -> GpFitReport:
    """L-BFGS on the exact marginal likelihood; the fit's report."""
    model.train()
    likelihood.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
    iterations, gradient_norm = 0, math.inf
    for _ in range(MAX_ROUNDS):
        optimizer = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=MAX_ITERATIONS,
                                      line_search_fn="strong_wolfe", tolerance_grad=1e-6,
                                      tolerance_change=1e-10)

        def closure(optimizer: torch.optim.LBFGS = optimizer) -> torch.Tensor:
            optimizer.zero_grad()
            with gpytorch.settings.max_cholesky_size(MAX_OBSERVATIONS):
                loss = -mll(model(x), y)
            loss.backward()
            return loss

        optimizer.step(closure)
        iterations += int(optimizer.state[optimizer.param_groups[0]["params"][0]]
                          .get("n_iter", 0))
        loss = closure().detach()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        gradient_norm = float(torch.sqrt(sum((g**2).sum() for g in grads))) if grads else 0.0
        if not (math.isfinite(float(loss)) and math.isfinite(gradient_norm)) or any(
                not torch.isfinite(p).all() for p in model.parameters()):
            raise InterferenceFitError("the GP's hyperparameter fit went non-finite")
        if gradient_norm < GRADIENT_TOLERANCE:
            break
    converged = gradient_norm < GRADIENT_TOLERANCE
    if not converged:
        warnings.warn(f"co-location GP: L-BFGS stopped after {iterations} iterations with "
                      f"gradient norm {gradient_norm:.2g} (>= {GRADIENT_TOLERANCE}); its "
                      "intervals may be off", UnreliableFitWarning, stacklevel=3)
    lengths = model.covar_module.base_kernel.lengthscale.detach().numpy().reshape(-1)
    names = [f"target.{c}" for c in columns] + [f"other.{c}" for c in columns]
    return GpFitReport(iterations, float(loss), gradient_norm, converged,
                       dict(zip(names, (float(v) for v in lengths), strict=True)),
                       float(likelihood.noise.detach().sqrt()))

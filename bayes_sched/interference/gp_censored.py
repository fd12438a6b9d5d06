"""The GP co-location model with a censored (Tobit) likelihood: speeds recorded at a cap are "at
least the cap", not measurements of exactly the cap.

Why: a table whose co-located throughputs were capped at the solo one (Gavel's artifact records a
job that ran at or above its solo speed as exactly 1.000: see
:data:`~.gavel.RECORDED_SPEED_CAP`) holds many identical values at the cap. The Gaussian model
(:mod:`.gp`) takes them as exact measurements of ``log speed = 0``: a smooth function through many
equal values is evidence of almost no noise, so its fitted noise and its intervals shrink. Here
a row at the cap contributes the probability of landing there,
``P(y* >= log cap) = Phi((f - log cap) / sigma)``, and a row below it the Gaussian density, so the
noise is fitted on what was measured.

Model (same inputs, standardisation, kernel and priors as :mod:`.gp`)::

    y* = m + f(x_target, x_other) + eps,   f ~ GP(0, k_ARD),   eps ~ N(0, sigma_g^2)
    recorded log speed = min(y*, log cap)

with one noise level per noise group ``g`` of the target (``noise_group``, e.g. its GPU type;
by default one group): ``log sigma_g^2 = b + u_g``, the offsets ``u_g`` drawn around the typical
level ``b`` (a hierarchical prior, :data:`NOISE_GROUP_SCALE`). Why: measurements differ in how
far they scatter from any smooth law by where they were taken (on Gavel's pairs, the residuals
of held-out V100 pairs are about three times those of K80 or P100 pairs), and one noise level
for all is then too wide for some rows and too narrow for others. A group the fit never saw (a
GPU type held out) gets the prior's mean noise variance over groups, ``exp(b + scale^2 / 2)``.

The Tobit likelihood is log-concave in ``f``, so the posterior of ``f`` has one mode and the
Laplace approximation (Rasmussen & Williams, *Gaussian Processes for Machine Learning*, 2006,
algorithms 3.1-3.2) is well posed: Newton's method finds the mode, the posterior is the Gaussian
with the curvature there, and the evidence is the Laplace evidence; the censored rows' factors need
no inducing-point or variational approximation. ``m``, the length scales and
the noise levels maximise the Laplace evidence with the Gaussian model's priors on at most
:data:`~.gp.EVIDENCE_OBSERVATIONS` observations (L-BFGS, from the Gaussian model's fit on the
same subset); its gradient is exact: the mode enters through one Newton step from the converged
mode, whose derivative in the hyperparameters is the mode's (Newton's map has zero derivative in
``f`` at its fixed point). The prediction conditions on every observation with those
hyperparameters. It is of the uncensored speed ``exp(y*)``: what the job would run at, above the
cap included; a caller comparing with capped records caps the prediction itself.

Cost: a few Cholesky factors of ``M x M`` per evidence evaluation (``M`` the evidence subset), and
a few of ``N x N`` for the prediction (``N`` training observations).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import cast

import gpytorch
import numpy as np
import pandas as pd
import torch
from botorch.models import SingleTaskGP
from gpytorch.constraints import GreaterThan
from gpytorch.priors import LogNormalPrior

from bayes_sched.interference.gp import (
    GRADIENT_TOLERANCE,
    MAX_ITERATIONS,
    GpFitReport,
    PairGP,
    TrainingSet,
    evidence_subset,
    fit_evidence,
    training_set,
)
from bayes_sched.interference.model import InterferenceFitError
from bayes_sched.interference.tables import InterferenceInputError
from perfmodel.errors import UnreliableFitWarning

#: Newton iterations at most for the posterior mode, and the largest change of the latent
#: values (standardised units) of a converged one.
NEWTON_ITERATIONS = 50
NEWTON_TOLERANCE = 1e-8
#: Halvings of one Newton step at most while the objective falls.
NEWTON_HALVINGS = 30
#: Jitter added to the kernel matrix's diagonal (standardised units).
JITTER = 1e-6
#: The noise model's prior: a typical log noise variance ``b ~ N(NOISE_PRIOR_LOC, 1)``
#: (BoTorch's noise prior), each noise group's offset from it ``~ N(0, NOISE_GROUP_SCALE^2)``:
#: a priori a group's noise standard deviation is within a factor ``exp(NOISE_GROUP_SCALE)``,
#: about 2.7, of the typical one with 95% probability.
NOISE_PRIOR_LOC = -4.0
NOISE_GROUP_SCALE = 1.0
#: Smallest noise standard deviation (standardised units): its square is added to every
#: group's noise variance.
MIN_NOISE = 1e-3


class _Hyperparameters(gpytorch.Module):
    """Constant mean, ARD RBF kernel (BoTorch's dimension-scaled log-normal length-scale prior,
    unit variance on standardised targets, as :class:`botorch.models.SingleTaskGP`) and a noise
    variance per noise group ``g`` (e.g. the target's GPU type), ``log sigma_g^2 = b + u_g``:
    ``b ~ N(NOISE_PRIOR_LOC, 1)`` (BoTorch's ``LogNormal(-4, 1)`` noise-variance prior), each
    group's offset ``u_g ~ N(0, NOISE_GROUP_SCALE^2)``; the length-scale constraint
    softplus-transformed so that unconstrained L-BFGS steps stay inside it."""

    def __init__(self, dims: int, groups: int) -> None:
        super().__init__()
        self.mean = gpytorch.means.ConstantMean()
        prior = LogNormalPrior(loc=math.sqrt(2) + 0.5 * math.log(dims), scale=math.sqrt(3))
        self.kernel = gpytorch.kernels.RBFKernel(
            ard_num_dims=dims, lengthscale_prior=prior,
            lengthscale_constraint=GreaterThan(2.5e-2, initial_value=prior.mode))
        self.noise_bias = torch.nn.Parameter(torch.tensor(NOISE_PRIOR_LOC))
        self.noise_offsets = torch.nn.Parameter(torch.zeros(groups))

    def copy_from(self, start: SingleTaskGP) -> None:
        """Take the mean, length scales and (one) noise of a fitted ``SingleTaskGP``."""
        mean = cast(gpytorch.means.ConstantMean, start.mean_module)
        kernel = cast(gpytorch.kernels.Kernel, start.covar_module)
        likelihood = cast(gpytorch.likelihoods.GaussianLikelihood, start.likelihood)
        with torch.no_grad():
            self.mean.constant = mean.constant.detach()
            self.kernel.lengthscale = kernel.lengthscale.detach()
            self.noise_bias.copy_(likelihood.noise.detach().reshape(()).log())
            self.noise_offsets.zero_()

    def noise_variance(self, group: torch.Tensor) -> torch.Tensor:
        """Noise variance (standardised units) of rows in noise groups ``group`` ``(N,)``
        (indices; -1 for a group the fit never saw, which gets the prior's mean over groups,
        ``exp(b + NOISE_GROUP_SCALE^2 / 2)``), ``(N,)``."""
        known = group >= 0
        offsets = torch.where(known, self.noise_offsets[group.clamp_min(0)],
                              torch.full_like(self.noise_bias, 0.5 * NOISE_GROUP_SCALE**2))
        return (self.noise_bias + offsets).exp() + MIN_NOISE**2

    def sigma(self, group: torch.Tensor) -> torch.Tensor:
        """Noise standard deviation (standardised units) of rows in noise groups ``group``."""
        return self.noise_variance(group).sqrt()

    def covariance(self, x: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
        """Kernel matrix ``(N, N)`` of ``x`` with jitter, or ``(N, M)`` of ``x`` and ``z``."""
        if z is None:
            k = self.kernel(x).to_dense()
            return k + JITTER * torch.eye(len(x), dtype=x.dtype)
        return self.kernel(x, z).to_dense()

    def log_prior(self) -> torch.Tensor:
        """Sum of the hyperparameters' log prior densities (the noise's up to constants)."""
        lengths = sum((prior.log_prob(closure(module)).sum()
                       for _, module, prior, closure, _ in self.named_priors()),
                      torch.zeros((), dtype=torch.float64))
        bias = -0.5 * (self.noise_bias - NOISE_PRIOR_LOC) ** 2
        offsets = -0.5 * (self.noise_offsets / NOISE_GROUP_SCALE).pow(2).sum()
        return lengths + bias + offsets


@dataclass(frozen=True)
class _Tobit:
    """Censored observations (standardised): ``y`` ``(N,)``, ``censored`` ``(N,)`` bool (the
    value is the cap ``upper``: ``y* >= upper``), ``group`` ``(N,)`` each row's noise group
    (index)."""

    y: torch.Tensor
    censored: torch.Tensor
    upper: float
    group: torch.Tensor

    def subset(self, rows: torch.Tensor) -> _Tobit:
        """The observations at indices ``rows``."""
        return _Tobit(self.y[rows], self.censored[rows], self.upper, self.group[rows])

    def terms(self, f: torch.Tensor, sigma: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log likelihood (scalar), its gradient in ``f`` and its negative curvature ``W``
        (each ``(N,)``) at latent values ``f``."""
        residual = (self.y - f) / sigma
        z = (f - self.upper) / sigma
        log_tail = torch.special.log_ndtr(z)
        # Inverse Mills ratio phi(z) / Phi(z), computed in logs (Phi underflows far below).
        mills = torch.exp(-0.5 * z**2 - 0.5 * math.log(2 * math.pi) - log_tail)
        exact = -0.5 * residual**2 - torch.log(sigma) - 0.5 * math.log(2 * math.pi)
        log_lik = torch.where(self.censored, log_tail, exact).sum()
        gradient = torch.where(self.censored, mills / sigma, residual / sigma)
        curvature = torch.where(self.censored, mills * (z + mills) / sigma**2,
                                torch.ones_like(f) / sigma**2)
        return log_lik, gradient, curvature


def _newton_step(k: torch.Tensor, mean: torch.Tensor, g: torch.Tensor, data: _Tobit,
                 sigma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One Newton step for the posterior mode of the zero-mean latent ``g = f - m`` (algorithm
    3.1 of Rasmussen & Williams): the new ``g`` and ``a = K^-1 g`` (each ``(N,)``)."""
    _, gradient, w = data.terms(mean + g, sigma)
    root = w.sqrt()
    chol = torch.linalg.cholesky(torch.eye(len(g), dtype=g.dtype) + root[:, None] * k * root)
    b = w * g + gradient
    a = b - root * torch.cholesky_solve((root * (k @ b))[:, None], chol)[:, 0]
    return k @ a, a


def _mode(k: torch.Tensor, mean: torch.Tensor, data: _Tobit, sigma: torch.Tensor
          ) -> torch.Tensor:
    """The posterior mode of ``g = f - m`` (no gradient), by Newton's method from zero, each
    step halved until the objective ``log p(y | m + g) - g' K^-1 g / 2`` does not fall (the
    objective is concave, so a short enough Newton step always raises it; full steps can
    overshoot where the noise is small against the kernel's variance)."""

    def objective(g: torch.Tensor, a: torch.Tensor) -> float:
        return float(data.terms(mean + g, sigma)[0] - 0.5 * (a @ g))

    with torch.no_grad():
        g, a = torch.zeros_like(data.y), torch.zeros_like(data.y)
        value = objective(g, a)
        for _ in range(NEWTON_ITERATIONS):
            new, new_a = _newton_step(k, mean, g, data, sigma)
            new_value = objective(new, new_a)
            for _ in range(NEWTON_HALVINGS):
                if new_value >= value - 1e-12 * abs(value):
                    break
                # g and a = K^-1 g move together: a step's fraction is linear in both.
                new, new_a = 0.5 * (g + new), 0.5 * (a + new_a)
                new_value = objective(new, new_a)
            if float((new - g).abs().max()) < NEWTON_TOLERANCE:
                return new
            g, a, value = new, new_a, new_value
    raise InterferenceFitError(f"the censored GP's posterior mode did not converge in "
                               f"{NEWTON_ITERATIONS} Newton iterations")


def _laplace_evidence(hyper: _Hyperparameters, x: torch.Tensor, data: _Tobit) -> torch.Tensor:
    """Laplace log evidence plus log prior, per observation, differentiable in the
    hyperparameters (see the module docstring for why its gradient is exact)."""
    k = hyper.covariance(x)
    mean, sigma = hyper.mean(x), hyper.sigma(data.group)
    g, a = _newton_step(k, mean, _mode(k, mean, data, sigma), data, sigma)
    log_lik, _, w = data.terms(mean + g, sigma)
    root = w.sqrt()
    chol = torch.linalg.cholesky(torch.eye(len(g), dtype=g.dtype) + root[:, None] * k * root)
    evidence = -0.5 * (a @ g) + log_lik - torch.log(torch.diagonal(chol)).sum()
    return (evidence + hyper.log_prior()) / len(g)


class CensoredColocationGP(PairGP):
    """A fitted censored GP co-location model; build it with :meth:`fit`."""

    def __init__(self, hyper: _Hyperparameters, x: torch.Tensor, data: _Tobit,
                 training: TrainingSet, report: GpFitReport,
                 noise_group: Callable[[str], str] | None, groups: Sequence[str]) -> None:
        super().__init__(training, report)
        self._hyper, self._x = hyper, x
        self._noise_group, self._groups = noise_group, list(groups)
        with torch.no_grad():
            k = hyper.covariance(x)
            mean, sigma = hyper.mean(x), hyper.sigma(data.group)
            g = _mode(k, mean, data, sigma)
            _, gradient, w = data.terms(mean + g, sigma)
            root = w.sqrt()
        # Algorithm 3.2: the predictive mean needs K^-1 g = the likelihood's gradient at the
        # mode, the variance the Cholesky factor of I + W^1/2 K W^1/2.
        self._gradient, self._root = gradient, root
        self._chol = torch.linalg.cholesky(torch.eye(len(g), dtype=g.dtype)
                                           + root[:, None] * k * root)

    @classmethod
    def fit(cls, observations: pd.DataFrame, solo_features: pd.DataFrame, cap: float = 1.0,
            seed: int = 0, noise_group: Callable[[str], str] | None = None
            ) -> CensoredColocationGP:
        """Fit to ``observations`` (as :meth:`.gp.ColocationGP.fit`) whose speeds were recorded
        capped at ``cap``: a speed equal to ``cap`` is censored ("at least ``cap``"); a speed
        above it contradicts the cap (:class:`InterferenceInputError`). ``noise_group`` maps a
        target job to its noise group (e.g. :func:`~.gavel.gpu_of`: measurements on one GPU type
        share a noise level); ``None``, one noise level for every row. Raises
        :class:`InterferenceFitError` where the fit goes non-finite; warns
        :class:`~perfmodel.errors.UnreliableFitWarning` where L-BFGS stopped before the
        gradient was small."""
        if not cap > 0:
            raise InterferenceInputError(f"cap {cap}: expected a positive normalised speed")
        training = training_set(observations, solo_features)
        above = training.speed > cap
        if above.any():
            raise InterferenceInputError(
                f"speed {float(training.speed[above][0]):g} above the cap {cap:g}: expected "
                "speeds recorded capped (use the Gaussian GP, --model gp, for uncapped ones)")
        torch.manual_seed(seed)
        upper = (math.log(cap) - training.y_mean) / training.y_scale
        censored = torch.as_tensor(training.speed >= cap)
        x, y = training.inputs(), training.targets()
        labels = [noise_group(t) if noise_group else "" for t in observations["target"]]
        groups = sorted(set(labels))
        index = {g: i for i, g in enumerate(groups)}
        data = _Tobit(torch.where(censored, torch.tensor(upper, dtype=y.dtype), y), censored,
                      upper, torch.as_tensor([index[g] for g in labels]))
        subset = torch.as_tensor(evidence_subset(len(y), seed))
        hyper = _Hyperparameters(x.shape[1], len(groups)).to(x.dtype)
        with warnings.catch_warnings():
            # Only a start: whether the fit converged is judged on the censored evidence.
            warnings.simplefilter("ignore", UnreliableFitWarning)
            hyper.copy_from(fit_evidence(x, data.y, seed, training.columns)[0])
        report = _maximise_evidence(hyper, x[subset], data.subset(subset), training.columns)
        with torch.no_grad():
            # The report's noise: geometric mean over the training rows; and each group's.
            typical = float(hyper.noise_variance(data.group).log().mean().mul(0.5).exp())
            by_group = hyper.sigma(torch.arange(len(groups))).numpy()
        report = replace(report, noise=typical, noise_groups={
            g: float(v) for g, v in zip(groups, by_group, strict=True)} if noise_group else {})
        return cls(hyper, x, data, training, report.with_noise_scale(training.y_scale),
                   noise_group, groups)

    def log_speed_moments(self, targets: Sequence[str], others: Sequence[str]
                          ) -> tuple[np.ndarray, np.ndarray]:
        """Predictive mean and standard deviation of the uncensored ``log(speed)`` (noise
        included), each ``(N,)``."""
        x = self.data.inputs_of(targets, others)
        with torch.no_grad():
            cross = self._hyper.covariance(self._x, x)
            mean = self._hyper.mean(x) + cross.T @ self._gradient
            v = torch.linalg.solve_triangular(self._chol, self._root[:, None] * cross,
                                              upper=False)
            prior = torch.ones(len(x), dtype=x.dtype)  # unit kernel variance
            variance = (prior - (v**2).sum(dim=0)
                        + self._hyper.noise_variance(self._group_index(targets)))
        return (mean.numpy() * self.data.y_scale + self.data.y_mean,
                variance.clamp_min(0).sqrt().numpy() * self.data.y_scale)


    def _group_index(self, targets: Sequence[str]) -> torch.Tensor:
        """Noise group index of each target ``(N,)``, -1 for a group the fit never saw."""
        index = {g: i for i, g in enumerate(self._groups)}
        return torch.as_tensor([index.get(self._noise_group(t) if self._noise_group else "", -1)
                                for t in targets], dtype=torch.long)


def _maximise_evidence(hyper: _Hyperparameters, x: torch.Tensor, data: _Tobit,
                       columns: list[str]) -> GpFitReport:
    """Maximise the Laplace evidence with priors (:func:`_laplace_evidence`) by L-BFGS with a
    strong-Wolfe line search; the fit's report, its gradient measured after the fit."""
    parameters = [p for p in hyper.parameters() if p.requires_grad]
    optimiser = torch.optim.LBFGS(parameters, max_iter=MAX_ITERATIONS,
                                  line_search_fn="strong_wolfe", tolerance_grad=1e-7,
                                  tolerance_change=1e-12)

    def closure() -> torch.Tensor:
        optimiser.zero_grad()
        loss = -_laplace_evidence(hyper, x, data)
        loss.backward()
        return loss.detach()

    try:
        optimiser.step(closure)
        objective = -_laplace_evidence(hyper, x, data)
        grads = torch.autograd.grad(objective, parameters)
    except torch.linalg.LinAlgError as error:
        raise InterferenceFitError(f"the censored GP's fit failed: {error}") from None
    gradient_norm = math.sqrt(sum(float((g**2).sum()) for g in grads))
    loss = float(objective.detach())
    if not (math.isfinite(loss) and math.isfinite(gradient_norm)):
        raise InterferenceFitError("the censored GP's fit went non-finite")
    converged = gradient_norm < GRADIENT_TOLERANCE
    if not converged:
        warnings.warn(f"co-location GP (censored): the fit stopped with gradient norm "
                      f"{gradient_norm:.2g} (tolerance {GRADIENT_TOLERANCE}); its intervals "
                      "may be off", UnreliableFitWarning, stacklevel=3)
    lengths = hyper.kernel.lengthscale.detach().numpy().reshape(-1)
    names = [f"target.{c}" for c in columns] + [f"other.{c}" for c in columns]
    return GpFitReport(loss, gradient_norm, converged,
                       dict(zip(names, (float(v) for v in lengths), strict=True)),
                       math.nan)

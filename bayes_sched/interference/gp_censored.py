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

    y* = m + a_g (f(x_target, x_other) + t_target + o_other) + eps,   f ~ GP(0, k_ARD),
    t_j ~ N(0, tau_t^2),   o_j ~ N(0, tau_o^2),   eps ~ N(0, sigma_g^2)
    recorded log speed = min(y*, log cap)

with one noise level ``sigma_g`` per noise group ``g`` of the target (``noise_group``, e.g. its
GPU type; by default one group), ``log sigma_g^2 = b + u_g``, the offsets ``u_g`` drawn around
the typical level ``b`` (a hierarchical prior, :data:`NOISE_GROUP_SCALE`), and optionally
(``group_amplitudes``) one kernel amplitude ``a_g`` per group, ``log a_g ~ N(0,
AMPLITUDE_GROUP_SCALE^2)`` around the unit amplitude of standardised targets (else ``a_g = 1``).
Why: groups differ in how far measurements scatter from any smooth law, and may differ in how
strongly the speed varies with the inputs (on Gavel's pairs, V100 speeds spread about twice as
widely as K80 or P100 ones); one noise level for all is too wide for some rows and too narrow
for others. The amplitudes sharpen the predictions of a group whose speeds vary widely, but
leave its noise Gaussian-narrow: where that group's residuals are heavy-tailed, its intervals
under-cover. A group the fit never saw (a GPU type held out) has no fitted levels: its
predictive distribution is the model's, with its noise offset (and log amplitude) drawn from
the prior (:meth:`CensoredColocationGP.log_speed_draws`; a scale mixture of Gaussians,
heavier-tailed than the typical group's Gaussian).

``t_j`` and ``o_j`` are each job's own effects, as a target (how much more or less it suffers
next to anyone than its solo features say) and as a neighbour (how much more or less it
disturbs), ``log tau ~ N(0, EFFECT_SCALE^2)`` around the smooth law's unit amplitude. Why:
the solo features do not tell everything about a job; without its own effects the smooth law
must either bend to each job's pairs (short length scales, which then extrapolate wildly to a
job never co-located) or call the difference noise (wide intervals and smoothed predictions for
jobs whose pairs were measured). With them, a job's measured pairs inform its other pairs
through its effects, and a job never co-located gets the effects' prior variance and the smooth
law's mean.

Optionally (``student_t``) the noise ``eps`` is Student-t, with a scale ``sigma_g`` (the same
hierarchical prior) and degrees of freedom ``nu_g`` per noise group (prior
:data:`DOF_PRIOR_SHAPE`, :data:`DOF_PRIOR_RATE`), a row at the cap contributing the t
distribution function (:mod:`.likelihoods`). Why: where a group's residuals are heavy-tailed (a
few measurements far from any smooth law), a Gaussian noise level either covers the bulk and
leaves the far rows outside its intervals, or stretches to them and makes every interval too
wide; the t noise keeps a small scale for the bulk and long tails for the rest.

The Gaussian Tobit likelihood is log-concave in ``f``, so the posterior of ``f`` has one mode
and the Laplace approximation (Rasmussen & Williams, *Gaussian Processes for Machine Learning*,
2006, algorithms 3.1-3.2) is well posed: Newton's method finds the mode, the posterior is the
Gaussian with the curvature there, and the evidence is the Laplace evidence; the censored rows'
factors need no inducing-point or variational approximation. The Student-t likelihood is not
log-concave (a row far from ``f`` has negative curvature ``W``), so the posterior may have
several modes and ``I + W^1/2 K W^1/2`` is not defined: the search takes a full Newton step
where the posterior's curvature is negative definite and elsewhere the step of the t's
scale-mixture (EM) view, ``W`` raised to each measured row's expected precision (an ascent
direction), each step halved until the objective rises (Vanhatalo, Jylänki & Vehtari, "Gaussian
process regression with Student-t likelihood", NIPS 2009, treat the mode so); it keeps the mode
reached from ``f = m``, and the evidence and the prediction factor ``K^-1 + W`` through ``K``'s
Cholesky factor (:class:`_Curvature`); a fit whose final mode is not a maximum raises
:class:`~.model.InterferenceFitError`.

``m``, the length scales, the effects, the amplitudes and the noise levels maximise the Laplace
evidence with the Gaussian model's priors on at most :data:`~.gp.EVIDENCE_OBSERVATIONS`
observations (L-BFGS, from the Gaussian model's fit on the same subset); its gradient is exact:
the mode enters through one Newton step from the converged mode, whose derivative in the
hyperparameters is the mode's (Newton's map has zero derivative in ``f`` at its fixed point;
with Student-t noise a censored row's derivative in ``nu_g`` is a central difference of the t
distribution function, :mod:`.likelihoods`). The prediction conditions on every observation with
those hyperparameters. It is of the uncensored speed ``exp(y*)``: what the job would run at,
above the cap included; a caller comparing with capped records caps the prediction itself.

Cost: a few Cholesky factors of ``M x M`` per evidence evaluation (``M`` the evidence subset), and
a few of ``N x N`` for the prediction (``N`` training observations); with Student-t noise one
more per Newton search (``K``'s factor), SciPy's t distribution function for every row per
evaluation, and more Newton steps (those with negative curvature converge linearly).
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
from scipy.stats import gamma

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
from bayes_sched.interference.likelihoods import (
    RowNoise,
    bounding_curvature,
    censored_terms,
    standard_noise,
)
from bayes_sched.interference.model import InterferenceFitError
from bayes_sched.interference.tables import InterferenceInputError
from perfmodel.errors import UnreliableFitWarning

#: Newton iterations at most for the posterior mode; the search ends where a step changes no
#: latent value (standardised units) by more than NEWTON_TOLERANCE, or raises the objective by
#: less than NEWTON_GAIN times its magnitude (for a concave objective a Newton step's gain
#: measures how far below the maximum it started; changes of the latent values can stay above
#: any fixed size where the kernel matrix is ill-conditioned, float64 rounding of its solves
#: moving them while the objective no longer changes).
NEWTON_ITERATIONS = 50
#: Newton iterations at most with Student-t noise: where the posterior's curvature is
#: indefinite the search steps on the EM bound, which converges linearly, not quadratically.
NEWTON_ITERATIONS_T = 200
NEWTON_TOLERANCE = 1e-8
NEWTON_GAIN = 1e-12
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
#: Each noise group's kernel amplitude ``a_g = exp(c_g)``, ``c_g ~ N(0,
#: AMPLITUDE_GROUP_SCALE^2)`` around the unit amplitude of standardised targets: the same
#: prior spread as a group's noise standard deviation has (half its log variance's), a factor
#: of about 2.7 either way with 95% probability.
AMPLITUDE_GROUP_SCALE = 0.5 * NOISE_GROUP_SCALE
#: Each job's own effects on log speed, as a target (``tau_t``) and as a neighbour
#: (``tau_o``), relative to the smooth law's unit amplitude: ``log tau ~ N(0, EFFECT_SCALE^2)``,
#: no preference a priori between a job's own effect and the smooth law (each as likely the
#: larger), within a factor of about 7 of each other with 95% probability.
EFFECT_SCALE = 1.0
#: Smallest noise standard deviation (standardised units): its square is added to every
#: group's noise variance.
MIN_NOISE = 1e-3
#: Student-t noise: each noise group's degrees of freedom ``nu_g = 1 + exp(d_g)`` (above 1:
#: the noise has a mean), ``nu_g ~ Gamma(DOF_PRIOR_SHAPE, DOF_PRIOR_RATE)``, the prior of
#: Juárez & Steel (2010, "Model-based clustering of non-Gaussian panel data based on skew-t
#: distributions"): mode 10, mean 20, little mass on near-Gaussian tails beyond 60 or on tails
#: so heavy that the variance is infinite (below 2). An unseen group's draws take theirs from it.
DOF_PRIOR_SHAPE = 2.0
DOF_PRIOR_RATE = 0.1
#: The mode of the degrees of freedom's prior, ``(shape - 1) / rate``: the fit's start.
_DOF_PRIOR_MODE = (DOF_PRIOR_SHAPE - 1) / DOF_PRIOR_RATE


class _Hyperparameters(gpytorch.Module):
    """Constant mean, ARD RBF kernel (BoTorch's dimension-scaled log-normal length-scale prior,
    unit variance on standardised targets, as :class:`botorch.models.SingleTaskGP`) plus each
    job's own effects as a target and as a neighbour (log standard deviations ``~ N(0,
    EFFECT_SCALE^2)``), a kernel amplitude per noise group ``g`` (e.g. the target's GPU type;
    ``log a_g ~ N(0, AMPLITUDE_GROUP_SCALE^2)``, fixed at 1 unless fitted) and a noise variance
    per noise group, ``log sigma_g^2 = b + u_g``: ``b ~ N(NOISE_PRIOR_LOC, 1)`` (BoTorch's
    ``LogNormal(-4, 1)`` noise-variance prior), each group's offset ``u_g ~ N(0,
    NOISE_GROUP_SCALE^2)``; the length-scale constraint softplus-transformed so that
    unconstrained L-BFGS steps stay inside it."""

    def __init__(self, dims: int, groups: int) -> None:
        super().__init__()
        self.mean = gpytorch.means.ConstantMean()
        prior = LogNormalPrior(loc=math.sqrt(2) + 0.5 * math.log(dims), scale=math.sqrt(3))
        self.kernel = gpytorch.kernels.RBFKernel(
            ard_num_dims=dims, lengthscale_prior=prior,
            lengthscale_constraint=GreaterThan(2.5e-2, initial_value=prior.mode))
        self.noise_bias = torch.nn.Parameter(torch.tensor(NOISE_PRIOR_LOC))
        self.noise_offsets = torch.nn.Parameter(torch.zeros(groups))
        self.amplitude_logs = torch.nn.Parameter(torch.zeros(groups))
        # Student-t noise's log(nu_g - 1) per group (unused with Gaussian noise).
        self.dof_logs = torch.nn.Parameter(torch.zeros(groups))
        self.student_t = False
        # Log standard deviations of a job's own effects as a target and as a neighbour.
        self.effect_logs = torch.nn.Parameter(torch.zeros(2))

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
            self.amplitude_logs.zero_()
            self.effect_logs.zero_()
            self.dof_logs.fill_(math.log(_DOF_PRIOR_MODE - 1))

    def noise_variance(self, group: torch.Tensor, unseen: torch.Tensor | None = None
                       ) -> torch.Tensor:
        """Noise variance (standardised units) of rows in noise groups ``group`` ``(N,)``
        (indices; -1 for a group the fit never saw, whose offset from the typical level is
        ``unseen`` (broadcast against ``group``; a draw from the prior), by default 0),
        ``(..., N)``."""
        offsets = _group_values(self.noise_offsets, group, unseen)
        return (self.noise_bias + offsets).exp() + MIN_NOISE**2

    def amplitude(self, group: torch.Tensor, unseen: torch.Tensor | None = None
                  ) -> torch.Tensor:
        """Kernel amplitude ``a_g`` of rows in noise groups ``group`` ``(N,)`` (an unseen
        group's log amplitude ``unseen``, by default 0: the prior's median), ``(..., N)``."""
        return _group_values(self.amplitude_logs, group, unseen).exp()

    def sigma(self, group: torch.Tensor) -> torch.Tensor:
        """Noise standard deviation (Student-t noise: scale; standardised units) of rows in
        noise groups ``group``."""
        return self.noise_variance(group).sqrt()

    def dof(self, group: torch.Tensor, unseen: torch.Tensor | None = None) -> torch.Tensor:
        """Student-t degrees of freedom of rows in noise groups ``group`` (an unseen group's
        ``1 + exp(unseen)``, by default the prior's mode), ``(..., N)``."""
        fill = (torch.tensor(math.log(_DOF_PRIOR_MODE - 1), dtype=self.dof_logs.dtype)
                if unseen is None else unseen)
        return 1.0 + _group_values(self.dof_logs, group, fill).exp()

    def noise(self, group: torch.Tensor) -> RowNoise:
        """The likelihood's noise of rows in (seen) noise groups ``group``."""
        return RowNoise(self.sigma(group), self.dof(group) if self.student_t else None)

    def covariance(self, x: torch.Tensor, group: torch.Tensor, jobs: torch.Tensor,
                   z: torch.Tensor | None = None, z_jobs: torch.Tensor | None = None
                   ) -> torch.Tensor:
        """Kernel matrix ``a_i a_j c(i, j)`` ``(N, N)`` of rows ``x`` in noise groups ``group``
        whose (target, neighbour) jobs are ``jobs`` ``(N, 2)`` (codes), with jitter; or
        ``a_i c(i, j)`` ``(N, M)`` of them and rows ``z`` of jobs ``z_jobs`` (the amplitude of
        ``z``'s rows left to the caller). ``c(i, j) = k(x_i, x_j) + tau_t^2 [same target] +
        tau_o^2 [same neighbour]`` (:meth:`unit_variance` on the diagonal)."""
        amplitude = self.amplitude(group)
        tau = (2 * self.effect_logs).exp()
        if z is None or z_jobs is None:
            z, z_jobs = x, jobs
        same = (jobs[:, None, :] == z_jobs[None, :, :]).to(x.dtype)
        c = self.kernel(x, z).to_dense() + same @ tau
        if z is x:
            return (amplitude[:, None] * c * amplitude
                    + JITTER * torch.eye(len(x), dtype=x.dtype))
        return amplitude[:, None] * c

    def unit_variance(self) -> torch.Tensor:
        """A row's prior latent variance at unit amplitude, ``1 + tau_t^2 + tau_o^2``."""
        return 1.0 + (2 * self.effect_logs).exp().sum()

    def log_prior(self) -> torch.Tensor:
        """Sum of the hyperparameters' log prior densities (the noise's up to constants)."""
        lengths = sum((prior.log_prob(closure(module)).sum()
                       for _, module, prior, closure, _ in self.named_priors()),
                      torch.zeros((), dtype=torch.float64))
        bias = -0.5 * (self.noise_bias - NOISE_PRIOR_LOC) ** 2
        offsets = -0.5 * (self.noise_offsets / NOISE_GROUP_SCALE).pow(2).sum()
        amplitudes = -0.5 * (self.amplitude_logs / AMPLITUDE_GROUP_SCALE).pow(2).sum()
        effects = -0.5 * (self.effect_logs / EFFECT_SCALE).pow(2).sum()
        total = lengths + bias + offsets + amplitudes + effects
        if self.student_t:
            # Gamma(shape, rate) on nu = 1 + exp(d), with the Jacobian exp(d).
            nu = 1.0 + self.dof_logs.exp()
            total = total + ((DOF_PRIOR_SHAPE - 1) * nu.log() - DOF_PRIOR_RATE * nu
                             + self.dof_logs).sum()
        return total


def _job_codes(solo: pd.DataFrame, targets: Sequence[str] | pd.Series,
               others: Sequence[str] | pd.Series) -> torch.Tensor:
    """Each row's (target, neighbour) as positions in the solo table's index ``(N, 2)``."""
    return torch.as_tensor(np.stack([solo.index.get_indexer(list(targets)),
                                     solo.index.get_indexer(list(others))], axis=1))


def _group_values(values: torch.Tensor, group: torch.Tensor, unseen: torch.Tensor | None
                  ) -> torch.Tensor:
    """``values[group]`` ``(N,)``, where ``group`` is -1 (a group the fit never saw)
    ``unseen`` instead (0 by default; broadcast: ``(S, 1)`` gives ``(S, N)``)."""
    fill = torch.zeros((), dtype=values.dtype) if unseen is None else unseen
    return torch.where(group >= 0, values[group.clamp_min(0)], fill)


@dataclass(frozen=True)
class _Tobit:
    """Censored observations (standardised): ``y`` ``(N,)``, ``censored`` ``(N,)`` bool (the
    value is the cap ``upper``: ``y* >= upper``), ``group`` ``(N,)`` each row's noise group
    (index)."""

    y: torch.Tensor
    censored: torch.Tensor
    upper: float
    group: torch.Tensor
    jobs: torch.Tensor

    def subset(self, rows: torch.Tensor) -> _Tobit:
        """The observations at indices ``rows``."""
        return _Tobit(self.y[rows], self.censored[rows], self.upper, self.group[rows],
                      self.jobs[rows])

    def terms(self, f: torch.Tensor, noise: RowNoise
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log likelihood (scalar), its gradient in ``f`` and its negative curvature ``W``
        (each ``(N,)``) at latent values ``f`` (:func:`~.likelihoods.censored_terms`)."""
        return censored_terms(self.y, self.censored, self.upper, f, noise)


class _Curvature:
    """The Laplace posterior's precision ``K^-1 + W`` for a kernel matrix ``K`` ``(N, N)`` and
    the likelihood's negative curvature ``W`` ``(N,)``, factored as algorithm 3.1 of Rasmussen
    & Williams does where ``W >= 0`` (the Cholesky factor of ``B = I + W^1/2 K W^1/2``), and
    otherwise (a Student-t likelihood's rows far from the latent value) through ``K = L L'``:
    ``K^-1 + W = L^-T C L^-1`` with ``C = I + L' W L``, positive definite at a maximum of the
    posterior. Raises :class:`torch.linalg.LinAlgError` where the precision is not positive
    definite."""

    def __init__(self, k: torch.Tensor, w: torch.Tensor, chol_k: torch.Tensor | None = None
                 ) -> None:
        self.k, self.w = k, w
        eye = torch.eye(len(w), dtype=w.dtype)
        if bool((w >= 0).all()):
            self.root: torch.Tensor | None = w.sqrt()
            self.chol_k = None
            self.chol = torch.linalg.cholesky(eye + self.root[:, None] * k * self.root)
        else:
            self.root = None
            self.chol_k = torch.linalg.cholesky(k) if chol_k is None else chol_k
            self.chol = torch.linalg.cholesky(eye + self.chol_k.T * w @ self.chol_k)

    def solve(self, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``g = (K^-1 + W)^-1 b`` and ``a = K^-1 g``, each ``(N,)``."""
        if self.root is not None:
            a = b - self.root * torch.cholesky_solve(
                (self.root * (self.k @ b))[:, None], self.chol)[:, 0]
            return self.k @ a, a
        assert self.chol_k is not None
        inner = torch.cholesky_solve((self.chol_k.T @ b)[:, None], self.chol)[:, 0]
        a = torch.linalg.solve_triangular(self.chol_k.T, inner[:, None], upper=True)[:, 0]
        return self.chol_k @ inner, a

    def half_log_det(self) -> torch.Tensor:
        """``log det(I + K W) / 2``."""
        return torch.log(torch.diagonal(self.chol)).sum()

    def reduction(self, cross: torch.Tensor) -> torch.Tensor:
        """``diag(k*' (K + W^-1)^-1 k*)`` ``(M,)`` for the covariances ``cross`` ``(N, M)``
        of the training rows with ``M`` others: how far conditioning on the observations
        lowers their latent variance."""
        if self.root is not None:
            v = torch.linalg.solve_triangular(self.chol, self.root[:, None] * cross,
                                              upper=False)
            return (v**2).sum(dim=0)
        assert self.chol_k is not None
        # k*' (K^-1 - K^-1 (K^-1 + W)^-1 K^-1) k* with v = L^-1 k*: v'v - v' C^-1 v.
        v = torch.linalg.solve_triangular(self.chol_k, cross, upper=False)
        u = torch.linalg.solve_triangular(self.chol, v, upper=False)
        return (v**2).sum(dim=0) - (u**2).sum(dim=0)


def _newton_step(k: torch.Tensor, mean: torch.Tensor, g: torch.Tensor, data: _Tobit,
                 noise: RowNoise, chol_k: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """One Newton step for the posterior mode of the zero-mean latent ``g = f - m`` (algorithm
    3.1 of Rasmussen & Williams, with :class:`_Curvature` where ``W`` has negative entries):
    the new ``g`` and ``a = K^-1 g`` (each ``(N,)``)."""
    _, gradient, w = data.terms(mean + g, noise)
    return _Curvature(k, w, chol_k).solve(w * g + gradient)


def _search_step(k: torch.Tensor, mean: torch.Tensor, g: torch.Tensor, data: _Tobit,
                 noise: RowNoise, chol_k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A Newton step (:func:`_newton_step`) where the posterior's curvature at ``g`` is
    negative definite; elsewhere (a Student-t likelihood far from its mode) the step with ``W``
    raised to :func:`~.likelihoods.bounding_curvature` (for the measured rows the EM step of
    the t's scale-mixture view: a step on a quadratic below the objective), an ascent
    direction."""
    _, gradient, w = data.terms(mean + g, noise)
    try:
        return _Curvature(k, w, chol_k).solve(w * g + gradient)
    except torch.linalg.LinAlgError:
        w = bounding_curvature(data.y, data.censored, mean + g, w, noise)
        return _Curvature(k, w).solve(w * g + gradient)


def _mode(k: torch.Tensor, mean: torch.Tensor, data: _Tobit, noise: RowNoise
          ) -> torch.Tensor:
    """The posterior mode of ``g = f - m`` (no gradient), by Newton's method from zero
    (:func:`_search_step`), each step halved until the objective ``log p(y | m + g) - g' K^-1
    g / 2`` does not fall (a short enough step in an ascent direction always raises it; full
    steps can overshoot where the noise is small against the kernel's variance, or where a
    Student-t likelihood is not concave). It ends where a step
    changes the latent values or the objective by less than :data:`NEWTON_TOLERANCE` and
    :data:`NEWTON_GAIN` say, or where no halving of a step raises the objective (rounding,
    not the objective's shape, then sets what a step does: a line search of the evidence can
    try hyperparameters whose kernel matrix is nearly singular)."""

    def objective(g: torch.Tensor, a: torch.Tensor) -> float:
        return float(data.terms(mean + g, noise)[0] - 0.5 * (a @ g))

    with torch.no_grad():
        chol_k = torch.linalg.cholesky(k) if noise.dof is not None else None
        g, a = torch.zeros_like(data.y), torch.zeros_like(data.y)
        value = objective(g, a)
        iterations = NEWTON_ITERATIONS if chol_k is None else NEWTON_ITERATIONS_T
        for _ in range(iterations):
            new, new_a = (_newton_step(k, mean, g, data, noise) if chol_k is None
                          else _search_step(k, mean, g, data, noise, chol_k))
            new_value = objective(new, new_a)
            for _ in range(NEWTON_HALVINGS):
                if new_value >= value - 1e-12 * abs(value):
                    break
                # g and a = K^-1 g move together: a step's fraction is linear in both.
                new, new_a = 0.5 * (g + new), 0.5 * (a + new_a)
                new_value = objective(new, new_a)
            else:
                return g
            change, gain = float((new - g).abs().max()), new_value - value
            if change < NEWTON_TOLERANCE or gain <= NEWTON_GAIN * abs(value):
                return new
            g, a, value = new, new_a, new_value
    raise InterferenceFitError(f"the censored GP's posterior mode did not converge in "
                               f"{iterations} Newton iterations (the last changed a "
                               f"latent value by {change:.2g} and the objective {value:.6g} "
                               f"by {gain:.2g})")


def _laplace_evidence(hyper: _Hyperparameters, x: torch.Tensor, data: _Tobit) -> torch.Tensor:
    """Laplace log evidence plus log prior, per observation, differentiable in the
    hyperparameters (see the module docstring for why its gradient is exact)."""
    k = hyper.covariance(x, data.group, data.jobs)
    mean, noise = hyper.mean(x), hyper.noise(data.group)
    g, a = _newton_step(k, mean, _mode(k, mean, data, noise), data, noise)
    log_lik, _, w = data.terms(mean + g, noise)
    evidence = -0.5 * (a @ g) + log_lik - _Curvature(k, w).half_log_det()
    return (evidence + hyper.log_prior()) / len(g)


class CensoredColocationGP(PairGP):
    """A fitted censored GP co-location model; build it with :meth:`fit`."""

    def __init__(self, hyper: _Hyperparameters, x: torch.Tensor, data: _Tobit,
                 training: TrainingSet, report: GpFitReport,
                 noise_group: Callable[[str], str] | None, groups: Sequence[str],
                 amplitude_scale: float) -> None:
        super().__init__(training, report)
        self._hyper, self._x, self._train_group = hyper, x, data.group
        self._train_jobs = data.jobs
        # The prior spread of an unseen group's log amplitude (0: amplitudes not fitted).
        self._amplitude_scale = amplitude_scale
        self._noise_group, self._groups = noise_group, list(groups)
        with torch.no_grad():
            k = hyper.covariance(x, data.group, data.jobs)
            mean, noise = hyper.mean(x), hyper.noise(data.group)
            g = _mode(k, mean, data, noise)
            _, gradient, w = data.terms(mean + g, noise)
            # Algorithm 3.2: the predictive mean needs K^-1 g = the likelihood's gradient at
            # the mode, the variance the factored posterior precision.
            self._gradient = gradient
            try:
                self._curvature = _Curvature(k, w)
            except torch.linalg.LinAlgError:
                raise InterferenceFitError(
                    "the censored GP's posterior has no maximum where Newton's method ended "
                    "(its curvature there is not negative definite)") from None

    @classmethod
    def fit(cls, observations: pd.DataFrame, solo_features: pd.DataFrame, cap: float = 1.0,
            seed: int = 0, noise_group: Callable[[str], str] | None = None,
            group_amplitudes: bool = False, student_t: bool = False) -> CensoredColocationGP:
        """Fit to ``observations`` (as :meth:`.gp.ColocationGP.fit`) whose speeds were recorded
        capped at ``cap``: a speed equal to ``cap`` is censored ("at least ``cap``"); a speed
        above it contradicts the cap (:class:`InterferenceInputError`). ``noise_group`` maps a
        target job to its noise group (e.g. :func:`~.gavel.gpu_of`: measurements on one GPU type
        share a noise level); ``None``, one noise level for every row. ``group_amplitudes``: a
        kernel amplitude per noise group too (else the unit amplitude for all, an unseen
        group's included). ``student_t``: Student-t noise (a scale and degrees of freedom per
        noise group, :mod:`.likelihoods`) instead of Gaussian. Raises
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
                      upper, torch.as_tensor([index[g] for g in labels]),
                      _job_codes(training.solo, observations["target"], observations["other"]))
        subset = torch.as_tensor(evidence_subset(len(y), seed))
        hyper = _Hyperparameters(x.shape[1], len(groups)).to(x.dtype)
        hyper.amplitude_logs.requires_grad_(group_amplitudes)
        hyper.dof_logs.requires_grad_(student_t)
        with warnings.catch_warnings():
            # Only a start: whether the fit converged is judged on the censored evidence.
            warnings.simplefilter("ignore", UnreliableFitWarning)
            hyper.copy_from(fit_evidence(x, data.y, seed, training.columns)[0])
        hyper.student_t = student_t
        report = _maximise_evidence(hyper, x[subset], data.subset(subset), training.columns)
        with torch.no_grad():
            # The report's noise: geometric mean over the training rows; and each group's.
            typical = float(hyper.noise_variance(data.group).log().mean().mul(0.5).exp())
            every = torch.arange(len(groups))
            noises = dict(zip(groups, hyper.sigma(every).tolist(), strict=True))
            amplitudes = dict(zip(groups, hyper.amplitude(every).tolist(), strict=True))
            dofs = dict(zip(groups, hyper.dof(every).tolist(), strict=True))
        report = replace(report, noise=typical, noise_groups=noises if noise_group else {},
                         amplitude_groups=amplitudes if noise_group and group_amplitudes else {},
                         dof_groups=dofs if student_t else {})
        return cls(hyper, x, data, training, report.with_noise_scale(training.y_scale),
                   noise_group, groups, AMPLITUDE_GROUP_SCALE if group_amplitudes else 0.0)

    def log_speed_moments(self, targets: Sequence[str], others: Sequence[str]
                          ) -> tuple[np.ndarray, np.ndarray]:
        """Predictive mean and standard deviation of the uncensored ``log(speed)`` (noise
        included), each ``(N,)``; for a target in a noise group the fit never saw, those of
        the mixture over the group's amplitude and noise level drawn from their priors
        (:meth:`log_speed_draws` draws from it). With Student-t noise the standard deviation
        is infinite where the noise has no variance: at most 2 degrees of freedom, and in an
        unseen group (its prior reaches below 2)."""
        x, group = self.data.inputs_of(targets, others), self._group_index(targets)
        with torch.no_grad():
            shift, spread = self._latent(x, _job_codes(self.data.solo, targets, others))
            # An unseen group's amplitude a = exp(c), c ~ N(0, s^2): E[a] = exp(s^2 / 2),
            # E[a^2] = exp(s^2)^2; its noise variance's mean exp(b + NOISE_GROUP_SCALE^2 / 2):
            # each the value at a fixed log offset, which the seen groups ignore.
            def at(offset: float) -> torch.Tensor:
                return torch.tensor(offset, dtype=x.dtype)
            first = self._hyper.amplitude(group, at(0.5 * self._amplitude_scale**2))
            second = self._hyper.amplitude(group, at(self._amplitude_scale**2)) ** 2
            noise = self._hyper.noise_variance(group, at(0.5 * NOISE_GROUP_SCALE**2))
            if self._hyper.student_t:
                dof = self._hyper.dof(group)
                noise = torch.where((group >= 0) & (dof > 2), noise * dof / (dof - 2),
                                    torch.tensor(math.inf, dtype=x.dtype))
            mean = self._hyper.mean(x) + first * shift
            variance = second * (spread + shift**2) - (first * shift) ** 2 + noise
        return (mean.numpy() * self.data.y_scale + self.data.y_mean,
                variance.clamp_min(0).sqrt().numpy() * self.data.y_scale)

    def log_speed_draws(self, targets: Sequence[str], others: Sequence[str],
                        num_samples: int, rng: np.random.Generator) -> np.ndarray:
        """Predictive draws of the uncensored ``log(speed)`` ``(num_samples, N)``. A target in
        a noise group the fit never saw (e.g. a GPU type held out) has no fitted amplitude or
        noise level: each draw takes its group's log amplitude and noise offset from their
        priors (one draw per unseen group and sample), so its predictive distribution is the
        hierarchical model's, a scale mixture of Gaussians (with Student-t noise, its degrees
        of freedom drawn from their prior too), not the typical group's distribution."""
        x, group = self.data.inputs_of(targets, others), self._group_index(targets)
        labels = [self._noise_group(t) if self._noise_group else "" for t in targets]
        unseen = sorted({label for label, g in zip(labels, group.tolist(), strict=True)
                         if g < 0})
        which = torch.as_tensor([unseen.index(label) if label in unseen else 0
                                 for label in labels])
        normal = torch.as_tensor(rng.standard_normal((2, num_samples, max(len(unseen), 1))))
        amplitude_logs = (self._amplitude_scale * normal[0])[:, which]
        noise_offsets = (NOISE_GROUP_SCALE * normal[1])[:, which]
        dof = None
        if self._hyper.student_t:
            # Gamma(shape, rate) truncated to nu > 1, drawn by inverting its distribution
            # function; then log(nu - 1), as the fitted levels are held.
            prior = gamma(DOF_PRIOR_SHAPE, scale=1 / DOF_PRIOR_RATE)
            above = prior.sf(1.0)
            nu = prior.isf(above * rng.uniform(size=(num_samples, max(len(unseen), 1))))
            dof_logs = torch.as_tensor(np.log(nu - 1.0))[:, which]
            with torch.no_grad():
                dof = self._hyper.dof(group, dof_logs).expand(num_samples, len(x)).numpy()
        with torch.no_grad():
            shift, spread = self._latent(x, _job_codes(self.data.solo, targets, others))
            amplitude = self._hyper.amplitude(group, amplitude_logs)
            latent = (self._hyper.mean(x) + amplitude * shift + amplitude * spread.sqrt()
                      * torch.as_tensor(rng.standard_normal((num_samples, len(x)))))
            scale = self._hyper.noise_variance(group, noise_offsets).sqrt()
            draws = latent + scale * torch.as_tensor(
                standard_noise(rng, (num_samples, len(x)), dof))
        return draws.numpy() * self.data.y_scale + self.data.y_mean

    def _latent(self, x: torch.Tensor, jobs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior of the unit-amplitude latent at standardised inputs ``x`` ``(M, D)``: its
        mean and variance, each ``(M,)`` (a target of amplitude ``a`` has latent mean ``a``
        times the first, variance ``a^2`` times the second: its covariance with every
        training row is ``a`` times the unit one's)."""
        cross = self._hyper.covariance(self._x, self._train_group, self._train_jobs, x, jobs)
        shift = cross.T @ self._gradient
        reduction = self._curvature.reduction(cross)
        return shift, (self._hyper.unit_variance() - reduction).clamp_min(0)

    def _group_index(self, targets: Sequence[str]) -> torch.Tensor:
        """Noise group index of each target ``(N,)``, -1 for a group the fit never saw."""
        index = {g: i for i, g in enumerate(self._groups)}
        return torch.as_tensor([index.get(self._noise_group(t) if self._noise_group else "", -1)
                                for t in targets], dtype=torch.long)


def _maximise_evidence(hyper: _Hyperparameters, x: torch.Tensor, data: _Tobit,
                       columns: list[str]) -> GpFitReport:
    """Maximise the Laplace evidence with priors (:func:`_laplace_evidence`) by L-BFGS with a
    strong-Wolfe line search (a trial point where the evidence cannot be evaluated counts as
    infinitely bad); the fit's report, its gradient measured after the fit."""
    parameters = [p for p in hyper.parameters() if p.requires_grad]
    optimiser = torch.optim.LBFGS(parameters, max_iter=MAX_ITERATIONS,
                                  line_search_fn="strong_wolfe", tolerance_grad=1e-7,
                                  tolerance_change=1e-12)

    def closure() -> torch.Tensor:
        optimiser.zero_grad()
        try:
            loss = -_laplace_evidence(hyper, x, data)
        except (torch.linalg.LinAlgError, InterferenceFitError):
            # A trial point without a usable Laplace approximation (with Student-t noise: no
            # maximum where the mode search ended): an infinite loss, so that the line search
            # shortens its step (bisection); the fit's final point is checked below.
            for p in parameters:
                p.grad = torch.zeros_like(p)
            return torch.tensor(math.inf, dtype=x.dtype)
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

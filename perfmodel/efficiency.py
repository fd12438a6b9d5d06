"""Statistical efficiency from the gradient noise scale, with its uncertainty along training.

With ``grad_sqr`` (squared norm of the true gradient) and ``grad_var`` (variance of the stochastic
gradient) measured at the initial batch size ``M0``, training at batch ``M`` (``scale = M / M0``) makes
``gain = (grad_var + grad_sqr) / (grad_var / scale + grad_sqr)`` times the progress per step, so each
example is worth ``efficiency = gain / scale`` examples at ``M0``. Only the noise-to-signal ratio
``phi = grad_var / grad_sqr`` matters: ``efficiency = (phi + 1) / (phi + scale)``, increasing in ``phi``
for ``scale > 1``, so quantiles of ``phi`` map to quantiles of efficiency.

Per-epoch estimates of ``phi`` are noisy. :class:`NoiseScaleCurve` smooths ``log phi`` over the
fraction of training done with a conjugate Bayesian regression on a cubic polynomial basis: the
posterior of the mean curve is a Student-t at every point, closed form, no sampling.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfmodel.errors import InputError
from perfmodel.profiles import MAX_LOG_NOISE, GradientTrace

_DEGREE = 3
# Weak conjugate prior: coefficients ~ N(0, 10^2 sigma^2), sigma^2 ~ InvGamma(1, 0.1) on log phi.
_PRIOR_COEF_SCALE = 10.0
_PRIOR_A, _PRIOR_B = 1.0, 0.1


def efficiency_from_noise(noise_to_signal: np.ndarray | float, init_bsz: np.ndarray | float,
                          batch_size: np.ndarray | float) -> np.ndarray:
    """Examples-at-``init_bsz`` worth of progress per example at ``batch_size``, in (0, 1] for
    ``batch_size >= init_bsz``. ``noise_to_signal`` is ``grad_var / grad_sqr``; arrays broadcast."""
    phi = np.asarray(noise_to_signal, dtype=np.float64)
    scale = np.asarray(batch_size, dtype=np.float64) / np.asarray(init_bsz, np.float64)
    # (phi + 1) / (phi + scale) written as 1 - (scale - 1) / (phi + scale): the same number, but
    # phi = inf (pure noise) gives the limit 1 instead of inf / inf.
    return 1.0 - (scale - 1.0) / (phi + scale)


def scale_invariant_gain(grad_sqr: float, grad_var: float, scale: float) -> float:
    """Progress, in steps at the initial batch, of one step at ``scale`` times that batch:
    ``(var + sqr) / (var / scale + sqr)`` (``scale`` where the denominator vanishes)."""
    denominator = grad_var / scale + grad_sqr
    return (grad_var + grad_sqr) / denominator if denominator > 0 else scale


def gradient_noise_estimate(small_sqr: float, small_batch: float, big_sqr: float,
                            big_batch: float, init_bsz: float) -> tuple[float, float]:
    """Unbiased ``(grad_sqr, grad_var)`` from the squared norms of two gradients of one step.

    ``small_sqr`` is ``|g_b|^2`` for a gradient averaged over ``small_batch`` examples (one
    replica's micro-batch), ``big_sqr`` is ``|g_B|^2`` for the gradient averaged over
    ``big_batch > small_batch`` examples (all replicas and micro-steps). As ``E|g_b|^2 = |G|^2 +
    tr(Sigma) / b`` (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training", App. A):
    ``|G|^2 = (B |g_B|^2 - b |g_b|^2) / (B - b)`` and ``tr(Sigma) = (|g_b|^2 - |g_B|^2) / (1/b -
    1/B)``. ``grad_var`` is the variance at the initial batch, ``tr(Sigma) / init_bsz`` (the unit
    :func:`efficiency_from_noise` and the Pollux traces use); with ``B = count * b`` these are
    AdaptDL's ``(count |g_B|^2 - |g_b|^2) / (count - 1)`` and ``(|g_b|^2 - |g_B|^2) * scale /
    (count - 1)``. Single estimates are noisy and may be negative: smooth them before use.

    Raises:
        ValueError: ``big_batch <= small_batch`` (no second batch size, nothing to estimate).
    """
    if not big_batch > small_batch > 0:
        raise ValueError(f"batch sizes {small_batch} and {big_batch}: expected 0 < small < big")
    grad_sqr = (big_batch * big_sqr - small_batch * small_sqr) / (big_batch - small_batch)
    trace = (small_sqr - big_sqr) / (1.0 / small_batch - 1.0 / big_batch)
    return float(grad_sqr), float(trace / init_bsz)


def statistical_efficiency(grad_sqr: np.ndarray | float, grad_var: np.ndarray | float,
                           init_bsz: float, batch_size: np.ndarray | float) -> np.ndarray:
    """``gain / scale`` with ``scale = batch_size / init_bsz``; arrays broadcast.

    Where ``grad_sqr`` is 0 (pure noise) the gain is ``scale`` and efficiency 1.
    """
    sqr = np.asarray(grad_sqr, dtype=np.float64)
    var = np.asarray(grad_var, dtype=np.float64)
    scale = np.asarray(batch_size, dtype=np.float64) / np.asarray(init_bsz, np.float64)
    denom = var / scale + sqr
    safe = np.where(denom > 0, denom, 1.0)
    gain = np.where(denom > 0, (var + sqr) / safe, scale)
    return gain / scale


def _basis(fraction: np.ndarray) -> np.ndarray:
    x = np.asarray(fraction, dtype=np.float64)[..., None]
    return x ** np.arange(_DEGREE + 1)


@dataclass(frozen=True)
class NoiseScaleCurve:
    """Posterior of ``log phi`` as a smooth function of the training fraction ``x`` in [0, 1].

    ``log phi(x) = basis(x) @ w``; ``w | data ~ Student-t(dof, coef_mean, scale2 * coef_cov)``.
    """

    batch_size: int
    max_progress: float
    coef_mean: np.ndarray
    coef_cov: np.ndarray
    scale2: float
    dof: float
    num_epochs: int

    @classmethod
    def fit(cls, trace: GradientTrace, total_progress: float | None = None) -> NoiseScaleCurve:
        """Fit the curve to one training run's per-epoch gradient statistics.

        ``total_progress`` is the progress at the end of training where the trace stops short of
        it (a run still training): fractions are then of the whole run and the curve past the
        trace's end is a forecast. Default: the trace's last progress.
        """
        log_phi = trace.log_noise_to_signal
        keep = np.isfinite(log_phi)
        if keep.sum() < 2:
            raise InputError("fewer than 2 epochs with grad_var > 0 and grad_sqr > 0: expected a "
                             "gradient-statistics trace", trace.source or None, column="grad_var")
        max_progress = max(float(trace.progress.max()), float(total_progress or 0.0))
        x = trace.progress[keep] / max_progress
        y = log_phi[keep]
        design = _basis(x)
        prior_precision = np.eye(_DEGREE + 1) / _PRIOR_COEF_SCALE**2
        precision = prior_precision + design.T @ design
        coef_cov = np.linalg.inv(precision)
        coef_mean = coef_cov @ design.T @ y
        a_n = _PRIOR_A + len(y) / 2
        b_n = _PRIOR_B + 0.5 * (y @ y - coef_mean @ precision @ coef_mean)
        return cls(trace.batch_size, max_progress, coef_mean, coef_cov, float(b_n / a_n),
                   float(2 * a_n), int(keep.sum()))

    def log_noise(self, fraction: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        """Posterior location and scale of the mean ``log phi`` at ``fraction``; Student-t with
        :attr:`dof` degrees of freedom. Both have the shape of ``fraction``."""
        design = _basis(np.clip(fraction, 0.0, 1.0))
        loc = design @ self.coef_mean
        scale = np.sqrt(self.scale2 * np.einsum("...i,ij,...j->...", design, self.coef_cov,
                                                design))
        return loc, scale

    def noise_to_signal(self, fraction: np.ndarray | float, quantile: float | None = None
                        ) -> np.ndarray:
        """``phi`` at ``fraction``: the posterior median, or the given posterior quantile."""
        loc, scale = self.log_noise(fraction)
        if quantile is not None:
            import scipy.stats  # here: the training client imports this module, and scipy is slow

            loc = loc + scale * scipy.stats.t.ppf(quantile, self.dof)
        return np.exp(np.clip(loc, -MAX_LOG_NOISE, MAX_LOG_NOISE))

    def sample_log_noise_curves(self, fractions: np.ndarray, num_samples: int,
                                generator: np.random.Generator) -> np.ndarray:
        """Joint posterior draws of the mean ``log phi`` curve at ``fractions`` (shape ``(F,)``):
        shape ``(num_samples, F)``, each row one curve (multivariate Student-t coefficients)."""
        design = _basis(np.clip(fractions, 0.0, 1.0))
        chol = np.linalg.cholesky(self.scale2 * self.coef_cov)
        normal = generator.standard_normal((num_samples, len(self.coef_mean))) @ chol.T
        scale = np.sqrt(self.dof / generator.chisquare(self.dof, size=(num_samples, 1)))
        return (self.coef_mean + normal * scale) @ design.T

    def sample_noise_to_signal(self, fraction: float, num_samples: int,
                               generator: np.random.Generator) -> np.ndarray:
        """``num_samples`` posterior draws of ``phi`` at one ``fraction``, shape ``(num_samples,)``."""
        loc, scale = self.log_noise(float(fraction))
        draws = loc + scale * generator.standard_t(self.dof, size=num_samples)
        return np.exp(np.clip(draws, -MAX_LOG_NOISE, MAX_LOG_NOISE))


class EfficiencyModel:
    """Statistical efficiency with uncertainty, from gradient statistics of one or more runs.

    Each run (a ``validation-<B>.csv``) gives a :class:`NoiseScaleCurve`. Asked about a job trained at
    total batch ``train_bsz``, the model uses the run with the nearest batch size on a log scale.
    """

    def __init__(self, curves: dict[int, NoiseScaleCurve], init_bsz: int) -> None:
        if not curves:
            raise InputError("no gradient-statistics traces: expected at least one")
        self.curves = dict(sorted(curves.items()))
        smallest = min(self.curves)
        # Efficiency is progress per example relative to init_bsz: it lies in (0, 1] for batches
        # of at least init_bsz, so init_bsz cannot exceed the smallest batch that was traced.
        if isinstance(init_bsz, bool) or not isinstance(init_bsz, int | np.integer) or not (
                1 <= init_bsz <= smallest):
            raise InputError(f"initial batch size (init_bsz) {init_bsz!r}: expected an integer "
                             f"in [1, {smallest}] (the smallest traced batch size)")
        self.init_bsz = int(init_bsz)

    @classmethod
    def fit(cls, traces: dict[int, GradientTrace], init_bsz: int | None = None
            ) -> EfficiencyModel:
        """Fit one curve per trace; ``init_bsz`` defaults to the smallest traced batch size."""
        curves = {b: NoiseScaleCurve.fit(t) for b, t in traces.items()}
        return cls(curves, init_bsz if init_bsz is not None else min(traces, default=1))

    def curve(self, train_bsz: int | None = None) -> NoiseScaleCurve:
        """The curve measured at the batch size nearest ``train_bsz`` (default: the initial one)."""
        target = np.log(train_bsz or self.init_bsz)
        return min(self.curves.values(), key=lambda c: abs(np.log(c.batch_size) - target))

    def efficiency(self, batch_size: np.ndarray | float, fraction: np.ndarray | float,
                   quantile: float | None = None, train_bsz: int | None = None) -> np.ndarray:
        """Efficiency at ``batch_size`` when a ``fraction`` of training is done; the posterior
        median, or a quantile (efficiency is monotone in ``phi`` so quantiles carry over; for
        ``batch_size < init_bsz`` the ordering flips and ``1 - quantile`` is used)."""
        curve = self.curve(train_bsz)
        batch = np.asarray(batch_size, dtype=np.float64)
        if quantile is None:
            return efficiency_from_noise(curve.noise_to_signal(fraction), self.init_bsz, batch)
        upper = efficiency_from_noise(curve.noise_to_signal(fraction, quantile), self.init_bsz,
                                      batch)
        lower = efficiency_from_noise(curve.noise_to_signal(fraction, 1 - quantile),
                                      self.init_bsz, batch)
        return np.where(batch >= self.init_bsz, upper, lower)

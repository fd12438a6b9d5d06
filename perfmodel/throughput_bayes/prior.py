"""Priors of the step-time parameters (:class:`StepTimePrior`): a default statement of scale
from the profile itself, or a population prior learned from other models' fits; ``gamma`` on the
log-odds of its position in its bounds (:func:`gamma_logit`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pyro.distributions as dist
import scipy.stats
import torch

from perfmodel.profiles import StepTimeProfile
from perfmodel.throughput import (
    GAMMA_BOUNDS,
    PARAM_NAMES,
    SHIFT_NAMES,
    ThroughputParams,
    configuration_class,
    predict_step_time,
)

#: Multiples of the median compute time at which each positive parameter's prior is centred, and
#: the prior's log-scale spread; wide because these vary by orders of magnitude across models.
_PRIOR_CENTRE = {"alpha_c": 0.5, "alpha_n": 1.0, "beta_n": 0.05, "alpha_r": 0.3, "beta_r": 0.02}
_PRIOR_SPREAD = {"alpha_c": 1.5, "beta_c": 1.5, "alpha_n": 2.0, "beta_n": 2.0, "alpha_r": 2.0,
                 "beta_r": 2.0}
#: The step-time noise ratio sites of the multi-GPU classes and the class each one scales.
NOISE_CLASSES = {"ratio_within": "within", "ratio_across": "across"}
#: Log-scale spread of the default prior on how much more a multi-GPU class scatters than one GPU.
_RATIO_PRIOR_SCALE = 0.7
#: Default prior spread of the multi-GPU compute shifts (sites :data:`SHIFT_NAMES`, log factors):
#: some tens of percent either way (the shipped profiles' medians lie well inside it).
_SHIFT_PRIOR_SCALE = 0.2


@dataclass(frozen=True)
class StepTimePrior:
    """Prior locations and scales for the six positive parameters (log seconds), for the
    multi-GPU compute shifts (:data:`SHIFT_NAMES`, log factors) and optionally for ``gamma``
    (``gamma_loc``, ``gamma_scale``: on :func:`gamma_logit`; None keeps the uniform prior on
    :data:`~perfmodel.throughput.GAMMA_BOUNDS`).

    ``df`` None: log-normal / normal / logit-normal priors (the default prior, a statement of
    scale). ``df`` a number: Student-t with ``df`` degrees of freedom in the same coordinates
    (a population prior from few reference models, :meth:`from_population`).
    """

    loc: dict[str, float]
    scale: dict[str, float]
    shift_loc: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SHIFT_NAMES, 0.0))
    shift_scale: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(SHIFT_NAMES, _SHIFT_PRIOR_SCALE))
    gamma_loc: float | None = None
    gamma_scale: float | None = None
    df: float | None = None
    #: Prior of the step-time noise scale of each multi-GPU class (:data:`NOISE_CLASSES` keys):
    #: location and scale of its log (log of log seconds), Student-t with ``df`` where that is
    #: set; None keeps the default, a ratio to the 1-GPU noise scale (see :meth:`ratio_site`).
    noise_loc: dict[str, float] | None = None
    noise_scale: dict[str, float] | None = None

    @classmethod
    def for_profile(cls, profile: StepTimeProfile) -> StepTimePrior:
        t_c = float(np.median(profile.compute_time))
        m = float(np.median(profile.local_bsz))
        loc = {name: math.log(t_c * c) for name, c in _PRIOR_CENTRE.items()}
        loc["beta_c"] = math.log(0.5 * t_c / m)
        return cls(loc, dict(_PRIOR_SPREAD))

    def site(self, name: str) -> dist.TorchDistribution:
        """The prior of parameter ``name`` (one of :data:`PARAM_NAMES` or :data:`SHIFT_NAMES`) as a
        Pyro distribution in float64; ``gamma`` without a population prior is uniform."""
        f64 = torch.float64
        if name == "gamma" and self.gamma_loc is None:
            return dist.Uniform(torch.tensor(GAMMA_BOUNDS[0], dtype=f64),
                                torch.tensor(GAMMA_BOUNDS[1], dtype=f64))
        loc, scale = self._location(name)
        base: dist.TorchDistribution = (
            dist.Normal(torch.tensor(loc, dtype=f64), torch.tensor(scale, dtype=f64))
            if self.df is None else
            dist.StudentT(torch.tensor(self.df, dtype=f64), torch.tensor(loc, dtype=f64),
                          torch.tensor(scale, dtype=f64)))
        if name == "gamma":
            return _GammaLogitPrior(base)
        if name in SHIFT_NAMES:
            return base
        return dist.TransformedDistribution(base, [dist.transforms.ExpTransform()])

    def _location(self, name: str) -> tuple[float, float]:
        """Location and scale of parameter ``name``'s prior in its coordinate (log seconds, a
        log factor for a shift, :func:`gamma_logit` for ``gamma`` with a population prior)."""
        if name == "gamma":
            assert self.gamma_loc is not None and self.gamma_scale is not None
            return self.gamma_loc, self.gamma_scale
        if name in SHIFT_NAMES:
            return self.shift_loc[name], self.shift_scale[name]
        return self.loc[name], self.scale[name]

    def quantiles(self, params: ThroughputParams) -> dict[str, float]:
        """Where ``params`` lies in this prior: the prior's distribution function at each of its
        seven parameters (:data:`~perfmodel.throughput.PARAM_NAMES`, keys in that order), each
        in ``[0, 1]``.

        Why: a cold start's predictive is only as good as the place the job's own parameters
        take in the prior of the ones its data cannot see (the network terms and ``gamma`` of a
        job measured on one GPU). A value near 0 or 1 is a parameter the prior calls unlikely
        (its intervals will miss), one near 0.5 a parameter it could have pinned more tightly
        (its intervals will be wider than the miss). Positive parameters are read in log
        seconds, ``gamma`` on :func:`gamma_logit` (linearly on its bounds under the uniform
        prior); a parameter at 0 (a term the fit switched off) lies at the bottom, 0.
        """
        values = params.as_dict()
        out: dict[str, float] = {}
        for name in PARAM_NAMES:
            value = float(values[name])
            if name == "gamma" and self.gamma_loc is None:
                low, high = GAMMA_BOUNDS
                out[name] = min(max((value - low) / (high - low), 0.0), 1.0)
                continue
            if name != "gamma" and value <= 0:
                out[name] = 0.0
                continue
            loc, scale = self._location(name)
            x = gamma_logit(value) if name == "gamma" else math.log(value)
            z = (x - loc) / scale
            out[name] = float(scipy.stats.norm.cdf(z) if self.df is None
                              else scipy.stats.t.cdf(z, self.df))
        return out

    def ratio_site(self, name: str, sigma_step: torch.Tensor) -> dist.TorchDistribution:
        """The prior of noise ratio ``name`` (:data:`NOISE_CLASSES`) given the 1-GPU step noise
        ``sigma_step`` (shape ``(...)``): by default log-normal around 1 (spread
        :data:`_RATIO_PRIOR_SCALE`); with a learned noise prior (:attr:`noise_loc`), the class's
        noise scale ``sigma_step * ratio`` follows it, i.e. ``log ratio`` is centred on
        ``noise_loc - log sigma_step``."""
        f64 = torch.float64
        if self.noise_loc is None or self.noise_scale is None:
            return dist.LogNormal(torch.tensor(0.0, dtype=f64),
                                  torch.tensor(_RATIO_PRIOR_SCALE, dtype=f64))
        key = NOISE_CLASSES[name]
        loc = self.noise_loc[key] - torch.log(sigma_step)
        scale = torch.full_like(loc, self.noise_scale[key])
        base: dist.TorchDistribution = (
            dist.Normal(loc, scale) if self.df is None else
            dist.StudentT(torch.full_like(loc, self.df), loc, scale))
        return dist.TransformedDistribution(base, [dist.transforms.ExpTransform()])

    def with_fleet_noise(self, reference: Sequence[tuple[StepTimeProfile, ThroughputParams]]
                         ) -> StepTimePrior:
        """This prior with the noise scale of each multi-GPU class learned from other models
        (:func:`step_noise`: the robust scatter of their measured step times around their fits),
        as the predictive of a new member of a normal population of log noise scales (Student-t,
        ``n - 1`` degrees of freedom, spread ``sd * sqrt(1 + 1/n)``) — the prior's ``df`` where
        it has one (a population prior of the same references), else that.

        Why: a fit on one GPU sees no multi-GPU row, so the default ratio prior multiplies the
        1-GPU scatter of a few rows by a factor 0.3 to 3; the scatter of multi-node steps
        (network jitter shared by every model on the cluster) varies much less across models than
        the 1-GPU scatter does.
        """
        rows = [step_noise(p, params) for p, params in reference]
        loc, scale = {}, {}
        for key in NOISE_CLASSES.values():
            logs = np.log([row[key] for row in rows if key in row])
            if len(logs) < 2:
                return self
            loc[key] = float(logs.mean())
            scale[key] = float(logs.std(ddof=1)) * math.sqrt(1 + 1 / len(logs))
        df = self.df if self.df is not None else float(len(rows) - 1)
        return replace(self, noise_loc=loc, noise_scale=scale, df=df)

    @classmethod
    def from_population(cls, profile: StepTimeProfile,
                        reference: Sequence[tuple[StepTimeProfile, ThroughputParams]],
                        min_scale: float = 0.5, robust_gamma: bool = False) -> StepTimePrior:
        """A prior for ``profile`` learned from other models' fits (empirical Bayes).

        Each reference parameter is expressed relative to its model's median compute time (and
        ``beta_c`` relative to compute time per example), so models of very different speed
        share one scale; ``gamma`` on :func:`gamma_logit`. The prior of each is the predictive
        distribution of a new member of a normal population whose mean and variance are
        estimated from the ``n`` references: Student-t with ``n - 1`` degrees of freedom,
        centred on the reference mean, scale the references' standard deviation times
        ``sqrt(1 + 1/n)`` (never below ``min_scale``). A job measured on one placement then
        borrows what the fleet knows about networks and their overlap with compute instead of
        facing the wide default prior.

        Why Student-t and gamma: with the normal predictive (which takes the references' spread
        as known) and ``gamma`` left uniform on [1, 10], the 90% intervals of cold starts of the
        shipped models (1-GPU rows only) were too wide for five models (the uniform ``gamma``
        alone spans a factor 2 in the step time of a configuration whose all-reduce takes as
        long as its compute) and far too narrow for ncf (a reference spread taken as known from
        five models is too sure of itself). Measured coverage: docs/results/bench_perfmodel.md.

        ``robust_gamma``: ``gamma``'s location and spread are the references' median and median
        absolute deviation (over 0.6745) instead of mean and standard deviation. A reference
        whose fit lies at a bound of ``gamma`` (no overlap, ``gamma = 1``) has an infinite
        log-odds, clipped by :func:`gamma_logit`: its mean and standard deviation are then set
        by the clip, not by the data, while median and deviation from it are not.
        """
        if len(reference) < 2:
            raise ValueError("a population prior needs at least two reference models")
        def log_ratios(p: StepTimeProfile, params: ThroughputParams) -> dict[str, float]:
            t_c = float(np.median(p.compute_time))
            per_example = t_c / float(np.median(p.local_bsz))
            values = params.as_dict()
            ratios = {n: math.log(max(values[n], 1e-12) / t_c) for n in _PRIOR_CENTRE}
            ratios["beta_c"] = math.log(max(values["beta_c"], 1e-12) / per_example)
            ratios["gamma"] = gamma_logit(values["gamma"])
            return ratios
        table = [log_ratios(p, params) for p, params in reference]
        target = cls.for_profile(profile)
        t_c = float(np.median(profile.compute_time))
        per_example = t_c / float(np.median(profile.local_bsz))
        inflation = math.sqrt(1 + 1 / len(table))
        loc, scale = {}, {}
        for name in (*target.loc, "gamma"):
            values = np.array([row[name] for row in table])
            base = 0.0 if name == "gamma" else math.log(per_example if name == "beta_c" else t_c)
            centre, spread = float(values.mean()), float(values.std(ddof=1))
            if name == "gamma" and robust_gamma:
                centre = float(np.median(values))
                spread = float(np.median(np.abs(values - centre))) / 0.6745
            loc[name] = base + centre
            scale[name] = max(spread * inflation, min_scale)
        gamma_loc, gamma_scale = loc.pop("gamma"), scale.pop("gamma")
        # Compute shifts as measured in the references (a reference without rows of a class, or
        # without one GPU at the same micro-batch, says nothing of it); the spread of a new
        # member of the population, as above, but no floor: these are measured, not fitted.
        shifts = [compute_shifts(p) for p, _ in reference]
        shift_loc, shift_scale = dict(target.shift_loc), dict(target.shift_scale)
        for name in SHIFT_NAMES:
            measured = np.array([row[name] for row in shifts if name in row])
            if len(measured) >= 2:
                shift_loc[name] = float(measured.mean())
                shift_scale[name] = float(measured.std(ddof=1)) * math.sqrt(1 + 1 / len(measured))
        return cls(loc, scale, shift_loc, shift_scale, gamma_loc, gamma_scale,
                   df=float(len(table) - 1))


class _GammaLogitPrior(dist.TransformedDistribution):
    """``gamma`` whose log-odds of its position on :data:`GAMMA_BOUNDS` follow ``base``; its
    support is the interval, so Pyro maps it to the same unconstrained coordinate as the
    uniform prior's."""

    support = dist.constraints.interval(*GAMMA_BOUNDS)

    def __init__(self, base: dist.TorchDistribution) -> None:
        low, high = GAMMA_BOUNDS
        super().__init__(base, [dist.transforms.SigmoidTransform(),
                                dist.transforms.AffineTransform(low, high - low)])

    def expand(self, batch_shape: torch.Size | tuple[int, ...], _instance: object = None
               ) -> _GammaLogitPrior:
        """The same prior over a batch of shape ``batch_shape`` (for a plate of draws)."""
        return _GammaLogitPrior(self.base_dist.expand(batch_shape))


def gamma_logit(gamma: float) -> float:
    """``gamma`` on :data:`~perfmodel.throughput.GAMMA_BOUNDS` as the log-odds of its position
    there, the coordinate of a population prior on ``gamma``; bounds clipped 1e-6 inside."""
    low, high = GAMMA_BOUNDS
    share = min(max((gamma - low) / (high - low), 1e-6), 1 - 1e-6)
    return math.log(share / (1 - share))


def compute_shifts(profile: StepTimeProfile) -> dict[str, float]:
    """Median log ratio of each multi-GPU class's compute time to the mean 1-GPU compute time at
    the same micro-batch size, by :data:`SHIFT_NAMES` name; classes without such rows are left
    out."""
    classes = configuration_class(profile.num_nodes, profile.num_replicas)
    alone = classes == 0
    shifts = {}
    for index, name in enumerate(SHIFT_NAMES, start=1):
        rows = (classes == index) & np.isin(profile.local_bsz, profile.local_bsz[alone])
        if not rows.any():
            continue
        single = {m: float(np.mean(profile.compute_time[alone & (profile.local_bsz == m)]))
                  for m in np.unique(profile.local_bsz[rows])}
        reference = np.array([single[m] for m in profile.local_bsz[rows]])
        shifts[name] = float(np.median(np.log(profile.compute_time[rows] / reference)))
    return shifts



def step_noise(profile: StepTimeProfile, params: ThroughputParams) -> dict[str, float]:
    """Robust scatter of ``profile``'s measured step times around ``params``' prediction per
    multi-GPU class (``"within"``, ``"across"``; classes without rows left out): the median
    absolute log residual over 0.6745 (the standard deviation of normal residuals, undisturbed by
    the odd straggler), log seconds."""
    predicted = predict_step_time(params, profile.num_nodes, profile.num_replicas,
                                  profile.local_bsz, profile.accum_steps)
    residual = np.log(profile.step_time / predicted)
    classes = configuration_class(profile.num_nodes, profile.num_replicas)
    out = {}
    for index, key in ((1, "within"), (2, "across")):
        rows = residual[classes == index]
        if len(rows):
            out[key] = float(np.median(np.abs(rows - np.median(rows))) / 0.6745)
    return out

"""Bayesian fit of the step-time model in Pyro, and its predictive distribution.

The model (a plain function of data, :func:`step_time_model`):

* the seven step-time parameters get weakly informative priors on the scale of the measured compute
  time (log-normal for the positive ones, uniform on [1, 10] for ``gamma``): a parameter the data
  cannot inform stays as wide as its prior, so predictions for configurations unlike any measured
  widen instead of collapsing;
* measured compute times and step times are log-Student-t around the model's prediction with
  independent noise: heavy tails (degrees of freedom ``nu``, learned) keep the odd straggler from
  widening every interval. Step-time noise is ``sigma_step`` on one GPU, times a learned ratio
  within a node (``ratio_within``) and across nodes (``ratio_across``), because multi-node steps
  scatter more; a class never measured keeps its ratio's prior, so its intervals stay honest;
* optionally (``placement_effects=True``) rows are log-normal with a deviation shared by every row
  of one placement (``tau``) on top, integrated out in closed form (rows of a placement are jointly
  normal in log space with compound-symmetric covariance), so inference stays low-dimensional.

Inference (:func:`fit_throughput_posterior`) is SVI in the unconstrained space with a full-rank
guide whose whitened coordinates are Student-t (tails no lighter than the posterior's) and each
pass through a monotone spline (skewed marginals), in coordinates where the all-reduce terms'
trade-off is linear (:class:`NetworkCoordinates`), started at the Laplace approximation around
the posterior mode; the guide's affine part is then adapted as an importance proposal to the
posterior's PSIS-weighted moments (:func:`adapt_proposal`), checked by Pareto-smoothed importance
sampling (PSIS k-hat) on fresh draws, and its draws resampled by their PSIS weights;
``method="nuts"`` runs Pyro's NUTS instead, to check SVI.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.distributions.transforms import Spline
from pyro.infer import MCMC, NUTS
from pyro.infer.autoguide.initialization import init_to_value
from pyro.infer.mcmc.util import initialize_model

from perfmodel.convergence import Convergence, FitMonitor
from perfmodel.errors import UnreliableFitWarning
from perfmodel.profiles import StepTimeProfile
from perfmodel.saved_fits import FitCache, fit_key, quiet_arviz
from perfmodel.throughput import (
    GAMMA_BOUNDS,
    PARAM_NAMES,
    PARAM_UNITS,
    SHIFT_NAMES,
    ArrayT,
    ThroughputParams,
    configuration_class,
    fit_throughput,
    identifiable,
    profile_tensors,
    single_thread,
    step_time_terms,
)

if TYPE_CHECKING:
    from arviz import InferenceData

NOISE_NAMES = ("sigma_compute", "tau_compute", "sigma_step", "ratio_within", "ratio_across",
               "tau_step", "nu")
#: Units of the noise sites: the scales are standard deviations of log seconds (unitless, roughly
#: relative errors), the ratios and degrees of freedom are plain numbers.
NOISE_UNITS = {"sigma_compute": "log s", "tau_compute": "log s", "sigma_step": "log s",
               "ratio_within": "1", "ratio_across": "1", "tau_step": "log s", "nu": "1"}
#: Sites of the placement-effect likelihood only, and of the Student-t likelihood only.
_PLACEMENT_SITES = ("tau_compute", "tau_step")
_STUDENT_SITES = ("nu",)
#: Multiples of the median compute time at which each positive parameter's prior is centred, and
#: the prior's log-scale spread; wide because these vary by orders of magnitude across models.
_PRIOR_CENTRE = {"alpha_c": 0.5, "alpha_n": 1.0, "beta_n": 0.05, "alpha_r": 0.3, "beta_r": 0.02}
_PRIOR_SPREAD = {"alpha_c": 1.5, "beta_c": 1.5, "alpha_n": 2.0, "beta_n": 2.0, "alpha_r": 2.0,
                 "beta_r": 2.0}
_NOISE_PRIOR_SCALE = 0.3
#: Log-scale spread of the prior on how much more a multi-GPU class scatters than one GPU.
_RATIO_PRIOR_SCALE = 0.7
#: Default prior spread of the multi-GPU compute shifts (sites :data:`SHIFT_NAMES`, log factors):
#: some tens of percent either way (the shipped profiles' medians lie well inside it).
_SHIFT_PRIOR_SCALE = 0.2
#: Above this PSIS k-hat an SVI guide is not a usable posterior (Vehtari et al., 2015-2024).
PARETO_K_USABLE = 0.7
#: NUTS draws are trusted with at least this bulk ESS and at most this R-hat (Vehtari et al. 2021:
#: ESS above 100 per chain, R-hat near 1; 1.05 rather than 1.01 because one chain is run).
ESS_USABLE = 100
R_HAT_USABLE = 1.05
#: NUTS warm-up steps and draws of the fallback (one chain): enough for ESS_USABLE when it mixes,
#: and a few minutes at most on the largest shipped profile.
FALLBACK_WARMUP = 300
FALLBACK_SAMPLES = 400


@dataclass(frozen=True)
class StepTimeData:
    """A profile as tensors for the Pyro model; shapes ``(N,)``, ``group`` indexes placements."""

    nodes: torch.Tensor
    replicas: torch.Tensor
    local_bsz: torch.Tensor
    log_compute: torch.Tensor
    log_step: torch.Tensor
    group: torch.Tensor
    num_groups: int
    placements: tuple[str, ...]
    placement_effects: bool = True
    #: Index into :data:`CONFIGURATION_CLASSES` per row, shape ``(N,)``.
    config_class: torch.Tensor | None = None

    @classmethod
    def from_profile(cls, profile: StepTimeProfile, placement_effects: bool = True
                     ) -> StepTimeData:
        tensors = profile_tensors(profile)
        labels, group = np.unique(profile.placement.astype(str), return_inverse=True)
        classes = configuration_class(profile.num_nodes, profile.num_replicas)
        return cls(tensors["nodes"], tensors["replicas"], tensors["m"], tensors["log_tc"],
                   tensors["log_to"], torch.as_tensor(group), len(labels), tuple(labels),
                   placement_effects, torch.as_tensor(classes))


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
        if name == "gamma":
            loc, scale = self.gamma_loc, self.gamma_scale
        elif name in SHIFT_NAMES:
            loc, scale = self.shift_loc[name], self.shift_scale[name]
        else:
            loc, scale = self.loc[name], self.scale[name]
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

    @classmethod
    def from_population(cls, profile: StepTimeProfile,
                        reference: Sequence[tuple[StepTimeProfile, ThroughputParams]],
                        min_scale: float = 0.5) -> StepTimePrior:
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
            loc[name] = base + float(values.mean())
            scale[name] = max(float(values.std(ddof=1)) * inflation, min_scale)
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


def shifted_step_time_terms(theta: torch.Tensor, shift_within: torch.Tensor,
                            shift_across: torch.Tensor, num_nodes: torch.Tensor,
                            num_replicas: torch.Tensor, local_bsz: torch.Tensor
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(T_c, T_o)`` as :func:`~perfmodel.throughput.step_time_terms`, shape ``(..., N)``, with
    each multi-GPU row's compute time scaled by its class's factor ``exp(shift)``; ``theta`` is
    ``(..., 7)`` and the shifts ``(...)`` per draw, the configuration arrays ``(N,)``."""
    draws = torch.cat([theta, shift_within[..., None], shift_across[..., None]], dim=-1)
    return step_time_terms(draws[..., None, :], num_nodes, num_replicas, local_bsz)


def grouped_normal_log_prob(residual: torch.Tensor, group: torch.Tensor, num_groups: int,
                            sigma: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """Log density of residuals ``r`` (shape ``(..., N)``) where rows of one group share a
    ``N(0, tau^2)`` offset on top of independent ``N(0, sigma^2)`` noise; returns shape ``(...)``.
    ``sigma`` and ``tau`` broadcast against ``(..., num_groups)`` (one scale per group allowed).

    Per group of ``n`` rows the covariance is ``sigma^2 I + tau^2 11^T``, whose determinant and
    inverse have closed forms in the group's sum and sum of squares of ``r``.
    """
    batch = residual.shape[:-1]
    zeros = residual.new_zeros((*batch, num_groups))
    count = residual.new_zeros(num_groups).index_add(0, group, torch.ones_like(group,
                                                                                dtype=residual.dtype))
    total = zeros.index_add(-1, group, residual)
    squares = zeros.index_add(-1, group, residual**2)
    s2, t2 = sigma**2, tau**2
    joint = s2 + count * t2
    log_det = (count - 1) * torch.log(s2) + torch.log(joint)
    quad = (squares - t2 * total**2 / joint) / s2
    return -0.5 * (count * math.log(2 * math.pi) + log_det + quad).sum(-1)


def sample_parameters(prior: StepTimePrior) -> torch.Tensor:
    """Sample the seven step-time parameters; returns ``theta`` of shape ``(..., 7)``."""
    values = [pyro.sample(name, prior.site(name)) for name in PARAM_NAMES]
    return torch.stack(torch.broadcast_tensors(*values), dim=-1)


def step_noise_scale(sigma_step: ArrayT, ratio_within: ArrayT, ratio_across: ArrayT,
                     config_class: ArrayT) -> ArrayT:
    """Step-time noise scale per row, shape ``(..., N)``, from per-draw scales ``(...)`` and the
    rows' configuration classes ``(N,)``."""
    ratios = (sigma_step * 0 + 1, ratio_within, ratio_across)
    ratio = sum((config_class == i) * r[..., None] for i, r in enumerate(ratios))
    return sigma_step[..., None] * ratio


def step_time_model(data: StepTimeData, prior: StepTimePrior) -> None:
    """Pyro model of measured compute and step times (see the module docstring)."""
    theta = sample_parameters(prior)
    f64 = torch.float64
    half_normal = dist.HalfNormal(torch.tensor(_NOISE_PRIOR_SCALE, dtype=f64))
    sigma_compute = pyro.sample("sigma_compute", half_normal)
    sigma_step = pyro.sample("sigma_step", half_normal)
    ratio_prior = dist.LogNormal(torch.tensor(0.0, dtype=f64),
                                 torch.tensor(_RATIO_PRIOR_SCALE, dtype=f64))
    ratio_within = pyro.sample("ratio_within", ratio_prior)
    ratio_across = pyro.sample("ratio_across", ratio_prior)
    shift_within, shift_across = (pyro.sample(name, prior.site(name)) for name in SHIFT_NAMES)
    classes = data.config_class if data.config_class is not None else torch.zeros_like(data.group)
    scale = {"compute": sigma_compute[..., None],
             "step": step_noise_scale(sigma_step, ratio_within, ratio_across, classes)}
    t_c, t_o = shifted_step_time_terms(theta, shift_within, shift_across, data.nodes,
                                       data.replicas, data.local_bsz)
    residuals = {"compute": data.log_compute - torch.log(t_c),
                 "step": data.log_step - torch.log(t_o)}
    if data.placement_effects:
        # Rows of one placement share a class, so the group's noise scale is any row's.
        first_row = torch.zeros(data.num_groups, dtype=torch.long).index_reduce(
            0, data.group, torch.arange(len(data.group)), "amin", include_self=False)
        for series, residual in residuals.items():
            tau = pyro.sample(f"tau_{series}", half_normal)
            sigma = scale[series].expand(residual.shape)[..., first_row]
            pyro.factor(f"{series}_time", grouped_normal_log_prob(
                residual, data.group, data.num_groups, sigma, tau[..., None]))
        return
    # Gamma(2, 0.1) on the degrees of freedom (Juarez and Steel's prior): mean 20, near-normal
    # unless the data show heavy tails.
    nu = pyro.sample("nu", dist.Gamma(torch.tensor(2.0, dtype=f64), torch.tensor(0.1, dtype=f64)))
    for series, residual in residuals.items():
        likelihood = dist.StudentT(nu[..., None], torch.zeros((), dtype=f64), scale[series])
        pyro.factor(f"{series}_time", likelihood.log_prob(residual).sum(-1))


@dataclass(frozen=True)
class FitDiagnostics:
    """How the posterior was obtained and how far to trust it.

    ``method``: what produced the draws (``"svi"`` or ``"nuts"``); ``fallback_from``: the method
    first tried when its result was not trusted and NUTS replaced it (``"svi"``), else None;
    ``pareto_k``: PSIS k-hat of the SVI guide, adapted as a proposal, against the model (< 0.5
    good, < 0.7 usable; for a fallback, the k-hat that caused it; NaN where not computed);
    ``final_loss``: last ELBO loss per row; ``seconds``: wall time of the whole fit, fallback
    included. NUTS only: ``divergences`` (divergent transitions after warm-up), ``ess_bulk_min``
    (smallest bulk effective sample size over the sites) and ``r_hat_max`` (largest
    rank-normalised split R-hat; infinite where a site's draws never moved), from ArviZ. SVI
    only: ``convergence``, the optimisation's verdict (:meth:`.Convergence.as_dict`, the rule of
    :mod:`perfmodel.convergence`; None for NUTS alone).
    """

    method: str
    num_steps: int
    final_loss: float
    pareto_k: float
    seconds: float
    fallback_from: str | None = None
    divergences: int = 0
    ess_bulk_min: float = float("nan")
    r_hat_max: float = float("nan")
    convergence: dict[str, Any] | None = None

    @property
    def converged(self) -> bool:
        """Whether the SVI optimisation converged (True where there was none: NUTS alone)."""
        return self.convergence is None or Convergence.from_dict(self.convergence).converged

    @property
    def reliable(self) -> bool:
        """Whether the intervals can be trusted: an SVI guide that converged and whose k-hat is
        at most :data:`PARETO_K_USABLE` (NaN, not computed, counts as unreliable), or NUTS draws
        without divergences, with bulk ESS at least :data:`ESS_USABLE` and R-hat at most
        :data:`R_HAT_USABLE` (where computed)."""
        if self.method == "svi":
            return self.converged and self.pareto_k <= PARETO_K_USABLE
        return not (self.divergences > 0 or self.ess_bulk_min < ESS_USABLE
                    or self.r_hat_max > R_HAT_USABLE)

    @property
    def source(self) -> str:
        """One phrase naming what produced the draws, e.g. ``"nuts (fallback: SVI k-hat 1.11)"``."""
        if self.fallback_from is None:
            return self.method
        return (f"{self.method} (fallback: {self.fallback_from.upper()} PSIS k-hat "
                f"{self.pareto_k:.2f} > {PARETO_K_USABLE})")

    def warning(self, model: str) -> str | None:
        """One line saying why ``model``'s intervals are not to be trusted, or None."""
        if self.reliable:
            return None
        if self.method == "svi":
            problems = []
            if not self.pareto_k <= PARETO_K_USABLE:
                problems.append(f"PSIS k-hat {self.pareto_k:.2f} is above {PARETO_K_USABLE}: the "
                                "SVI guide fits the posterior poorly and its intervals may be too "
                                "narrow; check with --method nuts")
            if self.convergence is not None and not self.converged:
                problems.append(str(Convergence.from_dict(self.convergence).message()))
            return f"{model}: {'; '.join(problems)}"
        problems = []
        if self.divergences > 0:
            problems.append(f"{self.divergences} divergent transitions")
        if self.ess_bulk_min < ESS_USABLE:
            problems.append(f"bulk ESS {self.ess_bulk_min:.0f} < {ESS_USABLE}")
        if self.r_hat_max > R_HAT_USABLE:
            problems.append(f"R-hat {self.r_hat_max:.3f} > {R_HAT_USABLE}")
        return (f"{model}: {self.source} did not mix ({', '.join(problems)}): its intervals may "
                "be wrong")

    def as_dict(self) -> dict[str, Any]:
        """The fields and :attr:`reliable`, for JSON output."""
        return {**asdict(self), "reliable": self.reliable}


class ThroughputPosterior:
    """Posterior draws of the step-time model and its predictive distribution.

    Attributes:
        samples: dict of site name to a numpy array of shape ``(S,)``.
        theta: the step-time parameters, shape ``(S, 7)`` in ``PARAM_NAMES`` order.
        placement_effects: posterior mean log-offset of each measured placement, per series.
    """

    def __init__(self, samples: dict[str, np.ndarray], data: StepTimeData,
                 diagnostics: FitDiagnostics, point: ThroughputParams) -> None:
        self.samples = samples
        self.theta = np.stack([samples[name] for name in PARAM_NAMES], axis=-1)
        self.diagnostics = diagnostics
        self.point = point
        self.placements = data.placements
        self.placement_effects = data.placement_effects
        self._effects = self._placement_effects(data) if data.placement_effects else {
            "compute": np.zeros(data.num_groups), "step": np.zeros(data.num_groups)}

    def to_inference_data(self) -> InferenceData:
        """The draws as ArviZ InferenceData: a ``posterior`` group (one chain, ``S`` draws per
        site), with the diagnostics, the point fit and whether placement effects were modelled
        as JSON attributes (what :meth:`from_inference_data` needs besides the profile)."""
        import xarray as xr

        with quiet_arviz() as az:
            posterior = xr.Dataset({name: (("chain", "draw"), np.asarray(draws)[None])
                                    for name, draws in self.samples.items()})
            idata = az.InferenceData(posterior=posterior)
        idata.attrs.update({
            "diagnostics": json.dumps(asdict(self.diagnostics)),
            "point_fit": json.dumps(self.point.as_dict()),
            "placement_effects": int(self.placement_effects),
        })
        return idata

    @classmethod
    def from_inference_data(cls, idata: InferenceData, profile: StepTimeProfile
                            ) -> ThroughputPosterior:
        """A posterior saved by :meth:`to_inference_data`, for the profile it was fitted to."""
        samples = {str(name): np.asarray(values).reshape(-1)
                   for name, values in idata["posterior"].data_vars.items()}
        diagnostics = FitDiagnostics(**json.loads(idata.attrs["diagnostics"]))
        point = ThroughputParams(**json.loads(idata.attrs["point_fit"]))
        data = StepTimeData.from_profile(profile, bool(int(idata.attrs["placement_effects"])))
        return cls(samples, data, diagnostics, point)

    def _placement_effects(self, data: StepTimeData) -> dict[str, np.ndarray]:
        # Posterior of a placement's offset u given its rows: normal with mean
        # tau^2 * sum(r) / (sigma^2 + n tau^2); averaged over draws.
        t_c, t_o = (torch.as_tensor(t) for t in self.step_time_terms(
            data.nodes.numpy(), data.replicas.numpy(), data.local_bsz.numpy()))
        count = np.bincount(data.group.numpy(), minlength=data.num_groups)
        effects = {}
        for series, observed, predicted in (("compute", data.log_compute, t_c),
                                            ("step", data.log_step, t_o)):
            residual = (observed - torch.log(predicted)).numpy()            # (S, N)
            total = np.zeros((residual.shape[0], data.num_groups))
            np.add.at(total.T, data.group.numpy(), residual.T)
            classes = np.zeros(data.num_groups, dtype=np.int64)
            classes[data.group.numpy()] = (data.config_class.numpy() if data.config_class is not None
                                           else 0)
            s2 = self.noise_scale(series, classes) ** 2
            t2 = self._noise(f"tau_{series}")[:, None] ** 2
            effects[series] = (t2 * total / (s2 + count * t2)).mean(axis=0)
        return effects

    def noise_scale(self, series: str, classes: np.ndarray) -> np.ndarray:
        """Draws of the noise scale of ``series`` (``"compute"`` or ``"step"``) for rows of the
        given configuration classes ``(N,)``; shape ``(S, N)``."""
        if series == "compute":
            return np.broadcast_to(self.samples["sigma_compute"][:, None],
                                   (self.num_samples, len(classes)))
        return step_noise_scale(self.samples["sigma_step"], self._noise("ratio_within", 1.0),
                                self._noise("ratio_across", 1.0), np.asarray(classes))

    def _noise(self, name: str, default: float = 0.0) -> np.ndarray:
        """Draws of a noise site, shape ``(S,)``; ``default`` for a site left out of the model."""
        return self.samples.get(name, np.full(self.theta.shape[0], default))

    @property
    def draws(self) -> np.ndarray:
        """The step-time parameters and the multi-GPU compute shifts, shape ``(S, 9)`` in
        :data:`~perfmodel.throughput.DRAW_NAMES` order (shifts 0 for a fit saved without them):
        what :func:`~perfmodel.throughput.step_time_terms` and
        :class:`~perfmodel.goodput.GoodputModel` take."""
        return np.column_stack([self.theta, *(self._noise(name) for name in SHIFT_NAMES)])

    def step_time_terms(self, num_nodes: np.ndarray, num_replicas: np.ndarray,
                        local_bsz: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Draws of ``(T_c, T_o)`` in seconds, each ``(S, N)``, for configurations ``(N,)``, the
        multi-GPU compute shifts included."""
        nodes, replicas, m = (np.asarray(a, np.float64) for a in (num_nodes, num_replicas,
                                                                   local_bsz))
        return step_time_terms(self.draws[:, None, :], nodes, replicas, m)

    @property
    def num_samples(self) -> int:
        return self.theta.shape[0]

    def parameter_summary(self, probability: float = 0.9) -> list[dict[str, float | str]]:
        """Posterior mean and central credible interval of every parameter, with its unit (see
        :data:`~perfmodel.throughput.PARAM_UNITS`, :data:`NOISE_UNITS`), one dict per row."""
        tail = (1 - probability) / 2
        level = f"{100 * probability:g}"  # interval columns are named lower_90/upper_90
        rows: list[dict[str, float | str]] = []
        for name in (*PARAM_NAMES, *SHIFT_NAMES, *NOISE_NAMES):
            if name not in self.samples:
                continue
            draws = self.samples[name]
            rows.append({
                "parameter": name,
                "unit": {**PARAM_UNITS, **NOISE_UNITS}.get(name, "1"),
                "point_fit": getattr(self.point, name, float("nan")),
                "mean": float(draws.mean()),
                f"lower_{level}": float(np.quantile(draws, tail)),
                f"upper_{level}": float(np.quantile(draws, 1 - tail)),
            })
        return rows

    def log_step_time_draws(self, num_nodes: np.ndarray, num_replicas: np.ndarray,
                            local_bsz: np.ndarray, accum_steps: np.ndarray | int = 0,
                            placement: Sequence[str] | None = None, seed: int = 0) -> np.ndarray:
        """Posterior predictive draws of log seconds per iteration, shape ``(S, N)``.

        A placement that was measured keeps its learned offset; any other configuration draws a
        fresh placement offset (``tau``) besides the noise (``sigma``) — the honest uncertainty of
        a configuration never measured.
        """
        nodes, replicas, m, s = np.broadcast_arrays(*(np.atleast_1d(np.asarray(a, np.float64))
                                                      for a in (num_nodes, num_replicas,
                                                                local_bsz, accum_steps)))
        classes = configuration_class(nodes, replicas)
        t_c, t_o = self.step_time_terms(nodes, replicas, m)
        log_t = np.log(s * t_c + t_o)
        rng = np.random.default_rng(seed)
        sigma = self.noise_scale("step", classes)
        tau = self._noise("tau_step")[:, None]
        offset = tau * rng.standard_normal(log_t.shape)
        if placement is not None:
            index = {label: i for i, label in enumerate(self.placements)}
            for j, label in enumerate(np.broadcast_to(np.asarray(placement, dtype=object),
                                                      nodes.shape)):
                if label in index:
                    offset[:, j] = self._effects["step"][index[label]]
        if "nu" in self.samples:
            standard = rng.standard_t(self.samples["nu"][:, None], log_t.shape)
        else:
            standard = rng.standard_normal(log_t.shape)
        return log_t + offset + sigma * standard

    def predict_step_time(self, num_nodes: np.ndarray, num_replicas: np.ndarray,
                          local_bsz: np.ndarray, accum_steps: np.ndarray | int = 0,
                          quantiles: Sequence[float] = (0.05, 0.5, 0.95),
                          placement: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Predictive step time in seconds: ``mean``, ``median`` (the point prediction) and
        ``q<quantile>`` entries, each of shape ``(N,)``."""
        draws = self.log_step_time_draws(num_nodes, num_replicas, local_bsz, accum_steps,
                                         placement)
        result = {"mean": np.exp(draws).mean(axis=0), "median": np.exp(np.median(draws, axis=0))}
        for q in quantiles:
            result[f"q{q:g}"] = np.exp(np.quantile(draws, q, axis=0))
        return result

    def predict_throughput(self, num_nodes: np.ndarray, num_replicas: np.ndarray,
                           local_bsz: np.ndarray, accum_steps: np.ndarray | int = 0,
                           quantiles: Sequence[float] = (0.05, 0.5, 0.95),
                           placement: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Predictive throughput in examples/s, as :meth:`predict_step_time` (quantile ``q`` of
        throughput is ``K m (s+1)`` over quantile ``1-q`` of step time)."""
        draws = self.log_step_time_draws(num_nodes, num_replicas, local_bsz, accum_steps,
                                         placement)
        work = np.log(np.asarray(num_replicas) * np.asarray(local_bsz)
                      * (np.asarray(accum_steps) + 1.0))
        log_tp = work - draws
        result = {"mean": np.exp(log_tp).mean(axis=0), "median": np.exp(np.median(log_tp, 0))}
        for q in quantiles:
            result[f"q{q:g}"] = np.exp(np.quantile(log_tp, q, axis=0))
        return result


def _initial_values(profile: StepTimeProfile, point: ThroughputParams, prior: StepTimePrior
                    ) -> dict[str, torch.Tensor]:
    # Start from the point fit where the data inform a parameter, from the prior median where
    # they cannot (the point fit pins those at its lower bound, which a log-normal prior puts
    # far in its tail).
    start = point.as_dict()
    ok = identifiable(profile)
    uninformed = set()
    if not ok["across"]:
        uninformed |= {"alpha_n", "beta_n"}
    if not ok["within"]:
        uninformed |= {"alpha_r", "beta_r"}
    if not ok["retrogression"]:
        uninformed |= {"beta_n", "beta_r"}
    for name in uninformed:
        start[name] = math.exp(prior.loc[name])
    values = {name: torch.tensor(max(v, 1e-6) if name != "gamma" else
                                 min(max(v, GAMMA_BOUNDS[0] + 0.05), GAMMA_BOUNDS[1] - 0.05),
                                 dtype=torch.float64)
              for name, v in start.items()}
    for name in NOISE_NAMES:  # sites the model leaves out are ignored
        values[name] = torch.tensor(0.1 if name.startswith(("sigma", "tau")) else
                                    10.0 if name == "nu" else 1.0, dtype=torch.float64)
    for name in SHIFT_NAMES:
        values[name] = torch.tensor(prior.shift_loc[name], dtype=torch.float64)
    return values


#: Bins and half-width (in scale units of the guide's base) of the guide's per-coordinate monotone
#: spline; outside the half-width the spline is the identity. Wide, because a posterior piled
#: against a bound of its prior (``gamma`` near 1, a slope near 0) has in unconstrained space an
#: exponential tail that the spline must bend far out (on yolov3 the heaviest importance weights
#: lay several scales below the mode, and half-width 8 gave lower k-hat than 4; measured
#: figures: docs/results/bench_perfmodel.md).
GUIDE_SPLINE_BINS = 8
GUIDE_SPLINE_BOUND = 8.0
#: Degrees of freedom of the guide's base distribution (Student-t per whitened coordinate): an
#: importance proposal must have tails no lighter than the target's, and those exponential tails
#: outgrow any Gaussian's (a Gaussian base left yolov3's and imagenet's k-hat near or above 0.7).
GUIDE_BASE_DF = 10.0


def guide_base(dim: int) -> dist.Distribution:
    """The guide's base: independent Student-t coordinates with :data:`GUIDE_BASE_DF` degrees of
    freedom, location 0 and scale 1, as one event of shape ``(dim,)``."""
    zeros = torch.zeros(dim, dtype=torch.float64)
    return dist.StudentT(torch.full((dim,), GUIDE_BASE_DF, dtype=torch.float64), zeros,
                         zeros + 1).to_event(1)


def identity_spline(dim: int) -> Spline:
    """Pyro's elementwise monotone rational-quadratic spline on ``dim`` coordinates, initialised
    to the identity (equal bins, unit slopes), in float64."""
    spline = Spline(dim, count_bins=GUIDE_SPLINE_BINS, bound=GUIDE_SPLINE_BOUND).double()
    with torch.no_grad():
        for parameter in spline.parameters():
            parameter.zero_()
        # Pyro adds a minimum slope of 1e-3 to softplus(unnormalised slope).
        spline.unnormalized_derivatives.fill_(math.log(math.expm1(1 - 1e-3)))
    return spline


@dataclass(frozen=True)
class NetworkCoordinates:
    """The guide's coordinates for the all-reduce time pairs: for ``(alpha, beta)`` of one link
    (``alpha_n, beta_n`` across nodes, ``alpha_r, beta_r`` within one), with all-reduce time
    ``alpha + beta r`` at retrogression ``r = K - 2``, instead of ``(log alpha, log beta)`` the
    log time at the profile's median retrogression ``c`` of that link, ``log(alpha + beta c)``,
    and the log-odds of its retrogression share, ``log(beta c / alpha)``; every other
    coordinate is Pyro's unconstrained one.

    Why: the data pin the time at the measured replica counts, so a smaller ``beta`` is traded
    for a larger ``alpha`` along a curve in ``(log alpha, log beta)`` that no affine guide
    follows (on cifar10 the PSIS-weighted standard deviation of ``log beta_r`` was well above the
    guide's, and more SVI steps did not change it); in these coordinates the curve is a line.
    The map has unit Jacobian (``d(log alpha, log beta) / d(time, share)`` has determinant
    ``(1 - s) + s = 1`` with ``s`` the share's sigmoid), so densities carry over unchanged.
    """

    #: ``(index of alpha, index of beta, log c)`` per link in the coordinate vector.
    pairs: tuple[tuple[int, int, float], ...]

    @classmethod
    def for_data(cls, data: StepTimeData, names: Sequence[str]) -> NetworkCoordinates:
        retrogression = (data.replicas - 2).clamp(min=0)
        multi_node = data.nodes > 1
        pairs = []
        for alpha, beta, rows in (("alpha_n", "beta_n", multi_node),
                                  ("alpha_r", "beta_r", ~multi_node & (data.replicas > 1))):
            measured = retrogression[rows & (retrogression > 0)]
            # Without rows that show a retrogression, any c does: take one replica beyond two.
            c = float(measured.median()) if len(measured) else 1.0
            pairs.append((names.index(alpha), names.index(beta), math.log(c)))
        return cls(tuple(pairs))

    def to_unconstrained(self, y: torch.Tensor) -> torch.Tensor:
        """Guide coordinates ``(..., D)`` to Pyro's unconstrained ones, same shape."""
        columns = list(y.unbind(-1))
        for a, b, log_c in self.pairs:
            time, share = columns[a], columns[b]
            columns[a] = time - torch.nn.functional.softplus(share)
            columns[b] = time - torch.nn.functional.softplus(-share) - log_c
        return torch.stack(columns, -1)

    def from_unconstrained(self, z: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`to_unconstrained`."""
        columns = list(z.unbind(-1))
        for a, b, log_c in self.pairs:
            log_alpha, log_beta = columns[a], columns[b] + log_c
            columns[a] = torch.logaddexp(log_alpha, log_beta)
            columns[b] = log_beta - log_alpha
        return torch.stack(columns, -1)


def spline_guide(base: dist.Distribution, spline: Spline, loc: torch.Tensor,
                 scale_tril: torch.Tensor) -> dist.TransformedDistribution:
    """The guide's distribution: ``z = loc + scale_tril @ spline(u)``, ``u ~ base``; ``loc``
    ``(D,)``, ``scale_tril`` ``(D, D)`` lower triangular."""
    return dist.TransformedDistribution(
        base, [spline, dist.transforms.LowerCholeskyAffine(loc, scale_tril)])


@dataclass(frozen=True)
class _SviFit:
    """An SVI fit: constrained draws, final loss (negative ELBO), PSIS k-hat of the guide as an
    importance proposal, the guide (``(D,)`` in the coordinates of ``coordinates``), its
    Gaussian part (``loc`` and ``scale_tril``) and the model's log density there."""

    samples: dict[str, np.ndarray]
    loss: float
    pareto_k: float
    guide: dist.TransformedDistribution
    loc: torch.Tensor
    scale_tril: torch.Tensor
    log_density: Callable[[torch.Tensor], torch.Tensor]
    to_constrained: dict[str, Any]
    coordinates: NetworkCoordinates
    convergence: Convergence

    def constrained(self, y: torch.Tensor) -> dict[str, np.ndarray]:
        """Draws ``(S, D)`` in the guide's coordinates as constrained draws per site, each
        ``(S,)``."""
        z = self.coordinates.to_unconstrained(y)
        return {n: self.to_constrained[n](z[:, i]).detach().numpy()
                for i, n in enumerate(self.to_constrained)}


def _svi_spline_gaussian(data: StepTimeData, prior: StepTimePrior,
                         init: dict[str, torch.Tensor], num_steps: int, num_samples: int,
                         check: bool, num_particles: int = 16) -> _SviFit:
    """SVI in the model's unconstrained space with a full-rank guide whose whitened coordinates
    pass through a learned monotone spline each: ``z = loc + L s(u)``, ``u`` independent
    Student-t (:func:`guide_base`).

    Why not a Gaussian alone: a parameter the data bound on one side only (a retrogression
    slope, e.g. ``beta_r``, that the data say is below some value and the prior lets fall orders
    of magnitude lower) has a skewed posterior in log space (on bert, skewness -2.9 and excess
    kurtosis 10 in NUTS draws), which no Gaussian can follow; the spline bends each marginal,
    while ``L`` keeps the correlations.

    The model's potential (negative log joint with Jacobians, from Pyro's ``initialize_model``)
    is evaluated for all particles in one trace because the model broadcasts over leading
    dimensions; this avoids the per-particle, per-step tracing of model and guide that dominates
    a plain ``pyro.infer.SVI`` loop for an eleven-dimensional problem.
    """
    params, _, transforms, _ = initialize_model(
        step_time_model, model_args=(data, prior), init_strategy=init_to_value(values=init))
    names = list(params)
    # initialize_model's transforms map constrained to unconstrained values; we need the inverse.
    to_constrained = {n: transforms[n].inv for n in names}
    dim = len(names)
    coordinates = NetworkCoordinates.for_data(data, names)

    def log_density(y: torch.Tensor) -> torch.Tensor:
        # Log joint in the guide's coordinates per particle, shape (P,): the model broadcasts
        # over a leading particle dimension, so one trace scores every particle. The map to
        # Pyro's unconstrained coordinates has unit Jacobian.
        z = coordinates.to_unconstrained(y)
        values = {n: to_constrained[n](z[..., i]) for i, n in enumerate(names)}
        trace = poutine.trace(poutine.condition(step_time_model, data=values)).get_trace(
            data, prior)
        total = sum(cast(Any, site["fn"]).log_prob(site["value"]) for site in trace.nodes.values()
                    if site["type"] == "sample")
        jacobian = sum(to_constrained[n].log_abs_det_jacobian(z[..., i], values[n])
                       for i, n in enumerate(names))
        return total + jacobian

    # Start the guide at the Laplace approximation around the posterior mode: parameters the data
    # cannot inform then start as wide as their prior instead of having to grow there by SVI.
    # The mode, not the point fit: the point fit minimises another objective and knows nothing
    # of the noise sites, so the Laplace approximation there is far off (on bert its noise
    # scale and degrees of freedom sat many posterior standard deviations from the mode), and
    # Adam steps from there did not recover (figures: docs/results/bench_perfmodel.md).
    mode = posterior_mode(log_density, coordinates.from_unconstrained(
        torch.stack([params[n].detach() for n in names])))
    start = _laplace_scale_tril(log_density, mode)
    loc = mode.clone().requires_grad_(True)
    raw_scale = torch.log(torch.expm1(torch.diagonal(start))).clone().requires_grad_(True)
    off_diag = start.tril(-1).clone().requires_grad_(True)
    spline = identity_spline(dim)
    base = guide_base(dim)

    def scale_tril() -> torch.Tensor:
        return torch.diag(torch.nn.functional.softplus(raw_scale)) + off_diag.tril(-1)

    def guide() -> dist.TransformedDistribution:
        return spline_guide(base, spline, loc, scale_tril())

    parameters = [loc, raw_scale, off_diag, *spline.parameters()]
    optimizer = torch.optim.Adam(parameters, lr=0.01)
    schedule = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.995)
    monitor = FitMonitor("throughput (SVI)", num_steps, len(data.log_step))

    def scaled_gradient() -> torch.Tensor:
        # Unit-free (perfmodel.convergence): the location's gradient in the guide's whitened
        # coordinates (L^T g), the scales' with respect to their logs (softplus leaves), the
        # off-diagonal's per unit of its row's scale; the spline acts on whitened draws already.
        scale = torch.nn.functional.softplus(raw_scale.detach())
        tril = scale_tril().detach()
        parts = [tril.T @ cast(torch.Tensor, loc.grad),
                 cast(torch.Tensor, raw_scale.grad) * scale / torch.sigmoid(raw_scale.detach()),
                 (cast(torch.Tensor, off_diag.grad) * scale[:, None]).tril(-1).reshape(-1),
                 *(p.grad.reshape(-1) for p in spline.parameters() if p.grad is not None)]
        return torch.cat([part.reshape(-1) for part in parts])

    for _ in range(num_steps):
        q = guide()
        z = q.rsample((num_particles,))
        # Negative ELBO: E_q[log q - log p].
        loss = (q.log_prob(z) - log_density(z)).mean()
        optimizer.zero_grad()
        loss.backward()
        monitor.record(loss, scaled_gradient)
        optimizer.step()
        schedule.step()
        monitor.check_parameters(parameters)
    with torch.no_grad():
        q = guide()
        final_loss = monitor.losses[-1] if monitor.losses else float("nan")
        fit = _SviFit({}, final_loss, float("nan"), q, loc.detach().clone(),
                      scale_tril().detach().clone(), log_density, to_constrained, coordinates,
                      monitor.verdict())
        if not check:
            return replace(fit, samples=fit.constrained(q.sample((num_samples,))))
        # The guide as an importance proposal: its affine part moved to the PSIS-weighted moments
        # of its draws (the ELBO's optimum is narrower than the posterior where the posterior is
        # curved), then checked on fresh draws and resampled by their PSIS weights.
        proposal = adapt_proposal(base, spline, fit.loc, fit.scale_tril, log_density)
        z = proposal.sample((PSIS_DRAWS,))
        log_weights = log_density(z) - proposal.log_prob(z)
        smoothed, pareto_k = psis(log_weights)
        keep = torch.multinomial(smoothed.exp(), num_samples, replacement=True)
        fit = replace(fit, pareto_k=pareto_k, guide=proposal,
                      loc=proposal.transforms[-1].loc, scale_tril=proposal.transforms[-1].scale_tril)
    return replace(fit, samples=fit.constrained(z[keep]))


#: Draws of the PSIS check and of the moment matching: Vehtari et al. (2024) need at least
#: ``10 ** (1 / (1 - k))`` draws (2,155 at k = 0.7) for k-hat itself to be reliable near the
#: threshold; at 1,000 draws the k-hat of one guide scattered across the threshold from one batch
#: of fresh draws to the next (measured: docs/results/bench_perfmodel.md). Each draw costs a
#: model evaluation on every row.
PSIS_DRAWS = 4000
#: Rounds of moment matching (each tries a shift of the mean, then of the scales, then of the
#: covariance, and keeps the first that lowers k-hat; Paananen et al. 2021). Later rounds chase
#: the noise of the draws they are scored on: on deepspeech2 rounds past the third lowered k-hat
#: on those draws but not on fresh ones.
MOMENT_MATCH_ROUNDS = 3


def adapt_proposal(base: dist.Distribution, spline: Spline, loc: torch.Tensor,
                   scale_tril: torch.Tensor,
                   log_density: Callable[[torch.Tensor], torch.Tensor]
                   ) -> dist.TransformedDistribution:
    """The guide ``loc + scale_tril @ spline(u)``, ``u ~ base`` (all ``(D,)`` unconstrained),
    with its affine part adapted by implicitly adaptive importance sampling (Paananen et al.,
    2021, "Implicitly adaptive importance sampling"): its draws are moved by an affine map to
    the PSIS-weighted mean, then scales, then covariance of the posterior they estimate, and a
    map is kept where it lowers PSIS k-hat. The maps are lower triangular, so the result is the
    same family of guide.

    Why: the ELBO is mode-seeking, so its optimum is narrower than the posterior wherever the
    guide cannot follow the posterior's shape, and more SVI steps do not change that; the
    adaptation lowers k-hat on fresh draws (cifar10, deepspeech2: docs/results/bench_perfmodel.md).
    """
    q = spline_guide(base, spline, loc, scale_tril)
    z = q.sample((PSIS_DRAWS,))
    log_q = q.log_prob(z)
    smoothed, k = psis(log_density(z) - log_q)
    for _ in range(MOMENT_MATCH_ROUNDS):
        for kind in ("mean", "scale", "covariance"):
            try:
                map_, shift = _moment_map(z, smoothed.exp(), kind)
            except torch.linalg.LinAlgError:  # weight on fewer draws than dimensions
                continue
            if not (torch.isfinite(map_).all() and (torch.diagonal(map_) > 0).all()):
                continue
            moved = shift + z @ map_.T
            moved_log_q = log_q - torch.log(torch.diagonal(map_)).sum()
            moved_smoothed, moved_k = psis(log_density(moved) - moved_log_q)
            if moved_k < k:
                z, log_q, smoothed, k = moved, moved_log_q, moved_smoothed, moved_k
                loc, scale_tril = shift + map_ @ loc, map_ @ scale_tril
                break
        else:
            break
    return spline_guide(base, spline, loc, scale_tril)


def _moment_map(z: torch.Tensor, weights: torch.Tensor, kind: str
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Lower-triangular ``A`` ``(D, D)`` and shift ``b`` ``(D,)`` such that ``b + A z`` has the
    weighted mean of draws ``z`` ``(S, D)`` (normalised ``weights`` ``(S,)``) and, for ``kind``
    ``"scale"``, their weighted standard deviations, for ``"covariance"`` their weighted
    covariance (``"mean"``: ``A`` is the identity)."""
    mean, weighted_mean = z.mean(0), weights @ z
    if kind == "mean":
        map_ = torch.eye(z.shape[1], dtype=z.dtype)
    elif kind == "scale":
        map_ = torch.diag(((weights @ (z - weighted_mean) ** 2) / z.var(0)).sqrt())
    else:
        centred = z - weighted_mean
        weighted_cov = (centred * weights[:, None]).T @ centred
        map_ = torch.linalg.cholesky(weighted_cov) @ torch.linalg.inv(
            torch.linalg.cholesky(torch.cov(z.T)))
    return map_, weighted_mean - map_ @ mean


def _nuts_whitened(svi: _SviFit, warmup: int, num_samples: int
                   ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Pyro's NUTS on the model's exact posterior, in coordinates whitened by the SVI guide:
    ``z = loc + L u``, so where the guide is roughly right ``u`` is roughly standard normal and
    NUTS takes short trajectories (the guide as a linear preconditioner, as in NeuTra HMC); where
    it is wrong (the reason for the fallback) NUTS still targets the true posterior. Returns
    constrained draws and :func:`_mcmc_diagnostics`."""
    loc, tril = svi.loc, svi.scale_tril

    def potential(params: dict[str, torch.Tensor]) -> torch.Tensor:
        return -svi.log_density(loc + tril @ params["u"])

    kernel = NUTS(potential_fn=potential, max_tree_depth=6)
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup, disable_progbar=True,
                initial_params={"u": torch.zeros_like(loc)})
    mcmc.run()
    z = loc + mcmc.get_samples()["u"].detach() @ tril.T
    samples = svi.constrained(z)
    divergences = sum(len(v) for v in mcmc.diagnostics()["divergences"].values())
    return samples, _mcmc_diagnostics(samples, divergences)


def _mcmc_diagnostics(samples: dict[str, np.ndarray], divergences: int) -> dict[str, Any]:
    """ArviZ's bulk ESS (smallest over sites) and rank-normalised split R-hat (largest) of one
    chain of draws per site ``(S,)``, with the divergence count, as :class:`FitDiagnostics`
    fields. The chain's halves are passed as two chains (ArviZ needs two for R-hat; it splits
    each again, comparing the four quarters). A site whose draws never move within a quarter has
    no R-hat (ArviZ: NaN, no within-chain variance); it counts as infinite, the worst mixing, so
    that it is not lost in the maximum (``max`` over NaNs depends on the sites' order)."""
    half = min(len(v) for v in samples.values()) // 2
    with quiet_arviz() as az:
        idata = az.from_dict(posterior={n: v[: 2 * half].reshape(2, half)
                                        for n, v in samples.items()})
        ess = az.ess(idata, method="bulk")
        r_hat = az.rhat(idata)
    return {"divergences": int(divergences),
            "ess_bulk_min": min(float(ess[n]) for n in samples),
            "r_hat_max": max(math.inf if math.isnan(float(r_hat[n])) else float(r_hat[n])
                             for n in samples)}


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


def _laplace_scale_tril(log_density: Callable[[torch.Tensor], torch.Tensor],
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


def psis(log_weights: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Pareto-smoothed, normalised log importance weights ``(S,)`` and their k-hat (ArviZ's
    ``psislw``; Vehtari et al.): below 0.5 the proposal is good, above 0.7 unreliable."""
    with quiet_arviz() as az:
        smoothed, k = az.psislw(log_weights.detach().numpy().astype(np.float64))
    return torch.as_tensor(smoothed), float(k)




def fit_throughput_posterior(profile: StepTimeProfile, method: str = "svi",
                             num_steps: int = 500, num_samples: int = 1000, seed: int = 0,
                             prior: StepTimePrior | None = None,
                             check: bool = True, placement_effects: bool = False,
                             fallback: bool = True, cache: FitCache | None = None,
                             fallback_warmup: int = FALLBACK_WARMUP,
                             fallback_samples: int = FALLBACK_SAMPLES) -> ThroughputPosterior:
    """Posterior of the step-time model given a profile.

    Args:
        profile: measured step times.
        method: ``"svi"`` (full-rank Student-t guide with spline marginals, Adam) or ``"nuts"``.
        num_steps: SVI steps, or NUTS warm-up steps.
        num_samples: posterior draws kept.
        seed: seeds Pyro and torch, so fits reproduce.
        prior: defaults to :meth:`StepTimePrior.for_profile`.
        check: adapt the SVI guide as an importance proposal, compute its PSIS k-hat on
            :data:`PSIS_DRAWS` fresh draws and resample those by their PSIS weights (else the
            guide's own draws, unchecked).
        placement_effects: model a deviation shared by the rows of a placement. It makes
            parameter intervals honest about correlated errors and fits measured placements
            closely, but on the Pollux profiles it predicted held-out placements less accurately
            than independent rows (experiments/bench_perfmodel.py), hence off by default.
        fallback: when SVI's k-hat (``check``) is above :data:`PARETO_K_USABLE`, replace its
            draws by NUTS (``fallback_warmup`` warm-up steps, ``fallback_samples`` draws, one
            chain) in coordinates whitened by the guide (:func:`_nuts_whitened`); the
            diagnostics record it. NUTS rather than PSIS reweighting of the guide's draws: a
            k-hat above 0.7 is exactly the case where the importance weights' tail is too heavy
            for reweighting to be reliable (Vehtari et al.), so reweighting would keep the
            problem it was meant to fix.
        cache: reuse a saved fit of the same data, settings and package version, and save a
            new one (:mod:`perfmodel.saved_fits`).

    Warns :class:`~perfmodel.errors.UnreliableFitWarning` (one line, :meth:`FitDiagnostics.warning`)
    when the intervals are not to be trusted, a saved fit's included; raises
    :class:`~perfmodel.errors.FitError` when SVI's loss or parameters go non-finite.
    """
    prior = prior or StepTimePrior.for_profile(profile)
    settings = {"method": method, "num_steps": num_steps, "num_samples": num_samples,
                "seed": seed, "prior": asdict(prior), "check": check,
                "placement_effects": placement_effects, "fallback": fallback,
                "fallback_warmup": fallback_warmup, "fallback_samples": fallback_samples}
    key = fit_key("throughput", profile_arrays(profile), settings)
    posterior = None if cache is None else cache.read(
        "throughput", profile.model, key,
        lambda idata: ThroughputPosterior.from_inference_data(idata, profile))
    if posterior is None:
        with single_thread():
            posterior = _fit(profile, method, num_steps, num_samples, seed, prior, check,
                             placement_effects, (fallback_warmup, fallback_samples) if fallback
                             else None)
        if cache is not None:
            cache.save("throughput", profile.model, key, posterior.to_inference_data())
    if (warning := posterior.diagnostics.warning(profile.model)) is not None:
        warnings.warn(warning, UnreliableFitWarning, stacklevel=2)
    return posterior


def profile_arrays(profile: StepTimeProfile) -> dict[str, np.ndarray]:
    """Every array of ``profile`` a fit reads, by name (what a saved fit's key covers)."""
    return {"num_nodes": profile.num_nodes, "num_replicas": profile.num_replicas,
            "local_bsz": profile.local_bsz, "accum_steps": profile.accum_steps,
            "step_time": profile.step_time, "sync_time": profile.sync_time,
            "placement": profile.placement.astype(str)}


def _fit(profile: StepTimeProfile, method: str, num_steps: int, num_samples: int, seed: int,
         prior: StepTimePrior, check: bool, placement_effects: bool,
         fallback: tuple[int, int] | None) -> ThroughputPosterior:
    started = time.perf_counter()
    pyro.set_rng_seed(seed)
    point = fit_throughput(profile)
    data = StepTimeData.from_profile(profile, placement_effects)
    init = _initial_values(profile, point, prior)
    if method == "nuts":
        samples, nuts = _nuts(data, prior, init, num_steps, num_samples)
        diagnostics = FitDiagnostics("nuts", num_steps, float("nan"), float("nan"),
                                     time.perf_counter() - started, **nuts)
        return ThroughputPosterior(samples, data, diagnostics, point)
    if method != "svi":
        raise ValueError(f"method must be 'svi' or 'nuts', not {method!r}")
    svi = _svi_spline_gaussian(data, prior, init, num_steps, num_samples, check)
    samples = svi.samples
    diagnostics = FitDiagnostics("svi", num_steps, svi.loss / len(profile), svi.pareto_k,
                                 time.perf_counter() - started,
                                 convergence=svi.convergence.as_dict())
    if fallback is not None and svi.pareto_k > PARETO_K_USABLE:
        warmup, draws = fallback
        samples, nuts = _nuts_whitened(svi, warmup, draws)
        diagnostics = replace(diagnostics, method="nuts", fallback_from="svi", num_steps=warmup,
                              seconds=time.perf_counter() - started, **nuts)
    return ThroughputPosterior(samples, data, diagnostics, point)


def _nuts(data: StepTimeData, prior: StepTimePrior, init: dict[str, torch.Tensor],
          warmup: int, num_samples: int) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """One NUTS chain on the model, started at ``init``; its draws and
    :func:`_mcmc_diagnostics`."""
    kernel = NUTS(step_time_model, init_strategy=init_to_value(values=init), max_tree_depth=6)
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup, disable_progbar=True)
    mcmc.run(data, prior)
    samples = {k: v.detach().numpy() for k, v in mcmc.get_samples().items()}
    divergences = sum(len(v) for v in mcmc.diagnostics()["divergences"].values())
    return samples, _mcmc_diagnostics(samples, divergences)

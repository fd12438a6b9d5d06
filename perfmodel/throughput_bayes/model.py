"""The step-time model as a Pyro function of data (:func:`step_time_model`) and its data.

* the seven step-time parameters and the multi-GPU compute shifts get the priors of
  :class:`~perfmodel.throughput_bayes.prior.StepTimePrior`: a parameter the data cannot inform
  stays as wide as its prior, so predictions for configurations unlike any measured widen instead
  of collapsing;
* measured compute times and step times are log-Student-t around the model's prediction with
  independent noise: heavy tails (degrees of freedom ``nu``, learned) keep the odd straggler from
  widening every interval. Step-time noise is ``sigma_step`` on one GPU, times a learned ratio
  within a node (``ratio_within``) and across nodes (``ratio_across``), because multi-node steps
  scatter more; a class never measured keeps its ratio's prior, so its intervals stay honest;
* optionally (``placement_effects=True``) rows are log-normal with a deviation shared by every row
  of one placement (``tau``) on top, integrated out in closed form (rows of a placement are jointly
  normal in log space with compound-symmetric covariance), so inference stays low-dimensional.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import TorchDistribution, constraints

from perfmodel.profiles import StepTimeProfile
from perfmodel.throughput import (
    CONFIGURATION_CLASSES,
    PARAM_NAMES,
    SHIFT_NAMES,
    ArrayT,
    configuration_class,
    profile_tensors,
    step_time_terms,
)
from perfmodel.throughput_bayes.prior import StepTimePrior

#: The noise sites of :func:`step_time_model` (``tau_*`` with placement effects only, ``nu``
#: without them).
NOISE_NAMES = ("sigma_compute", "tau_compute", "sigma_step", "ratio_within", "ratio_across",
               "tau_step", "nu")
#: Units of the noise sites: the scales are standard deviations of log seconds (unitless, roughly
#: relative errors), the ratios and degrees of freedom are plain numbers.
NOISE_UNITS = {"sigma_compute": "log s", "tau_compute": "log s", "sigma_step": "log s",
               "ratio_within": "1", "ratio_across": "1", "tau_step": "log s", "nu": "1"}
#: Scale of the half-normal priors on the noise scales (``sigma_*``, ``tau_*``; log seconds).
_NOISE_PRIOR_SCALE = 0.3


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
    #: The distinct configurations ``(nodes, replicas, local_bsz)``, each shape ``(U,)``, and
    #: each row's index into them, shape ``(N,)``: the predicted times depend on the
    #: configuration alone, so the model computes them once per configuration (profiles repeat
    #: configurations across placements and runs). None: every row its own configuration.
    configurations: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    row_configuration: torch.Tensor | None = None

    @classmethod
    def from_profile(cls, profile: StepTimeProfile, placement_effects: bool = True
                     ) -> StepTimeData:
        tensors = profile_tensors(profile)
        labels, group = np.unique(profile.placement.astype(str), return_inverse=True)
        classes = configuration_class(profile.num_nodes, profile.num_replicas)
        columns = torch.stack([tensors["nodes"], tensors["replicas"], tensors["m"]], dim=-1)
        unique, row_configuration = torch.unique(columns, dim=0, return_inverse=True)
        nodes, replicas, local_bsz = unique.unbind(-1)
        return cls(tensors["nodes"], tensors["replicas"], tensors["m"], tensors["log_tc"],
                   tensors["log_to"], torch.as_tensor(group), len(labels), tuple(labels),
                   placement_effects, torch.as_tensor(classes), (nodes, replicas, local_bsz),
                   row_configuration)

    def without_rows(self) -> StepTimeData:
        """The same data with no rows (and no placements): the model then draws its latent
        sites exactly as with the rows (the likelihood draws nothing) but scores no data, which
        is all a draw from the prior needs."""
        def empty(t: torch.Tensor) -> torch.Tensor:
            return t[:0]
        return StepTimeData(
            empty(self.nodes), empty(self.replicas), empty(self.local_bsz),
            empty(self.log_compute), empty(self.log_step), empty(self.group), 0, (),
            self.placement_effects,
            None if self.config_class is None else empty(self.config_class))

    def log_step_time_terms(self, theta: torch.Tensor, shift_within: torch.Tensor,
                            shift_across: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(log T_c, log T_o)`` per draw and row, shape ``(..., N)``, of
        :func:`shifted_step_time_terms` (arguments as there), computed once per distinct
        configuration."""
        configurations = self.configurations or (self.nodes, self.replicas, self.local_bsz)
        t_c, t_o = shifted_step_time_terms(theta, shift_within, shift_across, *configurations)
        log_t_c, log_t_o = torch.log(t_c), torch.log(t_o)
        if self.row_configuration is None:
            return log_t_c, log_t_o
        return log_t_c[..., self.row_configuration], log_t_o[..., self.row_configuration]



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


class RowStudentT(TorchDistribution):
    """Independent zero-location Student-t values on ``N`` rows as one event ``(N,)``, degrees of
    freedom ``df`` per draw (shape ``batch``) and scale per draw and row class (``scale``, shape
    ``batch + (C,)``; row ``n`` has class ``row_class[n]``, ``row_class`` of shape ``(N,)``).

    The log density is that of ``StudentT(df[..., None], 0, scale[..., row_class])`` summed
    over rows, with the terms that depend on the draw and class alone (``lgamma``, ``log df``,
    ``log scale``) computed once per draw and class instead of once per row.
    """

    arg_constraints = {"df": constraints.positive, "scale": constraints.positive}
    support = constraints.independent(constraints.real, 1)
    has_rsample = True

    def __init__(self, df: torch.Tensor, scale: torch.Tensor, row_class: torch.Tensor,
                 validate_args: bool | None = None) -> None:
        self.df, self.scale, self.row_class = df, scale, row_class
        batch_shape = torch.broadcast_shapes(df.shape, scale.shape[:-1])
        super().__init__(batch_shape, row_class.shape, validate_args=validate_args)

    def _row_scale(self) -> torch.Tensor:
        return self.scale[..., self.row_class]

    def rsample(self, sample_shape: torch.Size | list[int] | tuple[int, ...] = ()
                ) -> torch.Tensor:
        return dist.StudentT(self.df[..., None], torch.zeros_like(self.scale[..., :1]),
                             self._row_scale()).rsample(torch.Size(sample_shape))

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        df = self.df
        counts = torch.bincount(self.row_class, minlength=self.scale.shape[-1])
        precision = 1 / (df[..., None] * self.scale**2)
        # One class: broadcast rather than gather its precision onto every row.
        per_row = precision if self.scale.shape[-1] == 1 else precision[..., self.row_class]
        quad = torch.log1p(value**2 * per_row).sum(-1)
        per_draw = (torch.lgamma(0.5 * (df + 1)) - torch.lgamma(0.5 * df)
                    - 0.5 * torch.log(math.pi * df))
        return (-0.5 * (df + 1) * quad + self.row_class.shape[-1] * per_draw
                - (counts.to(self.scale.dtype) * torch.log(self.scale)).sum(-1))


def step_time_model(data: StepTimeData, prior: StepTimePrior) -> None:
    """Pyro model of measured compute and step times (see the module docstring)."""
    theta = sample_parameters(prior)
    f64 = torch.float64
    half_normal = dist.HalfNormal(torch.tensor(_NOISE_PRIOR_SCALE, dtype=f64))
    sigma_compute = pyro.sample("sigma_compute", half_normal)
    sigma_step = pyro.sample("sigma_step", half_normal)
    ratio_within = pyro.sample("ratio_within", prior.ratio_site("ratio_within", sigma_step))
    ratio_across = pyro.sample("ratio_across", prior.ratio_site("ratio_across", sigma_step))
    shift_within, shift_across = (pyro.sample(name, prior.site(name)) for name in SHIFT_NAMES)
    classes = data.config_class if data.config_class is not None else torch.zeros_like(data.group)
    log_t_c, log_t_o = data.log_step_time_terms(theta, shift_within, shift_across)
    residuals = {"compute": data.log_compute - log_t_c, "step": data.log_step - log_t_o}
    if data.placement_effects:
        scale = {"compute": sigma_compute[..., None],
                 "step": step_noise_scale(sigma_step, ratio_within, ratio_across, classes)}
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
    # Per draw and class: compute times have one scale, step times one per configuration class.
    class_scale = {"compute": (sigma_compute[..., None], torch.zeros_like(classes)),
                   "step": (step_noise_scale(sigma_step, ratio_within, ratio_across,
                                             torch.arange(len(CONFIGURATION_CLASSES))), classes)}
    for series, residual in residuals.items():
        series_scale, row_class = class_scale[series]
        pyro.factor(f"{series}_time",
                    RowStudentT(nu, series_scale, row_class).log_prob(residual))

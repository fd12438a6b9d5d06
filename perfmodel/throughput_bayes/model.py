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

from perfmodel.profiles import StepTimeProfile
from perfmodel.throughput import (
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

    @classmethod
    def from_profile(cls, profile: StepTimeProfile, placement_effects: bool = True
                     ) -> StepTimeData:
        tensors = profile_tensors(profile)
        labels, group = np.unique(profile.placement.astype(str), return_inverse=True)
        classes = configuration_class(profile.num_nodes, profile.num_replicas)
        return cls(tensors["nodes"], tensors["replicas"], tensors["m"], tensors["log_tc"],
                   tensors["log_to"], torch.as_tensor(group), len(labels), tuple(labels),
                   placement_effects, torch.as_tensor(classes))



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
    ratio_within = pyro.sample("ratio_within", prior.ratio_site("ratio_within", sigma_step))
    ratio_across = pyro.sample("ratio_across", prior.ratio_site("ratio_across", sigma_step))
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

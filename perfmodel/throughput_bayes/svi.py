"""SVI with the spline guide (:func:`fit_svi`): started at the Laplace approximation around the
posterior mode, optimised by Adam, then adapted as an importance proposal, checked by PSIS k-hat
on fresh draws and its draws resampled by their PSIS weights."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer import Predictive
from pyro.infer.autoguide.initialization import init_to_value
from pyro.infer.mcmc.util import initialize_model

from perfmodel.convergence import Convergence, FitMonitor
from perfmodel.throughput_bayes.guide import (
    NetworkCoordinates,
    guide_base,
    identity_spline,
    spline_guide,
)
from perfmodel.throughput_bayes.importance import (
    PSIS_DRAWS,
    adapt_proposal,
    log_density_of_draws,
    psis,
)
from perfmodel.throughput_bayes.laplace import laplace_scale_tril, posterior_mode
from perfmodel.throughput_bayes.model import StepTimeData, step_time_model
from perfmodel.throughput_bayes.prior import StepTimePrior


@dataclass(frozen=True)
class SviFit:
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


#: Prior draws from which :func:`prior_spread` measures the prior's spread, and their seed (a
#: stream of their own, so the fit's draws do not depend on them).
PRIOR_SPREAD_DRAWS = 4096
_PRIOR_SPREAD_SEED = 0
#: Interquartile range of the standard normal: a spread measured as ``IQR / 1.349`` is the
#: standard deviation of the normal with that interquartile range.
_NORMAL_IQR = 2 * 0.6744897501960817


def prior_spread(data: StepTimeData, prior: StepTimePrior, names: list[str],
                 to_unconstrained: dict[str, Any], coordinates: NetworkCoordinates
                 ) -> torch.Tensor:
    """The prior's spread in each of the guide's coordinates (``names`` mapped by
    ``to_unconstrained``, then by ``coordinates``), shape ``(D,)``: the interquartile range of
    :data:`PRIOR_SPREAD_DRAWS` prior draws over that of the standard normal, so it is the
    standard deviation of a normal prior and stays finite for a heavy-tailed (Student-t
    population) prior. The draws come from a torch random stream of their own, seeded
    :data:`_PRIOR_SPREAD_SEED`, so the global stream (and the fit's draws) are untouched; the
    model runs without the data's rows, which prior draws do not read."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_PRIOR_SPREAD_SEED)
        draws = Predictive(step_time_model, num_samples=PRIOR_SPREAD_DRAWS, return_sites=names,
                           parallel=True)(data.without_rows(), prior)
    z = torch.stack([to_unconstrained[n](draws[n].reshape(-1)) for n in names], dim=-1)
    quartiles = torch.quantile(coordinates.from_unconstrained(z),
                               torch.tensor([0.25, 0.75], dtype=z.dtype), dim=0)
    return (quartiles[1] - quartiles[0]) / _NORMAL_IQR


def fit_svi(data: StepTimeData, prior: StepTimePrior, init: dict[str, torch.Tensor],
            num_steps: int, num_samples: int, check: bool, num_particles: int = 16) -> SviFit:
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
    start = laplace_scale_tril(log_density, mode, bound=prior_spread(
        data, prior, names, {n: transforms[n] for n in names}, coordinates))
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
        fit = SviFit({}, final_loss, float("nan"), q, loc.detach().clone(),
                      scale_tril().detach().clone(), log_density, to_constrained, coordinates,
                      monitor.verdict())
        if not check:
            return replace(fit, samples=fit.constrained(q.sample((num_samples,))))
        # The guide as an importance proposal: its affine part moved to the PSIS-weighted moments
        # of its draws (the ELBO's optimum is narrower than the posterior where the posterior is
        # curved), then checked on fresh draws and resampled by their PSIS weights.
        proposal = adapt_proposal(base, spline, fit.loc, fit.scale_tril, log_density)
        z = proposal.sample((PSIS_DRAWS,))
        log_weights = log_density_of_draws(log_density, z) - proposal.log_prob(z)
        smoothed, pareto_k = psis(log_weights)
        if bool(torch.isfinite(smoothed).all()):
            keep = torch.multinomial(smoothed.exp(), num_samples, replacement=True)
        else:
            # Weights that are not numbers (a guide collapsed to near-zero widths on a profile
            # without noise) check nothing: the fit is marked unreliable (k-hat infinite, which
            # the caller's limit refuses) and keeps the proposal's own draws.
            pareto_k = math.inf
            keep = torch.arange(num_samples) % z.shape[0]
        fit = replace(fit, pareto_k=pareto_k, guide=proposal,
                      loc=proposal.transforms[-1].loc, scale_tril=proposal.transforms[-1].scale_tril)
    return replace(fit, samples=fit.constrained(z[keep]))

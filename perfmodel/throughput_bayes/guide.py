"""The SVI guide's family: ``z = loc + L s(u)`` with ``u`` independent Student-t
(:func:`guide_base`), ``s`` a monotone spline per coordinate (:func:`identity_spline`), in
coordinates where the all-reduce terms' trade-off is linear (:class:`NetworkCoordinates`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pyro.distributions as dist
import torch
from pyro.distributions.transforms import Spline

from perfmodel.throughput_bayes.model import StepTimeData

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

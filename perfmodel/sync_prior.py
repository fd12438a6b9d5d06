"""A physics prior for the network terms of the step-time model: all-reduce cost from a job's
gradient bytes and the links its placement crosses.

What sets a data-parallel job's synchronisation time is known before it runs: the bytes of its
gradients (parameter count times bytes per gradient element) and the links a ring all-reduce
crosses; :mod:`perfmodel.allreduce` turns both into the step-time model's four network terms at
line rate (:func:`~perfmodel.allreduce.line_rate_terms`).

Links are never used at line rate: protocol overhead, TCP flow limits, PCIe switches shared by
two GPUs and the part of the all-reduce hidden behind the backward pass all change the time a
step loses. That is the *slowdown* of each term against line rate (``log(term / line-rate
term)``), and its uncertainty is the prior's: :class:`LinkSlowdown` holds a location and scale
per term in log units, either a wide default (a link is used at between 5% and 100% of its rate,
90% of the time) or learned from other jobs fitted on the same cluster
(:meth:`LinkSlowdown.from_fleet`: the same links, other gradient sizes). Overlap with compute
stays with ``gamma``, whose prior is the base prior's.

A cold start on a cluster where other jobs were fitted takes :func:`fleet_physics_prior`: the
network terms from physics with the slowdowns measured on the other jobs, every other
uninformed site (compute shifts, ``gamma``, the multi-GPU step noise) learned from them too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from perfmodel.allreduce import NETWORK_TERMS, Links, line_rate_terms
from perfmodel.profiles import StepTimeProfile
from perfmodel.throughput import ThroughputParams
from perfmodel.throughput_bayes.prior import StepTimePrior

#: Default slowdown: a link is used at between 5% and 100% of its line rate with 90% probability
#: (log slowdown normal, 5% quantile 0 and 95% quantile log 20). A statement of ignorance bounded
#: by the line rate, for a cluster where no job has been measured yet.
_DEFAULT_EFFICIENCY_RANGE = (0.05, 1.0)
_Z90 = 1.6448536269514722


@dataclass(frozen=True)
class LinkSlowdown:
    """How much slower than line rate each network term is: location and scale of its log
    slowdown (:data:`NETWORK_TERMS` keys), with ``df`` None for normal and a number for Student-t
    (a population learned from few jobs)."""

    loc: dict[str, float]
    scale: dict[str, float]
    df: float | None = None

    @classmethod
    def default(cls) -> LinkSlowdown:
        """The wide default: links used at 5% to 100% of line rate (90% interval), every term."""
        low, high = (-math.log(e) for e in _DEFAULT_EFFICIENCY_RANGE)
        loc, scale = (low + high) / 2, (low - high) / (2 * _Z90)
        return cls(dict.fromkeys(NETWORK_TERMS, loc), dict.fromkeys(NETWORK_TERMS, scale))

    @classmethod
    def from_fleet(cls, reference: Sequence[tuple[ThroughputParams, float]], links: Links,
                   min_scale: float = 0.5) -> LinkSlowdown:
        """Slowdowns learned from other jobs fitted on the same links: each reference is a
        point fit with the job's gradient bytes.

        Each term's log slowdown is a member of a normal population whose mean and spread are
        estimated from the ``n`` references: Student-t with ``n - 1`` degrees of freedom, centred
        on their mean, scale their standard deviation times ``sqrt(1 + 1/n)``, never below
        ``min_scale`` (the floor of :meth:`.StepTimePrior.from_population`: a spread from few
        fitted values understates the population's).

        A cold start's prior (:func:`fleet_physics_prior`) takes ``min_scale=0``: the floor
        widened the predictive of every shipped model, and with the Student-t's tails alone a
        model whose slowdowns lie far from the other five's (deepspeech2 on the shipped testbed)
        is still covered, its data-free terms trading off against ``gamma``.
        """
        if len(reference) < 2:
            raise ValueError("a fleet slowdown needs at least two reference jobs")
        table = []
        for params, grad_bytes in reference:
            rate = line_rate_terms(grad_bytes, links)
            values = params.as_dict()
            table.append({n: math.log(max(values[n], 1e-12) / rate[n]) for n in NETWORK_TERMS})
        inflation = math.sqrt(1 + 1 / len(table))
        loc, scale = {}, {}
        for name in NETWORK_TERMS:
            column = np.array([row[name] for row in table])
            loc[name] = float(column.mean())
            scale[name] = max(float(column.std(ddof=1)) * inflation, min_scale)
        return cls(loc, scale, df=float(len(table) - 1))


def physics_prior(profile: StepTimeProfile, grad_bytes: float, links: Links,
                  slowdown: LinkSlowdown | None = None, base: StepTimePrior | None = None
                  ) -> StepTimePrior:
    """The prior of ``profile``'s step-time model with its network terms from physics.

    The four network terms are log-normal (Student-t in log space where ``slowdown`` has ``df``)
    around their line-rate values (:func:`line_rate_terms`) times the slowdown's location,
    with its scale; every other site keeps ``base``'s prior (default
    :meth:`.StepTimePrior.for_profile`: compute on the scale of the measured compute time,
    ``gamma`` uniform). A Student-t slowdown makes the whole prior Student-t with its degrees
    of freedom, so ``base`` should then be a population prior of the same references
    (:meth:`.StepTimePrior.from_population`) or a normal one.
    """
    slowdown = slowdown or LinkSlowdown.default()
    base = base or StepTimePrior.for_profile(profile)
    rate = line_rate_terms(grad_bytes, links)
    loc, scale = dict(base.loc), dict(base.scale)
    for name in NETWORK_TERMS:
        loc[name] = math.log(rate[name]) + slowdown.loc[name]
        scale[name] = slowdown.scale[name]
    df = slowdown.df if slowdown.df is not None else base.df
    return replace(base, loc=loc, scale=scale, df=df)


def fleet_physics_prior(profile: StepTimeProfile, grad_bytes: float, links: Links,
                        reference: Sequence[tuple[StepTimeProfile, ThroughputParams, float]]
                        ) -> StepTimePrior:
    """The prior of a cold start (``profile`` measured on one GPU) on a cluster where other jobs
    were fitted: each reference is a profile of another model on the same links, its point fit
    and its gradient bytes.

    Every site's prior comes from the references or from physics: the network terms from
    :func:`physics_prior` with the slowdowns of :meth:`LinkSlowdown.from_fleet` as measured on
    the references (no floor); compute, the compute shifts and ``gamma`` from
    :meth:`.StepTimePrior.from_population` (``gamma`` by median and MAD, which a reference at a
    bound of ``gamma`` does not inflate); the step noise of each multi-GPU class from the
    references' scatter (:meth:`.StepTimePrior.with_fleet_noise`).
    """
    pairs = [(p, params) for p, params, _ in reference]
    base = StepTimePrior.from_population(profile, pairs, robust_gamma=True)
    base = base.with_fleet_noise(pairs)
    slowdown = LinkSlowdown.from_fleet([(params, b) for _, params, b in reference], links,
                                       min_scale=0.0)
    return physics_prior(profile, grad_bytes, links, slowdown, base=base)

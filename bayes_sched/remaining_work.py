"""What a policy reads for the ``remaining_work`` need: the contracts, in the core.

A job that adapts its batch size (Accordion, GNS) runs its remaining epochs in *regimes* (batch
sizes) whose epochs take different times, and which regimes are still ahead is uncertain. A
:class:`RemainingWorkPredictor` answers: how many seconds of training (alone on the job's GPUs)
are left after ``epochs_done`` epochs of a job whose submission-time profile is a
:class:`RegimeProfile`. The estimation stage publishes one under :data:`REMAINING_SECONDS`
(the predictors themselves: :mod:`bayes_sched.estimation.remaining_work`; the truth a world
knows: its ``oracle_remaining_work``); :class:`RemainingWorkPosterior` binds it to one job as a
:class:`~bayes_sched.estimates.Posterior`.

A job that declares a length in steps (a Gavel job's ``target_steps``) may still end before it:
cancelled or failed at a time no scheduler knows. A :class:`RemainingStepsPredictor` answers how
many steps such a job has left after the progress it reports; the estimation stage publishes one
under :data:`REMAINING_STEPS` (the predictors: :mod:`bayes_sched.estimation.remaining_steps`; the
truth a world knows: its ``oracle_remaining_steps``). :func:`declared_steps_left` is what trusting
the declaration gives.

Units: seconds (``remaining_work``), the job's progress units (``remaining_steps``: steps at its
initial batch size). This module is core: it imports no estimator, policy or simulator.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

import numpy as np

from bayes_sched.estimates import Need, Posterior, check_quantile, resample_draws
from bayes_sched.jobs import JobView


@dataclass(frozen=True)
class RegimeProfile:
    """A job's profile: its batch size (regime) and time alone in each epoch.

    Attributes:
        regimes: batch size of each epoch, shape ``(E,)``.
        epoch_seconds: seconds of each epoch alone on the job's GPUs, shape ``(E,)``.
    """

    regimes: tuple[int, ...]
    epoch_seconds: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.regimes) != len(self.epoch_seconds) or not self.regimes:
            raise ValueError(f"a profile needs one regime and one epoch time per epoch: got "
                             f"{len(self.regimes)} and {len(self.epoch_seconds)}")

    @property
    def epochs(self) -> int:
        return len(self.regimes)

    def regime_seconds(self) -> dict[int, float]:
        """Mean seconds of an epoch in each regime."""
        return dict(self._regime_seconds)

    @cached_property
    def _regime_seconds(self) -> dict[int, float]:
        out: dict[int, list[float]] = {}
        for regime, seconds in zip(self.regimes, self.epoch_seconds, strict=True):
            out.setdefault(regime, []).append(seconds)
        return {regime: float(np.mean(values)) for regime, values in out.items()}

    def seconds_done(self, epochs_done: int) -> float:
        """Seconds of the profile's first ``epochs_done`` epochs."""
        return float(sum(self.epoch_seconds[:max(epochs_done, 0)]))


class RemainingWorkPredictor(Protocol):
    """Seconds of training left (alone on the job's GPUs) after ``epochs_done`` epochs: the
    predictive mean, a quantile of the predictive distribution and joint draws (a point
    predictor answers its point). ``job`` is what the scheduler sees of the job (an oracle
    needs its name; the predictors use only the profile).

    ``whole_epochs``: whether the predictor is calibrated on profiles whose epochs count the
    whole iterations a job runs (``ceil(examples / batch)``) rather than Shockwave's
    ``examples / batch``; a policy that builds the profiles may follow it.
    """

    whole_epochs: bool

    def remaining_seconds(self, profile: RegimeProfile, epochs_done: int,
                          job: JobView | None = None) -> float: ...

    def quantile_seconds(self, profile: RegimeProfile, epochs_done: int, q: float,
                         job: JobView | None = None) -> float: ...

    def draws(self, profile: RegimeProfile, epochs_done: int,
              job: JobView | None = None) -> np.ndarray:
        """The predictor's own joint draws of the remaining seconds, shape ``(S,)`` (one value
        for a point predictor)."""
        ...


#: The bundle's key of remaining work: the predictor the estimation stage publishes
#: (:class:`RemainingWorkPosterior` binds it to one job).
REMAINING_SECONDS: Need[RemainingWorkPredictor] = Need("remaining_work")


class RemainingWorkPosterior:
    """One job's remaining seconds (alone on its GPUs) after ``epochs_done`` epochs as a
    :class:`~bayes_sched.estimates.Posterior`, shape ``()``: the predictor's mean and quantiles;
    draws are the predictor's (resampled to ``n``)."""

    shape: tuple[int, ...] = ()

    def __init__(self, predictor: RemainingWorkPredictor, profile: RegimeProfile,
                 epochs_done: int, job: JobView | None = None) -> None:
        self.predictor = predictor
        self.profile = profile
        self.epochs_done = epochs_done
        self.job = job

    def mean(self) -> np.ndarray:
        return np.asarray(self.predictor.remaining_seconds(self.profile, self.epochs_done,
                                                           self.job))

    def quantile(self, q: float) -> np.ndarray:
        return np.asarray(self.predictor.quantile_seconds(self.profile, self.epochs_done,
                                                          check_quantile(q), self.job))

    def draws(self, n: int, seed: int = 0) -> np.ndarray:
        fixed = np.asarray(self.predictor.draws(self.profile, self.epochs_done, self.job),
                           dtype=np.float64)
        return resample_draws(fixed, n, seed)


class RemainingStepsPredictor(Protocol):
    """Steps of training a job has left after the progress its view reports (the predictive
    mean; NaN where the predictor cannot say, e.g. a job that declares no length), and the
    predictive distribution as a :class:`~bayes_sched.estimates.Posterior` of shape ``()``."""

    def remaining_steps(self, job: JobView) -> float: ...

    def posterior(self, job: JobView) -> Posterior: ...


#: The bundle's key of remaining steps: the predictor the estimation stage publishes.
REMAINING_STEPS: Need[RemainingStepsPredictor] = Need("remaining_steps")


def declared_steps_left(job: JobView) -> float:
    """The steps the job's user declared less the steps done, at least 0 (NaN where the job
    declares none): what a policy that trusts the declaration reads."""
    if job.target_steps is None:
        return math.nan
    return max(float(job.target_steps) - float(job.progress), 0.0)


def gittins_rank(draws: np.ndarray) -> float:
    """The Gittins rank of a job whose remaining work has the predictive draws ``draws``
    ``(S,)`` (lower runs first): ``min over D of E[min(R, D)] / P(R <= D)``, the thresholds
    ``D`` at the draws: the least expected work per chance of finishing, the index that
    minimises the mean completion time of one server's jobs of known size distributions
    (Gittins; for a certain ``R``, ``R``). NaN where any draw is NaN."""
    r = np.sort(np.asarray(draws, dtype=np.float64))
    if not len(r) or np.isnan(r).any():
        return math.nan
    k = np.arange(1, len(r) + 1)
    expected = (np.cumsum(r) + (len(r) - k) * r) / len(r)
    return float(np.min(expected * len(r) / k))


def profile_from(regimes: Sequence[int], seconds_per_regime: Mapping[int, float]
                 ) -> RegimeProfile:
    """A profile whose epochs in each regime take that regime's seconds."""
    return RegimeProfile(tuple(int(r) for r in regimes),
                         tuple(float(seconds_per_regime[r]) for r in regimes))


__all__ = ["REMAINING_SECONDS", "REMAINING_STEPS", "RegimeProfile", "RemainingStepsPredictor",
           "RemainingWorkPosterior", "RemainingWorkPredictor", "declared_steps_left",
           "gittins_rank", "profile_from"]

"""Remaining-work predictors for jobs whose batch size changes: Shockwave's Dirichlet posterior.

A job that adapts its batch size (Accordion, GNS) runs its remaining epochs in *regimes* (batch
sizes) whose epochs take different times, and which regimes are still ahead is uncertain. A
predictor answers: how many seconds of training (alone on the job's GPUs) are left after
``epochs_done`` epochs of a job whose submission-time profile is a :class:`RegimeProfile`.

:class:`DirichletRegimePredictor` is Shockwave's (Zheng et al., NSDI 2023, section 4.2;
``JobMetaData.dirichlet_posterior_remaining_runtime``): a Dirichlet over the share of epochs spent
in each regime of the profile, with a uniform prior of ``E / K`` pseudo-epochs on each of the
``K`` regimes (``E`` epochs in all), updated with one count per profile epoch up to and including
the current one; its mean, rebased to ``E`` epochs and less the epochs already seen in each regime,
gives the epochs left per regime, each at that regime's mean epoch time, scaled to the epochs
actually left.

:class:`NoiseScaleRegimePredictor` is ours, for jobs whose batch size follows the gradient noise
scale (GNS): see its docstring; it gives joint posterior draws, so also quantiles.
:class:`OracleRemainingWork` answers the truth a benchmark supplies (the upper bound). All sit
behind :class:`RemainingWorkPredictor`; :data:`REMAINING_WORK` names the two a policy may choose.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

import numpy as np

from bayes_sched.estimates import Need, check_quantile, resample_draws
from bayes_sched.jobs import JobView
from perfmodel.efficiency import NoiseScaleCurve
from perfmodel.profiles import GradientTrace


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
    predictive mean, and a quantile of the predictive distribution (a point predictor answers
    its point). ``job`` is what the scheduler sees of the job (an oracle supplied by a benchmark
    needs its name; the predictors of the policies use only the profile)."""

    def remaining_seconds(self, profile: RegimeProfile, epochs_done: int,
                          job: JobView | None = None) -> float: ...

    def quantile_seconds(self, profile: RegimeProfile, epochs_done: int, q: float,
                         job: JobView | None = None) -> float: ...


class DirichletRegimePredictor:
    """Shockwave's Dirichlet posterior over batch-size regimes (see the module docstring)."""

    def posterior(self, profile: RegimeProfile, epochs_done: int) -> dict[int, float]:
        """Concentration per regime after observing the profile's epochs ``0..epochs_done``
        (Shockwave counts the current epoch as observed)."""
        regimes = sorted(set(profile.regimes))
        concentration = {regime: profile.epochs / len(regimes) for regime in regimes}
        for regime in profile.regimes[:epochs_done + 1]:
            concentration[regime] += 1.0
        return concentration

    def remaining_epochs(self, profile: RegimeProfile, epochs_done: int) -> dict[int, float]:
        """Expected epochs left per regime: the posterior mean rebased to the job's epochs, less
        one per observed epoch of the regime (where that leaves it non-negative)."""
        concentration = self.posterior(profile, epochs_done)
        total = sum(concentration.values())
        left = {regime: profile.epochs * c / total for regime, c in concentration.items()}
        for regime in profile.regimes[:epochs_done + 1]:
            if left[regime] >= 1.0:
                left[regime] -= 1.0
        return left

    def remaining_seconds(self, profile: RegimeProfile, epochs_done: int,
                          job: JobView | None = None) -> float:
        left_epochs = profile.epochs - epochs_done
        per_regime = self.remaining_epochs(profile, epochs_done)
        # Shockwave's normalisation: the predicted epochs (rounded up by one) are scaled to the
        # epochs that are truly left, never up.
        predicted = max(int(sum(per_regime.values()) + 1), left_epochs)
        if predicted <= 0 or left_epochs <= 0:
            return 1.0
        seconds = profile.regime_seconds()
        total = sum(epochs * seconds[regime] for regime, epochs in per_regime.items())
        return total * left_epochs / predicted

    def quantile_seconds(self, profile: RegimeProfile, epochs_done: int, q: float,
                         job: JobView | None = None) -> float:
        """Shockwave plans on the posterior mean only: every quantile is the mean."""
        return self.remaining_seconds(profile, epochs_done, job)


class NoiseScaleRegimePredictor:
    """Remaining seconds from a posterior over the job's gradient-noise-scale curve.

    Under GNS a job's batch size tracks its gradient noise scale ``phi`` (batch ~ ``phi`` times the
    initial batch, doubled when ``phi`` has doubled, capped), and ``phi`` drifts smoothly over
    training. So the batch sizes seen so far are readings of ``log phi`` relative to its start:
    ``log(batch / initial batch)`` at each observed epoch. Those readings are fit by the
    efficiency model's conjugate noise-scale curve (:class:`perfmodel.efficiency.NoiseScaleCurve`,
    a Student-t posterior over a cubic in the fraction of training done, here over the job's
    declared epochs so that the rest of training is a forecast); each joint posterior draw of the
    curve gives a batch size per remaining epoch (the largest of the profile's regimes at most
    ``initial x exp(draw)``, never below the current one and never shrinking, as GNS only grows
    the batch), each at that regime's mean epoch time. The prediction is the mean over draws,
    and its quantiles those of the draws.

    It uses what the Dirichlet uses: the regimes seen up to and including the current epoch, the
    profile's set of regimes with their epoch times, and the job's epochs. With fewer than two
    epochs seen it assumes the current regime to the end.
    """

    def __init__(self, num_draws: int = 256, seed: int = 0) -> None:
        self.num_draws = num_draws
        self.seed = seed
        self._cache: dict[tuple[tuple[int, ...], int], tuple[np.ndarray, np.ndarray]] = {}

    def remaining_seconds(self, profile: RegimeProfile, epochs_done: int,
                          job: JobView | None = None) -> float:
        return float(self.draws(profile, epochs_done).mean())

    def quantile_seconds(self, profile: RegimeProfile, epochs_done: int, q: float,
                         job: JobView | None = None) -> float:
        return float(np.quantile(self.draws(profile, epochs_done), q))

    def draws(self, profile: RegimeProfile, epochs_done: int) -> np.ndarray:
        """Joint posterior draws of the remaining seconds, shape ``(num_draws,)`` (one value
        where the prediction is certain): each draw's epochs left per regime (which depend on
        the regimes only, so are cached per (regimes, epochs done) and reused when the epoch
        times change, as with a learner's every new belief) at the profile's epoch times."""
        if profile.epochs - epochs_done <= 0:
            return np.ones(1)
        key = (profile.regimes, epochs_done)
        cached = self._cache.get(key)
        if cached is None:
            if len(self._cache) > 4096:  # a long run: forget the oldest half
                for old in list(self._cache)[:2048]:
                    del self._cache[old]
            cached = self._cache[key] = self._epochs_left(profile.regimes, epochs_done)
        ladder, counts = cached
        seconds = profile.regime_seconds()
        return counts @ np.array([seconds[int(b)] for b in ladder])

    def _epochs_left(self, regimes: tuple[int, ...], epochs_done: int
                     ) -> tuple[np.ndarray, np.ndarray]:
        """The profile's regimes (ascending), shape ``(K,)``, and each draw's epochs left in
        each (the current epoch included), shape ``(num_draws, K)`` (one row where certain)."""
        epochs = len(regimes)
        ladder = np.array(sorted(set(regimes)), dtype=float)
        seen = np.array(regimes[:epochs_done + 1], dtype=float)
        current = int(np.searchsorted(ladder, seen[-1]))
        if len(seen) < 2 or epochs - epochs_done == 1:
            counts = np.zeros((1, len(ladder)))
            counts[0, current] = epochs - epochs_done
            return ladder, counts
        progress = np.arange(len(seen)) + 0.5  # epochs, each read at its middle
        trace = GradientTrace(int(seen[0]), progress, progress, np.zeros_like(progress),
                              np.ones_like(progress), seen / seen[0])
        curve = NoiseScaleCurve.fit(trace, total_progress=float(epochs))
        future = (np.arange(epochs_done + 1, epochs) + 0.5) / epochs
        draws = curve.sample_log_noise_curves(future, self.num_draws,
                                              np.random.default_rng(self.seed))
        level = np.searchsorted(ladder, seen[0] * np.exp(draws), side="right") - 1
        level = np.maximum(level, current)
        level = np.maximum.accumulate(level, axis=1)
        rows = np.arange(self.num_draws)[:, None] * len(ladder)
        counts = np.bincount((rows + level).ravel(), minlength=self.num_draws * len(ladder)
                             ).reshape(self.num_draws, len(ladder)).astype(float)
        counts[:, current] += 1.0  # the current epoch
        return ladder, counts


class OracleRemainingWork:
    """The true remaining seconds, from a function the caller supplies (a benchmark's upper
    bound: the simulator's truth, never a policy's default; the policy only calls it).

    Args:
        truth: job name -> seconds of training it truly has left alone on its GPUs.
    """

    def __init__(self, truth: Callable[[str], float]) -> None:
        self.truth = truth

    def remaining_seconds(self, profile: RegimeProfile, epochs_done: int,
                          job: JobView | None = None) -> float:
        if job is None:
            raise ValueError("the oracle needs the job")
        return float(self.truth(job.name))

    def quantile_seconds(self, profile: RegimeProfile, epochs_done: int, q: float,
                         job: JobView | None = None) -> float:
        return self.remaining_seconds(profile, epochs_done, job)


#: The remaining-work predictors a policy may be given by name (the oracle only by a benchmark).
REMAINING_WORK: dict[str, Callable[[], RemainingWorkPredictor]] = {
    "dirichlet": DirichletRegimePredictor, "noise_scale": NoiseScaleRegimePredictor}


#: The bundle's key of remaining work: the predictor the estimation stage publishes
#: (:class:`RemainingWorkPosterior` binds it to one job).
REMAINING_SECONDS: Need[RemainingWorkPredictor] = Need("remaining_work")


class RemainingWorkPosterior:
    """One job's remaining seconds (alone on its GPUs) after ``epochs_done`` epochs as a
    :class:`~bayes_sched.estimates.Posterior`, shape ``()``: the predictor's mean and quantiles;
    draws are :class:`NoiseScaleRegimePredictor`'s joint draws (resampled to ``n``), the mean
    repeated for a point predictor."""

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
        if isinstance(self.predictor, NoiseScaleRegimePredictor):
            fixed = self.predictor.draws(self.profile, self.epochs_done)
        else:
            fixed = self.mean()[None]
        return resample_draws(fixed, n, seed)


def profile_from(regimes: Sequence[int], seconds_per_regime: Mapping[int, float]
                 ) -> RegimeProfile:
    """A profile whose epochs in each regime take that regime's seconds."""
    return RegimeProfile(tuple(int(r) for r in regimes),
                         tuple(float(seconds_per_regime[r]) for r in regimes))

"""Remaining-work estimators for jobs whose batch size changes: Shockwave's Dirichlet posterior
and ours over the gradient-noise-scale curve.

Each estimator publishes a :class:`~bayes_sched.remaining_work.RemainingWorkPredictor` under the
``remaining_work`` need (:data:`~bayes_sched.remaining_work.REMAINING_SECONDS`); the policy asks
it about each job's profile (:class:`~bayes_sched.remaining_work.RegimeProfile`), which the
policy builds from what it knows of the job.

:class:`DirichletRegimePredictor` is Shockwave's (Zheng et al., NSDI 2023, section 4.2;
``JobMetaData.dirichlet_posterior_remaining_runtime``): a Dirichlet over the share of epochs spent
in each regime of the profile, with a uniform prior of ``E / K`` pseudo-epochs on each of the
``K`` regimes (``E`` epochs in all), updated with one count per profile epoch up to and including
the current one; its mean, rebased to ``E`` epochs and less the epochs already seen in each regime,
gives the epochs left per regime, each at that regime's mean epoch time, scaled to the epochs
actually left.

:class:`NoiseScaleRegimePredictor` is ours, for jobs whose batch size follows the gradient noise
scale (GNS): see its docstring; it gives joint posterior draws, so also quantiles.
:class:`OracleRemainingWork` answers the truth a world supplies (the upper bound; only as the
world's ``oracle_remaining_work``, :mod:`bayes_sched.sim.oracles`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import numpy as np

from bayes_sched.estimation.constant import ConstantEstimator
from bayes_sched.jobs import JobView
from bayes_sched.registry import SEED, Range
from bayes_sched.remaining_work import REMAINING_SECONDS, RegimeProfile, RemainingWorkPredictor
from perfmodel.efficiency import NoiseScaleCurve
from perfmodel.profiles import GradientTrace

#: Most joint draws of :class:`NoiseScaleRegimePredictor` (memory: draws x regimes per cache entry).
MAX_DRAWS = 100_000


class _PointPrediction:
    """A point predictor's quantiles and draws: its :meth:`remaining_seconds` (which it
    defines)."""

    def remaining_seconds(self, profile: RegimeProfile, epochs_done: int,
                          job: JobView | None = None) -> float:
        raise NotImplementedError

    def quantile_seconds(self, profile: RegimeProfile, epochs_done: int, q: float,
                         job: JobView | None = None) -> float:
        """Every quantile of a point prediction is its value."""
        return self.remaining_seconds(profile, epochs_done, job)

    def draws(self, profile: RegimeProfile, epochs_done: int,
              job: JobView | None = None) -> np.ndarray:
        """The value, shape ``(1,)``."""
        return np.array([self.remaining_seconds(profile, epochs_done, job)])


class DirichletRegimePredictor(_PointPrediction):
    """Shockwave's Dirichlet posterior over batch-size regimes (see the module docstring); a
    point prediction, on Shockwave's epoch times (``whole_epochs`` False): Shockwave plans on
    the posterior mean only, so every quantile is the mean."""

    whole_epochs = False

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
    epochs seen it assumes the current regime to the end. Its quantiles are calibrated on the
    epochs the jobs run (``whole_epochs`` True).
    """

    whole_epochs = True

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

    def draws(self, profile: RegimeProfile, epochs_done: int,
              job: JobView | None = None) -> np.ndarray:
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


class OracleRemainingWork(_PointPrediction):
    """The true remaining seconds, from a function the world supplies (the upper bound: the
    simulator's truth, reaching a policy only as the world's ``oracle_remaining_work``).

    Args:
        truth: job name -> seconds of training it truly has left alone on its GPUs.
        whole_epochs: the profiles the policy builds beside it (they serve its fair-share
            targets only; default Shockwave's).
    """

    def __init__(self, truth: Callable[[str], float], whole_epochs: bool = False) -> None:
        self.truth = truth
        self.whole_epochs = whole_epochs

    def remaining_seconds(self, profile: RegimeProfile, epochs_done: int,
                          job: JobView | None = None) -> float:
        if job is None:
            raise ValueError("the oracle needs the job")
        return float(self.truth(job.name))


class RemainingWorkEstimator(ConstantEstimator[RemainingWorkPredictor]):
    """Publishes a remaining-work predictor for the ``remaining_work`` need (the predictor is
    asked per job, at the policy's profiles, when a decision reads it).

    Args:
        predictor: what answers the policy's questions.
        name: the label of the estimate (``"oracle"`` for the truth a world supplies).
    """

    def __init__(self, predictor: RemainingWorkPredictor, name: str) -> None:
        super().__init__(REMAINING_SECONDS, name, predictor)
        self.predictor = predictor


def dirichlet() -> RemainingWorkEstimator:
    """Shockwave's Dirichlet posterior over batch-size regimes (a point prediction)."""
    return RemainingWorkEstimator(DirichletRegimePredictor(), "dirichlet")


def noise_scale(num_draws: Annotated[int, Range(1, MAX_DRAWS)] = 256,
                seed: Annotated[int, SEED] = 0) -> RemainingWorkEstimator:
    """Ours: a posterior over the job's gradient-noise-scale curve (``num_draws`` joint draws,
    ``seed``)."""
    return RemainingWorkEstimator(NoiseScaleRegimePredictor(num_draws, seed), "noise_scale")


__all__ = ["DirichletRegimePredictor", "NoiseScaleRegimePredictor", "OracleRemainingWork",
           "RemainingWorkEstimator", "dirichlet", "noise_scale"]

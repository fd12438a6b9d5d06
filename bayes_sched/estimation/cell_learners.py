"""Simple throughput learners behind :mod:`bayes_sched.estimation.throughput_cells`: the oracle,
no estimation, and independent per-cell log-normal posteriors.

* :class:`OracleLearner` knows the measured table (the upper bound of every learner): it ignores
  what jobs report. A cell the table lacks answers as Gavel's mechanism does for a job type it
  never measured: :data:`DEFAULT_STEPS_PER_SECOND` alone, 0 in a pair (not packed).
* :class:`UniformLearner` estimates nothing: one steps/s for every job type on every GPU type,
  no pair (the "no estimation" baseline of a policy that has no heterogeneity-agnostic form).
* :class:`PerCellLearner` keeps one conjugate normal posterior over ``log(steps/s)`` per cell,
  independent of every other cell (no pooling across job types, GPU types, scale factors or
  partners: the ablation of a pooled model), with a broad prior. A report of rate ``r`` is
  ``log r ~ Normal(log rate, observation_sd^2)``; after ``n`` reports ``y_1..y_n`` the posterior
  is ``Normal(m, s^2)`` with ``1/s^2 = 1/prior_sd^2 + n/observation_sd^2`` and
  ``m = s^2 (prior_mean/prior_sd^2 + sum y / observation_sd^2)``. Its mean steps/s is the
  log-normal mean ``exp(m + s^2/2)``; draws are ``exp(Normal(m, s^2))``, independent across cells.
  A cell never measured answers with the prior. It profiles nothing up front: a policy that
  decides on its draws explores.

Reports with a non-finite or non-positive rate or seconds are ignored with a logged reason.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from bayes_sched.cells import Cell, CellObservation
from bayes_sched.estimation.throughput.observations import (
    UsableObservations,
    usable_observations,
)
from bayes_sched.estimation.throughput_cells import CellPrediction, ThroughputBelief
from bayes_sched.throughputs import ThroughputTable

LOG = logging.getLogger(__name__)

#: Gavel's steps/s for a job type it never measured (``DEFAULT_THROUGHPUT``).
DEFAULT_STEPS_PER_SECOND = 1.0


def _point(mean: np.ndarray, num_draws: int) -> CellPrediction:
    """A point estimator's answer: the draws are the mean (one row when none are asked for)."""
    return CellPrediction(mean=mean, draws=np.repeat(mean[None, :], max(num_draws, 1), axis=0))


@dataclass(frozen=True)
class TableBelief:
    """The measured table as a belief (a point estimate: the draws are the mean)."""

    table: ThroughputTable

    def steps_per_second(self, cell: Cell) -> float:
        if cell.partner is None:
            rate = self.table.steps_per_second(cell.job_type, cell.scale_factor, cell.gpu_type)
            return DEFAULT_STEPS_PER_SECOND if rate is None else rate
        pair = self.table.pair_steps_per_second(
            cell.gpu_type, (cell.job_type, cell.scale_factor), (cell.partner, cell.scale_factor))
        return 0.0 if pair is None else pair[0]

    def predict(self, cells: Sequence[Cell], num_draws: int = 0, seed: int = 0
                ) -> CellPrediction:
        return _point(np.array([self.steps_per_second(c) for c in cells], dtype=float),
                      num_draws)


class OracleLearner:
    """The known table, whatever the jobs report (the upper bound).

    Args:
        table: the measured throughputs the jobs run at.
    """

    name = "oracle"

    def __init__(self, table: ThroughputTable) -> None:
        self._belief = TableBelief(table)

    def fit(self, observations: Sequence[CellObservation]) -> ThroughputBelief:
        return self._belief  # the same object: nothing was learned

    def fits(self, cell: Cell) -> bool:
        """Where the table says a job fits: a positive entry, or (alone) a job type it lacks
        (Gavel's default rate everywhere); a pair only where the table has it positive."""
        table = self._belief.table
        if cell.partner is None:
            rate = table.steps_per_second(cell.job_type, cell.scale_factor, cell.gpu_type)
            return rate is None or rate > 0
        pair = table.pair_steps_per_second(cell.gpu_type, (cell.job_type, cell.scale_factor),
                                           (cell.partner, cell.scale_factor))
        return pair is not None and min(pair) > 0

    def profiling_cells(self, job_type: str, scale_factor: int, gpu_types: Sequence[str],
                        belief: ThroughputBelief) -> list[Cell]:
        return []


@dataclass(frozen=True)
class UniformBelief:
    """No estimation: every job type at :data:`DEFAULT_STEPS_PER_SECOND` on every GPU type,
    every pair at 0 (nothing is known to pay for sharing)."""

    def predict(self, cells: Sequence[Cell], num_draws: int = 0, seed: int = 0
                ) -> CellPrediction:
        return _point(np.array([DEFAULT_STEPS_PER_SECOND if c.partner is None else 0.0
                                for c in cells], dtype=float), num_draws)


class UniformLearner:
    """No estimation (the baseline for policies without a heterogeneity-agnostic variant):
    ignores the reports and believes every job runs at one steps/s everywhere, alone only."""

    name = "uniform"

    def fit(self, observations: Sequence[CellObservation]) -> ThroughputBelief:
        return _UNIFORM

    def profiling_cells(self, job_type: str, scale_factor: int, gpu_types: Sequence[str],
                        belief: ThroughputBelief) -> list[Cell]:
        return []


_UNIFORM = UniformBelief()


@dataclass(frozen=True)
class LogNormalCellBelief:
    """Independent log-normal posteriors per cell.

    Attributes:
        prior_mean: prior mean of ``log(steps/s)``.
        prior_sd: prior standard deviation of ``log(steps/s)``.
        posterior: ``{cell: (mean, sd) of log(steps/s)}`` for the cells with reports.
    """

    prior_mean: float
    prior_sd: float
    posterior: Mapping[Cell, tuple[float, float]]

    def log_moments(self, cells: Sequence[Cell]) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation of ``log(steps/s)`` per cell, two arrays ``(N,)``."""
        prior = (self.prior_mean, self.prior_sd)
        moments = np.array([self.posterior.get(c, prior) for c in cells],
                           dtype=float).reshape(-1, 2)
        return moments[:, 0], moments[:, 1]

    def log_variance_and_fit(self, cells: Sequence[Cell]) -> tuple[np.ndarray, np.ndarray]:
        """The variance of each cell's log steps/s and the probability it runs (1: this
        belief does not model where jobs fit), each ``(N,)``."""
        return self.log_moments(cells)[1] ** 2, np.ones(len(cells))

    def predict(self, cells: Sequence[Cell], num_draws: int = 0, seed: int = 0
                ) -> CellPrediction:
        mu, sd = self.log_moments(cells)
        mean = np.exp(mu + sd ** 2 / 2.0)
        if num_draws == 0:
            return CellPrediction(mean=mean, draws=mean[None, :])
        z = np.random.default_rng(seed).standard_normal((num_draws, len(cells)))
        return CellPrediction(mean=mean, draws=np.exp(mu + sd * z))


class PerCellLearner:
    """Independent conjugate log-normal posterior per cell (no pooling; see the module).

    Args:
        prior_mean_steps_per_second: prior median steps/s of every cell (10: the order of
            magnitude of the shipped tables, whose rates span 0.1 to 700).
        prior_sd: prior standard deviation of ``log(steps/s)`` (3: the 95 % prior interval
            spans a factor of about 360 either way).
        observation_sd: standard deviation of one report's ``log(steps/s)`` (0.1: above the
            clusters' default 5 % noise, so the learner is not overconfident).
    """

    name = "per_cell"

    def __init__(self, prior_mean_steps_per_second: float = 10.0, prior_sd: float = 3.0,
                 observation_sd: float = 0.1) -> None:
        if not (prior_mean_steps_per_second > 0 and prior_sd > 0 and observation_sd > 0):
            raise ValueError("prior_mean_steps_per_second, prior_sd and observation_sd must "
                             "be > 0")
        self.prior_mean = math.log(prior_mean_steps_per_second)
        self.prior_sd = float(prior_sd)
        self.observation_sd = float(observation_sd)
        # Sufficient statistics (reports, sum of log rates) and the posterior per cell, kept so
        # that a refit on the same observations with new ones appended reads only the new ones.
        self._sums: dict[Cell, list[float]] = {}
        self._posterior: dict[Cell, tuple[float, float]] = {}
        self._count = 0
        self._last: CellObservation | None = None

    def fit(self, observations: Sequence[CellObservation]) -> ThroughputBelief:
        count = self._count
        if count and not (len(observations) >= count and observations[count - 1] is self._last):
            self._sums, self._posterior, count = {}, {}, 0  # not an extension: start over
        new = observations[count:]
        self._count = len(observations)
        self._last = observations[-1] if observations else None
        touched = set()
        for observation in new if isinstance(observations, UsableObservations) \
                else usable_observations(new):
            if observation.out_of_memory:
                continue  # not a rate: the estimation stage keeps where jobs do not fit
            total = self._sums.setdefault(observation.cell, [0.0, 0.0])
            total[0] += 1.0
            total[1] += math.log(observation.steps_per_second)
            touched.add(observation.cell)
        prior_precision = self.prior_sd ** -2
        noise_precision = self.observation_sd ** -2
        for cell in touched:
            reports, log_sum = self._sums[cell]
            precision = prior_precision + reports * noise_precision
            mean = (self.prior_mean * prior_precision + log_sum * noise_precision) / precision
            self._posterior[cell] = (mean, precision ** -0.5)
        # A copy: beliefs handed out earlier stay as they were.
        return LogNormalCellBelief(self.prior_mean, self.prior_sd,
                                   MappingProxyType(dict(self._posterior)))

    def profiling_cells(self, job_type: str, scale_factor: int, gpu_types: Sequence[str],
                        belief: ThroughputBelief) -> list[Cell]:
        return []

"""Co-location and contention estimates as :class:`~bayes_sched.estimates.Posterior` s, and
their typed keys in the :class:`~bayes_sched.estimates.Estimates` bundle.

:class:`SlowdownPosterior`: slowdown predictors composed in order, over candidate allocations
``(P, J, N)``, the log speed factor of every job in every candidate, shape ``(P, J)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bayes_sched.estimates import DrawsPosterior, Need
from bayes_sched.interference.predictor import SlowdownPredictor

#: Co-location slowdown predictors, composed in order (:class:`SlowdownPosterior`).
COLOCATION: Need[Sequence[SlowdownPredictor]] = Need("colocation")
#: The contention posterior from counters, as a slowdown predictor.
CONTENTION: Need[SlowdownPredictor] = Need("contention")


class SlowdownPosterior:
    """Log speed factor (``<= 0`` where sharing hurts) of every job in every candidate under the
    composition of ``predictors``: the sum of their log slowdowns, shape ``(P, J)`` for
    ``states`` ``(P, J, N)`` and ``applications`` ``(J,)``.

    The draws are the predictors' fixed joint draws summed (a predictor without uncertainty adds
    its mean to each), resampled to ``n`` with ``seed``; quantiles are those of the fixed draws.
    """

    def __init__(self, predictors: Sequence[SlowdownPredictor], states: np.ndarray,
                 applications: Sequence[str]) -> None:
        self.predictors = list(predictors)
        self.states = states
        self.applications = applications

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.states.shape[0], self.states.shape[1])

    def mean(self) -> np.ndarray:
        total = np.zeros(self.shape)
        for predictor in self.predictors:
            total = total + predictor.log_slowdown(self.states, self.applications)
        return total

    def _fixed(self) -> DrawsPosterior:
        total = np.zeros((1, *self.shape))
        for predictor in self.predictors:
            total = total + predictor.log_slowdown(self.states, self.applications, draws=True)
        return DrawsPosterior(total.reshape(-1, *self.shape), self.mean())

    def quantile(self, q: float) -> np.ndarray:
        return self._fixed().quantile(q)

    def draws(self, n: int, seed: int = 0) -> np.ndarray:
        return self._fixed().draws(n, seed)


__all__ = ["COLOCATION", "CONTENTION", "SlowdownPosterior"]

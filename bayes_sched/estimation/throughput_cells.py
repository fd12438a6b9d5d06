"""Beliefs about steps/s: the interface between throughput learners and the policies that read them.

A *cell* is one throughput a scheduler may need: a job type at a scale factor on a GPU type,
alone or sharing each of its GPUs with a job of another type (Gavel's pairs; same scale factor).
What a cluster reports is a :class:`CellObservation` (steps/s measured over some seconds); a
:class:`ThroughputLearner` turns observations into a :class:`ThroughputBelief`, whose one method,
:meth:`ThroughputBelief.predict`, answers a batch of cells with a posterior mean and posterior
draws (a point estimator answers with one draw equal to its mean). Policies read only beliefs;
the known table (the oracle), Gavel's matrix completion, Sia's one-GPU bootstrap and our
Bayesian model are all learners behind this one interface.

Units: steps per second of the whole job (all its GPUs together), as in
:mod:`bayes_sched.throughputs`; 0 means the job cannot run there (out of memory: a report with
``out_of_memory``, which the estimation stage learns, not a rate).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from bayes_sched.cells import Cell, CellObservation


@dataclass(frozen=True)
class CellPrediction:
    """A belief's answer for ``N`` cells.

    Attributes:
        mean: posterior mean steps/s, shape ``(N,)``.
        draws: posterior draws of steps/s, shape ``(S, N)`` with ``S >= 1``; a point estimator
            gives one row equal to ``mean``.
    """

    mean: np.ndarray
    draws: np.ndarray

    def interval(self, mass: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
        """Central ``mass`` interval of the draws, two arrays of shape ``(N,)`` (both equal to the
        mean for a point estimator)."""
        tail = (1.0 - mass) / 2.0
        return (np.quantile(self.draws, tail, axis=0), np.quantile(self.draws, 1.0 - tail, axis=0))


class ThroughputBelief(Protocol):
    """What a scheduler believes about steps/s (read-only)."""

    def predict(self, cells: Sequence[Cell], num_draws: int = 0, seed: int = 0
                ) -> CellPrediction:
        """Posterior mean of every cell and ``num_draws`` joint posterior draws (``seed`` makes
        them reproducible); with ``num_draws == 0`` the draws are the mean, shape ``(1, N)``."""
        ...


class ThroughputLearner(Protocol):
    """Fits a belief to what jobs reported."""

    name: str

    def fit(self, observations: Sequence[CellObservation]) -> ThroughputBelief:
        """The belief given ``observations`` (those with a non-finite or non-positive rate, or
        non-positive seconds, are ignored with a logged reason)."""
        ...

    def profiling_cells(self, job_type: str, scale_factor: int, gpu_types: Sequence[str],
                        belief: ThroughputBelief) -> list[Cell]:
        """The cells a newly submitted job of ``job_type`` on ``scale_factor`` GPUs should be
        measured in before its belief is used (Gavel: a fraction of its pairs with reference
        jobs; Sia: one GPU of every type); empty for a learner that profiles nothing up front
        (the oracle, or a policy that explores by posterior draws instead)."""
        ...


_BATCH_SIZE = re.compile(r"^(?P<family>.+?) \(batch size (?P<batch>\d+)\)$")


def job_type_features(job_type: str) -> tuple[str, int | None]:
    """What a job type declares at submission: its model family and batch size
    (``"ResNet-50 (batch size 32)"`` -> ``("ResNet-50", 32)``; ``"A3C"`` -> ``("A3C", None)``)."""
    match = _BATCH_SIZE.match(job_type)
    if match is None:
        return job_type, None
    return match["family"], int(match["batch"])

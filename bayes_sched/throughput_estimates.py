"""What a policy reads for the ``throughput`` need: the contracts of the estimate, in the core.

The estimation stage publishes one value under :data:`THROUGHPUT` in the round's
:class:`~bayes_sched.estimates.Estimates`, of one of two kinds:

* :class:`KnownThroughputs`: steps/s known for certain (the truth a world supplies through its
  ``oracle`` estimator, a measured table). A policy reads it as it would read the table
  itself: ``steps_per_second(job type, scale factor, GPU type)`` alone and
  ``pair_steps_per_second(GPU type, a, b)`` for two job classes sharing GPUs; ``None`` where the
  table has no entry.
* :class:`LearnedThroughputs`: a stage that learns steps/s from the jobs' reports (a learner
  behind the loop's throughput estimator): its :attr:`~LearnedThroughputs.belief` (a
  :class:`ThroughputBelief`, fitted lazily when read), where jobs fit (learned from failed
  launches), and the profiling plan of each job, which a policy runs and may amend.

Units: steps per second of the whole job (all its GPUs together); 0 means the job cannot run
there. A job class is ``(job type, scale factor)``.

This module is core: it imports no estimator, policy, table loader or simulator, so that a
policy reads these contracts without importing any estimator implementation.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from bayes_sched.cells import Cell, CellObservation
from bayes_sched.estimates import Need, check_quantile, resample_draws

#: A job class: ``(job type, scale factor)``.
JobClass = tuple[str, int]


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


#: Draws a :class:`CellPosterior` reads its quantiles from (joint draws of the belief, seed 0).
QUANTILE_DRAWS = 256


class CellPosterior:
    """Steps/s of ``cells`` under ``belief``, shape ``(N,)``.

    The mean and draws are the belief's (:meth:`ThroughputBelief.predict`); a point belief's
    single row is repeated. Quantiles are those of :data:`QUANTILE_DRAWS` joint draws (seed 0),
    so a point belief's quantiles are its value.
    """

    def __init__(self, belief: ThroughputBelief, cells: Sequence[Cell]) -> None:
        self.belief = belief
        self.cells = list(cells)

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.cells),)

    def mean(self) -> np.ndarray:
        return self.belief.predict(self.cells).mean

    def quantile(self, q: float) -> np.ndarray:
        return np.asarray(np.quantile(self.draws(QUANTILE_DRAWS), check_quantile(q), axis=0))

    def draws(self, n: int, seed: int = 0) -> np.ndarray:
        drawn = self.belief.predict(self.cells, n, seed).draws
        return drawn if drawn.shape[0] == n else resample_draws(drawn, n, seed)


@runtime_checkable
class KnownThroughputs(Protocol):
    """Steps/s known for certain (a measured table, as the world's oracle publishes it)."""

    def steps_per_second(self, job_type: str, scale_factor: int, gpu_type: str
                         ) -> float | None:
        """Steps/s of a job of ``job_type`` on ``scale_factor`` GPUs of ``gpu_type`` alone
        (``None``: not measured)."""
        ...

    def pair_steps_per_second(self, gpu_type: str, a: JobClass, b: JobClass
                              ) -> tuple[float, float] | None:
        """Steps/s of ``a`` and of ``b`` sharing GPUs of ``gpu_type`` (``None``: the pair was
        not measured)."""
        ...


class LearnedThroughputs(Protocol):
    """Steps/s learned from the jobs' reports, as the loop's throughput estimator keeps them."""

    @property
    def belief(self) -> ThroughputBelief:
        """The belief on every report so far (refitted first where a refit is due)."""
        ...

    @property
    def version(self) -> int:
        """Changes only when a fit returns a new belief."""
        ...

    @property
    def fits_version(self) -> tuple[int, int]:
        """Changes whenever :meth:`fits`' answers may (callers memoise ``fits`` per value)."""
        ...

    @property
    def failed_launches(self) -> Collection[Cell]:
        """Cells where a job failed to launch (out of memory), in the order first read."""
        ...

    @property
    def observations(self) -> Sequence[CellObservation]:
        """Every usable report so far, in the order read."""
        ...

    def refresh(self) -> None:
        """Refit when there are new reports and the refit interval has passed."""
        ...

    def fits(self, cell: Cell) -> bool:
        """Whether ``cell`` may run (no failed launch there, and the learner does not say
        otherwise)."""
        ...

    def pending_profiling(self, job: str) -> tuple[Cell, ...]:
        """The cells ``job`` is still to be measured in, in the learner's order."""
        ...

    def request_profiling(self, job: str, cell: Cell) -> None:
        """Add ``cell`` to the end of ``job``'s profiling plan (a policy's exploration trial)."""
        ...

    def drop_profiling(self, job: str, cell: Cell, why: str) -> None:
        """Strike ``cell`` off ``job``'s plan unmeasured (the policy cannot run it there)."""
        ...


#: What the ``throughput`` need holds: a known table or a learning stage.
ThroughputEstimate = KnownThroughputs | LearnedThroughputs

#: Steps/s per cell (:class:`KnownThroughputs` from the world's oracle, else
#: :class:`LearnedThroughputs`).
THROUGHPUT: Need[ThroughputEstimate] = Need("throughput")


__all__ = ["QUANTILE_DRAWS", "THROUGHPUT", "CellPosterior", "CellPrediction", "JobClass",
           "KnownThroughputs", "LearnedThroughputs",
           "ThroughputBelief", "ThroughputEstimate"]

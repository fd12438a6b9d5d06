"""Co-location costs in the Pollux world as paired cells of a throughput learner.

The ``bo`` policy learns what sharing a node costs each job from the jobs' progress. It does so
with the same estimator the time-sharing policies read (:mod:`bayes_sched.estimation.
throughput_cells`; by default ours, :class:`~bayes_sched.estimation.throughput.bayesian.
BayesianThroughputLearner`), one machinery for both worlds. This module is the translation:

* a job *class* is its application and whether it spans several nodes (both known to any
  scheduler), ``k = 2 * application index + distributed``;
* class ``k`` alone is the cell ``Cell(application, 1 or 2, NODE_SHARING)`` (scale factor 1: one
  node, 2: several), and class ``k`` sharing its node with a co-runner of class ``m`` is the same
  cell with ``partner`` the co-runner's class name (:func:`class_name`: the application, with
  ``ACROSS_NODES`` appended for a distributed co-runner);
* a cell's "steps/s" is the job's progress relative to what its own goodput model predicted
  (``exp`` of the residual the policy measures; 1 = as predicted), reported over the seconds of
  one round;
* the co-location log slowdown of class ``k`` beside class ``m`` is
  ``log paired(k | m) - log alone(k)``: posterior means from the belief's log moments where it has
  them (exact, by linearity), joint posterior draws from :meth:`ThroughputBelief.predict`.

The learner's paired effects then play the parts the ``bo`` policy's former pair kernel had: a
level shared by every co-location (``pair_level``, broad) and its deviation per scale
(``pair_level_place``, the learner's default standard deviation 0.5: co-location across nodes
starts from what sharing one node was seen to cost, not from the broad prior, whose variance of
25 made its first draws span e^+-10), an effect of the job's class (``pair_type``), of the
co-runner's class (``pair_partner``), of the application pair across both classes'
distributedness (``pair_family``: the job's family is its application whatever its scale) and
the pair cell's own effect (the ``pair`` nugget). :class:`PairPrior` gives their starting
standard deviations. Every co-location here launches (a node has room for its jobs), so the
learner does not model where pairs fit (``learn_pair_fits=False``).

Old reports are forgotten geometrically (:meth:`PairCellObservations.decay`): models and
workloads drift. Observations are pooled per cell, so a fit costs the same however many rounds
were seen.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Protocol, runtime_checkable

import numpy as np

from bayes_sched.cells import Cell, CellObservation
from bayes_sched.estimation.throughput.effects import (
    LOG_VARIANCE_BOUNDS,
    NUGGETS,
    RANDOM_EFFECTS,
    FixedPriors,
    default_log_variances,
)
from bayes_sched.estimation.throughput_cells import ThroughputBelief
from bayes_sched.registry import Range

#: The "GPU type" of every node-sharing cell: the Pollux world has one kind of node.
NODE_SHARING = "node"
#: Appended to a distributed co-runner's application to name its class.
ACROSS_NODES = " across nodes"


#: The learner's unlearned levels here: a cell's "steps/s" is progress relative to its goodput
#: model's prediction (1 = as predicted), so every level is centred on 0 (co-location harmless
#: until shown otherwise) with the broad standard deviation 5 the levels always had here.
NODE_SHARING_PRIORS = FixedPriors(level_mean=0.0, level_sd=5.0, scale_sd=5.0, pair_mean=0.0,
                                  pair_sd=5.0)


def class_name(application: str, distributed: bool) -> str:
    """A job class as a partner names it: ``"bert"`` or ``"bert across nodes"``."""
    return application + ACROSS_NODES if distributed else application


def class_cell(applications: Sequence[str], own: int, partner: int | None = None) -> Cell:
    """The cell of class ``own`` (index ``2 * application + distributed`` into
    ``applications``) alone (``partner`` ``None``) or beside a co-runner of class ``partner``."""
    other = None if partner is None else class_name(applications[partner // 2],
                                                    bool(partner % 2))
    return Cell(applications[own // 2], 1 + own % 2, NODE_SHARING, other)


@dataclass(frozen=True)
class PairPrior:
    """Starting prior standard deviations (log slowdown per co-runner) of the learner's paired
    effects: the job's class (``own``: ``pair_type``), the co-runner's class (``other``:
    ``pair_partner``), the application pair (``apps``: ``pair_family``) and the pair cell's own
    effect (``pair``: the paired nugget). Their prior means are 0: co-location is harmless until
    shown otherwise. The learner's per-GPU-type copies of these effects coincide with them here
    (one node type), so they start at the smallest variance the learner allows."""

    own: Annotated[float, Range(0.0, min_open=True)] = 0.04
    other: Annotated[float, Range(0.0, min_open=True)] = 0.04
    apps: Annotated[float, Range(0.0, min_open=True)] = 0.08
    pair: Annotated[float, Range(0.0, min_open=True)] = 0.04

    def log_variances(self) -> np.ndarray:
        """The learner's starting hyperparameters (learned log variances, then log nuggets)."""
        values = default_log_variances()
        index = {name: i for i, name in enumerate(RANDOM_EFFECTS)}
        for name, sd in (("pair_type", self.own), ("pair_partner", self.other),
                         ("pair_family", self.apps)):
            values[index[name]] = 2 * math.log(sd)
        for name in ("pair_type_gpu", "pair_partner_gpu", "pair_family_gpu"):
            values[index[name]] = LOG_VARIANCE_BOUNDS[0]
        values[len(RANDOM_EFFECTS) + NUGGETS.index("pair")] = 2 * math.log(self.pair)
        return values


@runtime_checkable
class LogMomentBelief(Protocol):
    """A belief that also gives each cell's posterior mean and variance of log steps/s."""

    def log_moments(self, cells: Sequence[Cell]) -> tuple[np.ndarray, np.ndarray, Any]:
        ...


class PairCellObservations:
    """Reports of node-sharing cells, pooled per cell with geometric forgetting.

    Each cell keeps its forgotten seconds and the seconds-weighted sum of its log relative rates;
    :meth:`observations` hands the learner one pooled report per cell (the learner pools reports
    of a cell the same way, so this equals feeding it every report with forgotten seconds).
    """

    def __init__(self) -> None:
        self._seconds: dict[Cell, float] = {}
        self._log_sum: dict[Cell, float] = {}

    def add(self, cell: Cell, log_rate: float, seconds: float) -> None:
        """One report: log relative progress ``log_rate`` over ``seconds`` (> 0) in ``cell``."""
        if not (math.isfinite(log_rate) and math.isfinite(seconds) and seconds > 0):
            return
        self._seconds[cell] = self._seconds.get(cell, 0.0) + seconds
        self._log_sum[cell] = self._log_sum.get(cell, 0.0) + seconds * log_rate

    def decay(self, forget: float) -> None:
        """Multiply every cell's weight by ``forget``; drop cells whose weight is negligible."""
        for cell in list(self._seconds):
            self._seconds[cell] *= forget
            self._log_sum[cell] *= forget
            if self._seconds[cell] < 1e-3:
                del self._seconds[cell], self._log_sum[cell]

    def observations(self, time: float = 0.0) -> list[CellObservation]:
        """One pooled report per cell."""
        return [CellObservation(cell, math.exp(self._log_sum[cell] / seconds), seconds, time)
                for cell, seconds in self._seconds.items()]

    def cells(self) -> list[Cell]:
        return list(self._seconds)


def log_slowdown_table(belief: ThroughputBelief, applications: Sequence[str], num_draws: int,
                       seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mean ``(K, K)`` and ``num_draws`` joint draws ``(S, K, K)`` of the co-location
    log slowdown of every class beside every class (``K = 2 * len(applications)``; rows: the
    job's class, columns: the co-runner's).

    The mean is the difference of the cells' posterior means of log steps/s where the belief has
    them (:class:`LogMomentBelief`), else of the logs of its mean steps/s (exact for a point
    belief, whose draws equal its mean)."""
    classes = 2 * len(applications)
    alone = [class_cell(applications, k) for k in range(classes)]
    paired = [class_cell(applications, k, m) for k in range(classes) for m in range(classes)]
    prediction = belief.predict(alone + paired, num_draws=num_draws, seed=seed)
    log_draws = np.log(prediction.draws)
    draws = (log_draws[:, classes:].reshape(-1, classes, classes)
             - log_draws[:, :classes, None])
    if isinstance(belief, LogMomentBelief):
        log_mean = belief.log_moments(alone + paired)[0]
    else:
        log_mean = np.log(prediction.mean)
    mean = log_mean[classes:].reshape(classes, classes) - log_mean[:classes, None]
    return mean, draws

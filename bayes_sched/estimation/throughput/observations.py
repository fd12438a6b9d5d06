"""What every throughput learner does with reports: drop bad ones, pool the rest per cell.

Also the bridge from a shipped :class:`~bayes_sched.throughputs.ThroughputTable` to cells and
observations (the offline benchmark and the tests feed learners a table this way).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from bayes_sched.cells import Cell, CellObservation
from bayes_sched.estimation.throughput_cells import CellPrediction
from bayes_sched.throughputs import ThroughputTable

logger = logging.getLogger(__name__)

#: Seconds a table entry counts as measured over (one Gavel round).
TABLE_SECONDS = 360.0


def _bad_reason(observation: CellObservation) -> str | None:
    rate, seconds = observation.steps_per_second, observation.seconds
    if observation.out_of_memory:
        return None if math.isfinite(seconds) and seconds >= 0 else f"measured over {seconds} s"
    if not math.isfinite(rate):
        return f"steps/s is {rate}"
    if rate <= 0:
        return f"steps/s {rate} <= 0"
    if not math.isfinite(seconds) or seconds <= 0:
        return f"measured over {seconds} s"
    return None


def usable_observations(observations: Iterable[CellObservation],
                        log: logging.Logger = logger) -> list[CellObservation]:
    """The observations with a finite positive rate over positive seconds; each other one is
    logged (warning) with its reason and left out."""
    listed = list(observations)
    # The usual list (every rate and seconds finite and positive, no failed launch: what
    # _bad_reason passes) as it is, without a call per report (the stage reads every job's
    # reports every round).
    if all(0.0 < o.steps_per_second < math.inf and 0.0 < o.seconds < math.inf
           and not o.out_of_memory for o in listed):
        return listed
    kept = []
    for observation in listed:
        reason = _bad_reason(observation)
        if reason is None:
            kept.append(observation)
        else:
            log.warning("ignored report for %s at t=%s s: %s (expected a finite rate > 0 over "
                        "seconds > 0)", observation.cell, observation.time, reason)
    return kept


class UsableObservations(list[CellObservation]):
    """A list of observations every one of which passed :func:`usable_observations` (the
    estimation stage's reports, checked as they arrive): a learner's pool reads them without
    checking them again. Only append observations that passed."""


@dataclass(frozen=True)
class PooledCell:
    """All usable reports of one cell.

    Attributes:
        rate: seconds-weighted mean steps/s.
        log_rate: seconds-weighted mean of log steps/s.
        seconds: total seconds measured.
    """

    rate: float
    log_rate: float
    seconds: float


def pool(observations: Sequence[CellObservation]) -> dict[Cell, PooledCell]:
    """Usable reports pooled per cell (bad ones logged and left out), in first-seen order."""
    return IncrementalPool().update(observations)


class IncrementalPool:
    """:func:`pool` kept up to date as a growing list of observations is passed again: a list
    that extends the one seen last (same length prefix, same last object) costs only its new
    tail; any other list is pooled from scratch. The sums are added in the same order as
    :func:`pool` adds them, so the result is the same to the last bit (an online loop hands its
    learner every report so far at each fit, and pooling them all again grows with the
    rounds)."""

    def __init__(self) -> None:
        self._sums: dict[Cell, list[float]] = {}
        self._pooled: dict[Cell, PooledCell] = {}
        self._count = 0
        self._last: CellObservation | None = None
        #: Whether the last :meth:`update` read only the new tail of the list seen before.
        self.extended = False
        #: The cells whose pooled reports the last :meth:`update` changed or added, in
        #: first-seen order (every cell after a start over).
        self.touched: list[Cell] = []

    def extends(self, observations: Sequence[CellObservation]) -> bool:
        """Whether ``observations`` extends the list pooled last (its first reports are that
        list's: same last object at the same place)."""
        count = self._count
        return bool(count) and len(observations) >= count \
            and observations[count - 1] is self._last

    def update(self, observations: Sequence[CellObservation]) -> dict[Cell, PooledCell]:
        """The pooled usable observations of ``observations`` (as :func:`pool`)."""
        count = self._count
        self.extended = self.extends(observations)
        if not self.extended:
            # Not an extension of the last list: start over.
            self._sums, self._pooled, count = {}, {}, 0
        touched: dict[Cell, None] = {}  # in first-seen order, as the new cells join _sums
        new = observations[count:]
        sums, log = self._sums, math.log
        for obs in new if isinstance(observations, UsableObservations) \
                else usable_observations(new):
            if obs.out_of_memory:
                continue  # not a rate: the estimation stage keeps where jobs do not fit
            cell, rate, seconds = obs.cell, obs.steps_per_second, obs.seconds
            acc = sums.get(cell)
            if acc is None:
                acc = sums[cell] = [0.0, 0.0, 0.0]
            acc[0] += rate * seconds
            acc[1] += log(rate) * seconds
            acc[2] += seconds
            touched[cell] = None
        for cell in touched:
            a, b, s = self._sums[cell]
            self._pooled[cell] = PooledCell(a / s, b / s, s)
        self._count = len(observations)
        self._last = observations[-1] if observations else None
        self.touched = list(touched)
        return dict(self._pooled)


def table_rate(table: ThroughputTable, cell: Cell) -> float | None:
    """The table's steps/s in ``cell`` (``None`` where it has no entry)."""
    if cell.partner is None:
        return table.steps_per_second(cell.job_type, cell.scale_factor, cell.gpu_type)
    pair = table.pair_steps_per_second(cell.gpu_type, (cell.job_type, cell.scale_factor),
                                       (cell.partner, cell.scale_factor))
    return None if pair is None else pair[0]


def table_cells(table: ThroughputTable) -> list[Cell]:
    """Every cell with a positive rate in ``table``: alone, then in pairs."""
    cells = [Cell(job_type, sf, gpu) for (job_type, sf), rates in table.solo.items()
             for gpu, rate in rates.items() if rate > 0]
    cells += [Cell(a[0], a[1], gpu, b[0]) for gpu, pairs in table.pairs.items()
              for (a, b), (rate, _) in pairs.items() if rate > 0]
    return cells


def job_cells(table: ThroughputTable, job_type: str, scale_factor: int) -> list[Cell]:
    """The cells a scheduler needs for a job of ``job_type`` on ``scale_factor`` GPUs that the
    table has positive rates for: alone on every GPU type, its rate beside every partner and every
    partner's rate beside it."""
    return [cell for cell in table_cells(table) if cell.scale_factor == scale_factor
            and (cell.job_type == job_type or cell.partner == job_type)]


def table_observations(table: ThroughputTable, keep: Callable[[Cell], bool] = lambda _: True,
                       seconds: float = TABLE_SECONDS) -> list[CellObservation]:
    """The table's positive cells accepted by ``keep`` as observations over ``seconds``."""
    out = []
    for cell in table_cells(table):
        if keep(cell):
            rate = table_rate(table, cell)
            assert rate is not None
            out.append(CellObservation(cell, rate, seconds))
    return out


class PointTable:
    """Pooled mean rates with the lookups the point estimators (Gavel's, Sia's) share.

    A paired rate is predicted as the job's alone rate times a *ratio* (paired / alone, Gavel's
    normalised throughput) borrowed from stand-in types: ``substitute`` maps a job type to the
    known type whose throughputs it uses (Gavel: its nearest reference type; Sia: its nearest
    type by one-GPU profile).
    """

    def __init__(self, pooled: Mapping[Cell, PooledCell]) -> None:
        self.rates = {cell: p.rate for cell, p in pooled.items()}
        #: ``{(job type, scale factor): {gpu type: alone steps/s}}``.
        self.alone: dict[tuple[str, int], dict[str, float]] = {}
        for cell, rate in self.rates.items():
            if cell.partner is None:
                self.alone.setdefault((cell.job_type, cell.scale_factor), {})[cell.gpu_type] = rate
        self._mean_ratios: dict[tuple[int, str], float] = {}

    def rate(self, cell: Cell) -> float | None:
        return self.rates.get(cell)

    def ratio(self, job_type: str, partner: str, scale_factor: int, gpu: str) -> float | None:
        """Observed paired / alone rate of ``job_type`` beside ``partner``."""
        pair = self.rates.get(Cell(job_type, scale_factor, gpu, partner))
        alone = self.rates.get(Cell(job_type, scale_factor, gpu))
        return None if pair is None or alone is None else pair / alone

    def mean_ratio(self, scale_factor: int, gpu: str) -> float:
        """Mean observed ratio at ``scale_factor`` on ``gpu`` (1 where none is observed)."""
        if (scale_factor, gpu) in self._mean_ratios:
            return self._mean_ratios[(scale_factor, gpu)]
        ratios = [r for cell in self.rates if cell.partner is not None
                  and cell.scale_factor == scale_factor and cell.gpu_type == gpu
                  and (r := self.ratio(cell.job_type, cell.partner, scale_factor, gpu))
                  is not None]
        mean = float(np.mean(ratios)) if ratios else 1.0
        self._mean_ratios[(scale_factor, gpu)] = mean
        return mean

    def mean_alone(self, scale_factor: int, gpu: str) -> float:
        """Geometric mean alone rate at ``scale_factor`` on ``gpu`` (1 where none is observed)."""
        known = [rates[gpu] for (_, s), rates in self.alone.items()
                 if s == scale_factor and gpu in rates]
        return float(np.exp(np.mean(np.log(known)))) if known else 1.0

    def substituted_ratio(self, cell: Cell, substitute: Mapping[str, str],
                          fallback: Callable[[str, str], float | None] | None = None) -> float:
        """The ratio for paired ``cell``: observed, else with the job, the partner or both
        replaced by their stand-ins, else ``fallback(stand-in job, stand-in partner)``, else the
        mean ratio."""
        assert cell.partner is not None
        x, y = cell.job_type, cell.partner
        sx, sy = substitute.get(x, x), substitute.get(y, y)
        for a, b in ((x, y), (sx, y), (x, sy), (sx, sy)):
            found = self.ratio(a, b, cell.scale_factor, cell.gpu_type)
            if found is not None:
                return found
        if fallback is not None and (found := fallback(sx, sy)) is not None:
            return found
        return self.mean_ratio(cell.scale_factor, cell.gpu_type)


class PointBelief:
    """A point estimator's belief (Gavel's, Sia's): a measured cell as measured, an alone cell
    by :meth:`alone`, a paired cell as its job's alone rate times :meth:`ratio`; one draw equal
    to the mean."""

    table: PointTable
    fallback_reason: str | None = None

    def alone(self, cell: Cell) -> float:
        """Steps/s of an alone cell that was not measured."""
        raise NotImplementedError

    def ratio(self, cell: Cell) -> float:
        """Paired / alone steps/s of a paired cell that was not measured."""
        raise NotImplementedError

    def rate(self, cell: Cell) -> float:
        if (rate := self.table.rate(cell)) is not None:
            return rate
        alone_cell = Cell(cell.job_type, cell.scale_factor, cell.gpu_type)
        alone = self.table.rate(alone_cell)
        alone = self.alone(alone_cell) if alone is None else alone
        return alone if cell.partner is None else alone * self.ratio(cell)

    def predict(self, cells: Sequence[Cell], num_draws: int = 0, seed: int = 0
                ) -> CellPrediction:
        mean = np.array([self.rate(cell) for cell in cells], dtype=float)
        return CellPrediction(mean, mean[None, :].copy())

"""Where two jobs fit in one GPU's memory, learned from their launches.

A pair of job types at a scale factor on a GPU type either fits (both jobs run: a paired rate is
reported) or does not (the launch fails: out of memory, :attr:`CellObservation.out_of_memory`).
What is unknown is whether a pair never launched fits. The pairs of one *group* (scale factor,
GPU type) fit with an unknown probability ``theta``, a priori uniform (``Beta(1, 1)``, Laplace's
rule of succession), and the distinct pairs of the group seen to fit or to fail update it:
``theta ~ Beta(1 + fits, 1 + failures)``. A pair is its two job types, unordered (both jobs of a
launch report it, and ``a`` beside ``b`` fits exactly when ``b`` beside ``a`` does).

A belief over rates is combined with it (:func:`with_pair_fits`): a pair known to fail predicts
0, one known to fit as the rate belief says, an unlaunched one has mean ``P(fit)`` times the
rate's mean, and a joint draw draws ``theta`` once per group, then each unlaunched pair's fit
from it (the same for both of its cells): Thompson sampling over where pairs fit as well as how
fast they run. Without it, a belief that only models rates treats every unlaunched pair as
fitting, so a policy deciding on its draws keeps packing pairs of a group where every launch so
far has failed (in Gavel's table no pair of multi-GPU jobs fits).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from bayes_sched.cells import Cell, CellObservation
from bayes_sched.estimation.throughput.observations import PooledCell
from bayes_sched.estimation.throughput_cells import CellPrediction

#: An unordered pair of job types at a scale factor on a GPU type.
PairKey = tuple[frozenset[str], int, str]
#: Scale factor, GPU type.
Group = tuple[int, str]


def pair_key(cell: Cell) -> PairKey:
    """The unordered pair a paired ``cell`` belongs to."""
    assert cell.partner is not None
    return frozenset((cell.job_type, cell.partner)), cell.scale_factor, cell.gpu_type


class PairLaunches:
    """The pairs seen to fit and to fail, kept up to date from a growing list of reports (the
    reports after ``seen`` are read; :meth:`restart` when the list is a new one)."""

    def __init__(self) -> None:
        self.fits: set[PairKey] = set()
        self.failures: set[PairKey] = set()
        #: The paired cells (both directions) of the pairs seen to fail and never to fit.
        self.failed_cells: set[Cell] = set()
        self.seen = 0
        self._last: CellObservation | None = None  # the last report read
        #: The belief on the launches read, until one changes them (its memo then stays).
        self._belief: PairFitBelief | None = None

    def restart(self) -> None:
        self.fits, self.failures, self.failed_cells, self.seen = set(), set(), set(), 0
        self._last = None
        self._belief = None

    def update(self, observations: Sequence[CellObservation]) -> PairFitBelief:
        """Read the reports not read yet (out-of-memory reports and positive paired rates; a
        report of a pair that ran wins over a failed launch of it)."""
        self._read(observations, len(observations))
        return self.belief()

    def belief(self) -> PairFitBelief:
        """Where pairs fit, given the reports read so far (the same object while no report
        read since changed the pairs seen to fit or to fail)."""
        if self._belief is None:
            self._belief = PairFitBelief.from_launches(self.fits, self.failures - self.fits)
        return self._belief

    def at(self, observations: Sequence[CellObservation], count: int) -> PairFitBelief:
        """Where pairs fit given the first ``count`` of ``observations``: the reports not read
        yet when the list extends the one read so far (the last report read is still at its
        place), else read again from the start."""
        if count < self.seen or (self.seen and observations[self.seen - 1] is not self._last):
            self.restart()
        self._read(observations, count)
        return self.belief()

    def _read(self, observations: Sequence[CellObservation], count: int) -> None:
        for report in observations[self.seen:count]:
            cell, partner = report.cell, report.cell.partner
            if partner is None:
                continue
            key = pair_key(cell)
            both = (cell, Cell(partner, cell.scale_factor, cell.gpu_type, cell.job_type))
            if report.out_of_memory:
                if key not in self.failures:
                    self.failures.add(key)
                    self._belief = None
                if key not in self.fits:
                    self.failed_cells.update(both)
            elif report.steps_per_second > 0:
                if key not in self.fits:
                    self.fits.add(key)
                    self._belief = None
                self.failed_cells.difference_update(both)
        if count > self.seen:
            self._last = observations[count - 1]
        self.seen = max(self.seen, count)


class LaunchesAt:
    """Where pairs fit given the first ``count`` of a growing list of reports, read on first
    use (:attr:`pair_fits`): a belief built for a policy that never asks about a pair (one that
    does not pack) never reads them. The list's first ``count`` reports must stay as they are
    (an online loop only appends)."""

    def __init__(self, launches: PairLaunches, observations: Sequence[CellObservation]) -> None:
        self._launches = launches
        self._observations = observations
        self._count = len(observations)
        self._belief: PairFitBelief | None = None

    @property
    def pair_fits(self) -> PairFitBelief:
        if self._belief is None:
            self._belief = self._launches.at(self._observations, self._count)
        return self._belief


@dataclass(frozen=True)
class PairFitBelief:
    """Posterior over which pairs fit (see the module docstring).

    Attributes:
        fits, failures: pairs seen to fit, and to fail (never seen to fit).
        counts: ``{group: (pairs seen to fit, pairs seen to fail)}``.
    """

    fits: frozenset[PairKey] = frozenset()
    failures: frozenset[PairKey] = frozenset()
    counts: dict[Group, tuple[int, int]] = field(default_factory=dict)
    #: :meth:`probabilities`' answers so far (a recompute asks of the same ~700 cells again).
    _probability: dict[Cell, float] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_launches(cls, fits: Iterable[PairKey], failures: Iterable[PairKey]
                      ) -> PairFitBelief:
        fits, failures = frozenset(fits), frozenset(failures)
        counts: dict[Group, list[int]] = {}
        for keys, slot in ((fits, 0), (failures, 1)):
            for _, scale_factor, gpu in keys:
                counts.setdefault((scale_factor, gpu), [0, 0])[slot] += 1
        return cls(fits, failures, {g: (a, b) for g, (a, b) in counts.items()})

    def _beta(self, group: Group) -> tuple[float, float]:
        fits, failures = self.counts.get(group, (0, 0))
        return 1.0 + fits, 1.0 + failures

    def probability(self, cell: Cell) -> float:
        """Posterior probability that ``cell`` runs (1 for an alone cell)."""
        return float(self.probabilities([cell])[0])

    def probabilities(self, cells: Sequence[Cell]) -> np.ndarray:
        """:meth:`probability` of each of ``cells`` ``(N,)``, those asked before read from
        a memo."""
        kept = self._probability
        missing = list(dict.fromkeys(cell for cell in cells if cell not in kept))
        if missing:
            kept.update(zip(missing, self._index(missing).probability.tolist(), strict=True))
        return np.array([kept[cell] for cell in cells], dtype=float).reshape(len(cells))

    def _index(self, cells: Sequence[Cell]) -> _PairIndex:
        """Each paired cell's pair and each pair's group and state, as arrays."""
        rows, key_of_row = [], []
        keys: dict[PairKey, int] = {}
        for i, cell in enumerate(cells):
            if cell.partner is not None:
                rows.append(i)
                key_of_row.append(keys.setdefault(pair_key(cell), len(keys)))
        groups: dict[Group, int] = {}
        group_of_key = np.array([groups.setdefault((s, g), len(groups)) for _, s, g in keys],
                                dtype=np.int64)
        beta = np.array([self._beta(group) for group in groups]).reshape(len(groups), 2)
        # 1: seen to run, 0: seen to fail (and never to run), NaN: never launched.
        known = np.array([1.0 if key in self.fits else 0.0 if key in self.failures else np.nan
                          for key in keys])
        key_index = np.array(key_of_row, dtype=np.int64)
        prior = beta[group_of_key, 0] / beta.sum(axis=1)[group_of_key] if len(keys) \
            else np.zeros(0)
        probability = np.ones(len(cells))
        probability[rows] = np.where(np.isnan(known), prior, known)[key_index]
        return _PairIndex(np.array(rows, dtype=np.int64), key_index, group_of_key, beta, known,
                          probability)

    def draw(self, cells: Sequence[Cell], num_draws: int, seed: int) -> np.ndarray:
        """Joint draws of whether each cell runs, shape ``(num_draws, N)`` of 0/1."""
        return self._index(cells).draw(num_draws, seed, len(cells))


@dataclass(frozen=True)
class _PairIndex:
    """The paired cells of a query: ``rows`` ``(R,)`` and their pair ``key_index`` ``(R,)``;
    per pair its group ``(K,)`` and ``known`` state ``(K,)`` (1, 0 or NaN); ``beta`` ``(G, 2)``
    per group; every cell's ``probability`` ``(N,)``."""

    rows: np.ndarray
    key_index: np.ndarray
    group_of_key: np.ndarray
    beta: np.ndarray
    known: np.ndarray
    probability: np.ndarray

    def draw(self, num_draws: int, seed: int, num_cells: int) -> np.ndarray:
        out = np.ones((num_draws, num_cells))
        if not len(self.rows):
            return out
        rng = np.random.default_rng([seed, 0x9A1F])  # a stream apart from the rates' draws
        theta = rng.beta(self.beta[:, 0], self.beta[:, 1], size=(num_draws, len(self.beta)))
        fit = rng.uniform(size=(num_draws, len(self.known))) < theta[:, self.group_of_key]
        fit = np.where(np.isnan(self.known), fit, self.known)
        out[:, self.rows] = fit[:, self.key_index]
        return out


def with_pair_fits(prediction: CellPrediction, cells: Sequence[Cell], belief: PairFitBelief,
                   num_draws: int, seed: int) -> CellPrediction:
    """``prediction`` of ``cells`` (a rate belief's) with where pairs fit: mean times the
    probability of fitting, each draw times a joint draw of fitting (with ``num_draws == 0`` the
    draws are the mean, as :meth:`ThroughputBelief.predict` promises)."""
    if num_draws == 0:
        mean = prediction.mean * belief.probabilities(cells)
        return CellPrediction(mean, mean[None, :].copy())
    index = belief._index(cells)
    if not len(index.rows):
        return prediction
    mean = prediction.mean * index.probability
    return CellPrediction(mean, prediction.draws * index.draw(num_draws, seed, len(cells)))


def with_failed_pairs(pooled: Mapping[Cell, PooledCell], launches: PairLaunches
                      ) -> dict[Cell, PooledCell]:
    """``pooled`` rates with every paired cell of a pair seen to fail at rate 0 (Gavel's
    convention: its table holds a pair that does not fit as throughput 0, a measured value its
    matrix completion and nearest-type mapping carry to similar jobs). For the point estimators,
    whose tables read only ``rate``; ``log_rate`` is ``-inf``."""
    out = dict(pooled)
    for cell in launches.failed_cells:
        if cell not in out:
            out[cell] = PooledCell(0.0, -math.inf, 0.0)
    return out

"""How a time-sharing policy reads its ``throughput`` estimate: a known table, or a learning stage.

The round's :class:`~bayes_sched.estimates.Estimates` holds one value for the ``throughput``
need. :class:`ThroughputReading` (a part of
:class:`~bayes_sched.policies.gavel.time_sharing.TimeSharingPolicy`) reads it:

* a known table (:class:`~bayes_sched.throughput_estimates.KnownThroughputs`, what the world's
  oracle publishes) as Gavel reads its measured table: :func:`measured_throughputs` per job and
  type, the table's pair rates (a pair it lacks is logged once and not packed);
* a learning stage (:class:`~bayes_sched.throughput_estimates.LearnedThroughputs`): where a job
  may run at all (learned from failed launches, memoised per the stage's ``fits_version``) and,
  at each allocation recompute, one joint prediction of the jobs' rates alone and of their
  classes' pairs (a posterior draw, or the mean).

Units: steps/s of the whole job. Shapes: ``(J, T)`` jobs by the policy's GPU types; pair rates
per class pair ``(C, C, T, 2)``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from itertools import islice

import numpy as np

from bayes_sched.acquisition import thompson
from bayes_sched.cells import Cell
from bayes_sched.cluster import ClusterState
from bayes_sched.estimates import Estimates
from bayes_sched.jobs import JobView
from bayes_sched.mechanisms.pop import pairs_within
from bayes_sched.throughput_estimates import (
    THROUGHPUT,
    CellPosterior,
    KnownThroughputs,
    LearnedThroughputs,
)
from bayes_sched.throughput_estimates import JobClass as JobKey

LOG = logging.getLogger(__name__)

#: Gavel's steps/s for a job whose type was never measured (``DEFAULT_THROUGHPUT``).
DEFAULT_STEPS_PER_SECOND = 1.0



def measured_throughputs(jobs: Sequence[JobView], types: Sequence[str], cluster: ClusterState,
                         table: KnownThroughputs,
                         cache: dict[JobKey, np.ndarray] | None = None) -> np.ndarray:
    """Steps/s of each job alone on each type, shape ``(J, T)``: the measured table for the job's
    type and scale factor (its requested GPUs); :data:`DEFAULT_STEPS_PER_SECOND` on every type for
    a job the table does not cover on some type; 0 where the type has fewer GPUs than the job
    needs. ``cache``: rows already read for these ``types``, by job class (emptied when the
    cluster's GPUs per type change)."""
    capacity = np.array([cluster.gpus_of_type(t) for t in types])
    cache = {} if cache is None else cache
    if cache.get(("", -1)) is None or not np.array_equal(cache[("", -1)], capacity):
        cache.clear()
        cache[("", -1)] = capacity  # the GPUs per type the rows were read for
    rows = []
    for job in jobs:
        key = (job.application, job.requested_replicas)
        row = cache.get(key)
        if row is None:
            rates = [table.steps_per_second(job.application, job.requested_replicas, t)
                     for t in types]
            row = np.full(len(types), DEFAULT_STEPS_PER_SECOND) if None in rates \
                else np.array(rates, dtype=float)
            row[capacity < job.requested_replicas] = 0.0
            cache[key] = row
        rows.append(row)
    return np.array(rows, dtype=float).reshape(len(jobs), len(types))


class ThroughputReading:
    """The throughput-reading part of a time-sharing policy (a base class of
    :class:`~bayes_sched.policies.gavel.time_sharing.TimeSharingPolicy`, which sets and resets the
    state declared here)."""

    name: str
    packing: bool
    seed: int
    thompson: bool
    draws_made: int
    #: The round's estimate: a known table, or a learning stage; the other is ``None``.
    table: KnownThroughputs | None
    estimator: LearnedThroughputs | None
    missing_pairs: set[tuple[JobKey, JobKey, str]]
    _types: tuple[str, ...]
    _pair_draw: tuple[list[JobKey], np.ndarray]
    _table_pair_rows: dict[tuple[JobKey, JobKey], np.ndarray]
    _may_run_rows: dict[tuple[str, int], list[float]]
    _may_run_state: tuple[object, ...]
    _pair_fits: dict[tuple[str, JobKey, JobKey], bool]
    _pair_fit_masks: dict[tuple[JobKey, JobKey], np.ndarray]
    _alone_cells: dict[JobKey, list[Cell]]
    _pair_slots: dict[tuple[JobKey, JobKey], list[tuple[int, Cell, Cell]]]
    _pair_fits_state: tuple[int, int]

    def _read_throughputs(self, estimates: Estimates) -> None:
        """Take the round's ``throughput`` estimate: a known table (the world's oracle) is read
        as the table itself (Gavel's path), anything else as a learning stage."""
        value = estimates.require(THROUGHPUT)
        if isinstance(value, KnownThroughputs):
            self.table, self.estimator = value, None
        else:
            self.table, self.estimator = None, value

    def _pairs(self, classes: list[JobKey], index: np.ndarray, measured: np.ndarray,
               groups: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Pairs of jobs (of ``classes[index[j]]``) of one scale factor that may share GPUs, and
        their measured rates ``(P, 2, T)``; a pair the table lacks on a type is logged once and
        not packed there. ``groups`` ``(J,)``: each job's POP sub-problem; pairs only within
        one (:func:`~bayes_sched.mechanisms.pop.pairs_within`)."""
        if self.estimator is not None:
            # The recompute's prediction, where it may fit (:meth:`_believed`, these classes).
            assert self._pair_draw[0] == classes
            rates = self._pair_draw[1]
        else:
            rates = np.zeros((len(classes), len(classes), len(self._types), 2))
            for a, key_a in enumerate(classes):
                for b, key_b in enumerate(classes):
                    if key_a[1] != key_b[1]:
                        continue
                    # The table's rates stand for the policy's types: read once per class pair.
                    row = self._table_pair_rows.get((key_a, key_b))
                    if row is None:
                        row = self._table_pair_rows[(key_a, key_b)] = self._table_pair_row(
                            key_a, key_b)
                    rates[a, b] = row
        # Only jobs of a class with some partner class to pair with can be in a pair (at 1,900
        # jobs the pairs of every two jobs number 1.8 million): the same pairs, in order.
        pairs_somewhere = (rates.min(axis=3) > 0).any(axis=2)  # (C, C)
        candidates = np.flatnonzero((pairs_somewhere | pairs_somewhere.T).any(axis=1)[index])
        first, second = (pairs_within(candidates, groups) if groups is not None
                         else (candidates[i] for i in np.triu_indices(len(candidates), k=1)))
        cls_a, cls_b = index[first], index[second]
        pair_rates = rates[cls_a, cls_b].transpose(0, 2, 1)  # (P, 2, T)
        usable = (pair_rates.min(axis=1) > 0) & (measured[first] > 0) & (measured[second] > 0)
        keep = usable.any(axis=1)
        pair_rates = np.where(usable[:, None, :], pair_rates, 0.0)[keep]
        return np.stack([first[keep], second[keep]], axis=1), pair_rates

    def _table_pair_row(self, key_a: JobKey, key_b: JobKey) -> np.ndarray:
        """The table's steps/s of ``key_a`` and ``key_b`` sharing GPUs on each of the policy's
        types ``(T, 2)`` (0 where either cannot run there alone or the pair is not measured; a
        pair the table lacks is logged once)."""
        row = np.zeros((len(self._types), 2))
        assert self.table is not None
        for t, gpu in enumerate(self._types):
            if not (self.table.steps_per_second(*key_a, gpu)
                    and self.table.steps_per_second(*key_b, gpu)):
                continue
            pair = self._pair_steps_per_second(gpu, key_a, key_b)
            if pair is None:
                if (key_a, key_b, gpu) not in self.missing_pairs:
                    self.missing_pairs.add((key_a, key_b, gpu))
                    LOG.warning("policy %s: the throughput table has no pair %s x %s on "
                                "%s: not packing it", self.name, key_a, key_b, gpu)
                continue
            row[t] = pair
        return row

    def _pair_steps_per_second(self, gpu: str, a: JobKey, b: JobKey
                               ) -> tuple[float, float] | None:
        """Steps/s of ``a`` and ``b`` sharing GPUs of type ``gpu`` by the table (``None``: the
        table lacks the pair)."""
        assert self.table is not None
        return self.table.pair_steps_per_second(gpu, a, b)

    def _may_run(self, jobs: Sequence[JobView], types: Sequence[str], cluster: ClusterState
                 ) -> np.ndarray:
        """With a learner: 1 where a job may run alone on a type, 0 where the type has fewer
        GPUs than it needs or a job of its type and scale failed to launch there (out of
        memory), shape ``(J, T)``; learned, not read from the table."""
        estimator = self.estimator
        assert estimator is not None
        capacity = [cluster.gpus_of_type(t) for t in types]
        fits = estimator.fits
        # Per (job type, scale): jobs share them, and they stand while the capacities and the
        # estimator's answers do.
        state = (tuple(capacity), estimator.fits_version)
        if state != self._may_run_state:
            self._may_run_rows.clear()
            self._may_run_state = state
        rows = self._may_run_rows
        for kind, size in {(job.application, job.requested_replicas) for job in jobs}:
            if (kind, size) not in rows:
                rows[(kind, size)] = [float(capacity[t] >= size and fits(Cell(kind, size, gpu)))
                                      for t, gpu in enumerate(types)]
        return np.array([rows[(job.application, job.requested_replicas)] for job in jobs]
                        ).reshape(len(jobs), len(types))

    def _pair_may_fit(self, gpu: str, a: JobKey, b: JobKey) -> bool:
        """Whether ``a`` and ``b`` may share GPUs of type ``gpu``: the same scale factor, and
        (with a learner) no failed launch of the pair there, or (the table) a positive entry."""
        if a[1] != b[1]:
            return False
        if self.table is not None:
            known = self.table.pair_steps_per_second(gpu, a, b)
            return known is not None and min(known) > 0
        memo = self._pair_fit_memo()
        key = (gpu, a, b)
        fit = memo.get(key)
        if fit is None:
            estimator = self.estimator
            assert estimator is not None  # the memo was read for it
            fit = memo[key] = (estimator.fits(Cell(a[0], a[1], gpu, b[0]))
                               and estimator.fits(Cell(b[0], b[1], gpu, a[0])))
        return fit

    def _pair_fit_mask(self, a: JobKey, b: JobKey) -> np.ndarray:
        """:meth:`_pair_may_fit` of ``a`` and ``b`` on each of the policy's types ``(T,)``
        (with a learner)."""
        self._pair_fit_memo()
        mask = self._pair_fit_masks.get((a, b))
        if mask is None:
            mask = self._pair_fit_masks[(a, b)] = np.array(
                [self._pair_may_fit(gpu, a, b) for gpu in self._types], dtype=bool)
        return mask

    def _pair_fit_memo(self) -> dict[tuple[str, JobKey, JobKey], bool]:
        """The memo of :meth:`_pair_may_fit`'s answers with a learner, emptied (with
        :meth:`_pair_fit_mask`'s) when they may have changed (the estimator's
        ``fits_version``). They are asked of every job pair in force every round (~500k times
        a packed run)."""
        estimator = self.estimator
        assert estimator is not None
        state = estimator.fits_version
        old = self._pair_fits_state
        if state == old:
            return self._pair_fits
        if state[1] == old[1] and 0 <= old[0] <= state[0]:
            # Only failed launches were added: forget the class pairs they name (a packed run
            # reads a few hundred, each once; emptying every memo cost ~1,000 checks each).
            for cell in islice(estimator.failed_launches, old[0], state[0]):
                if cell.partner is None:
                    continue
                a, b = (cell.job_type, cell.scale_factor), (cell.partner, cell.scale_factor)
                for first, second in ((a, b), (b, a)):
                    self._pair_fits.pop((cell.gpu_type, first, second), None)
                    self._pair_fit_masks.pop((first, second), None)
                    self._pair_slots.pop((first, second), None)
        else:
            self._pair_fits.clear()
            self._pair_fit_masks.clear()
            self._pair_slots.clear()
        self._pair_fits_state = state
        return self._pair_fits

    def _believed(self, jobs: Sequence[JobView], runnable: np.ndarray) -> np.ndarray:
        """One joint prediction (a posterior draw, or the mean) of the jobs' steps/s alone
        ``(J, T)`` (0 where ``runnable`` is false) and, kept for :meth:`_pairs`, of every pair of
        their (job type, scale factor) classes known to fit on a type."""
        assert self.estimator is not None
        classes = list(dict.fromkeys((job.application, job.requested_replicas) for job in jobs))
        cells: dict[Cell, int] = {}
        alone_cells = self._alone_cells
        for kind, size in classes:
            row = alone_cells.get((kind, size))
            if row is None:
                row = alone_cells[(kind, size)] = [Cell(kind, size, gpu) for gpu in self._types]
            for cell in row:
                cells.setdefault(cell, len(cells))
        # Per (a, b, type) where they may share it: a's cell beside b and b's beside a.
        slots: list[tuple[int, int, int]] = []
        pair_cells: list[tuple[Cell, Cell]] = []
        if self.packing:
            self._pair_fit_memo()  # emptied here if the estimator's answers may have changed
            kept = self._pair_slots
            for i, a in enumerate(classes):
                for j, b in enumerate(classes):
                    if a[1] != b[1]:
                        continue  # pairs share their GPUs: one scale factor
                    where = kept.get((a, b))
                    if where is None:
                        where = kept[(a, b)] = [
                            (t, Cell(a[0], a[1], gpu, b[0]), Cell(b[0], b[1], gpu, a[0]))
                            for t, (gpu, fits) in enumerate(zip(
                                self._types, self._pair_fit_mask(a, b).tolist(), strict=True))
                            if fits]
                    for t, own, other in where:
                        slots.append((i, j, t))
                        pair_cells.append((own, other))
                        # (b, a, t) is a slot too: b's cell joins there, in the same order.
                        cells.setdefault(own, len(cells))
        posterior = CellPosterior(self.estimator.belief, list(cells))
        seed = self.seed * 1_000_003 + self.draws_made
        self.draws_made += 1
        values = thompson(posterior, seed) if self.thompson else posterior.mean()
        # The alone cells came first, class by class in the types' order: (classes, T).
        by_class = values[:len(classes) * len(self._types)].reshape(len(classes), -1)
        position = {key: c for c, key in enumerate(classes)}
        rates = by_class[[position[(job.application, job.requested_replicas)]
                          for job in jobs]].reshape(runnable.shape)
        pair_rates = np.zeros((len(classes), len(classes), len(self._types), 2))
        if slots:
            at = np.array([(cells[own], cells[other]) for own, other in pair_cells],
                          dtype=np.int64)
            i, j, t = np.array(slots, dtype=np.int64).T
            pair_rates[i, j, t] = values[at]
        self._pair_draw = (classes, pair_rates)
        return np.where(runnable, rates, 0.0)


__all__ = ["DEFAULT_STEPS_PER_SECOND", "ThroughputReading", "measured_throughputs"]

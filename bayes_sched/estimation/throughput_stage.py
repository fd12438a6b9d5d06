"""The loop's throughput estimator: job reports -> a :class:`ThroughputBelief` a policy reads.

:class:`ThroughputEstimator` wraps any
:class:`~bayes_sched.estimation.throughput_cells.ThroughputLearner`. Every round it gathers the
throughputs the jobs measured (``JobView.cell_observations``) and drops bad reports (non-finite or
non-positive rate or seconds) with a logged reason. Fitting is lazy: reading
:attr:`ThroughputEstimator.belief` refits the learner on everything reported so far when there is
something new and at least ``min_refit_interval`` seconds have passed since the last fit (each fit
timed), so a policy that reads the belief only when it recomputes its allocation (Gavel's: at most
every 1,920 s) pays for a fit only then, not every round. "New" is a report of a cell the last fit
had no report of, a failed launch, or a cell whose reported seconds have grown ``refit_growth``-
fold since the last fit (1: any report): more of the same cell's seconds narrow its pooled rate
slowly, and refitting for each round of them made the fits grow with the rounds. When the only
news is failed launches and the learner has ``refit_launches(observations, belief)`` (ours), the
refit is that: the belief with where pairs fit read again and its rates' posterior kept (the
rates' reports since then wait for the next refit a rate makes due). Failed launches are many of
the refits of a packed run (docs/results/bench_uncertainty.md), and a rate refit is a
conditioning and a fresh prediction of every cell. The belief is read-only (one method,
``predict``); :attr:`ThroughputEstimator.version` changes only when a fit returns a new belief
(the oracle's never does). A fit that raises keeps the previous belief,
logged and counted (:attr:`~ThroughputEstimator.failed_fits`); a learner that can tell it did not
converge should itself answer with its prior, widened.

Out of memory: a job that fails to launch in a cell reports it (``CellObservation.
out_of_memory``); the estimator keeps those cells (:meth:`ThroughputEstimator.fits`) apart from
the rates the learner fits, so where a job fits at all is learned from failed launches, not read
from a table; the learner sees the failed launches too (with the rates), so one that models
where jobs fit can generalise from them.

Profiling: when a job is first seen the learner names the cells it should be measured in
(:meth:`ThroughputLearner.profiling_cells`); the policy runs the job there (real rounds, the job
progressing at that cell's rate) and the estimator strikes a cell off when the job reports from it.
GPU-seconds are counted: :attr:`~ThroughputEstimator.profiling_gpu_seconds` (rounds a job spent in
a cell of its profiling plan, its scale factor times the seconds it reported) and
:attr:`~ThroughputEstimator.first_visit_gpu_seconds` (rounds in a cell nobody had reported from
before: the exploration a policy deciding on posterior draws does; the oracle's runs visit new
cells too, without exploring, so compare it between sources).
"""

from __future__ import annotations

import logging
import time
from collections.abc import KeysView, Mapping, Sequence
from typing import Any

from bayes_sched.cells import Cell
from bayes_sched.cluster import ClusterState
from bayes_sched.estimates import Estimate
from bayes_sched.estimation.posteriors import THROUGHPUT
from bayes_sched.estimation.throughput.observations import (
    UsableObservations,
    usable_observations,
)
from bayes_sched.estimation.throughput_cells import ThroughputBelief, ThroughputLearner
from bayes_sched.jobs import JobView

LOG = logging.getLogger(__name__)

#: The policies' default ``refit_growth`` (see :class:`ThroughputEstimator`): a cell already
#: fitted makes a refit due once its reported seconds double. Refitting at every report (1) cost
#: more decision time for the same average JCT on Gavel's window (docs/results/
#: bench_uncertainty.md).
REFIT_GROWTH = 2.0


class ThroughputEstimator:
    """Learns steps/s per cell from what the jobs report (an
    :class:`~bayes_sched.estimation.Estimator`).

    Publishes ``throughput`` (:data:`~bayes_sched.throughput_estimates.THROUGHPUT`) under the
    learner's name: itself, as :class:`~bayes_sched.throughput_estimates.LearnedThroughputs`
    (its :attr:`belief` fitted lazily when read).

    Args:
        learner: what turns the reports into a belief.
        min_refit_interval: seconds between fits (0: refit every round with new reports).
        refit_growth: a cell already in the last fit makes a refit due once its reported
            seconds have grown by this factor since (1: with every report). At 2 a cell's
            pooled rate is refitted each time its measurement variance halves, so the fits
            over a long run grow with the cells and the doublings of their seconds, not with
            the rounds.
    """

    name = "throughputs"

    def __init__(self, learner: ThroughputLearner, min_refit_interval: float = 0.0,
                 refit_growth: float = REFIT_GROWTH) -> None:
        if not min_refit_interval >= 0:
            raise ValueError(f"min_refit_interval is {min_refit_interval}: expected seconds >= 0")
        if not refit_growth >= 1:
            raise ValueError(f"refit_growth is {refit_growth}: expected a factor >= 1")
        self.refit_growth = float(refit_growth)
        self.learner = learner
        # The learner's own ``fits(cell)``, if it knows where jobs fit (asked ~60 times a round).
        self._known_fits = getattr(learner, "fits", None)
        self.min_refit_interval = float(min_refit_interval)
        #: Every usable report so far (checked once here: the learner's pool does not again).
        self.observations = UsableObservations()
        # Cells where a job failed to launch, in the order first read (:attr:`failed_launches`).
        self._failed_launches: dict[Cell, None] = {}
        self.failed_launch_gpu_seconds = 0.0  # GPU-seconds held by jobs that failed to launch
        self.fit_seconds: list[float] = []
        self.rejected_reports = 0
        self.profiling_gpu_seconds = 0.0
        self.first_visit_gpu_seconds = 0.0
        self.dropped_profiling_cells = 0
        self.failed_fits = 0
        self.version = 0
        self._belief = self._timed_fit()
        self._due = False  # whether a report since the last fit makes a refit due
        self._rates_due = False  # ... and whether one of them is a rate (not a failed launch)
        # The learner's optional ``refit_launches(observations, belief)``: the belief with
        # the failed launches so far, its rates' posterior kept (see :meth:`refresh`).
        self._refit_launches = getattr(learner, "refit_launches", None)
        self._seconds: dict[Cell, float] = {}  # reported seconds per cell
        self._fitted_seconds: dict[Cell, float] = {}  # ... as of the last fit
        self._last_fit: float | None = None
        self._now = 0.0  # the last round's time (seconds), for the refit interval
        self._plans: dict[str, list[Cell]] = {}
        self._visited: set[Cell] = set()

    @property
    def has_unfitted_reports(self) -> bool:
        """Whether reports have arrived since the last fit that make a refit due (a cell new
        to the fit, a failed launch, or a cell's seconds grown ``refit_growth``-fold)."""
        return self._due

    @property
    def belief(self) -> ThroughputBelief:
        """The belief on every report so far (read-only; :meth:`refresh` first)."""
        self.refresh()
        return self._belief

    def refresh(self) -> None:
        """Refit when there are new reports and the minimum refit interval has passed."""
        due = (self._last_fit is None
               or self._now - self._last_fit >= self.min_refit_interval)
        if not (self.has_unfitted_reports and due):
            return
        launches_only = not self._rates_due and self._refit_launches is not None
        self._due, self._rates_due, self._last_fit = False, False, self._now
        seconds = dict(self._seconds)
        try:
            belief = self._timed_fit(launches_only)
        except Exception as error:  # noqa: BLE001 -- a failed fit keeps the last belief
            self.failed_fits += 1
            self._rates_due = not launches_only
            LOG.warning("throughput learner %s failed on %d reports (%s); the previous "
                        "belief is kept", self.learner.name, len(self.observations), error)
            return  # growth still counts from the belief kept: the next report may retry
        if not launches_only:
            self._fitted_seconds = seconds  # growth counts from the last fit of the rates
        if belief is not self._belief:
            self._belief = belief
            self.version += 1

    @property
    def learner_name(self) -> str:
        return self.learner.name

    def _timed_fit(self, launches_only: bool = False) -> ThroughputBelief:
        start = time.perf_counter()
        if launches_only:
            assert self._refit_launches is not None
            belief = self._refit_launches(self.observations, self._belief)
        else:
            belief = self.learner.fit(self.observations)
        self.fit_seconds.append(time.perf_counter() - start)
        return belief

    def pending_profiling(self, job: str) -> tuple[Cell, ...]:
        """The cells ``job`` is still to be measured in, in the learner's order."""
        return tuple(self._plans.get(job, ()))

    def request_profiling(self, job: str, cell: Cell) -> None:
        """Add ``cell`` to the end of the plan of ``job`` (one this stage has seen): a policy's
        exploration trial, run and counted as profiling."""
        plan = self._plans.get(job)
        if plan is not None and cell not in plan:
            plan.append(cell)

    def drop_profiling(self, job: str, cell: Cell, why: str) -> None:
        """Strike ``cell`` off ``job``'s plan unmeasured (the policy cannot run it there),
        logged with ``why`` and counted."""
        plan = self._plans.get(job, [])
        if cell in plan:
            plan.remove(cell)
            self.dropped_profiling_cells += 1
            LOG.info("job %s is not profiled in %s: %s", job, cell, why)

    def estimate(self, cluster: ClusterState, jobs: Sequence[JobView]) -> list[JobView]:
        names = {job.name for job in jobs}
        for gone in [name for name in self._plans if name not in names]:
            del self._plans[gone]
        types: tuple[str, ...] | None = None  # read when a job is new (a pass over the nodes)
        self._now = cluster.now
        # New jobs' plans come from the belief in force (fitted when the policy last read it:
        # at most one allocation recompute old), not a refit per arriving job: a plan names the
        # cells to measure, and a refit for it doubled the fits of an online run.
        for job in jobs:
            if job.name not in self._plans:
                if types is None:
                    types = tuple(sorted(set(cluster.gpu_types)))
                self._plans[job.name] = list(self.learner.profiling_cells(
                    job.application, job.requested_replicas, types, self._belief))
        visited = self._visited
        for job in jobs:
            observed = job.cell_observations
            if not observed:
                continue  # nothing reported (waiting this round)
            reports = usable_observations(observed)  # bad ones logged and left out
            self.rejected_reports += len(observed) - len(reports)
            plan = self._plans[job.name]
            for report in reports:
                cell = report.cell
                if plan and cell in plan:
                    plan.remove(cell)
                    self.profiling_gpu_seconds += report.seconds * cell.scale_factor
                if cell not in visited:
                    visited.add(cell)
                    self.first_visit_gpu_seconds += report.seconds * cell.scale_factor
                if report.out_of_memory:
                    self.failed_launch_gpu_seconds += report.seconds * report.cell.scale_factor
                    if self.note_failed_launch(report.cell):
                        LOG.info("job %s does not fit in %s (out of memory)", job.name,
                                 report.cell)
                # Failed launches go to the learner too (every pool skips them as rates): a
                # learner may generalise where jobs fit from them (Gavel's: a pair that does not
                # fit is a measured normalised throughput of 0).
                self.observations.append(report)
                seconds = self._seconds[cell] = self._seconds.get(cell, 0.0) + report.seconds
                fitted = self._fitted_seconds.get(cell)
                if report.out_of_memory:
                    self._due = True
                elif fitted is None or seconds >= self.refit_growth * fitted:
                    self._due = self._rates_due = True
        return list(jobs)

    def published(self) -> Sequence[Estimate[Any]]:
        return (Estimate(THROUGHPUT, self.learner.name, self),)

    def stats(self) -> Mapping[str, float]:
        """GPU-hours in profiling cells, in cells nobody had reported from before and held by
        failed launches; reports rejected; fits and their seconds (total)."""
        return {"profiling_gpu_hours": self.profiling_gpu_seconds / 3600.0,
                "first_visit_gpu_hours": self.first_visit_gpu_seconds / 3600.0,
                "failed_launch_gpu_hours": self.failed_launch_gpu_seconds / 3600.0,
                "rejected_reports": int(self.rejected_reports),
                "fits": int(len(self.fit_seconds)),
                "fit_seconds": float(sum(self.fit_seconds))}

    @property
    def failed_launches(self) -> KeysView[Cell]:
        """Cells where a job failed to launch (out of memory), in the order their first failed
        launch was read: learned, not read from a table."""
        return self._failed_launches.keys()

    def note_failed_launch(self, cell: Cell) -> bool:
        """Record that a job failed to launch in ``cell``; whether that is news."""
        if cell in self._failed_launches:
            return False
        self._failed_launches[cell] = None
        return True

    @property
    def fits_version(self) -> tuple[int, int]:
        """Changes whenever :meth:`fits`' answers may: with a new failed launch (that set only
        grows) or, where the learner has its own ``fits`` (which may read its fitted state),
        with a new belief. Callers memoise ``fits`` per value."""
        return (len(self._failed_launches),
                self.version if self._known_fits is not None else 0)

    def fits(self, cell: Cell) -> bool:
        """Whether ``cell`` may run: no job has failed to launch there (out of memory), and the
        learner, if it knows where jobs fit (its optional ``fits(cell)``: the oracle's table),
        does not say otherwise."""
        if cell in self._failed_launches:
            return False
        return self._known_fits is None or bool(self._known_fits(cell))


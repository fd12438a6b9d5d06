"""Co-location learning as an estimator: the slowdown predictors learn from each round just ended
and are published, in order, for the ``colocation`` need.

Each round, for every job that held the same GPUs over the whole round just ended and was not
restarting, the estimator compares the progress it made with what its fitted goodput model
(the ``job_goodput`` estimate attached to its view, which runs before this one) predicted there:
the residual ``log(realised / predicted)``, less the job's own *model error*: its recent mean
residual in rounds when it shared no node (or, before it has had one, the mean of such errors
over jobs of its application). Alone no predictor predicts a slowdown, so that residual is the
model's own; left in, it would be blamed on whatever co-location the job happened to be in.
Rounds that start with a restart are skipped: the restart, not the co-location, cost them.

The predictors (:class:`~bayes_sched.colocation.SlowdownPredictor`) then learn in order, each
from the residuals less what the ones before it predict: by default the contention posterior's
prior from counters (:class:`~bayes_sched.interference.contention_prior.ContentionPrior`, where
the cluster collects counters) and the pair learner over job classes
(:class:`~bayes_sched.interference.pairs.PairResiduals`). It reads only what a real cluster
reports: where jobs ran, their progress, counters.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Annotated, Any, TypeVar

import numpy as np

from bayes_sched.cluster import ClusterState
from bayes_sched.colocation import (
    COLOCATION,
    ColocationRound,
    SlowdownPredictor,
    allocation_entries,
    entry_features,
    predicted_rates,
    predictor_of,
)
from bayes_sched.errors import InputError
from bayes_sched.estimates import Estimate
from bayes_sched.estimation.pair_cells import PairPrior
from bayes_sched.interference.contention_prior import ContentionPrior
from bayes_sched.interference.pairs import PairResiduals
from bayes_sched.jobs import JobView
from bayes_sched.registry import PROBABILITY, SEED, Range
from bayes_sched.topology import NodeTopology

LOG = logging.getLogger(__name__)

_DEFAULT_PAIR_PRIOR = PairPrior()
_Predictor = TypeVar("_Predictor")

#: Most joint posterior draws of the pair table (memory follows ``draws x jobs x jobs``).
MAX_DRAWS = 4096


def _fit_failures() -> tuple[type[Exception], ...]:
    """The errors a predictor's fit raises when its linear algebra fails (numpy's, torch's, and
    GPyTorch's not-positive-definite), on which the last posterior is kept. Imported here, not
    at module level, so that reading :func:`colocation_learning`'s options (``bayes-sched list
    estimators``) loads no torch; an ``except`` clause evaluates it only when something was
    raised."""
    import torch
    from linear_operator.utils.errors import NotPSDError

    return (np.linalg.LinAlgError, torch.linalg.LinAlgError, NotPSDError)


class ColocationLearning:
    """Learns co-location slowdowns from the rounds just ended (an
    :class:`~bayes_sched.estimation.Estimator`); publishes ``colocation``
    (:data:`~bayes_sched.colocation.COLOCATION`): its predictors, in order.

    Args:
        predictors: the slowdown predictors, composed in order.
        node_topology: the nodes' layout the predictors are told where the cluster collects
            counters (``None``: the cluster's); checked against the cluster's nodes.
        error_forget: per-observation weight decay of each job's model-error estimate.

    Attributes:
        fit_problems: messages of failed predictor fits (the previous posterior kept).
    """

    name = "bo_colocation"

    def __init__(self, predictors: Sequence[SlowdownPredictor],
                 node_topology: NodeTopology | None = None, error_forget: float = 0.8) -> None:
        self.predictors = list(predictors)
        self.node_topology = node_topology
        self.error_forget = error_forget
        self.fit_problems: list[str] = []
        # name -> (GPUs per node, progress) at the last round
        self._previous: dict[str, tuple[np.ndarray, float]] = {}
        self._previous_time = 0.0
        self._model_error: dict[str, tuple[float, float]] = {}  # name -> (weight, sum) alone
        self._application_of: dict[str, str] = {}
        self._changed_at: dict[str, float] = {}  # name -> time its allocation last changed

    def predictor(self, kind: type[_Predictor]) -> _Predictor:
        """The first of :attr:`predictors` of type ``kind`` (for reports and tests)."""
        return predictor_of(self.predictors, kind, "estimator 'bo_colocation'")

    def estimate(self, cluster: ClusterState, jobs: Sequence[JobView]) -> list[JobView]:
        if (self.node_topology is not None
                and self.node_topology.num_gpus != cluster.gpus_per_node):
            raise InputError(f"estimator 'bo_colocation': node_topology holds "
                             f"{self.node_topology.num_gpus} GPUs, the cluster's nodes "
                             f"{cluster.gpus_per_node}: expected a topology that fits the nodes")
        if jobs:
            self.learn(cluster, jobs)
        return list(jobs)

    def published(self) -> Sequence[Estimate[Any]]:
        return (Estimate(COLOCATION, self.name, tuple(self.predictors)),)

    def stats(self) -> Mapping[str, float]:
        return {"colocation_fit_problems": int(len(self.fit_problems))}

    def learn(self, cluster: ClusterState, jobs: Sequence[JobView]) -> None:
        """Each predictor in turn learns from the round just ended (the counters, and the
        co-location residuals less what the predictors before it predict)."""
        jobs = sorted(jobs, key=lambda j: (j.attained_service, j.submit_time, j.name))
        measured = self._measure(cluster, jobs)
        allocation = np.stack([job.allocation for job in jobs])
        applications = tuple(job.application for job in jobs)
        # The nodes' topology matters only with counters (a cluster of mixed node layouts has
        # none to give, and needs none without counters).
        topology = (self.node_topology or cluster.topology if cluster.counters is not None
                    else self.node_topology)
        observation = ColocationRound(
            self._previous_time, cluster.now, tuple(job.name for job in jobs), applications,
            allocation, cluster.counters, topology, time_origin=cluster.time_origin)
        for k, predictor in enumerate(self.predictors):
            residuals = None
            if measured is not None:
                earlier = [p.log_slowdown(allocation[None], applications)[0]
                           for p in self.predictors[:k]]
                residuals = {}
                for j, residual, error in measured:
                    for prior in earlier:
                        residual = residual - prior[j]
                    residuals[j] = residual - error
            try:
                predictor.learn(replace(observation, residuals=residuals))
            except _fit_failures() as error:
                # keep the last posterior; the search goes on
                message = f"t={cluster.now:g}s: {predictor.name} fit failed ({error})"
                self.fit_problems.append(message)
                LOG.warning("%s; previous posterior kept", message)
        self._remember(cluster.now, jobs)

    def _remember(self, now: float, jobs: Sequence[JobView]) -> None:
        """Keep each job's GPUs and progress now; a job whose GPUs differ from the last round's
        had its allocation changed then (at the last round's time)."""
        for job in jobs:
            before = self._previous.get(job.name)
            held = before[0] if before is not None else np.zeros_like(job.allocation)
            if not np.array_equal(held, job.allocation):
                self._changed_at[job.name] = self._previous_time
        self._previous = {job.name: (job.allocation.copy(), job.progress) for job in jobs}
        self._previous_time = now

    def _measure(self, cluster: ClusterState, jobs: Sequence[JobView]
                 ) -> list[tuple[int, float, float]] | None:
        """The round just ended: ``(row, log(realised / predicted progress), model error)`` of
        every job that held the same GPUs all round and was not restarting, and whose model
        error is known; ``None`` when no round can be measured (the first, or no time passed).
        """
        elapsed = cluster.now - self._previous_time
        if elapsed <= 0 or not self._previous:
            return None
        feats = entry_features(allocation_entries([job.allocation for job in jobs]),
                               (1, len(jobs), cluster.num_nodes))[0]
        held: list[tuple[int, float]] = []  # (row, realised rate) of the jobs that kept GPUs
        for j, job in enumerate(jobs):
            self._application_of[job.name] = job.application
            before = self._previous.get(job.name)
            if before is None or not job.allocation.any():
                continue
            # GPUs that changed at the last round: this round began with a restart.
            changed_at = (self._previous_time if not np.array_equal(before[0], job.allocation)
                          else self._changed_at.get(job.name, -math.inf))
            if changed_at + cluster.restart_delay_of(job.application) > self._previous_time:
                continue
            held.append((j, (job.progress - before[1]) / elapsed))
        predictions = predicted_rates([jobs[j] for j, _ in held],
                                      [jobs[j].allocation for j, _ in held])
        measured: list[tuple[int, float]] = []
        for (j, rate), predicted in zip(held, predictions, strict=True):
            job = jobs[j]
            if predicted is None or rate <= 0:
                continue
            residual = math.log(rate / predicted)
            if feats[j, 2] == 0:  # alone on its nodes: this is the model's own error
                weight, total = self._model_error.get(job.name, (0.0, 0.0))
                self._model_error[job.name] = (self.error_forget * weight + 1.0,
                                               self.error_forget * total + residual)
            measured.append((j, residual))
        by_application: dict[str, list[float]] = {}
        for name, (weight, total) in self._model_error.items():
            if weight > 0 and name in self._application_of:
                by_application.setdefault(self._application_of[name], []).append(total / weight)
        rows = []
        for j, residual in measured:
            error = self._job_model_error(jobs[j], by_application)
            if error is not None:
                rows.append((j, residual, error))
        return rows

    def _job_model_error(self, job: JobView, by_application: dict[str, list[float]]
                         ) -> float | None:
        """Mean log residual of ``job``'s model when alone (else the mean over jobs of its
        application, ``by_application``); ``None`` when nothing is known."""
        weight, total = self._model_error.get(job.name, (0.0, 0.0))
        if weight > 0:
            return total / weight
        same = by_application.get(job.application)
        return float(np.mean(same)) if same else None


def colocation_learning(
        pair_prior: PairPrior = _DEFAULT_PAIR_PRIOR,
        residual_noise: Annotated[float, Range(0.0, min_open=True)] = 0.15,
        forget: Annotated[float, Range(0.0, 1.0, min_open=True)] = 0.998,
        posterior_draws: Annotated[int, Range(1, MAX_DRAWS)] = 64,
        error_forget: Annotated[float, PROBABILITY] = 0.8,
        node_topology: NodeTopology | None = None,
        contention_every: Annotated[int, Range(1)] = 10,
        seed: Annotated[int, SEED] = 0,
        pair_hyper_every: Annotated[int, Range(0)] = 0) -> ColocationLearning:
    """bo's co-location learning: the contention posterior's prior from counters (refitted every
    ``contention_every`` rounds; ``node_topology``: the nodes' layout, default the cluster's),
    then the pair learner on the residuals around it (``pair_prior``: its starting prior scales;
    ``residual_noise``: one job-round residual's standard deviation, log units; ``forget``:
    per-round weight decay of old residuals; ``posterior_draws``: joint draws of the pair table;
    ``pair_hyper_every``: rounds between its hyperparameter fits, 0 for none; ``seed``: its
    draws); ``error_forget``: per-observation weight decay of each job's model-error estimate."""
    return ColocationLearning(
        [ContentionPrior(node_topology, every=contention_every),
         PairResiduals(pair_prior, noise=residual_noise, forget=forget, draws=posterior_draws,
                       seed=seed, hyper_every=pair_hyper_every)],
        node_topology, error_forget)


__all__ = ["ColocationLearning", "colocation_learning"]

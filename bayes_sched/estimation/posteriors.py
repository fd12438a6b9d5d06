"""The estimators' uncertainty objects as :class:`~bayes_sched.estimates.Posterior` s, and the
typed keys of what they publish in the :class:`~bayes_sched.estimates.Estimates` bundle.

Each adapter binds a query to the object that answers it, without changing its answers:

* :class:`CellPosterior`: a :class:`~bayes_sched.estimation.throughput_cells.ThroughputBelief`
  over ``N`` cells, steps/s, shape ``(N,)``;
* :class:`GoodputPosterior`: a :class:`~bayes_sched.jobs.JobModel` over ``A`` allocations,
  goodput at the job's best batch in examples (at its initial batch) per second, shape ``(A,)``;

The co-location and contention keys and their adapter are core contracts beside the slowdown
predictor's protocol (:mod:`bayes_sched.colocation`), as are the remaining-work key and adapter
(:class:`bayes_sched.remaining_work.RemainingWorkPosterior`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from bayes_sched.cells import Cell
from bayes_sched.estimates import Need, check_quantile, resample_draws
from bayes_sched.estimation.throughput_cells import ThroughputBelief
from bayes_sched.jobs import JobModel
from bayes_sched.throughput_estimates import THROUGHPUT

#: ``{job name: {GPU type: JobModel}}`` for the jobs with a fitted model (:class:`GoodputPosterior`).
JOB_GOODPUT: Need[Mapping[str, Mapping[str, JobModel]]] = Need("job_goodput")

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


class GoodputPosterior:
    """Goodput of ``model``'s job at its best batch on ``num_nodes``/``num_replicas``
    allocations (shape ``(A,)``), examples at its initial batch per second.

    ``mean`` is the point fit's goodput (:meth:`JobModel.goodput`), ``quantile(q)`` the model's
    own ``q``-quantile rule (the batch that maximises that quantile over its posterior draws; the
    point fit for a model without draws), ``draws`` the goodput of each posterior draw of the
    step-time parameters at the point fit's batch (the point fit repeated without draws).
    """

    def __init__(self, model: JobModel, num_nodes: np.ndarray, num_replicas: np.ndarray) -> None:
        self.model = model
        self.num_nodes, self.num_replicas = np.broadcast_arrays(
            np.atleast_1d(np.asarray(num_nodes)), np.atleast_1d(np.asarray(num_replicas)))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.num_nodes.shape)

    def mean(self) -> np.ndarray:
        return self.model.goodput(self.num_nodes, self.num_replicas)

    def quantile(self, q: float) -> np.ndarray:
        return self.model.goodput(self.num_nodes, self.num_replicas, check_quantile(q))

    def draws(self, n: int, seed: int = 0) -> np.ndarray:
        choice = self.model.optimize(self.num_nodes, self.num_replicas)
        posterior = self.model.goodput_model(quantile=0.5)  # the draws' model where it has them
        with np.errstate(divide="ignore", invalid="ignore"):
            goodput = posterior.goodput(self.num_nodes, self.num_replicas, choice.local_bsz,
                                        choice.accum_steps)
        # Infeasible allocations (no batch fits) have goodput 0 under every draw.
        return resample_draws(np.where(choice.local_bsz > 0, goodput, 0.0), n, seed)


__all__ = ["JOB_GOODPUT", "QUANTILE_DRAWS", "THROUGHPUT", "CellPosterior", "GoodputPosterior"]

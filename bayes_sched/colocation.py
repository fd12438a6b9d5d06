"""What a policy reads for the ``colocation`` and ``contention`` needs: the contracts, in the core.

A co-location slowdown predictor (:class:`SlowdownPredictor`) says, for candidate allocations a
scheduler weighs, how much slower each job would run because of the jobs sharing its nodes, as a
log slowdown (``<= 0`` where sharing hurts, 0 = unaffected; ``exp`` of it multiplies the job's
predicted progress). It learns only from what a real cluster reports (:class:`ColocationRound`:
where jobs ran, their progress and, where collected, counters).

Predictors compose additively in log space, in order: each learns what the ones before it leave
unexplained (a counters-based prior first, a residual learned from progress after it), and the
composition predicts the sum (:func:`speed_factor`; as a
:class:`~bayes_sched.estimates.Posterior`, :class:`SlowdownPosterior`). The estimation stage
publishes the composition under :data:`COLOCATION` (the implementations and the learning:
:mod:`bayes_sched.interference`). :func:`colocation_features` and :func:`predicted_rate` are
what both the learning and a policy's report read of a candidate and of a job's model.

This module is core: it imports no estimator, policy or simulator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar, cast

import numpy as np
import xarray as xr

from bayes_sched.estimates import DrawsPosterior, Need
from bayes_sched.jobs import JobView
from bayes_sched.topology import NodeTopology
from perfmodel.goodput import optimize_each


@dataclass(frozen=True)
class ColocationRound:
    """One scheduling round as the cluster reported it.

    Attributes:
        start, end: when the round began and ended, seconds on the cluster's clock.
        names: the active jobs ``(J,)``.
        applications: each job's application ``(J,)``.
        allocation: GPUs per node each job held over the round, ``(J, N)``.
        counters: the cluster's counters window (:mod:`counters.schema`), ``None`` where it
            collects none.
        topology: the layout and capacities every node shares, where there are counters
            (``None`` where there are none: then it may be unknown, e.g. nodes of several
            layouts).
        time_origin: the second on the counters' time axis that the cluster's time 0 stands
            for (:attr:`bayes_sched.cluster.ClusterState.time_origin`).
        residuals: job row -> ``log(realised / predicted progress)`` over the round, less the
            job's own model error and less what the predictors before this one in the composition
            predict for it, for the jobs measured (same GPUs all round, no restart); ``None`` when
            the round could not be measured (the first, or no time passed).
    """

    start: float
    end: float
    names: tuple[str, ...]
    applications: tuple[str, ...]
    allocation: np.ndarray
    counters: xr.Dataset | None = None
    topology: NodeTopology | None = None
    residuals: Mapping[int, float] | None = None
    time_origin: float = 0.0


#: The nonzero entries ``(p, j, n, GPUs)`` of candidate states ``(P, J, N)``, each ``(K,)``, in
#: (state, job, node) order.
StateEntries = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class SparseCandidates(Protocol):
    """Candidate states ``(P, J, N)`` given by their nonzero entries, as an allocation search
    carries them (a job holds few of many nodes: on a large cluster the dense array costs more to
    build and scan than everything a predictor computes from the entries)."""

    @property
    def entries(self) -> StateEntries: ...

    @property
    def shape(self) -> tuple[int, int, int]: ...

    def dense(self) -> np.ndarray:
        """The states as a ``(P, J, N)`` array."""
        ...


def state_entries(states: np.ndarray | SparseCandidates) -> StateEntries:
    """The nonzero entries of ``states``: dense ``(P, J, N)`` GPU counts, or candidates that
    carry their entries already."""
    if isinstance(states, np.ndarray):
        p, j, n = np.nonzero(states)
        return p, j, n, states[p, j, n]
    return states.entries


class SlowdownPredictor(Protocol):
    """Predicts each job's co-location log slowdown in candidate allocations.

    ``name`` labels the predictor in messages (e.g. a failed fit). A predictor whose
    ``log_slowdown`` also takes :class:`SparseCandidates` (reading them through
    :func:`state_entries`) says so with a true ``takes_entries`` attribute; others are given the
    dense states. A predictor whose log slowdown is an additive pair table over job classes
    (on each node the sum of ``table[class(job), class(co-runner)]`` over the co-runners
    there, the job at its worst node, at most 0; class ``2 * application + distributed``) may
    say so with a ``pair_table(applications, draws=False)`` method giving each job's
    application index ``(J,)`` and the table ``(K, K)`` (``(S, K, K)`` with ``draws``), or
    ``None`` where it is not one now; a policy may then score candidates from the table
    directly (the ``bo`` policy's compiled search).
    """

    name: str

    def learn(self, observation: ColocationRound) -> None:
        """Update the posterior with the round just ended. May raise a linear-algebra error
        (:class:`numpy.linalg.LinAlgError`, ...) when a refit fails; the previous posterior is
        then kept."""
        ...

    def log_slowdown(self, states: np.ndarray, applications: Sequence[str],
                     draws: bool = False) -> np.ndarray:
        """Predicted log slowdown (log of the speed factor, ``<= 0`` where sharing hurts) of
        every job in every candidate: ``states`` ``(P, J, N)`` GPUs per node, ``applications``
        ``(J,)`` -> posterior mean ``(P, J)``; with ``draws``, the predictor's fixed joint
        posterior draws ``(S, P, J)``, or ``(P, J)`` for a predictor without uncertainty (it
        broadcasts against the others' draws). ``applications`` should be a sequence the
        caller does not mutate (predictors may cache per object)."""
        ...

    def diagnostics(self, allocation: np.ndarray, applications: Sequence[str]
                    ) -> dict[str, float]:
        """Named figures for the report about the chosen allocation ``(J, N)`` (a predictor
        with ``takes_entries`` may be given it by its entries, ``(1, J, N)``): e.g. its
        predicted mean log slowdown, fits so far; ``surrogate_std``, where the predictor has
        one, is the mean posterior standard deviation of what it learned (log units)."""
        ...


def speed_factor(predictors: Sequence[SlowdownPredictor],
                 states: np.ndarray | SparseCandidates, applications: Sequence[str],
                 draws: bool = False) -> np.ndarray | float:
    """The composition's predicted speed factor, ``prod exp(log slowdown)`` over ``predictors``:
    ``(P, J)``, ``(S, P, J)`` with ``draws`` where a predictor draws, ``1.0`` for none.
    ``states``: dense ``(P, J, N)``, or by their entries (densified once, only for a predictor
    that does not take entries).

    A product of factors rather than ``exp`` of the summed logs: the same numbers the ``bo``
    policy's figures were measured with, to the last bit."""
    factor: np.ndarray | float = 1.0
    dense: np.ndarray | None = states if isinstance(states, np.ndarray) else None
    for predictor in predictors:
        if dense is None and getattr(predictor, "takes_entries", False):
            log = predictor.log_slowdown(states, applications, draws)  # type: ignore[arg-type]
        else:
            if dense is None:
                dense = cast("SparseCandidates", states).dense()
            log = predictor.log_slowdown(dense, applications, draws)
        factor = factor * np.exp(log)
    return factor

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


_Predictor = TypeVar("_Predictor")


def predictor_of(predictors: Sequence[SlowdownPredictor], kind: type[_Predictor],
                 owner: str) -> _Predictor:
    """The first of ``predictors`` of type ``kind`` (for reports and tests); ``KeyError``
    naming ``owner`` (who holds them) where there is none."""
    for predictor in predictors:
        if isinstance(predictor, kind):
            return predictor
    raise KeyError(f"{owner} has no {kind.__name__} predictor")


#: Names of the co-location flags :func:`colocation_features` reports, in order.
FEATURE_NAMES = ("distributed", "shares_with_distributed", "shares_node")


def colocation_features(states: np.ndarray | SparseCandidates) -> np.ndarray:
    """Co-location flags (:data:`FEATURE_NAMES`) of every job in every state,
    ``(P, J, N) -> (P, J, 3)``: whether it spans several nodes, shares a node with another
    distributed job, shares a node at all. ``states``: dense or by their nonzero entries."""
    return entry_features(state_entries(states), states.shape)


def entry_features(entries: StateEntries, shape: tuple[int, ...]) -> np.ndarray:
    """:func:`colocation_features` of states ``shape`` ``(P, J, N)`` given by their nonzero
    ``entries`` (any order): the work follows the GPUs in use, not ``P x J x N``."""
    size, num_jobs, num_nodes = shape
    p, j, n, _ = entries
    pj = p * num_jobs + j
    pn = p * num_nodes + n
    distributed = np.bincount(pj, minlength=size * num_jobs) > 1            # (P * J,)
    mine = distributed[pj]                                                   # (E,)
    jobs_on_node = np.bincount(pn, minlength=size * num_nodes)
    others_dist = np.bincount(pn, weights=mine, minlength=size * num_nodes)[pn] - mine
    shares_dist = np.bincount(pj[others_dist > 0], minlength=size * num_jobs) > 0
    shares = np.bincount(pj[jobs_on_node[pn] > 1], minlength=size * num_jobs) > 0
    return np.stack([distributed, shares_dist, shares], axis=1).reshape(
        size, num_jobs, 3).astype(np.float64)


def allocation_entries(allocations: Sequence[np.ndarray]) -> StateEntries:
    """The nonzero entries of one cluster state given as each job's GPUs per node (``(N,)`` per
    job, rows in order): ``p`` all 0, in (job, node) order; no dense ``(J, N)`` is built."""
    nodes = [np.flatnonzero(allocation) for allocation in allocations]
    if not nodes:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, empty
    n = np.concatenate(nodes)
    j = np.repeat(np.arange(len(nodes)), [len(x) for x in nodes])
    v = np.concatenate([a[x] for a, x in zip(allocations, nodes, strict=True)])
    return np.zeros(n.size, np.int64), j, n, v


def predicted_rate(job: JobView, allocation: np.ndarray) -> float | None:
    """Progress per second (steps at the job's initial batch ``B0``) that ``job``'s fitted model
    predicts at ``allocation`` (GPUs per node ``(N,)``), at the batch the job itself would choose
    there (point fit); ``None`` without a model, GPUs or positive goodput."""
    return predicted_rates([job], [allocation])[0]


def predicted_rates(jobs: Sequence[JobView], allocations: Sequence[np.ndarray]
                    ) -> list[float | None]:
    """:func:`predicted_rate` of each job at its allocation, the batch choices of all of them
    made in one vectorised call (:func:`perfmodel.goodput.optimize_each`, which gives each job's
    own choice)."""
    out: list[float | None] = [None] * len(jobs)
    rows = []
    for i, (job, allocation) in enumerate(zip(jobs, allocations, strict=True)):
        replicas = int(allocation.sum())
        if job.model is not None and replicas > 0:
            rows.append((i, job.model, int(np.count_nonzero(allocation)), replicas))
    if not rows:
        return out
    points = [model.goodput_model() for _, model, _, _ in rows]
    limits = [model.limits for _, model, _, _ in rows]
    choice = optimize_each(
        np.concatenate([point.theta for point in points]),
        np.concatenate([point.noise_to_signal for point in points]),
        np.array([point.init_bsz for point in points]),
        np.array([nodes for _, _, nodes, _ in rows]),
        np.array([replicas for _, _, _, replicas in rows]),
        np.array([lim.max_batch_size for lim in limits]),
        np.array([lim.min_local_bsz for lim in limits]),
        np.array([lim.max_local_bsz for lim in limits]),
        np.array([lim.max_accum_steps for lim in limits]), accumulate_alone=True)
    for row, (i, _, _, _) in enumerate(rows):
        goodput = float(choice.goodput[row])
        out[i] = goodput / jobs[i].limits.init_batch_size if goodput > 0 else None
    return out


__all__ = ["COLOCATION", "CONTENTION", "FEATURE_NAMES", "ColocationRound", "SlowdownPosterior",
           "SlowdownPredictor", "colocation_features", "predicted_rate", "predictor_of", "speed_factor"]

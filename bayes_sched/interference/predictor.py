"""What a co-location slowdown predictor is: :class:`SlowdownPredictor`, learning from
:class:`ColocationRound` s, and :func:`speed_factor`, a composition's predicted speed factor.

A predictor says, for candidate allocations a scheduler weighs, how much slower each job would run
because of the jobs sharing its nodes, as a log slowdown (``<= 0`` where sharing hurts, 0 =
unaffected; ``exp`` of it multiplies the job's predicted progress). It learns only from what a
real cluster reports: where jobs ran, their progress and, where collected, counters.

Predictors compose additively in log space, in order: each learns what the ones before it leave
unexplained (a counters-based prior first, a residual learned from progress after it), and the
composition predicts the sum. Implementations: :class:`~bayes_sched.interference.contention_prior.
ContentionPrior` (demands inferred from counters through the contention network) and
:class:`~bayes_sched.interference.pairs.PairResiduals` (a GP over pairs of job classes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import xarray as xr

from bayes_sched.topology import NodeTopology


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


class SlowdownPredictor(Protocol):
    """Predicts each job's co-location log slowdown in candidate allocations.

    ``name`` labels the predictor in messages (e.g. a failed fit).
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
        """Named figures for the report about the chosen allocation ``(J, N)``: e.g. its
        predicted mean log slowdown, fits so far; ``surrogate_std``, where the predictor has
        one, is the mean posterior standard deviation of what it learned (log units)."""
        ...


def speed_factor(predictors: Sequence[SlowdownPredictor], states: np.ndarray,
                     applications: Sequence[str], draws: bool = False
                     ) -> np.ndarray | float:
    """The composition's predicted speed factor, ``prod exp(log slowdown)`` over ``predictors``:
    ``(P, J)``, ``(S, P, J)`` with ``draws`` where a predictor draws, ``1.0`` for none.

    A product of factors rather than ``exp`` of the summed logs: the same numbers the ``bo``
    policy's figures were measured with, to the last bit."""
    factor: np.ndarray | float = 1.0
    for predictor in predictors:
        factor = factor * np.exp(predictor.log_slowdown(states, applications, draws))
    return factor

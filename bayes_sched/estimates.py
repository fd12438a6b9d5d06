"""What the estimation stage hands a decision: posteriors, keyed by what the policy needs.

Every round the loop observes the cluster, runs the estimators, and gives the policy an
:class:`Estimates` bundle together with the cluster state and the job views:
``policy.decide(state, jobs, estimates)``. A policy declares what it reads as its ``needs``, a
tuple of names from :data:`NEEDS`:

=================== =============================================================================
``throughput``      steps/s per cell (job type, scale factor, GPU type, co-runner)
``job_goodput``     each job's goodput models per GPU type (throughput fit and gradient noise)
``colocation``      co-location log slowdowns of jobs sharing nodes in candidate allocations
``remaining_work``  seconds of training left per job (jobs whose batch size changes)
``remaining_steps`` steps of training left per job (jobs that may end before their declared length)
``contention``      the contention state inferred from counters (demands on shared resources)
``resource_use``    the contention network's posterior over each node's hidden resource use
=================== =============================================================================

Each entry of the bundle names the estimator that produced it (``oracle`` where the world
supplies the truth), so that a run can report which estimates its decisions read.

Uncertain quantities answer one protocol, :class:`Posterior`: its mean, a quantile, and draws.
The estimators' own objects (a throughput belief, a job model, a slowdown predictor, a remaining
work predictor) answer a query (which cells, which allocations, which candidates, which job) with
a :class:`Posterior` through the adapters beside their protocols
(:class:`~bayes_sched.throughput_estimates.CellPosterior`, :class:`~bayes_sched.jobs.GoodputPosterior`,
:mod:`bayes_sched.colocation`, :mod:`bayes_sched.remaining_work`).

This module is core: it imports no estimator, policy or simulator. A typed key (:class:`Need`) is
declared beside the protocol of what it holds, so that ``estimates.get(THROUGHPUT)`` is typed
without the core importing that protocol.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

#: The needs a policy may declare, with what each entry holds (the vocabulary of the bundle).
NEEDS: Mapping[str, str] = {
    "throughput": "steps/s per cell (job type, scale factor, GPU type, co-runner): a belief that "
                  "answers cells with posterior means and draws",
    "job_goodput": "per job, per GPU type, its goodput model (throughput fit, posterior draws "
                   "where drawn, gradient noise)",
    "colocation": "co-location log slowdown predictors, composed in order (each learns what the "
                  "ones before it leave unexplained)",
    "remaining_work": "seconds of training left, alone on the job's GPUs, from the job's "
                      "profile and epochs done",
    "remaining_steps": "steps of training left per job, in its progress units, from its declared "
                       "length, attained progress and the history of jobs that ended (NaN: "
                       "unknown)",
    "contention": "the contention state inferred from counters, as a log slowdown predictor",
    "resource_use": "per node, the contention network's posterior over hidden use of each shared "
                    "resource (load over capacity: mean and spread), inferred from the counters",
}

T = TypeVar("T")


@dataclass(frozen=True)
class Need(Generic[T]):
    """A typed key of the bundle: ``name`` (one of :data:`NEEDS`) and, through ``T``, the type of
    the value an estimator publishes for it."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in NEEDS:
            raise ValueError(f"need {self.name!r}: expected one of {', '.join(NEEDS)}")


@dataclass(frozen=True)
class Estimate(Generic[T]):
    """One entry of the bundle: the value published for ``need`` by the estimator named
    ``estimator`` (``"oracle"`` for the truth a world supplies)."""

    need: Need[T]
    estimator: str
    value: T


class Estimates:
    """What the estimation stage inferred this round, read-only: at most one :class:`Estimate` per
    need.

    ``get(need)`` gives the value (``None`` where no estimator published it), ``require(need)``
    the value or a ``KeyError`` naming the need, ``estimator_of(need)`` who published it and
    :meth:`sources` every need with its estimator (what a run's summary reports).

    Raises:
        ValueError: two entries for one need.
    """

    __slots__ = ("_entries",)

    def __init__(self, entries: Iterable[Estimate[Any]] = ()) -> None:
        table: dict[str, Estimate[Any]] = {}
        for entry in entries:
            name = entry.need.name
            if name in table:
                raise ValueError(f"need {name!r} published twice: by {table[name].estimator!r} "
                                 f"and {entry.estimator!r}")
            table[name] = entry
        object.__setattr__(self, "_entries", table)

    _entries: dict[str, Estimate[Any]]

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Estimates is read-only: cannot set '{name}'")

    def get(self, need: Need[T]) -> T | None:
        entry = self._entries.get(need.name)
        return None if entry is None else entry.value

    def require(self, need: Need[T]) -> T:
        entry = self._entries.get(need.name)
        if entry is None:
            have = ", ".join(self._entries) or "none"
            raise KeyError(f"no estimate of {need.name!r} this round (estimates: {have}); "
                           "does the policy declare it in its needs?")
        return entry.value

    def estimator_of(self, need: Need[Any] | str) -> str | None:
        name = need if isinstance(need, str) else need.name
        entry = self._entries.get(name)
        return None if entry is None else entry.estimator

    def sources(self) -> dict[str, str]:
        """``{need: estimator name}`` for every entry."""
        return {name: entry.estimator for name, entry in self._entries.items()}

    def __contains__(self, need: object) -> bool:
        name = need.name if isinstance(need, Need) else need
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Estimates({self.sources()})"


def describe_sources(sources: Mapping[str, str]) -> str:
    """``{need: estimator}`` as a run's summary names it: ``throughput=oracle, ...`` (``none``
    for a run whose decisions read no estimate)."""
    return ", ".join(f"{need}={name}" for need, name in sources.items()) or "none"


#: The bundle of a round in which no estimator published anything (a policy that needs nothing;
#: a test deciding on job views alone).
NO_ESTIMATES = Estimates()


class Posterior(Protocol):
    """The uncertainty about an array of quantities of one unit, shape :attr:`shape` (a query
    already bound: e.g. ``(N,)`` cells' steps/s, ``(A,)`` allocations' goodput, ``(P, J)``
    candidates' log slowdowns, ``()`` one job's remaining seconds).

    A point estimate is a posterior too: its quantiles are its value and its draws repeat it.
    """

    @property
    def shape(self) -> tuple[int, ...]: ...

    def mean(self) -> np.ndarray:
        """The posterior mean (for an estimator that keeps a point fit beside its draws, the
        point fit), shape :attr:`shape`."""
        ...

    def quantile(self, q: float) -> np.ndarray:
        """The ``q``-quantile (``0 <= q <= 1``) of each quantity's marginal, shape
        :attr:`shape`."""
        ...

    def draws(self, n: int, seed: int = 0) -> np.ndarray:
        """``n`` joint posterior draws, shape ``(n, *shape)``; one ``seed``, one answer."""
        ...


def resample_draws(fixed: np.ndarray, n: int, seed: int) -> np.ndarray:
    """``n`` draws ``(n, ...)`` from an estimator's fixed set ``fixed`` ``(S, ...)``: the set
    itself when ``n == S``, else rows chosen uniformly with replacement (``seed``)."""
    if n < 0:
        raise ValueError(f"n is {n}: expected draws >= 0")
    if fixed.shape[0] == n:
        return fixed
    rows = np.random.default_rng(seed).integers(0, fixed.shape[0], size=n)
    return fixed[rows]


def check_quantile(q: float) -> float:
    """``q`` as a float, or ``ValueError`` unless ``0 <= q <= 1``."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile is {q}: expected 0 <= q <= 1")
    return float(q)


class PointPosterior:
    """A certain value as a :class:`Posterior`: quantiles are the value, draws repeat it."""

    def __init__(self, value: np.ndarray | float) -> None:
        self._value = np.asarray(value, dtype=np.float64)
        self._value.flags.writeable = False

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._value.shape)

    def mean(self) -> np.ndarray:
        return self._value

    def quantile(self, q: float) -> np.ndarray:
        check_quantile(q)
        return self._value

    def draws(self, n: int, seed: int = 0) -> np.ndarray:
        return resample_draws(self._value[None], n, seed)


class DrawsPosterior:
    """A posterior known by a fixed set of joint draws ``(S, *shape)`` and its mean (by default
    the draws' mean); quantiles are the draws' (linear interpolation, numpy's default)."""

    def __init__(self, fixed_draws: np.ndarray, mean: np.ndarray | None = None) -> None:
        fixed = np.asarray(fixed_draws, dtype=np.float64)
        if fixed.ndim == 0 or fixed.shape[0] == 0:
            raise ValueError(f"draws of shape {fixed.shape}: expected (S >= 1, ...)")
        self._draws = fixed
        self._mean = fixed.mean(axis=0) if mean is None else np.asarray(mean, dtype=np.float64)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._draws.shape[1:])

    def mean(self) -> np.ndarray:
        return self._mean

    def quantile(self, q: float) -> np.ndarray:
        return np.asarray(np.quantile(self._draws, check_quantile(q), axis=0))

    def draws(self, n: int, seed: int = 0) -> np.ndarray:
        return resample_draws(self._draws, n, seed)


__all__ = ["NEEDS", "NO_ESTIMATES", "DrawsPosterior", "Estimate", "Estimates", "Need",
           "PointPosterior", "Posterior", "check_quantile", "describe_sources", "resample_draws"]

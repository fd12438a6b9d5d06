"""Remaining steps of jobs that may end before their declared length: trust the declaration,
ignore it, or a survival model with a posterior learned from the jobs that ended.

The estimators here serve the ``remaining_steps`` need
(:data:`~bayes_sched.remaining_work.REMAINING_STEPS`), chosen outside the policy
(``--estimator remaining_steps=NAME``); the truth is only the world's ``oracle_remaining_steps``
(:mod:`bayes_sched.sim.oracles`). Notation: a job declares ``D`` steps and reports ``p`` done;
``a = p / D`` is the fraction of its declaration it has attained.

* ``declared``: ``R = max(D - p, 0)``: the declaration trusted (Gavel's rule), so a job that
  will be cancelled or fail is planned at its full length.
* ``ignored``: no duration at all: every job's remaining steps are unknown (NaN). What each
  policy that reads them then does is its rule for jobs that declare nothing: finish-time
  fairness, min total duration and AlloX split time equally (Gavel's ``IsolatedPolicy``), and
  their round mechanism runs first the job that received the least time since the allocation was
  last recomputed (least attained service within that window); E-LAS becomes plain LAS
  (attained GPU-seconds only).
* ``survival`` (ours): a survival model of the fraction of its declaration a job runs, with a
  posterior per group of jobs learned from the jobs that ended and those still running.

**The model.** A job of group ``g`` (its tenant, its application, both, or one group for all:
option ``group``) runs a fraction ``U = X / D`` of its declaration, ``X`` its true length::

    U = 1                                  with probability pi     (it runs to its declaration)
    U ~ F on (0, 1),  F(u) = u ** theta    with probability 1 - pi (it is cancelled or fails)

``theta < 1``: the early exits crowd the start of a run (as failures do); ``theta = 1``: they
fall uniformly over it. The survival function, for ``0 <= u < 1``::

    S(u) = P(U > u) = pi + (1 - pi) (1 - u ** theta)

**Posterior.** ``(pi, theta)`` per group on a grid: ``pi`` at the midpoints of ``pi_points``
equal bins of (0, 1) under a uniform prior (Beta(1, 1)); ``theta`` at ``theta_points``
log-spaced points of [``THETA_RANGE``] under ``log theta ~ Normal(0, prior_sd**2)`` (centred on
uniform exits). The log-likelihood ``L_g`` of the group's jobs sums, per job last seen at ``a``:

* still running: ``log S(a)`` (right-censored);
* ended, and the most it can have reached by its end is ``b = (p + r dt) / D < 1`` (``r`` its
  fastest reported steps/s, or for a job that reported none the fastest of a job of its model
  and GPU count, times ``1 + rate_margin``; ``dt`` the round): an early exit in ``(a, b]``,
  ``log((1 - pi) (b ** theta - a ** theta))`` (interval-censored);
* ended with ``b >= 1`` (it may have reached its declaration, or it reported no rate):
  ``log S(a)`` (it ran to ``a``; its end says nothing of which way it ended).

A job is observed only through its views (progress and reports at each round's start), so its
exact end is known to a round. Groups borrow strength from each other: the weights of group
``g`` on the grid are ``w_g ∝ prior * exp(L_g + lambda_g (L_all - L_g))`` with
``lambda_g = min(1, pool_jobs / n_other)``, ``n_other`` the jobs of the other groups: their
evidence counts as at most ``pool_jobs`` jobs, and a group with no history reads theirs.

**Prediction.** For a job at ``a < 1`` of ``D`` declared steps, per grid point::

    m(a) = E[U - a | U > a] = (pi (1 - a) + (1 - pi) (theta / (theta + 1) (1 - a ** (theta + 1))
                               - a (1 - a ** theta))) / S(a)

and ``E[remaining steps] = D sum_k w_k m_k(a)`` (the weights already condition on this job
having run to ``a``: its censored term is in ``L_g``). Its predictive distribution is
``P(U > x | U > a) = sum_k w_k S_k(x) / S_k(a)`` for ``a <= x < 1``, with the atom
``sum_k w_k pi_k / S_k(a)`` at ``x = 1``; quantiles and draws come from it (on a grid of ``x``).
A job that declares no length: NaN; a job at ``a >= 1``: 0.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np

from bayes_sched.cluster import ClusterState
from bayes_sched.estimates import Estimate, PointPosterior, check_quantile
from bayes_sched.estimation.constant import ConstantEstimator
from bayes_sched.jobs import JobView
from bayes_sched.registry import Range
from bayes_sched.remaining_work import (
    REMAINING_STEPS,
    RemainingStepsPredictor,
    declared_steps_left,
)

#: Grid range of the early-exit exponent ``theta`` (a power law ``u ** theta``).
THETA_RANGE = (0.05, 20.0)

#: How jobs are grouped: by tenant, by application (job type), by both, or all together.
Grouping = Literal["tenant", "application", "tenant_application", "all"]

#: Points of the predictive distribution's grid of ``x`` (quantiles and draws).
_X_POINTS = 257


def group_of(job: JobView, grouping: Grouping) -> str:
    """The key of ``job``'s group under ``grouping``."""
    if grouping == "tenant":
        return job.tenant
    if grouping == "application":
        return job.application
    if grouping == "tenant_application":
        return f"{job.tenant}/{job.application}"
    return ""


class DeclaredSteps:
    """The declaration trusted: :func:`~bayes_sched.remaining_work.declared_steps_left`."""

    def remaining_steps(self, job: JobView) -> float:
        return declared_steps_left(job)

    def posterior(self, job: JobView) -> PointPosterior:
        return PointPosterior(self.remaining_steps(job))


class IgnoredSteps:
    """No duration: every job's remaining steps are unknown (NaN)."""

    def remaining_steps(self, job: JobView) -> float:
        return math.nan

    def posterior(self, job: JobView) -> PointPosterior:
        return PointPosterior(math.nan)


class OracleRemainingSteps:
    """The truth a world supplies: ``truth(job name)``, the steps the job really has left (the
    upper bound; only as the world's ``oracle_remaining_steps``)."""

    def __init__(self, truth: Callable[[str], float]) -> None:
        self.truth = truth

    def remaining_steps(self, job: JobView) -> float:
        return float(self.truth(job.name))

    def posterior(self, job: JobView) -> PointPosterior:
        return PointPosterior(self.remaining_steps(job))


def survival(pi: np.ndarray, theta: np.ndarray, a: np.ndarray | float) -> np.ndarray:
    """``S(a) = pi + (1 - pi)(1 - a ** theta)`` on the grid: ``pi`` ``(P, 1)``, ``theta``
    ``(1, T)``, ``a`` a scalar or ``(J, 1, 1)``; 0 <= a < 1."""
    return pi + (1.0 - pi) * (1.0 - np.power(a, theta))


def mean_fraction_left(pi: np.ndarray, theta: np.ndarray, a: float) -> np.ndarray:
    """``m(a) = E[U - a | U > a]`` per grid point (the module's formula), ``(P, T)``."""
    exits = theta / (theta + 1.0) * (1.0 - a ** (theta + 1.0)) - a * (1.0 - a ** theta)
    return (pi * (1.0 - a) + (1.0 - pi) * exits) / survival(pi, theta, a)


class SurvivalPosterior:
    """One job's remaining steps under the survival posterior, a
    :class:`~bayes_sched.estimates.Posterior` of shape ``()`` (see the module)."""

    shape: tuple[int, ...] = ()

    def __init__(self, declared: float, attained: float, weights: np.ndarray, pi: np.ndarray,
                 theta: np.ndarray) -> None:
        self.declared, self.attained = declared, attained
        # The grid points that carry the posterior (weights below 1e-9 of the largest dropped).
        keep = weights > weights.max() * 1e-9
        self.weights = weights[keep]
        self.pi = np.broadcast_to(pi, weights.shape)[keep]
        self.theta = np.broadcast_to(theta, weights.shape)[keep]

    def mean(self) -> np.ndarray:
        return np.asarray(self.declared * float(
            (self.weights * mean_fraction_left(self.pi, self.theta, self.attained)).sum()))

    def _cdf(self) -> tuple[np.ndarray, np.ndarray]:
        """The grid of ``x`` in ``[a, 1]`` and ``P(U <= x | U > a)`` on it (1 at ``x = 1``)."""
        a = self.attained
        x = a + (1.0 - a) * np.linspace(0.0, 1.0, _X_POINTS)
        base = survival(self.pi, self.theta, a)
        ratio = survival(self.pi, self.theta, x[:-1, None]) / base
        cdf = 1.0 - (self.weights * ratio).sum(axis=1)
        return x, np.append(np.maximum.accumulate(np.clip(cdf, 0.0, 1.0)), 1.0)

    def _inverse(self, q: np.ndarray) -> np.ndarray:
        x, cdf = self._cdf()
        # The first x whose CDF reaches q (a step at x = 1 holds the atom).
        index = np.minimum(np.searchsorted(cdf, q, side="left"), len(x) - 1)
        return self.declared * (x[index] - self.attained)

    def quantile(self, q: float) -> np.ndarray:
        return np.asarray(self._inverse(np.array([check_quantile(q)]))[0])

    def draws(self, n: int, seed: int = 0) -> np.ndarray:
        return self._inverse(np.random.default_rng(seed).random(n))


@dataclass(frozen=True)
class _Seen:
    """A job as last seen: its group, declared steps, steps done, fastest steps/s (0: none
    reported) and class (model, GPUs)."""

    group: str
    declared: float
    done: float
    rate: float
    kind: tuple[str, int]


class SurvivalPredictor:
    """The survival posterior of one round, per group (read-only; see the module)."""

    def __init__(self, estimator: SurvivalSteps, weights: Mapping[str, np.ndarray],
                 pooled: np.ndarray) -> None:
        self._grouping = estimator.grouping
        self._pi, self._theta = estimator.pi, estimator.theta
        self._weights = dict(weights)
        self._pooled = pooled

    def weights(self, group: str) -> np.ndarray:
        """The posterior weights ``(P, T)`` of ``group`` (summing to 1)."""
        return self._weights.get(group, self._pooled)

    def posterior(self, job: JobView) -> SurvivalPosterior | PointPosterior:
        declared = job.target_steps
        if declared is None or not declared > 0:
            return PointPosterior(math.nan)
        attained = float(job.progress) / float(declared)
        if attained >= 1.0:
            return PointPosterior(0.0)
        return SurvivalPosterior(float(declared), max(attained, 0.0),
                                 self.weights(group_of(job, self._grouping)), self._pi,
                                 self._theta)

    def remaining_steps(self, job: JobView) -> float:
        return float(self.posterior(job).mean())

    def summary(self, group: str) -> dict[str, float]:
        """Posterior mean and standard deviation of ``pi`` and ``theta`` in ``group``."""
        w = self.weights(group)
        out: dict[str, float] = {}
        for label, values in (("pi", np.broadcast_to(self._pi, w.shape)),
                              ("theta", np.broadcast_to(self._theta, w.shape))):
            mean = float((w * values).sum())
            out[label] = mean
            out[f"{label}_sd"] = float(np.sqrt(max((w * (values - mean) ** 2).sum(), 0.0)))
        return out


class SurvivalSteps:
    """The ``survival`` estimator: learns each group's ``(pi, theta)`` posterior from the jobs
    that ended and those running, and publishes a :class:`SurvivalPredictor` (see the module).

    Args:
        group: how jobs are grouped (``"tenant"``, ``"application"``, ``"tenant_application"``,
            ``"all"``).
        pool_jobs: at most how many jobs' worth the other groups' evidence counts for.
        rate_margin: the fraction a job's fastest reported steps/s is raised by to bound what
            it can have run in its last round (reports carry measurement noise).
        prior_sd: standard deviation of the prior on ``log theta``.
        pi_points, theta_points: the grid's size.
    """

    name = "survival"

    def __init__(self, group: Grouping = "tenant", pool_jobs: float = 10.0,
                 rate_margin: float = 0.25, prior_sd: float = 1.5, pi_points: int = 40,
                 theta_points: int = 48) -> None:
        if group not in ("tenant", "application", "tenant_application", "all"):
            raise ValueError(f"group is {group!r}: expected tenant, application, "
                             "tenant_application or all")
        for label, value in (("pool_jobs", pool_jobs), ("rate_margin", rate_margin),
                             ("prior_sd", prior_sd)):
            if not (math.isfinite(value) and value >= 0 and (label != "prior_sd" or value > 0)):
                raise ValueError(f"{label} is {value}: expected a finite number "
                                 f"{'> 0' if label == 'prior_sd' else '>= 0'}")
        self.grouping: Grouping = group
        self.pool_jobs, self.rate_margin = float(pool_jobs), float(rate_margin)
        self.pi = ((np.arange(pi_points) + 0.5) / pi_points)[:, None]  # (P, 1)
        self.theta = np.geomspace(*THETA_RANGE, theta_points)[None, :]  # (1, T)
        self.log_prior = -0.5 * (np.log(self.theta) / prior_sd) ** 2 + 0.0 * self.pi
        self._ended: dict[str, np.ndarray] = {}  # group -> summed log-likelihood of ended jobs
        self._ended_jobs: dict[str, int] = {}
        self._seen: dict[str, _Seen] = {}
        self._class_rate: dict[tuple[str, int], float] = {}  # fastest steps/s per class
        self._published: tuple[Estimate[Any], ...] = ()
        self._fits, self._fit_seconds = 0, 0.0

    def _end(self, seen: _Seen, round_seconds: float) -> None:
        """Add an ended job's term to its group's log-likelihood."""
        a = min(seen.done / seen.declared, 1.0)
        rate = seen.rate or self._class_rate.get(seen.kind, 0.0)
        reach = (seen.done + rate * (1.0 + self.rate_margin) * round_seconds) / seen.declared
        if rate > 0 and reach < 1.0:
            mass = np.power(reach, self.theta) - np.power(a, self.theta)
            term = np.log1p(-self.pi) + np.log(np.maximum(mass, 1e-300))
        else:
            term = np.log(np.maximum(survival(self.pi, self.theta, min(a, 1.0 - 1e-12)), 1e-300))
        self._ended[seen.group] = self._ended.get(seen.group, 0.0) + term
        self._ended_jobs[seen.group] = self._ended_jobs.get(seen.group, 0) + 1

    def estimate(self, cluster: ClusterState, jobs: Sequence[JobView]) -> list[JobView]:
        start = time.perf_counter()
        now = {job.name for job in jobs}
        for name in [n for n in self._seen if n not in now]:
            self._end(self._seen.pop(name), cluster.round_interval)
        for job in jobs:
            if job.target_steps is None or not job.target_steps > 0:
                continue
            before = self._seen.get(job.name)
            rate = max([before.rate if before else 0.0]
                       + [r.steps_per_second for r in job.cell_observations
                          if not r.out_of_memory])
            kind = (job.application, job.requested_replicas)
            self._class_rate[kind] = max(self._class_rate.get(kind, 0.0), rate)
            self._seen[job.name] = _Seen(group_of(job, self.grouping), float(job.target_steps),
                                         float(job.progress), rate, kind)
        self._published = (Estimate(REMAINING_STEPS, self.name, self._predictor()),)
        self._fits += 1
        self._fit_seconds += time.perf_counter() - start
        return list(jobs)

    def _predictor(self) -> SurvivalPredictor:
        """The posterior of this round: the ended jobs' terms and the running jobs' ``log S``."""
        loglik = {group: term.copy() for group, term in self._ended.items()}
        counts = dict(self._ended_jobs)
        running = list(self._seen.values())
        if running:
            a = np.array([min(s.done / s.declared, 1.0 - 1e-12) for s in running])
            terms = np.log(np.maximum(survival(self.pi, self.theta, a[:, None, None]), 1e-300))
            for group in {s.group for s in running}:
                rows = [i for i, s in enumerate(running) if s.group == group]
                loglik[group] = loglik.get(group, 0.0) + terms[rows].sum(axis=0)
                counts[group] = counts.get(group, 0) + len(rows)
        total = sum(loglik.values(), np.zeros_like(self.log_prior))
        jobs_in_all = sum(counts.values())
        weights = {group: self._normalised(term, total - term, jobs_in_all - counts[group])
                   for group, term in loglik.items()}
        return SurvivalPredictor(self, weights, self._normalised(0.0, total, jobs_in_all))

    def _normalised(self, own: np.ndarray | float, other: np.ndarray, other_jobs: int
                    ) -> np.ndarray:
        share = min(1.0, self.pool_jobs / other_jobs) if other_jobs > 0 else 0.0
        log_w = self.log_prior + own + share * other
        w = np.exp(log_w - log_w.max())
        return w / w.sum()

    def published(self) -> Sequence[Estimate[Any]]:
        return self._published

    def stats(self) -> Mapping[str, float]:
        """``survival_fits`` (rounds), ``survival_seconds`` and ``survival_ended`` (jobs whose
        end the posterior has learned from)."""
        return {"survival_fits": self._fits, "survival_seconds": self._fit_seconds,
                "survival_ended": sum(self._ended_jobs.values())}


class RemainingStepsEstimator(ConstantEstimator[RemainingStepsPredictor]):
    """Publishes a fixed remaining-steps predictor (``declared``, ``ignored``, the oracle)."""


def declared() -> RemainingStepsEstimator:
    """The declaration trusted: the steps declared less the steps done."""
    return RemainingStepsEstimator(REMAINING_STEPS, "declared", DeclaredSteps())


def ignored() -> RemainingStepsEstimator:
    """No duration: every job's remaining steps unknown (the policies' no-declaration rule)."""
    return RemainingStepsEstimator(REMAINING_STEPS, "ignored", IgnoredSteps())


def survival_steps(group: Grouping = "tenant",
                   pool_jobs: Annotated[float, Range(0.0)] = 10.0,
                   rate_margin: Annotated[float, Range(0.0)] = 0.25,
                   prior_sd: Annotated[float, Range(0.01, 100.0)] = 1.5) -> SurvivalSteps:
    """Ours: a survival model of the fraction of its declaration a job runs, per ``group``, with
    a grid posterior over its parameters (see :mod:`bayes_sched.estimation.remaining_steps`)."""
    return SurvivalSteps(group, pool_jobs, rate_margin, prior_sd)


__all__ = ["THETA_RANGE", "DeclaredSteps", "Grouping", "IgnoredSteps", "OracleRemainingSteps",
           "RemainingStepsEstimator", "SurvivalPosterior", "SurvivalPredictor", "SurvivalSteps",
           "declared", "group_of", "ignored", "mean_fraction_left", "survival",
           "survival_steps"]

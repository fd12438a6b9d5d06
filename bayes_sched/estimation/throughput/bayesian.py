"""Ours: one Gaussian process over log steps/s of every cell, alone and paired.

The model. For a cell of job type ``j`` (model family ``F``, log2 batch size ``b`` centred per
family) on ``s`` GPUs of type ``g``:

    log alone(j, s, g)      = f(j, s, g) + e
    log paired(j | k, s, g) = f(j, s, g) + h(j, k, s, g) + e'

``f`` and ``h`` are sums of independent Gaussian effects of what is known at submission, each
with its own variance (the effects and their priors:
:mod:`~bayes_sched.estimation.throughput.effects`): per GPU type and per (scale, GPU type) (fixed
priors stated in log steps/s, :class:`~bayes_sched.estimation.throughput.effects.FixedPriors`),
per family and family x GPU, batch-size slopes per family and family x GPU, per job type and
type x GPU, and for more than one GPU per (family, scale), (family, scale, GPU) and a batch slope per (family,
scale) and per (family, scale, GPU) (on Gavel's table how much faster a V100 is than a P100 at 8
GPUs falls with the batch size, 5.2x to 2.8x over LM's, and not on one GPU; without this slope a
held-out type at the end of its family's batch range was predicted from the wrong ratio, with
intervals too narrow); for the paired part one
level (fixed prior: about half the alone rate) and a deviation per (scale, GPU) (learned
variance: a place where no pair
has run yet starts from the level of those where pairs ran, not from the broad prior, which made
a first pair's draws span e^+-10), per (family, partner family) and with GPU,
batch slopes of both, per type, per partner, each x GPU, and slopes per GPU in the job's and the
partner's *load* (their measured log alone rate there, centred over types: heavy partners slow a
job more; a type with no alone report has load 0, the average). ``e``, ``e'`` are cell effects
(the part of each cell nothing shared explains; a cell measured again keeps its ``e``), and every
report adds measurement noise of standard deviation ``measurement_noise`` (log units) over
``reference_seconds``, shrinking as 1/sqrt(seconds).
A paired rate shares ``f`` with the job's alone rate: measuring either informs the other, and a
new type's one-GPU profile moves its paired predictions too. That is one joint Gaussian process
with a sum-of-products kernel (categorical x linear), so draws are joint across cells.

Why a GP in this form and not Bayesian matrix factorisation. The kernel is degenerate (a finite
sum of feature products plus a cell nugget), so the GP is solved exactly in weight space: a
sparse design (each cell touches ~20 effects) and one Cholesky of a ``p x p`` matrix (``p`` ~700
effects on Gavel's whole simulation table). That gives exact posteriors, closed-form joint draws
and analytic type-II maximum-likelihood gradients for the 23 variances, with no sampling and no
SVI to converge; a Pyro matrix factorisation would need SVI or MCMC at every online refit and
gives nothing for a type never seen (no row factors) unless its prior is built from these same
features. gpytorch/BoTorch exact GPs work on the ``n x n`` kernel (n ~2,100 cells here) and
re-derive with iterative solvers what the weight-space form gives exactly; at this size the
weight-space solve is the faster exact method. Libraries do the numerics (scipy sparse, LAPACK
Cholesky and ``potri``, L-BFGS-B). A (type, partner) effect and a (type, scale) effect were
tried and dropped: type-II ML gave them standard deviations of 0.002 and they doubled ``p``.

Fit time on every cell of Gavel's simulation table (2,127 cells, the most an online fit can
see; CPU seconds, one BLAS thread, ``experiments/bench_throughput_estimators.py --timing``):
cold hyperparameter fit 3.6 s (75 L-BFGS-B iterations), warm refit after one more round of
reports 0.7 s (13 iterations; the learner starts from its last converged hyperparameters),
conditioning only (:meth:`BayesianThroughputLearner.conditioning_only`) 0.06 s, and predicting
the 30,000 cells 100 active jobs need with 200 joint draws 0.09 s. Online (the estimation
stage hands the learner every report so far at each fit) the learner fits its hyperparameters
again only when the observed cells have doubled (``hyperparameter_growth``) and otherwise
conditions only. A conditioning costs what changed, not a pass over every report: the reports
are pooled incrementally, the context (batch centres, loads) is updated from the cells whose
reports moved, a cell's design row is rebuilt only when its context moved, and the precision's
data terms ``phi.T W phi`` and ``phi.T W y`` are kept and updated by the changed cells' old and
new terms (:class:`~bayes_sched.estimation.throughput.weight_space.OnlineDesign`), leaving one
LAPACK Cholesky of ``p x p`` (the covariance, ``potri``, costs more and is formed only where a
prediction needs it). Predictions of
fewer cells than effects (an allocation recompute's cells, a profiling plan's) go through
``L^-1 phi^T`` (``p^2 N``) for variances and draws, or through the covariance where it is
already formed. Many draws of a few cells draw the known effects' part from its ``(N, N)``
covariance's root, not through the ``p`` effects. A belief keeps the cells' mean and variance
of log steps/s as it predicts them (:attr:`BayesianThroughputBelief._moments`); a refit whose
only news is failed launches (:meth:`BayesianThroughputLearner.refit_launches`) keeps the
posterior and that memo, so an allocation recompute predicts only the cells new since.

Profiling (:meth:`BayesianThroughputLearner.profiling_cells`): a small uncertainty-driven plan, the
same budget as Sia (one cell per GPU type): among the job's alone cells at its scale factor and on
one GPU, greedily the one with the largest posterior variance of log steps/s given those already
chosen. A new job must run somewhere before its first decision anyway; measuring where the belief
is least sure is what a policy's posterior draws would also pick, done up front so the held-out
benchmark compares estimators at equal profiling cost.

Bad input: reports with a non-finite or non-positive rate or non-positive seconds are logged and
left out (:func:`~bayes_sched.estimation.throughput.observations.usable_observations`). If the
hyperparameter fit does not converge within ``max_iterations`` (or fails numerically), the belief
falls back to the prior's settings (the last converged hyperparameters, else the defaults),
conditioned on the data where that works and on nothing where it does not, with its spread
widened by ``fallback_widening``; :attr:`BayesianThroughputBelief.fallback_reason` says why.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.linalg
import scipy.optimize
import scipy.sparse

from bayes_sched.cells import Cell, CellObservation
from bayes_sched.estimation.throughput.effects import (
    LOG_VARIANCE_BOUNDS,
    RANDOM_EFFECTS,
    Effect,
    FeatureContext,
    FixedPriors,
    effect_prior,
    effect_variances,
    starting_log_variances,
)
from bayes_sched.estimation.throughput.observations import IncrementalPool
from bayes_sched.estimation.throughput.pair_fit import (
    LaunchesAt,
    PairFitBelief,
    PairLaunches,
    with_pair_fits,
)
from bayes_sched.estimation.throughput.weight_space import (
    Design,
    Matrix,
    OnlineDesign,
    Posterior,
    QueryRows,
    condition,
    feature_rows,
    one_blas_thread,
    quadratic_diag,
    solve_lower,
    squared,
)
from bayes_sched.estimation.throughput_cells import CellPrediction, ThroughputBelief

logger = logging.getLogger(__name__)

#: Below this many draws normals are drawn afresh (a Thompson draw: ``p`` normals, each with its
#: own seed); from it on they are kept (a held-out run's or bo's draws, one seed asked again).
_KEPT_DRAWS = 32


@dataclass
class _NormalStream:
    """The first ``rows`` rows of ``default_rng(seed).standard_normal((rows, S))`` (read-only)
    and, per row count ``p`` asked for, the generator's state after ``(p, S)`` normals."""

    z: np.ndarray
    states: dict[int, Mapping[str, Any]]


_NORMAL_STREAMS: dict[tuple[int, int], _NormalStream] = {}
#: The ``(num_draws, seed)`` asked for once so far (a stream is kept from the second ask on: a
#: policy's value-of-information draws take a new seed per call, and keeping those evicted the
#: repeated streams every few calls).
_ASKED_ONCE: dict[tuple[int, int], None] = {}


def _standard_normals(p: int, num_draws: int, seed: int
                      ) -> tuple[np.ndarray, Mapping[str, Any]]:
    """``default_rng(seed).standard_normal((p, num_draws))`` (read-only) and the generator's
    state after it. Many draws are kept per ``(num_draws, seed)`` asked for again (see
    :data:`_ASKED_ONCE`) and grown as ``p`` grows: a
    generator fills the rows in order, so the first ``p`` rows of a taller draw are the
    ``(p, num_draws)`` draw, and continuing from the state after ``p`` rows gives the rest (``p``
    grows with each fit that meets new effects, and drawing all of them again at every call
    cost more than the call's other work)."""
    stream = _NORMAL_STREAMS.get((num_draws, seed))
    if stream is None and (num_draws < _KEPT_DRAWS or (num_draws, seed) not in _ASKED_ONCE):
        if num_draws >= _KEPT_DRAWS:
            if len(_ASKED_ONCE) >= 1024:
                del _ASKED_ONCE[next(iter(_ASKED_ONCE))]
            _ASKED_ONCE[(num_draws, seed)] = None
        rng = np.random.default_rng(seed)
        z = rng.standard_normal((p, num_draws))
        z.flags.writeable = False
        return z, rng.bit_generator.state
    if stream is None:
        if len(_NORMAL_STREAMS) >= 4:
            del _NORMAL_STREAMS[next(iter(_NORMAL_STREAMS))]
        stream = _NORMAL_STREAMS[(num_draws, seed)] = _NormalStream(
            np.zeros((0, num_draws)), {0: np.random.default_rng(seed).bit_generator.state})
    if p not in stream.states:
        start = max(rows for rows in stream.states if rows <= p)
        rng = np.random.default_rng(seed)
        rng.bit_generator.state = stream.states[start]
        more = rng.standard_normal((p - start, num_draws))
        rows = len(stream.z)
        if p > rows:
            stream.z = np.concatenate([stream.z, more[rows - start:]])
            stream.z.flags.writeable = False
        stream.states[p] = rng.bit_generator.state
    return stream.z[:p], stream.states[p]


@dataclass
class BayesianThroughputBelief:
    """Posterior over every cell's steps/s (see the module docstring).

    Attributes:
        fallback_reason: ``None`` after a converged fit; else why the belief fell back to the
            prior's settings with widened intervals.
        log_variances: the hyperparameters used (learned log variances, then the log nuggets).
        fit_seconds: wall seconds the fit took.
        num_cells: cells observed.
    """

    design: Design | None
    posterior: Posterior | None
    log_variances: np.ndarray
    context: FeatureContext
    widening: float = 1.0
    fallback_reason: str | None = None
    fit_seconds: float = 0.0
    iterations: int = 0
    _observed: dict[Cell, int] = field(default_factory=dict)
    #: The launches where pairs fit are learned from (read on first use); ``None``: every pair
    #: is taken to fit.
    _launches: LaunchesAt | None = None
    _query_rows: QueryRows = field(default_factory=QueryRows)
    #: The priors of the effects not learned.
    fixed_priors: FixedPriors = field(default_factory=FixedPriors)
    #: The effects' variances and the nuggets of ``log_variances``, on first use.
    _variances: tuple[dict[str, float], np.ndarray] | None = None
    #: Cells' log steps/s mean and variance as predicted so far, shared by the beliefs that
    #: keep this one's posterior (:meth:`BayesianThroughputLearner.refit_launches`): an
    #: allocation recompute asks the mean of the same ~700 cells again.
    _moments: dict[Cell, tuple[float, float]] = field(default_factory=dict)

    @property
    def pair_fits(self) -> PairFitBelief | None:
        """Where pairs fit (:mod:`~bayes_sched.estimation.throughput.pair_fit`); ``None``: every
        pair is taken to fit."""
        return None if self._launches is None else self._launches.pair_fits

    @property
    def num_cells(self) -> int:
        return 0 if self.design is None else len(self.design.cells)

    def log_moments(self, cells: Sequence[Cell]) -> tuple[np.ndarray, np.ndarray,
                                                          _QueryParts]:
        """Posterior mean and variance of log steps/s of ``cells``, each shape ``(N,)``."""
        with one_blas_thread():
            parts = self._query(cells)
        var = parts.scale**2 * parts.known_var + parts.unknown_var + parts.cell_var
        return parts.offset + parts.scale * parts.known_mean, var * self.widening**2, parts

    def log_covariance(self, cells: Sequence[Cell]) -> np.ndarray:
        """Posterior covariance of log steps/s of ``cells`` (alone or paired, without where
        pairs fit), shape ``(N, N)``; its diagonal is :meth:`log_moments`' variance. Exact:
        the same terms :meth:`predict`'s draws are made of."""
        with one_blas_thread():
            parts = self._query(cells)
            n = len(cells)
            known = np.zeros((n, n))
            if self.posterior is not None and parts.phi.shape[1]:
                known = (parts.half.T @ parts.half if parts.half is not None
                         else np.asarray(parts.phi @ (parts.phi @ self.posterior.cov).T))
                known *= np.outer(parts.scale, parts.scale)
            unknown = (parts.unknown if isinstance(parts.unknown, np.ndarray)
                       else parts.unknown.toarray())  # few columns: the effects never seen
            cov = known + (unknown * parts.unknown_prior) @ unknown.T
            cov[np.diag_indices(n)] += parts.cell_var
        return cov * self.widening**2

    def predict(self, cells: Sequence[Cell], num_draws: int = 0, seed: int = 0
                ) -> CellPrediction:
        # Jobs of one type share their cells: predict each distinct cell once (the same cell
        # is the same throughput, so its draws are identical across the jobs that ask).
        distinct, positions = _distinct(cells)
        with one_blas_thread():
            unique = self._predict(distinct, num_draws, seed)
        if self._launches is not None and any(cell.partner is not None for cell in distinct):
            unique = with_pair_fits(unique, distinct, self._launches.pair_fits, num_draws, seed)
        return CellPrediction(unique.mean[positions], unique.draws[:, positions])

    def _predict(self, cells: list[Cell], num_draws: int, seed: int) -> CellPrediction:
        if num_draws == 0:
            mean_log, var_log = self._kept_moments(cells)
            mean = np.exp(mean_log + var_log / 2)
            return CellPrediction(mean, mean[None, :].copy())
        mean_log, var_log, parts = self.log_moments(cells)
        mean = np.exp(mean_log + var_log / 2)
        if not cells:
            return CellPrediction(mean, mean[None, :].copy())
        rng = np.random.default_rng(seed)
        n = len(cells)
        p = len(self.posterior.mean) if self.posterior is not None else 0
        if p and 10 * n * n + n * p < p * num_draws:
            # Few cells, many draws: draw the known part from its (N, N) covariance's root
            # (N normals a draw) instead of through the p effects (p normals a draw and an
            # (N, p) x (p, S) product, most of a value-of-information pass at large p).
            assert self.posterior is not None
            if parts.half is not None:
                known = parts.half.T @ parts.half
            else:
                known = np.asarray(parts.phi @ (parts.phi @ self.posterior.cov).T)
            known *= np.outer(parts.scale, parts.scale)
            eigenvalues, vectors = np.linalg.eigh(known)
            root = vectors * np.sqrt(np.clip(eigenvalues, 0.0, None))
            known_dev = rng.standard_normal((num_draws, n)) @ root.T
        elif self.posterior is not None and parts.phi.shape[1]:
            z, state = _standard_normals(p, num_draws, seed)
            rng.bit_generator.state = state
            if parts.half is not None:
                # phi @ L^-T z = (L^-1 phi^T)^T z: p^2 N work instead of p^2 draws.
                known_dev = (parts.half.T @ z).T * parts.scale
            else:
                w_dev = solve_lower(self.posterior.chol, z, transposed=True)
                known_dev = (parts.phi @ w_dev).T * parts.scale
        else:
            known_dev = np.zeros((num_draws, n))
        unknown = rng.standard_normal((num_draws, parts.unknown.shape[1])) * np.sqrt(
            parts.unknown_prior)
        unknown_dev = (parts.unknown @ unknown.T).T
        cell_dev = rng.standard_normal((num_draws, n)) * np.sqrt(parts.cell_var)
        deviation = (known_dev + unknown_dev + cell_dev) * self.widening
        return CellPrediction(mean, np.exp(mean_log[None, :] + deviation))

    def log_variance_and_fit(self, cells: Sequence[Cell]) -> tuple[np.ndarray, np.ndarray]:
        """Each cell's steps/s is ``F R``: ``R`` log-normal, ``F`` whether it runs at all
        (Bernoulli, independent of ``R``; 1 alone). Returns the variance of ``log R`` and
        ``P(F = 1)``, each ``(N,)`` (the mean of ``F R`` is :meth:`predict`'s mean)."""
        unique, positions = _distinct(cells)
        with one_blas_thread():
            _, var_log = self._kept_moments(unique)
        fit = (self._launches.pair_fits.probabilities(unique)
               if self._launches is not None else np.ones(len(unique)))
        return var_log[positions], fit[positions]

    def _kept_moments(self, cells: list[Cell]) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`log_moments`' mean and variance of ``cells`` (distinct), those not asked
        before computed and kept (:attr:`_moments`)."""
        kept = self._moments
        missing = [cell for cell in cells if cell not in kept]
        if missing:
            mean_log, var_log, _ = self.log_moments(missing)
            kept.update(zip(missing, zip(mean_log.tolist(), var_log.tolist(), strict=True),
                            strict=True))
        moments = np.array([kept[cell] for cell in cells], dtype=float).reshape(len(cells), 2)
        return moments[:, 0], moments[:, 1]

    def _query(self, cells: Sequence[Cell]) -> _QueryParts:
        if self._variances is None:
            log_params = self.log_variances
            self._variances = (effect_variances(log_params[:len(RANDOM_EFFECTS)]),
                               np.exp(log_params[len(RANDOM_EFFECTS):]))
        variances, nugget = self._variances
        columns: dict[tuple[str, tuple[object, ...]], int] = (
            self.design.columns if self.design is not None else {})
        p = len(columns)
        n = len(cells)
        # Fewer cells than effects: dense rows, and variances through L^-1 phi^T, unless the
        # covariance is at hand (a recompute's full prediction formed it): then sparse rows
        # and their quadratic forms in it, a few hundred products a cell instead of p^2.
        few = n < p and (self.posterior is None or not self.posterior.has_cov)
        phi, (urows, effects, uvals) = feature_rows(cells, self.context, columns,
                                                     self._query_rows, dense=few)
        # The unknown effects numbered in the order first met.
        unknown_cols: dict[Effect, int] = {}
        ucols = [unknown_cols.setdefault(effect, len(unknown_cols)) for effect in effects]
        fixed = self.fixed_priors
        unknown_priors = [effect_prior(effect, variances, fixed) for effect in unknown_cols]
        unknown: Matrix
        if few:
            unknown = np.zeros((n, len(unknown_cols)))
            unknown[urows, ucols] = uvals
        else:
            unknown = scipy.sparse.csr_matrix((uvals, (urows, ucols)),
                                              shape=(n, len(unknown_cols)))
        prior = np.array([var for _, var in unknown_priors])
        unknown_var = np.asarray(squared(unknown) @ prior).ravel() if len(prior) \
            else np.zeros(n)
        # The unknown effects' prior means (a first-seen GPU, scale or pair level).
        unknown_mean = np.asarray(unknown @ np.array([m for m, _ in unknown_priors])).ravel() \
            if len(prior) else np.zeros(n)
        cell_var = np.where([c.partner is not None for c in cells], nugget[1], nugget[0]) \
            if n else np.zeros(0)
        scale = np.ones(n)
        offset = np.zeros(n)
        half = None
        if self.posterior is not None:
            known_mean = phi @ self.posterior.mean + unknown_mean
            if isinstance(phi, np.ndarray):
                # Fewer cells than effects: L^-1 phi^T (p^2 N) beats the covariance (~p^3).
                # The factor is finite (its Cholesky succeeded), and so are the rows.
                half = solve_lower(self.posterior.chol, phi.T)
                known_var = np.einsum("ij,ij->j", half, half)
            else:
                known_var = quadratic_diag(phi, self.posterior.cov)
            assert self.design is not None
            observed = self._observed
            at = np.array([observed.get(cell, -1) for cell in cells], dtype=np.int64)
            rows = np.flatnonzero(at >= 0)
            if len(rows):
                # The cells' own effects given their reports: shrink towards them.
                noise = self.posterior.noise_var[at[rows]]
                meas = noise - cell_var[rows]
                gain = cell_var[rows] / noise
                scale[rows] = 1.0 - gain
                offset[rows] = gain * self.design.y[at[rows]]
                cell_var[rows] = cell_var[rows] * meas / noise
        else:
            column_priors = [effect_prior(effect, variances, fixed) for effect in columns]
            prior_var = np.array([var for _, var in column_priors])
            known_mean = unknown_mean + (phi @ np.array([m for m, _ in column_priors]) if p
                                         else 0.0)
            known_var = np.asarray(squared(phi) @ prior_var).ravel() if p else np.zeros(n)
        return _QueryParts(phi, known_mean, known_var, unknown, prior, unknown_var, cell_var,
                           scale, offset, half)


def _distinct(cells: Sequence[Cell]) -> tuple[list[Cell], np.ndarray]:
    """The distinct ``cells`` in first-asked order, and each cell's place among them
    ``(N,)``."""
    index: dict[Cell, int] = {}
    positions = np.array([index.setdefault(cell, len(index)) for cell in cells], dtype=int)
    return list(index), positions


@dataclass
class _QueryParts:
    phi: Matrix                    # (N, p) effects the fit saw
    known_mean: np.ndarray         # (N,)
    known_var: np.ndarray          # (N,) posterior (or prior, after a failed fit) variance
    unknown: Matrix                # (N, U) effects the fit never saw (prior)
    unknown_prior: np.ndarray      # (U,)
    unknown_var: np.ndarray        # (N,)
    cell_var: np.ndarray           # (N,) cell-effect variance (posterior where observed)
    scale: np.ndarray              # (N,) 1 - shrinkage of observed cells
    offset: np.ndarray             # (N,) shrinkage x observed log rate
    half: np.ndarray | None = None  # (p, N) L^-1 phi^T (L: the precision's factor), if formed


class BayesianThroughputLearner:
    """Ours (see the module docstring). Keeps its last converged hyperparameters as the warm
    start of the next fit.

    Args:
        max_iterations: L-BFGS-B iterations of the hyperparameter fit; 0 conditions on the data
            with the current hyperparameters only.
        hyperparameter_growth: the hyperparameters are fitted again only once the cells observed
            have grown by this factor since their last fit (a fit on a list that does not
            extend the last one's always fits them); in between a fit conditions on the data
            only (1: every fit). A fit that does not converge is retried at the same growth,
            not at every fit (each attempt costs up to ``max_iterations`` conditionings); in
            between, the last converged hyperparameters are used, or, before any has
            converged, the starting ones with the fallback's widening and reason. Doubling
            gives a logarithmic number of hyperparameter fits in an online loop, where each
            costs ~10-70 conditionings.
        measurement_noise: standard deviation of one report's log steps/s measured over
            ``reference_seconds``.
        fallback_widening: factor on the posterior spread after a failed fit.
        log_variances: starting hyperparameters (default :func:`default_log_variances`).
        learn_pair_fits: learn where pairs fit from failed launches (out-of-memory reports;
            :mod:`~bayes_sched.estimation.throughput.pair_fit`); off where every pair launches
            (bo's node-sharing cells).
        fixed_priors: the priors of the effects not learned (default :class:`FixedPriors`:
            steps/s of DL training on GPUs).
    """

    name = "bayes"

    def __init__(self, max_iterations: int = 200, measurement_noise: float = 0.05,
                 reference_seconds: float = 60.0, fallback_widening: float = 2.0,
                 log_variances: np.ndarray | None = None, profiling_budget: int | None = None,
                 hyperparameter_growth: float = 2.0, learn_pair_fits: bool = True,
                 fixed_priors: FixedPriors | None = None) -> None:
        if not hyperparameter_growth >= 1.0:
            raise ValueError(f"hyperparameter_growth is {hyperparameter_growth}: expected a "
                             "factor >= 1")
        self.max_iterations = max_iterations
        self.hyperparameter_growth = float(hyperparameter_growth)
        self._tuned_cells = 0  # cells observed at the last hyperparameter fit, converged or not
        self._converged = False  # whether any hyperparameter fit has converged
        #: Why the hyperparameters have not converged yet (``None`` once one fit has): between
        #: attempts a belief conditions on the starting values and still says it fell back.
        self._unconverged: str | None = None
        self._pool = IncrementalPool()  # the reports so far, pooled per cell
        self.measurement_noise = measurement_noise
        self.reference_seconds = reference_seconds
        self.fixed_priors = FixedPriors() if fixed_priors is None else fixed_priors
        self._design = self._new_design()  # their design and precision terms
        self.fallback_widening = fallback_widening
        self.log_variances = (starting_log_variances(self.fixed_priors) if log_variances is None
                              else np.array(log_variances, dtype=float))
        self.profiling_budget = profiling_budget
        self.learn_pair_fits = learn_pair_fits
        self._launches = PairLaunches()

    def _new_design(self) -> OnlineDesign:
        return OnlineDesign(self.measurement_noise**2, self.reference_seconds,
                             self.fixed_priors)

    def conditioning_only(self) -> BayesianThroughputLearner:
        """A learner that conditions on data with this one's current hyperparameters and fits
        none (``max_iterations=0``): the cheap refit between hyperparameter fits."""
        return BayesianThroughputLearner(0, self.measurement_noise, self.reference_seconds,
                                         self.fallback_widening, self.log_variances,
                                         self.profiling_budget,
                                         learn_pair_fits=self.learn_pair_fits,
                                         fixed_priors=self.fixed_priors)

    def fit(self, observations: Sequence[CellObservation]) -> BayesianThroughputBelief:
        # One BLAS thread: these matrices are small, and threads fight on a shared machine
        # (measured: docs/results/bench_uncertainty.md).
        with one_blas_thread():
            return self._fit(observations)

    def refit_launches(self, observations: Sequence[CellObservation],
                       belief: ThroughputBelief) -> ThroughputBelief:
        """``belief`` (this learner's last) with where pairs fit read from ``observations``
        (every report so far) and its rates' posterior kept: the refit when the only news is
        failed launches, which say nothing of rates (every pool skips them). The rates'
        reports since the last fit are read at the next :meth:`fit`. The belief shares the
        kept posterior's memo of cells' moments. Any other belief: a full :meth:`fit`."""
        if not isinstance(belief, BayesianThroughputBelief) or not self.learn_pair_fits \
                or not self._pool.extends(observations):
            return self.fit(observations)
        start = time.perf_counter()
        return dataclasses.replace(belief, _launches=LaunchesAt(self._launches, observations),
                                   iterations=0, fit_seconds=time.perf_counter() - start)

    def _fit(self, observations: Sequence[CellObservation]) -> BayesianThroughputBelief:
        start = time.perf_counter()
        pooled = self._pool.update(observations)
        if not self._pool.extended:
            self._tuned_cells = 0  # other data, not more of the same: fit the hyperparameters
            self._unconverged = None
            self._design = self._new_design()
            self._launches.restart()
        # Where pairs fit is read from the reports only when a prediction asks about a pair.
        launches = LaunchesAt(self._launches, observations) if self.learn_pair_fits else None
        self._design.update(pooled, self._pool.touched)
        context = self._design.context
        if not pooled:
            return BayesianThroughputBelief(None, None, self.log_variances.copy(), context,
                                            fit_seconds=time.perf_counter() - start,
                                            _launches=launches, fixed_priors=self.fixed_priors)
        design = self._design.design()
        observed = dict(self._design.index)
        reason: str | None = None
        params = self.log_variances.copy()
        iterations = 0
        tune = self.max_iterations > 0 and (
            not self._tuned_cells or len(pooled) >= self.hyperparameter_growth * self._tuned_cells)
        if tune:
            try:
                result = scipy.optimize.minimize(
                    lambda x: condition(design, x)[1:], params, jac=True, method="L-BFGS-B",
                    bounds=[LOG_VARIANCE_BOUNDS] * len(params),
                    options={"maxiter": self.max_iterations, "ftol": 1e-7, "gtol": 1e-3})
                iterations = int(result.nit)
                if result.success and np.all(np.isfinite(result.x)):
                    params = np.asarray(result.x)
                else:
                    reason = (f"hyperparameter fit did not converge in {result.nit} "
                              f"iterations ({result.message})")
            except (np.linalg.LinAlgError, ValueError) as error:
                reason = f"hyperparameter fit failed: {error}"
        try:
            posterior: Posterior | None = self._design.posterior(design, params)
        except (np.linalg.LinAlgError, ValueError) as error:
            reason = f"{reason}; " if reason else ""
            reason += f"conditioning failed ({error}): prior only"
            posterior = None
        if tune:  # a failed fit is retried once the cells grow, as a converged one is redone
            self._tuned_cells = len(pooled)
            self._converged = self._converged or reason is None
            self._unconverged = None if self._converged else reason
        if reason is None and self._unconverged is not None:
            reason = f"{self._unconverged} (at {self._tuned_cells} cells; retried at growth)"
        if reason is None:
            self.log_variances = params
        else:
            logger.warning("throughput belief falls back to the prior's settings with intervals "
                           "widened x%s: %s", self.fallback_widening, reason)
        return BayesianThroughputBelief(
            design if posterior is not None else None, posterior, params, context,
            widening=1.0 if reason is None else self.fallback_widening, fallback_reason=reason,
            fit_seconds=time.perf_counter() - start, iterations=iterations,
            _observed=observed if posterior is not None else {}, _launches=launches,
            _query_rows=self._design.query_rows, fixed_priors=self.fixed_priors)

    def profiling_cells(self, job_type: str, scale_factor: int, gpu_types: Sequence[str],
                        belief: ThroughputBelief) -> list[Cell]:
        """Greedy largest posterior variance among the job's alone cells at its scale factor and
        on one GPU, up to one cell per GPU type (see the module docstring), on the exact
        covariance of their log steps/s (512 draws' sample covariance, before, chose among
        near-equal variances by sampling noise: a job at its own scale and on one GPU of a type
        differ by a few percent of variance, and which was measured came down to the draws)."""
        scales = sorted({1, scale_factor})
        candidates = [Cell(job_type, s, g) for s in scales for g in gpu_types]
        budget = len(gpu_types) if self.profiling_budget is None else self.profiling_budget
        if not isinstance(belief, BayesianThroughputBelief):
            raise TypeError(f"profiling_cells reads this learner's own belief, not a "
                            f"{type(belief).__name__}")
        cov = belief.log_covariance(candidates)
        chosen: list[Cell] = []
        for _ in range(min(budget, len(candidates))):
            i = int(np.argmax(np.diag(cov)))
            if cov[i, i] <= 0:
                break
            chosen.append(candidates[i])
            cov = cov - np.outer(cov[:, i], cov[i, :]) / cov[i, i]
            cov[i, i] = 0.0
        return chosen

"""Ours: one Gaussian process over log steps/s of every cell, alone and paired.

The model. For a cell of job type ``j`` (model family ``F``, log2 batch size ``b`` centred per
family) on ``s`` GPUs of type ``g``:

    log alone(j, s, g)      = f(j, s, g) + e
    log paired(j | k, s, g) = f(j, s, g) + h(j, k, s, g) + e'

``f`` and ``h`` are sums of independent Gaussian effects of what is known at submission, each
with its own variance: per GPU type and per (scale, GPU type) (broad, fixed), per family and
family x GPU, batch-size slopes per family and family x GPU, per job type and type x GPU, and for
more than one GPU per (family, scale), (family, scale, GPU) and a batch slope per (family,
scale); for the paired part one level (broad, fixed) and a deviation per (scale, GPU) (learned
variance: a place where no pair has run yet starts from the level of those where pairs ran, not
from the broad prior, which made a first pair's draws span e^+-10), per (family, partner
family) and with GPU,
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
and analytic type-II maximum-likelihood gradients for the 21 variances, with no sampling and no
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
conditions only; the reports are pooled incrementally and each cell's design row is rebuilt
only when its context (batch centres, loads) moved, so a conditioning costs its Cholesky and
the new rows, not a pass over every report.

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

import functools
import logging
import math
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg
import scipy.optimize
import scipy.sparse
from threadpoolctl import ThreadpoolController

from bayes_sched.estimation.throughput.observations import IncrementalPool, PooledCell
from bayes_sched.estimation.throughput.pair_fit import PairFitBelief, PairLaunches, with_pair_fits
from bayes_sched.estimation.throughput_cells import (
    Cell,
    CellObservation,
    CellPrediction,
    ThroughputBelief,
    job_type_features,
)

logger = logging.getLogger(__name__)

#: Effects with a broad fixed prior variance (log units squared): levels, not learned.
FIXED_VARIANCE = 25.0
FIXED_EFFECTS = ("gpu", "scale", "pair_level")
#: Effects whose variances are learned (type-II maximum likelihood), in this order.
RANDOM_EFFECTS = (
    "family", "family_gpu", "batch", "batch_gpu", "type", "type_gpu",
    "family_scale", "family_scale_gpu", "batch_scale",
    "pair_family", "pair_family_gpu", "pair_batch", "pair_partner_batch",
    "pair_type", "pair_type_gpu", "pair_partner", "pair_partner_gpu",
    "pair_load", "pair_partner_load",
    "pair_level_place",
)
NUGGETS = ("solo", "pair")
_DEFAULT_LOG_VARIANCE = math.log(0.25)
#: Bounds of every learned log variance (hyperparameter fits; bo's pair learner starts the
#: effects it does not use at the lower one).
LOG_VARIANCE_BOUNDS = (-12.0, 4.0)

Feature = tuple[str, tuple[object, ...], float]

_THREADPOOLS: ThreadpoolController | None = None


def _one_blas_thread() -> AbstractContextManager[object]:
    """Limit BLAS to one thread for a block. The controller (which finds the loaded BLAS
    libraries, ~14 ms a call under load) is built once: a fresh ``threadpool_limits`` per predict
    cost more than the predict."""
    global _THREADPOOLS
    if _THREADPOOLS is None:
        _THREADPOOLS = ThreadpoolController()
    return _THREADPOOLS.limit(limits=1)


#: :func:`job_type_features` memoised (a regular expression per call, several per cell and fit).
_declared = functools.lru_cache(maxsize=4096)(job_type_features)


def _family_batch(job_type: str, centres: dict[str, float]) -> tuple[str, float]:
    family, batch = _declared(job_type)
    if batch is None:
        return family, 0.0
    log_batch = math.log2(batch)
    return family, log_batch - centres.get(family, log_batch)


@dataclass(frozen=True)
class FeatureContext:
    """What features are measured against, fixed at fit time.

    Attributes:
        centres: ``{family: mean log2 batch size of its types seen}``.
        loads: ``{(job type, scale factor, gpu type): observed mean log alone steps/s less the
            mean over types at that scale and GPU type}`` (a paired cell's covariates: how heavy
            the job and its partner are on that GPU).
    """

    centres: dict[str, float]
    loads: dict[tuple[str, int, str], float]


def cell_features(cell: Cell, context: FeatureContext) -> list[Feature]:
    """The effects a cell's log rate sums, with their multipliers (see the module docstring)."""
    centres = context.centres
    j, s, g = cell.job_type, cell.scale_factor, cell.gpu_type
    fam, xb = _family_batch(j, centres)
    out: list[Feature] = [
        ("gpu", (g,), 1.0), ("scale", (s, g), 1.0),
        ("family", (fam,), 1.0), ("family_gpu", (fam, g), 1.0),
        ("batch", (fam,), xb), ("batch_gpu", (fam, g), xb),
        ("type", (j,), 1.0), ("type_gpu", (j, g), 1.0)]
    if s > 1:
        out += [("family_scale", (fam, s), 1.0), ("family_scale_gpu", (fam, s, g), 1.0),
                ("batch_scale", (fam, s), xb)]
    if cell.partner is not None:
        k = cell.partner
        pfam, pxb = _family_batch(k, centres)
        load = context.loads.get((j, s, g), 0.0)
        partner_load = context.loads.get((k, s, g), 0.0)
        out += [("pair_level", (), 1.0), ("pair_level_place", (s, g), 1.0),
                ("pair_family", (fam, pfam), 1.0), ("pair_family_gpu", (fam, pfam, g), 1.0),
                ("pair_batch", (fam, pfam), xb), ("pair_partner_batch", (fam, pfam), pxb),
                ("pair_type", (j,), 1.0), ("pair_type_gpu", (j, g), 1.0),
                ("pair_partner", (k,), 1.0), ("pair_partner_gpu", (k, g), 1.0),
                ("pair_load", (g,), load), ("pair_partner_load", (g,), partner_load)]
    return [f for f in out if f[2] != 0.0]


def _effect_variances(log_variances: np.ndarray) -> dict[str, float]:
    variances = {name: FIXED_VARIANCE for name in FIXED_EFFECTS}
    variances.update({name: float(np.exp(v)) for name, v in zip(RANDOM_EFFECTS, log_variances,
                                                                  strict=False)})
    return variances


def default_log_variances() -> np.ndarray:
    """Starting hyperparameters: every learned variance and both nuggets at 0.25 (log units^2)."""
    return np.full(len(RANDOM_EFFECTS) + len(NUGGETS), _DEFAULT_LOG_VARIANCE)


@dataclass
class _Design:
    """Training cells in weight space."""

    cells: list[Cell]
    y: np.ndarray             # (n,) pooled log rate
    meas_var: np.ndarray      # (n,) measurement variance of the pooled log rate
    is_pair: np.ndarray       # (n,) bool
    phi: scipy.sparse.csr_matrix  # (n, p)
    columns: dict[tuple[str, tuple[object, ...]], int]
    column_effect: np.ndarray  # (p,) index into FIXED_EFFECTS + RANDOM_EFFECTS names
    effect_names: tuple[str, ...]


Unknown = list[tuple[int, str, tuple[object, ...], float]]


def _feature_rows(cells: Sequence[Cell], context: FeatureContext,
                  columns: dict[tuple[str, tuple[object, ...]], int], grow: bool
                  ) -> tuple[scipy.sparse.csr_matrix, Unknown]:
    """The cells' effects as sparse rows over ``columns``, shape ``(N, len(columns))``; an
    effect not in ``columns`` gets a new column when ``grow``, else is returned as ``(row, name,
    key, value)``."""
    rows, cols, vals = [], [], []
    unknown: Unknown = []
    for r, cell in enumerate(cells):
        for name, key, value in cell_features(cell, context):
            c = columns.get((name, key))
            if c is None and grow:
                c = columns[(name, key)] = len(columns)
            if c is None:
                unknown.append((r, name, key, value))
                continue
            rows.append(r)
            cols.append(c)
            vals.append(value)
    phi = scipy.sparse.csr_matrix((vals, (rows, cols)), shape=(len(cells), len(columns)))
    return phi, unknown


class _DesignRows:
    """The design's rows kept across the fits of one growing list of reports: the effect
    columns in first-seen order and each cell's sparse row, rebuilt only for a cell whose
    context (its families' batch centres, its and its partner's loads) changed. An online fit
    then costs what is new, not a pass over every cell's effects (a column left without a cell
    keeps its prior and changes no posterior)."""

    def __init__(self) -> None:
        self.columns: dict[tuple[str, tuple[object, ...]], int] = {}
        self._rows: dict[Cell, tuple[tuple[object, ...], np.ndarray, np.ndarray]] = {}

    def phi(self, cells: Sequence[Cell], context: FeatureContext) -> scipy.sparse.csr_matrix:
        """The cells' rows, shape ``(len(cells), len(self.columns))``."""
        indices, values = [], []
        for cell in cells:
            key = _context_key(cell, context)
            row = self._rows.get(cell)
            if row is None or row[0] != key:
                features = cell_features(cell, context)
                cols = np.array([self.columns.setdefault((name, k), len(self.columns))
                                 for name, k, _ in features], dtype=np.int64)
                row = self._rows[cell] = (key, cols, np.array([v for _, _, v in features]))
            indices.append(row[1])
            values.append(row[2])
        indptr = np.zeros(len(cells) + 1, dtype=np.int64)
        indptr[1:] = np.cumsum([len(i) for i in indices])
        return scipy.sparse.csr_matrix(
            (np.concatenate(values) if values else np.zeros(0),
             np.concatenate(indices) if indices else np.zeros(0, dtype=np.int64), indptr),
            shape=(len(cells), len(self.columns)))


def _context_key(cell: Cell, context: FeatureContext) -> tuple[object, ...]:
    """What of ``context`` a cell's features read (see :func:`cell_features`)."""
    centre = context.centres.get(_declared(cell.job_type)[0])
    if cell.partner is None:
        return (centre,)
    where = (cell.scale_factor, cell.gpu_type)
    return (centre, context.centres.get(_declared(cell.partner)[0]),
            context.loads.get((cell.job_type, *where)), context.loads.get((cell.partner, *where)))


def _build_design(pooled: dict[Cell, PooledCell], context: FeatureContext,
                  noise_var_at_reference: float, reference_seconds: float,
                  rows: _DesignRows | None = None) -> _Design:
    names = FIXED_EFFECTS + RANDOM_EFFECTS
    rows = _DesignRows() if rows is None else rows
    cells = list(pooled)
    phi = rows.phi(cells, context)
    columns = dict(rows.columns)  # a copy: the belief keeps it while the rows grow
    column_effect = [names.index(name) for name, _ in columns]
    seconds = np.array([pooled[c].seconds for c in cells])
    return _Design(cells, np.array([pooled[c].log_rate for c in cells]),
                   noise_var_at_reference * reference_seconds / seconds,
                   np.array([c.partner is not None for c in cells]), phi, columns,
                   np.array(column_effect, dtype=int), names)


@dataclass
class _Posterior:
    mean: np.ndarray      # (p,)
    chol: np.ndarray      # (p, p) lower Cholesky factor of the posterior precision
    cov: np.ndarray       # (p, p)
    prior_var: np.ndarray  # (p,)
    noise_var: np.ndarray  # (n,) nugget + measurement


def _condition(design: _Design, log_params: np.ndarray, gradient: bool = True
               ) -> tuple[_Posterior, float, np.ndarray]:
    """Posterior of the effects, the negative log marginal likelihood and its gradient with
    respect to ``log_params`` (learned log variances, then the log nuggets; zeros unless
    ``gradient``)."""
    variances = _effect_variances(log_params[:len(RANDOM_EFFECTS)])
    nugget = np.exp(log_params[len(RANDOM_EFFECTS):])
    prior_var = np.array([variances[design.effect_names[e]] for e in design.column_effect])
    kind_nugget = np.where(design.is_pair, nugget[1], nugget[0])
    noise = kind_nugget + design.meas_var
    phi = design.phi
    weighted = scipy.sparse.diags(1.0 / noise) @ phi
    precision = (phi.T @ weighted).toarray() + np.diag(1.0 / prior_var)
    chol = scipy.linalg.cholesky(precision, lower=True)
    b = weighted.T @ design.y
    mean = scipy.linalg.cho_solve((chol, True), b)
    cov = _inverse_from_cholesky(chol)
    resid = design.y - phi @ mean
    n = len(design.y)
    nll = 0.5 * (design.y @ (design.y / noise) - b @ mean + 2 * np.log(np.diag(chol)).sum()
                 + np.log(prior_var).sum() + np.log(noise).sum() + n * math.log(2 * math.pi))
    grad = np.zeros_like(log_params)
    if not gradient:
        return _Posterior(mean, chol, cov, prior_var, noise), float(nll), grad
    per_column = (mean**2 + np.diag(cov)) / prior_var - 1.0
    for i, name in enumerate(RANDOM_EFFECTS):
        e = design.effect_names.index(name)
        grad[i] = -0.5 * per_column[design.column_effect == e].sum()
    q = _quadratic_diag(phi, cov)
    per_row = (resid**2 + q) / noise**2 - 1.0 / noise
    for i, is_pair in enumerate((False, True)):
        rows = design.is_pair == is_pair
        grad[len(RANDOM_EFFECTS) + i] = -0.5 * nugget[i] * per_row[rows].sum()
    return _Posterior(mean, chol, cov, prior_var, noise), float(nll), grad


def _inverse_from_cholesky(chol: np.ndarray) -> np.ndarray:
    """``inv(chol @ chol.T)`` from its lower Cholesky factor (LAPACK ``potri``)."""
    inverse, info = scipy.linalg.lapack.dpotri(chol, lower=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"potri failed (info {info})")
    return np.tril(inverse) + np.tril(inverse, -1).T


def _quadratic_diag(phi: scipy.sparse.csr_matrix, cov: np.ndarray) -> np.ndarray:
    """``diag(phi @ cov @ phi.T)`` for a sparse ``phi`` of shape ``(N, p)``, shape ``(N,)``."""
    phi = phi.tocsr()
    counts = np.diff(phi.indptr)
    width = int(counts.max()) if len(counts) else 0
    idx = np.zeros((phi.shape[0], width), dtype=int)
    val = np.zeros((phi.shape[0], width))
    slot = np.arange(phi.nnz) - np.repeat(phi.indptr[:-1], counts)
    rows = np.repeat(np.arange(phi.shape[0]), counts)
    idx[rows, slot] = phi.indices
    val[rows, slot] = phi.data
    block = cov[idx[:, :, None], idx[:, None, :]]
    return np.einsum("ni,nij,nj->n", val, block, val)


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

    design: _Design | None
    posterior: _Posterior | None
    log_variances: np.ndarray
    context: FeatureContext
    widening: float = 1.0
    fallback_reason: str | None = None
    fit_seconds: float = 0.0
    iterations: int = 0
    _observed: dict[Cell, int] = field(default_factory=dict)
    #: Where pairs fit (:mod:`~bayes_sched.estimation.throughput.pair_fit`); ``None``: every
    #: pair is taken to fit.
    pair_fits: PairFitBelief | None = None

    @property
    def num_cells(self) -> int:
        return 0 if self.design is None else len(self.design.cells)

    def log_moments(self, cells: Sequence[Cell]) -> tuple[np.ndarray, np.ndarray,
                                                          _QueryParts]:
        """Posterior mean and variance of log steps/s of ``cells``, each shape ``(N,)``."""
        parts = self._query(cells)
        var = parts.scale**2 * parts.known_var + parts.unknown_var + parts.cell_var
        return parts.offset + parts.scale * parts.known_mean, var * self.widening**2, parts

    def predict(self, cells: Sequence[Cell], num_draws: int = 0, seed: int = 0
                ) -> CellPrediction:
        # Jobs of one type share their cells: predict each distinct cell once (the same cell
        # is the same throughput, so its draws are identical across the jobs that ask).
        index: dict[Cell, int] = {}
        positions = np.array([index.setdefault(cell, len(index)) for cell in cells], dtype=int)
        with _one_blas_thread():
            unique = self._predict(list(index), num_draws, seed)
        if self.pair_fits is not None:
            unique = with_pair_fits(unique, list(index), self.pair_fits, num_draws, seed)
        return CellPrediction(unique.mean[positions], unique.draws[:, positions])

    def _predict(self, cells: list[Cell], num_draws: int, seed: int) -> CellPrediction:
        mean_log, var_log, parts = self.log_moments(cells)
        mean = np.exp(mean_log + var_log / 2)
        if num_draws == 0 or not cells:
            return CellPrediction(mean, mean[None, :].copy())
        rng = np.random.default_rng(seed)
        n = len(cells)
        if self.posterior is not None and parts.phi.shape[1]:
            z = rng.standard_normal((len(self.posterior.mean), num_draws))
            w_dev = scipy.linalg.solve_triangular(self.posterior.chol, z, lower=True, trans="T")
            known_dev = (parts.phi @ w_dev).T * parts.scale
        else:
            known_dev = np.zeros((num_draws, n))
        unknown = rng.standard_normal((num_draws, parts.unknown.shape[1])) * np.sqrt(
            parts.unknown_prior)
        unknown_dev = (parts.unknown @ unknown.T).T
        cell_dev = rng.standard_normal((num_draws, n)) * np.sqrt(parts.cell_var)
        deviation = (known_dev + unknown_dev + cell_dev) * self.widening
        return CellPrediction(mean, np.exp(mean_log[None, :] + deviation))

    def _query(self, cells: Sequence[Cell]) -> _QueryParts:
        log_params = self.log_variances
        variances = _effect_variances(log_params[:len(RANDOM_EFFECTS)])
        nugget = np.exp(log_params[len(RANDOM_EFFECTS):])
        columns: dict[tuple[str, tuple[object, ...]], int] = (
            self.design.columns if self.design is not None else {})
        p = len(columns)
        n = len(cells)
        phi, found = _feature_rows(cells, self.context, columns, grow=False)
        unknown_cols: dict[tuple[str, tuple[object, ...]], int] = {}
        unknown_prior: list[float] = []
        urows, ucols, uvals = [], [], []
        for r, name, key, value in found:
            u = unknown_cols.get((name, key))
            if u is None:
                u = unknown_cols[(name, key)] = len(unknown_cols)
                unknown_prior.append(variances[name])
            urows.append(r)
            ucols.append(u)
            uvals.append(value)
        unknown = scipy.sparse.csr_matrix((uvals, (urows, ucols)), shape=(n, len(unknown_cols)))
        prior = np.array(unknown_prior)
        unknown_var = np.asarray(unknown.multiply(unknown) @ prior).ravel() if len(prior) \
            else np.zeros(n)
        cell_var = np.array([nugget[1] if c.partner is not None else nugget[0] for c in cells])
        scale = np.ones(n)
        offset = np.zeros(n)
        if self.posterior is not None:
            known_mean = phi @ self.posterior.mean
            known_var = _quadratic_diag(phi, self.posterior.cov)
            assert self.design is not None
            for r, cell in enumerate(cells):
                i = self._observed.get(cell)
                if i is None:
                    continue
                # The cell's own effect given its reports: shrink towards them.
                noise = self.posterior.noise_var[i]
                meas = noise - cell_var[r]
                gain = cell_var[r] / noise
                scale[r] = 1.0 - gain
                offset[r] = gain * self.design.y[i]
                cell_var[r] = cell_var[r] * meas / noise
        else:
            known_mean = np.zeros(n)
            known_var = np.zeros(n)
            prior_var = np.array([variances[name] for name, _ in columns])
            known_var = np.asarray(phi.multiply(phi) @ prior_var).ravel() if p else known_var
        return _QueryParts(phi, known_mean, known_var, unknown, prior, unknown_var, cell_var,
                           scale, offset)


@dataclass
class _QueryParts:
    phi: scipy.sparse.csr_matrix   # (N, p) effects the fit saw
    known_mean: np.ndarray         # (N,)
    known_var: np.ndarray          # (N,) posterior (or prior, after a failed fit) variance
    unknown: scipy.sparse.csr_matrix  # (N, U) effects the fit never saw (prior)
    unknown_prior: np.ndarray      # (U,)
    unknown_var: np.ndarray        # (N,)
    cell_var: np.ndarray           # (N,) cell-effect variance (posterior where observed)
    scale: np.ndarray              # (N,) 1 - shrinkage of observed cells
    offset: np.ndarray             # (N,) shrinkage x observed log rate


class BayesianThroughputLearner:
    """Ours (see the module docstring). Keeps its last converged hyperparameters as the warm
    start of the next fit.

    Args:
        max_iterations: L-BFGS-B iterations of the hyperparameter fit; 0 conditions on the data
            with the current hyperparameters only.
        hyperparameter_growth: the hyperparameters are fitted again only once the cells observed
            have grown by this factor since their last converged fit (a fit on a list that does
            not extend the last one's always fits them); in between a fit conditions on the
            data only (1: every fit). Doubling gives a logarithmic number of hyperparameter
            fits in an online loop, where each costs ~10-70 conditionings.
        measurement_noise: standard deviation of one report's log steps/s measured over
            ``reference_seconds``.
        fallback_widening: factor on the posterior spread after a failed fit.
        log_variances: starting hyperparameters (default :func:`default_log_variances`).
        learn_pair_fits: learn where pairs fit from failed launches (out-of-memory reports;
            :mod:`~bayes_sched.estimation.throughput.pair_fit`); off where every pair launches
            (bo's node-sharing cells).
    """

    name = "bayes"

    def __init__(self, max_iterations: int = 200, measurement_noise: float = 0.05,
                 reference_seconds: float = 60.0, fallback_widening: float = 2.0,
                 log_variances: np.ndarray | None = None, profiling_budget: int | None = None,
                 hyperparameter_growth: float = 2.0, learn_pair_fits: bool = True) -> None:
        if not hyperparameter_growth >= 1.0:
            raise ValueError(f"hyperparameter_growth is {hyperparameter_growth}: expected a "
                             "factor >= 1")
        self.max_iterations = max_iterations
        self.hyperparameter_growth = float(hyperparameter_growth)
        self._tuned_cells = 0  # cells observed at the last converged hyperparameter fit
        self._pool = IncrementalPool()  # the reports so far, pooled per cell
        self._rows = _DesignRows()  # their design rows
        self.measurement_noise = measurement_noise
        self.reference_seconds = reference_seconds
        self.fallback_widening = fallback_widening
        self.log_variances = (default_log_variances() if log_variances is None
                              else np.array(log_variances, dtype=float))
        self.profiling_budget = profiling_budget
        self.learn_pair_fits = learn_pair_fits
        self._launches = PairLaunches()

    def conditioning_only(self) -> BayesianThroughputLearner:
        """A learner that conditions on data with this one's current hyperparameters and fits
        none (``max_iterations=0``): the cheap refit between hyperparameter fits."""
        return BayesianThroughputLearner(0, self.measurement_noise, self.reference_seconds,
                                         self.fallback_widening, self.log_variances,
                                         self.profiling_budget,
                                         learn_pair_fits=self.learn_pair_fits)

    def fit(self, observations: Sequence[CellObservation]) -> BayesianThroughputBelief:
        # One BLAS thread: these matrices are small, and threads fight on a shared machine
        # (a 700 x 700 Cholesky took 2 s with OpenBLAS's threads at load 19, 30 ms without).
        with _one_blas_thread():
            return self._fit(observations)

    def _fit(self, observations: Sequence[CellObservation]) -> BayesianThroughputBelief:
        start = time.perf_counter()
        pooled = self._pool.update(observations)
        if not self._pool.extended:
            self._tuned_cells = 0  # other data, not more of the same: fit the hyperparameters
            self._rows = _DesignRows()
            self._launches.restart()
        pair_fits = self._launches.update(observations) if self.learn_pair_fits else None
        context = FeatureContext(_batch_centres(pooled), _loads(pooled))
        if not pooled:
            return BayesianThroughputBelief(None, None, self.log_variances.copy(), context,
                                            fit_seconds=time.perf_counter() - start,
                                            pair_fits=pair_fits)
        design = _build_design(pooled, context, self.measurement_noise**2,
                               self.reference_seconds, self._rows)
        observed = {cell: i for i, cell in enumerate(design.cells)}
        reason: str | None = None
        params = self.log_variances.copy()
        iterations = 0
        tune = self.max_iterations > 0 and (
            not self._tuned_cells or len(pooled) >= self.hyperparameter_growth * self._tuned_cells)
        if tune:
            try:
                result = scipy.optimize.minimize(
                    lambda x: _condition(design, x)[1:], params, jac=True, method="L-BFGS-B",
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
            posterior = _condition(design, params, gradient=False)[0]
        except (np.linalg.LinAlgError, ValueError) as error:
            reason = f"{reason}; " if reason else ""
            reason += f"conditioning failed ({error}): prior only"
            posterior = None
        if reason is None:
            self.log_variances = params
            if tune:
                self._tuned_cells = len(pooled)
        else:
            logger.warning("throughput belief falls back to the prior's settings with intervals "
                           "widened x%s: %s", self.fallback_widening, reason)
        return BayesianThroughputBelief(
            design if posterior is not None else None, posterior, params, context,
            widening=1.0 if reason is None else self.fallback_widening, fallback_reason=reason,
            fit_seconds=time.perf_counter() - start, iterations=iterations,
            _observed=observed if posterior is not None else {}, pair_fits=pair_fits)

    def profiling_cells(self, job_type: str, scale_factor: int, gpu_types: Sequence[str],
                        belief: ThroughputBelief) -> list[Cell]:
        """Greedy largest posterior variance among the job's alone cells at its scale factor and
        on one GPU, up to one cell per GPU type (see the module docstring)."""
        scales = sorted({1, scale_factor})
        candidates = [Cell(job_type, s, g) for s in scales for g in gpu_types]
        budget = len(gpu_types) if self.profiling_budget is None else self.profiling_budget
        draws = belief.predict(candidates, num_draws=512, seed=0).draws
        cov = np.atleast_2d(np.cov(np.log(draws), rowvar=False))
        chosen: list[Cell] = []
        for _ in range(min(budget, len(candidates))):
            i = int(np.argmax(np.diag(cov)))
            if cov[i, i] <= 0:
                break
            chosen.append(candidates[i])
            cov = cov - np.outer(cov[:, i], cov[i, :]) / cov[i, i]
            cov[i, i] = 0.0
        return chosen


def _batch_centres(pooled: dict[Cell, PooledCell]) -> dict[str, float]:
    """Mean log2 batch size of each family's types seen (the batch slopes' origin)."""
    by_family: dict[str, set[int]] = {}
    for cell in pooled:
        for job_type in (cell.job_type, cell.partner):
            if job_type is None:
                continue
            family, batch = job_type_features(job_type)
            if batch is not None:
                by_family.setdefault(family, set()).add(batch)
    return {fam: float(np.mean(np.log2(sorted(b)))) for fam, b in by_family.items()}


def _loads(pooled: dict[Cell, PooledCell]) -> dict[tuple[str, int, str], float]:
    """Observed log alone rates less their mean over types at each scale and GPU type."""
    by_place: dict[tuple[int, str], dict[str, float]] = {}
    for cell, p in pooled.items():
        if cell.partner is None:
            by_place.setdefault((cell.scale_factor, cell.gpu_type), {})[cell.job_type] = p.log_rate
    means = {place: float(np.mean(list(rates.values()))) for place, rates in by_place.items()}
    return {(j, s, g): rate - means[(s, g)]
            for (s, g), rates in by_place.items() for j, rate in rates.items()}

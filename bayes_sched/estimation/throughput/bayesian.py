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
intervals too narrow: 90% coverage 0.836 of its multi-GPU cells); for the paired part one
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
new terms (:class:`_OnlineDesign`), leaving one LAPACK Cholesky of ``p x p`` (0.3 ms at the
``p`` = 226 of Gavel's world, jobs 0-9; the covariance, ``potri``, twice that, is formed only
where a prediction needs it). Predictions of fewer cells than effects (an allocation recompute's
cells, a profiling plan's) go through ``L^-1 phi^T`` (``p^2 N``) for variances and draws.

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

import logging
import math
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
import scipy.linalg
import scipy.optimize
import scipy.sparse
from threadpoolctl import ThreadpoolController

from bayes_sched.estimation.throughput.effects import (
    EFFECT_NAMES,
    FIXED_EFFECTS,
    LOG_VARIANCE_BOUNDS,
    RANDOM_EFFECTS,
    ContextKey,
    Effect,
    FeatureContext,
    FixedPriors,
    batch_centre,
    context_key,
    effect_prior,
    effect_variances,
    fixed_features,
    keyed_features,
    load_features,
    starting_log_variances,
    type_features,
)
from bayes_sched.estimation.throughput.observations import IncrementalPool, PooledCell
from bayes_sched.estimation.throughput.pair_fit import (
    LaunchesAt,
    PairFitBelief,
    PairLaunches,
    with_pair_fits,
)
from bayes_sched.estimation.throughput_cells import (
    Cell,
    CellObservation,
    CellPrediction,
    ThroughputBelief,
)

logger = logging.getLogger(__name__)

_THREADPOOLS: ThreadpoolController | None = None


class _OneBlasThread(threading.local):
    """Limits BLAS to one thread for a block (see :func:`_one_blas_thread`); a block inside
    another (a predict's moments, a fit's plan) leaves the outer limit in force instead of
    setting it again (~15 us a limit, several per prediction)."""

    depth = 0
    limit: AbstractContextManager[object] | None = None

    def __enter__(self) -> None:
        if self.depth == 0:
            global _THREADPOOLS
            if _THREADPOOLS is None:
                _THREADPOOLS = ThreadpoolController()
            self.limit = _THREADPOOLS.limit(limits=1)
        self.depth += 1

    def __exit__(self, *exc: Any) -> None:
        self.depth -= 1
        if self.depth == 0 and self.limit is not None:
            limit, self.limit = self.limit, None
            limit.__exit__(*exc)


_BLAS = _OneBlasThread()


def _one_blas_thread() -> AbstractContextManager[None]:
    """Limit BLAS to one thread for a block. The controller (which finds the loaded BLAS
    libraries, ~14 ms a call under load) is built once: a fresh ``threadpool_limits`` per predict
    cost more than the predict."""
    return _BLAS



@dataclass
class _Design:
    """Training cells in weight space (a snapshot: the learner's design grows on)."""

    cells: list[Cell]
    y: np.ndarray             # (n,) pooled log rate
    meas_var: np.ndarray      # (n,) measurement variance of the pooled log rate
    is_pair: np.ndarray       # (n,) bool
    rows: list[tuple[np.ndarray, np.ndarray]]  # (n,) each cell's effect columns and values
    columns: dict[tuple[str, tuple[object, ...]], int]
    column_effect: np.ndarray  # (p,) index into FIXED_EFFECTS + RANDOM_EFFECTS names
    effect_names: tuple[str, ...]
    prior_mean: np.ndarray    # (p,) each effect's prior mean (0 but for fixed effects)
    fixed_var: np.ndarray     # (p,) a fixed effect's prior variance, NaN for learned ones
    _phi: scipy.sparse.csr_matrix | None = None
    _dense_rows: _PaddedRows | None = None

    @property
    def phi(self) -> scipy.sparse.csr_matrix:
        """The rows as one sparse matrix, shape ``(n, p)`` (built on first use: a fit that only
        conditions never needs it)."""
        if self._phi is None:
            self._phi = _csr(self.rows, len(self.columns))
        return self._phi

    @property
    def padded(self) -> _PaddedRows:
        """The rows padded to one width, and what a hyperparameter fit's every evaluation reads
        of them (built on first use, kept for the fit's ~10-70 evaluations)."""
        if self._dense_rows is None:
            self._dense_rows = _PaddedRows.of(self)
        return self._dense_rows


@dataclass(frozen=True)
class _PaddedRows:
    """A design's rows as dense ``(n, w)`` column and value arrays (:func:`_padded`), the flat
    ``(i, j)`` index of each product of two of a row's entries ``(n * w * w,)``, and each learned
    effect's columns. With them an evaluation of :func:`_condition` scatters its products with
    ``bincount`` instead of building scipy sparse matrices (whose set-up was most of an
    evaluation at a few hundred cells): the same products summed in the same order (cells in
    order), so the same numbers to the last bit."""

    idx: np.ndarray                 # (n, w) effect columns, padded with column 0
    val: np.ndarray                 # (n, w) values, padded with 0
    pair_index: np.ndarray          # (n * w * w,) i * p + j of val[k, a] * val[k, b]
    upper: np.ndarray               # (n, w, w) max(i, j) of that product
    lower: np.ndarray               # (n, w, w) min(i, j): the covariance's (i, j) is read at
    #                                 (upper, lower), in its lower triangle
    effect_columns: tuple[np.ndarray, ...]  # per RANDOM_EFFECTS name, its columns

    @classmethod
    def of(cls, design: _Design) -> _PaddedRows:
        p = len(design.columns)
        idx, val = _padded(design.rows)
        effect_columns = tuple(
            np.flatnonzero(design.column_effect == design.effect_names.index(name))
            for name in RANDOM_EFFECTS)
        first, second = idx[:, :, None], idx[:, None, :]
        return cls(idx, val, (first * p + second).ravel(), np.maximum(first, second),
                   np.minimum(first, second), effect_columns)

    def data_terms(self, noise: np.ndarray, y: np.ndarray, p: int
                   ) -> tuple[np.ndarray, np.ndarray]:
        """``phi.T @ W @ phi`` (dense ``(p, p)``) and ``phi.T @ W @ y`` ``(p,)``,
        ``W = diag(1 / noise)``: ``sum_k phi_ki (phi_kj / noise_k)`` and ``sum_k (phi_ki /
        noise_k) y_k``, summed over the cells ``k`` in order (as scipy's sparse products sum
        them)."""
        weighted = self.val * (1.0 / noise)[:, None]
        products = self.val[:, :, None] * weighted[:, None, :]
        gram = np.bincount(self.pair_index, products.ravel(), minlength=p * p).reshape(p, p)
        return gram, np.bincount(self.idx.ravel(), (weighted * y[:, None]).ravel(),
                                 minlength=p)


def _csr(rows: Sequence[tuple[np.ndarray, np.ndarray]], width: int) -> scipy.sparse.csr_matrix:
    """Sparse rows ``(columns, values)`` as a CSR matrix of shape ``(len(rows), width)``."""
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(cols) for cols, _ in rows])
    return scipy.sparse.csr_matrix(
        (np.concatenate([vals for _, vals in rows]) if rows else np.zeros(0),
         np.concatenate([cols for cols, _ in rows]) if rows else np.zeros(0, dtype=np.int64),
         indptr), shape=(len(rows), width))


#: Effects not among a fit's columns: their rows, the effects (name, key) and their values.
Unknown = tuple[list[int], list[Effect], list[float]]
#: A design's rows, dense or sparse.
Matrix: TypeAlias = "np.ndarray | scipy.sparse.csr_matrix"


def _feature_rows(cells: Sequence[Cell], context: FeatureContext,
                  columns: dict[tuple[str, tuple[object, ...]], int], rows: _QueryRows,
                  dense: bool = False) -> tuple[Matrix, Unknown]:
    """The cells' effects as rows over ``columns``, shape ``(N, len(columns))`` (sparse, or
    dense: a few cells, where scipy's sparse set-up costs more than the products); the effects
    not in ``columns`` are returned as their rows, ``(name, key)`` and values."""
    counts, cols, vals, unknown = rows.rows(cells, context, columns)
    if not dense:
        indptr = np.zeros(len(cells) + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        return scipy.sparse.csr_matrix((vals, cols, indptr),
                                       shape=(len(cells), len(columns))), unknown
    phi = np.zeros((len(cells), len(columns)))
    if len(cols):
        phi[np.repeat(np.arange(len(cells)), counts), cols] = vals
    return phi, unknown


def _squared(matrix: Matrix) -> Matrix:
    """Elementwise square of a dense or sparse matrix."""
    return matrix**2 if isinstance(matrix, np.ndarray) else matrix.multiply(matrix)


#: A kept row: the column count it is right at, its known columns and values, its unknown
#: effects ``(name, key)`` and their values.
_Row = tuple[int, np.ndarray, np.ndarray, tuple[Effect, ...], tuple[float, ...]]


class _QueryRows:
    """Cells' rows over the columns of one design lineage, kept across its beliefs.

    A learner's columns only grow while its reports extend one list (a column keeps its number),
    so a row stays right for every later belief of the lineage while none of its unknown
    effects has become a column. Kept per cell and batch centres: the effects that do not read
    the loads; a pair's two load effects (its loads move at every fit with an alone report at
    its place) are looked up per prediction and inserted at its row's end. A prediction then
    costs a lookup per cell, not one per effect (it is asked for the same cells at every
    allocation recompute)."""

    def __init__(self) -> None:
        #: Per (cell, batch centres): its row (:data:`_Row`).
        self._fixed: dict[tuple[Cell, ContextKey], _Row] = {}

    def rows(self, cells: Sequence[Cell], context: FeatureContext,
             columns: dict[tuple[str, tuple[object, ...]], int]
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, Unknown]:
        """The cells' rows over ``columns``: each row's count of known effects ``(N,)``, their
        columns and values one row after another, and the unknown effects (:data:`Unknown`)."""
        if len(self._fixed) > 1 << 16:
            self._fixed.clear()
        p = len(columns)
        fixed = self._fixed
        n = len(cells)
        counts = np.zeros(n, dtype=np.int64)
        col_parts: list[np.ndarray] = []
        val_parts: list[np.ndarray] = []
        load_at: list[int] = []  # where in the fixed effects' flat arrays a load effect goes
        load_cols: list[int] = []
        load_vals: list[float] = []
        unknown_rows: list[int] = []
        unknown_effects: list[Effect] = []
        unknown_values: list[float] = []
        at = 0
        for r, cell in enumerate(cells):
            key = context_key(cell, context)
            centres = key if cell.partner is None else key[:2]
            row = fixed.get((cell, centres))
            if row is None or row[0] != p:
                row = self._fixed_row(cell, centres, columns)
            width = len(row[1])
            col_parts.append(row[1])
            val_parts.append(row[2])
            at += width
            if row[3]:
                unknown_rows.extend([r] * len(row[3]))
                unknown_effects.extend(row[3])
                unknown_values.extend(row[4])
            if cell.partner is not None:
                for name, k, value in load_features(cell.gpu_type, key):
                    column = columns.get((name, k))
                    if column is None:
                        unknown_rows.append(r)
                        unknown_effects.append((name, k))
                        unknown_values.append(value)
                    else:
                        load_at.append(at)
                        load_cols.append(column)
                        load_vals.append(value)
                        width += 1
            counts[r] = width
        cols = np.concatenate(col_parts) if col_parts else np.zeros(0, dtype=np.int64)
        vals = np.concatenate(val_parts) if val_parts else np.zeros(0)
        if load_at:  # equal positions keep their order: a pair's load, then its partner's
            cols = np.insert(cols, load_at, load_cols)
            vals = np.insert(vals, load_at, load_vals)
        return counts, cols, vals, (unknown_rows, unknown_effects, unknown_values)

    def _fixed_row(self, cell: Cell, centres: ContextKey,
                   columns: dict[tuple[str, tuple[object, ...]], int]) -> _Row:
        """The row of :func:`fixed_features` over ``columns`` (kept): the column count it is
        right at, its known columns and values, its unknown effects."""
        p = len(columns)
        found = self._fixed.get((cell, centres))
        kept = _still_right(found, columns)
        if kept is not None:
            if kept is not found:
                self._fixed[(cell, centres)] = kept
            return kept
        cols, vals, missing, missing_values = [], [], [], []
        for name, k, value in fixed_features(cell, centres):
            column = columns.get((name, k))
            if column is None:
                missing.append((name, k))
                missing_values.append(value)
            else:
                cols.append(column)
                vals.append(value)
        row = (p, np.array(cols, dtype=np.int64), np.array(vals, dtype=float), tuple(missing),
               tuple(missing_values))
        self._fixed[(cell, centres)] = row
        return row


def _still_right(row: _Row | None, columns: dict[tuple[str, tuple[object, ...]], int]
                 ) -> _Row | None:
    """A kept row (see :class:`_QueryRows`) as of ``columns`` if it is still right there: built
    at as many columns, or at fewer where none of its unknown effects has become a column since
    (its known columns keep their numbers); ``None`` if it must be built again."""
    if row is None:
        return None
    p = len(columns)
    if row[0] == p:
        return row
    if row[0] > p:
        return None
    if row[3] and any(effect in columns for effect in row[3]):
        return None
    return (p, row[1], row[2], row[3], row[4])


class _OnlineDesign:
    """The design of one growing list of reports, kept across its fits.

    Per cell, in first-seen order: its effects' row (rebuilt only when its context key moved:
    its families' batch centres, its and its partner's loads), its pooled log rate and seconds;
    the context itself is updated from the cells whose reports changed. With the nuggets of its
    last conditioning it also keeps the data terms of the posterior precision, ``G = phi.T @ W @
    phi`` (dense ``(p, p)``) and ``b = phi.T @ W @ y``, ``W = diag(1 / (nugget + measurement
    variance))``: a conditioning with the same nuggets subtracts the old terms of the cells whose
    row, rate or seconds changed and adds their new ones (new effect columns join with zero
    terms), then takes one LAPACK Cholesky of ``G + diag(1 / prior variance)``. That is the
    full build's posterior up to rounding (pinned by ``tests/test_estimation_incremental.py``) at
    the cost of what changed, where the full build is a pass over every cell's effects."""

    def __init__(self, noise_var_at_reference: float, reference_seconds: float,
                 fixed_priors: FixedPriors) -> None:
        self.noise_var_at_reference = noise_var_at_reference
        self.reference_seconds = reference_seconds
        self.fixed_priors = fixed_priors
        self.columns: dict[tuple[str, tuple[object, ...]], int] = {}
        self._column_effect: list[int] = []
        self._column_prior: list[tuple[float, float]] = []  # (mean, fixed variance or NaN)
        self.cells: list[Cell] = []
        self.index: dict[Cell, int] = {}
        self._rows: list[tuple[np.ndarray, np.ndarray]] = []
        self._keys: list[ContextKey] = []
        self._y: list[float] = []
        self._seconds: list[float] = []
        self._is_pair: list[bool] = []
        self._by_family: dict[str, list[int]] = {}  # cells whose job or partner is of a family
        self._pairs_at: dict[tuple[int, str], list[int]] = {}  # paired cells per (scale, gpu)
        self._batches: dict[str, set[int]] = {}
        self._alone: dict[tuple[int, str], dict[str, float]] = {}  # log alone rates per place
        self._centres: dict[str, float] = {}
        self._loads: dict[tuple[str, int, str], float] = {}
        # The data terms and what they were built from (None: build them in full next time).
        self._terms: tuple[np.ndarray, np.ndarray] | None = None
        self._term_nuggets: np.ndarray | None = None
        self._term_weights = np.zeros(0)
        self._term_y = np.zeros(0)
        self._retired: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # rows the terms hold
        self._changed: set[int] = set()  # cells whose terms moved since the terms were built
        self.query_rows = _QueryRows()  # rows of the cells its beliefs are asked about

    @property
    def context(self) -> FeatureContext:
        """The context now (a snapshot)."""
        return FeatureContext(dict(self._centres), dict(self._loads))

    def update(self, pooled: dict[Cell, PooledCell], touched: Sequence[Cell]) -> None:
        """Take in the pooled reports, where only the cells ``touched`` changed or are new."""
        families: set[str] = set()
        places: set[tuple[int, str]] = set()
        candidates: set[int] = set()
        for cell in touched:
            report = pooled[cell]
            i = self.index.get(cell)
            if i is None:
                i = self.index[cell] = len(self.cells)
                self.cells.append(cell)
                self._rows.append((np.zeros(0, dtype=np.int64), np.zeros(0)))
                self._keys.append(())
                self._y.append(report.log_rate)
                self._seconds.append(report.seconds)
                self._is_pair.append(cell.partner is not None)
                for job_type in (cell.job_type, cell.partner):
                    if job_type is None:
                        continue
                    family, batch = type_features(job_type)
                    self._by_family.setdefault(family, []).append(i)
                    if batch is not None and batch not in self._batches.setdefault(family, set()):
                        self._batches[family].add(batch)
                        families.add(family)
                if cell.partner is not None:
                    self._pairs_at.setdefault((cell.scale_factor, cell.gpu_type), []).append(i)
            else:
                self._y[i], self._seconds[i] = report.log_rate, report.seconds
            if cell.partner is None:
                place = (cell.scale_factor, cell.gpu_type)
                self._alone.setdefault(place, {})[cell.job_type] = report.log_rate
                places.add(place)
            candidates.add(i)
        self._changed.update(candidates)  # their rate or seconds moved
        for family in families:
            centre = batch_centre(self._batches[family])
            if self._centres.get(family) != centre:
                self._centres[family] = centre
                candidates.update(self._by_family[family])
        for place in places:
            rates = self._alone[place]
            mean = float(np.mean(np.fromiter(rates.values(), float, len(rates))))
            for job_type, rate in rates.items():
                self._loads[(job_type, *place)] = rate - mean
            candidates.update(self._pairs_at.get(place, ()))
        context = FeatureContext(self._centres, self._loads)
        for i in sorted(candidates):  # in first-seen order, as new columns are numbered
            cell = self.cells[i]
            key = context_key(cell, context)
            if key != self._keys[i]:
                self._changed.add(i)
                if self._terms is not None and i < len(self._term_y) and i not in self._retired:
                    self._retired[i] = self._rows[i]
                features = keyed_features(cell, key)
                cols = np.array([self._column(name, k) for name, k, _ in features],
                                dtype=np.int64)
                self._rows[i] = (cols, np.array([v for _, _, v in features]))
                self._keys[i] = key

    def _column(self, name: str, key: tuple[object, ...]) -> int:
        column = self.columns.get((name, key))
        if column is None:
            column = self.columns[(name, key)] = len(self.columns)
            self._column_effect.append(EFFECT_NAMES.index(name))
            self._column_prior.append(self.fixed_priors.prior(name, key)
                                      if name in FIXED_EFFECTS else (0.0, math.nan))
        return column

    def design(self) -> _Design:
        """A snapshot of the training cells."""
        seconds = np.array(self._seconds)
        return _Design(list(self.cells), np.array(self._y),
                       self.noise_var_at_reference * self.reference_seconds / seconds,
                       np.array(self._is_pair), list(self._rows), dict(self.columns),
                       np.array(self._column_effect, dtype=int), EFFECT_NAMES,
                       np.array([m for m, _ in self._column_prior]),
                       np.array([v for _, v in self._column_prior]))

    def posterior(self, design: _Design, log_params: np.ndarray) -> _Posterior:
        """The effects' posterior under ``log_params`` (updating the data terms, or building
        them in full where the nuggets changed)."""
        prior_var, noise = _prior_and_noise(design, log_params)
        nuggets = log_params[len(RANDOM_EFFECTS):]
        weights = 1.0 / noise
        p = len(design.columns)
        if (self._terms is None or self._term_nuggets is None
                or not np.array_equal(nuggets, self._term_nuggets)):
            gram, b = design.padded.data_terms(noise, design.y, p)
        else:
            gram, b = self._terms
            if gram.shape[0] < p:  # new effects: zero data terms until a cell adds to them
                grown = np.zeros((p, p))
                grown[:gram.shape[0], :gram.shape[0]] = gram
                gram, b = grown, np.concatenate([b, np.zeros(p - len(b))])
            changed = sorted(self._changed)
            old = [i for i in changed if i < len(self._term_y)]
            rows = ([self._rows[i] for i in changed]
                    + [self._retired.get(i, self._rows[i]) for i in old])
            signed = np.concatenate([weights[changed], -self._term_weights[old]])
            ys = np.concatenate([design.y[changed], self._term_y[old]])
            idx, val = _padded(rows)
            # sum_r signed_r phi_r phi_r^T and sum_r signed_r y_r phi_r, scattered: a few
            # cells of ~20 effects each touch ~400 entries of gram.
            outer = signed[:, None, None] * val[:, :, None] * val[:, None, :]
            flat = (idx[:, :, None] * p + idx[:, None, :]).ravel()
            gram += np.bincount(flat, outer.ravel(), minlength=p * p).reshape(p, p)
            b = b + np.bincount(idx.ravel(), (val * (signed * ys)[:, None]).ravel(),
                                minlength=p)
        self._terms, self._term_nuggets = (gram, b), nuggets.copy()
        self._term_weights, self._term_y = weights, design.y
        self._retired, self._changed = {}, set()
        return _posterior_from_terms(gram, b, prior_var, noise, design.prior_mean)



@dataclass
class _Posterior:
    mean: np.ndarray      # (p,)
    chol: np.ndarray      # (p, p) lower Cholesky factor of the posterior precision
    prior_var: np.ndarray  # (p,)
    noise_var: np.ndarray  # (n,) nugget + measurement
    _cov: np.ndarray | None = None

    @property
    def cov(self) -> np.ndarray:
        """The effects' posterior covariance ``(p, p)``, on first use (LAPACK ``potri``: twice
        the Cholesky's cost, and most predictions need only a few of its entries' worth)."""
        if self._cov is None:
            self._cov = _inverse_from_cholesky(self.chol)
        return self._cov


def _prior_and_noise(design: _Design, log_params: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each effect column's prior variance ``(p,)`` and each cell's noise variance (its nugget
    and its measurement variance) ``(n,)`` under ``log_params``."""
    variances = effect_variances(log_params[:len(RANDOM_EFFECTS)])
    nugget = np.exp(log_params[len(RANDOM_EFFECTS):])
    per_effect = np.array([variances.get(name, math.nan) for name in design.effect_names])
    prior_var = per_effect[design.column_effect] if len(design.column_effect) else np.zeros(0)
    prior_var = np.where(np.isnan(design.fixed_var), prior_var, design.fixed_var)
    return prior_var, np.where(design.is_pair, nugget[1], nugget[0]) + design.meas_var


def _posterior_from_terms(gram: np.ndarray, b: np.ndarray, prior_var: np.ndarray,
                          noise: np.ndarray, prior_mean: np.ndarray) -> _Posterior:
    """The effects' posterior from the data terms: precision ``gram + diag(1 / prior_var)``,
    mean its inverse times ``b + prior_mean / prior_var``."""
    precision = np.array(gram, order="F")  # LAPACK's order: factored in place
    precision[np.diag_indices_from(precision)] += 1.0 / prior_var
    chol = _cholesky_lower(precision)
    mean, info = scipy.linalg.lapack.dpotrs(chol, b + prior_mean / prior_var, lower=1)
    if info != 0:
        raise ValueError(f"potrs failed (info {info})")
    return _Posterior(mean, chol, prior_var, noise)


def _cholesky_lower(matrix: np.ndarray) -> np.ndarray:
    """The lower Cholesky factor of a symmetric positive definite ``matrix`` (its lower
    triangle read; overwritten where it is in Fortran order). LAPACK ``potrf`` called as
    ``scipy.linalg.cholesky(matrix, lower=True)`` calls it, without its wrappers (a tenth of a
    millisecond a call, and a fit makes hundreds).

    Raises:
        ValueError: a non-finite entry.
        numpy.linalg.LinAlgError: the matrix is not positive definite.
    """
    if not matrix.size:
        return scipy.linalg.cholesky(matrix, lower=True)
    if not np.isfinite(matrix).all():
        raise ValueError("array must not contain infs or NaNs")
    chol, info = scipy.linalg.lapack.dpotrf(matrix, lower=1, clean=1, overwrite_a=1)
    if info > 0:
        raise np.linalg.LinAlgError(f"{info}-th leading minor of the array is not positive "
                                    "definite")
    if info < 0:
        raise ValueError(f"potrf: illegal value in argument {-info}")
    return chol


def _condition(design: _Design, log_params: np.ndarray, gradient: bool = True
               ) -> tuple[_Posterior, float, np.ndarray]:
    """Posterior of the effects (built in full), the negative log marginal likelihood and its
    gradient with respect to ``log_params`` (learned log variances, then the log nuggets;
    zeros unless ``gradient``)."""
    nugget = np.exp(log_params[len(RANDOM_EFFECTS):])
    prior_var, noise = _prior_and_noise(design, log_params)
    phi = design.phi
    padded = design.padded
    gram, b = padded.data_terms(noise, design.y, len(prior_var))
    prior_mean = design.prior_mean
    posterior = _posterior_from_terms(gram, b, prior_var, noise, prior_mean)
    mean, chol = posterior.mean, posterior.chol
    resid = design.y - phi @ mean
    n = len(design.y)
    # y ~ N(phi m, phi Lambda phi^T + N): its quadratic form is y^T N^-1 y + m^T Lambda^-1 m
    # - mu^T A mu, with A mu = b + Lambda^-1 m.
    shifted_b = b + prior_mean / prior_var
    nll = 0.5 * (design.y @ (design.y / noise) + prior_mean @ (prior_mean / prior_var)
                 - shifted_b @ mean + 2 * np.log(np.diag(chol)).sum()
                 + np.log(prior_var).sum() + np.log(noise).sum() + n * math.log(2 * math.pi))
    grad = np.zeros_like(log_params)
    if not gradient:
        return posterior, float(nll), grad
    # The covariance's lower triangle only: every entry the gradient reads is read there.
    lower = _lower_inverse_from_cholesky(chol)
    per_column = ((mean - prior_mean)**2 + np.diag(lower)) / prior_var - 1.0
    for i, columns in enumerate(padded.effect_columns):
        grad[i] = -0.5 * per_column[columns].sum()
    q = np.einsum("ni,nij,nj->n", padded.val, lower[padded.upper, padded.lower], padded.val)
    per_row = (resid**2 + q) / noise**2 - 1.0 / noise
    for i, is_pair in enumerate((False, True)):
        rows = design.is_pair == is_pair
        grad[len(RANDOM_EFFECTS) + i] = -0.5 * nugget[i] * per_row[rows].sum()
    return posterior, float(nll), grad


def _inverse_from_cholesky(chol: np.ndarray) -> np.ndarray:
    """``inv(chol @ chol.T)`` from its lower Cholesky factor (LAPACK ``potri``)."""
    inverse = _lower_inverse_from_cholesky(chol)
    return np.tril(inverse) + np.tril(inverse, -1).T


def _solve_lower(chol: np.ndarray, rhs: np.ndarray, transposed: bool = False) -> np.ndarray:
    """``chol^-1 rhs`` (``chol^-T rhs`` if ``transposed``) for a lower triangular ``chol`` in
    Fortran order (a factor of :func:`_cholesky_lower`): LAPACK ``trtrs`` called as
    ``scipy.linalg.solve_triangular(chol, rhs, lower=True, check_finite=False)`` calls it for
    such a factor, without its wrappers (asked at every prediction)."""
    if not chol.flags.f_contiguous:
        return scipy.linalg.solve_triangular(chol, rhs, lower=True, trans=int(transposed),
                                             check_finite=False)
    x, info = scipy.linalg.lapack.dtrtrs(chol, rhs, lower=1, trans=int(transposed))
    if info != 0:
        raise np.linalg.LinAlgError(f"trtrs failed (info {info})")
    return x


def _lower_inverse_from_cholesky(chol: np.ndarray) -> np.ndarray:
    """The lower triangle of ``inv(chol @ chol.T)`` (above it: zeros) from its lower Cholesky
    factor (LAPACK ``potri``)."""
    inverse, info = scipy.linalg.lapack.dpotri(chol, lower=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"potri failed (info {info})")
    return inverse


def _padded(rows: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Sparse rows ``(columns, values)`` as dense ``(N, width)`` column and value arrays,
    padded with column 0 and value 0."""
    if not rows:
        return np.zeros((0, 0), dtype=np.int64), np.zeros((0, 0))
    counts = np.array([len(cols) for cols, _ in rows], dtype=np.int64)
    return _padded_flat(counts, np.concatenate([cols for cols, _ in rows]),
                        np.concatenate([vals for _, vals in rows]).astype(float, copy=False))


def _padded_csr(phi: scipy.sparse.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    """A CSR matrix's rows as dense ``(N, width)`` column and value arrays (see
    :func:`_padded`)."""
    return _padded_flat(np.diff(phi.indptr), phi.indices, phi.data)


def _padded_flat(counts: np.ndarray, columns: np.ndarray, values: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``counts`` entries each, their ``columns`` and ``values`` one after another, as
    dense ``(N, width)`` column and value arrays padded with column 0 and value 0."""
    width = int(counts.max()) if len(counts) else 0
    idx = np.zeros((len(counts), width), dtype=np.int64)
    val = np.zeros((len(counts), width))
    starts = np.cumsum(counts) - counts
    slot = np.arange(len(columns)) - np.repeat(starts, counts)
    rows = np.repeat(np.arange(len(counts)), counts)
    idx[rows, slot] = columns
    val[rows, slot] = values
    return idx, val


def _quadratic_diag(phi: scipy.sparse.csr_matrix, cov: np.ndarray) -> np.ndarray:
    """``diag(phi @ cov @ phi.T)`` for a sparse ``phi`` of shape ``(N, p)``, shape ``(N,)``."""
    idx, val = _padded_csr(phi.tocsr())
    block = cov[idx[:, :, None], idx[:, None, :]]
    return np.einsum("ni,nij,nj->n", val, block, val)


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
    grows with each fit that meets new effects: drawing all of them again cost ~1 ms a call
    of 512 draws)."""
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

    design: _Design | None
    posterior: _Posterior | None
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
    _query_rows: _QueryRows = field(default_factory=_QueryRows)
    #: The priors of the effects not learned.
    fixed_priors: FixedPriors = field(default_factory=FixedPriors)
    #: The effects' variances and the nuggets of ``log_variances``, on first use.
    _variances: tuple[dict[str, float], np.ndarray] | None = None

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
        with _one_blas_thread():
            parts = self._query(cells)
        var = parts.scale**2 * parts.known_var + parts.unknown_var + parts.cell_var
        return parts.offset + parts.scale * parts.known_mean, var * self.widening**2, parts

    def log_covariance(self, cells: Sequence[Cell]) -> np.ndarray:
        """Posterior covariance of log steps/s of ``cells`` (alone or paired, without where
        pairs fit), shape ``(N, N)``; its diagonal is :meth:`log_moments`' variance. Exact:
        the same terms :meth:`predict`'s draws are made of."""
        with _one_blas_thread():
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
        index: dict[Cell, int] = {}
        positions = np.array([index.setdefault(cell, len(index)) for cell in cells], dtype=int)
        with _one_blas_thread():
            unique = self._predict(list(index), num_draws, seed)
        if self._launches is not None and any(cell.partner is not None for cell in index):
            unique = with_pair_fits(unique, list(index), self._launches.pair_fits, num_draws,
                                    seed)
        return CellPrediction(unique.mean[positions], unique.draws[:, positions])

    def _predict(self, cells: list[Cell], num_draws: int, seed: int) -> CellPrediction:
        mean_log, var_log, parts = self.log_moments(cells)
        mean = np.exp(mean_log + var_log / 2)
        if num_draws == 0 or not cells:
            return CellPrediction(mean, mean[None, :].copy())
        rng = np.random.default_rng(seed)
        n = len(cells)
        if self.posterior is not None and parts.phi.shape[1]:
            z, state = _standard_normals(len(self.posterior.mean), num_draws, seed)
            rng.bit_generator.state = state
            if parts.half is not None:
                # phi @ L^-T z = (L^-1 phi^T)^T z: p^2 N work instead of p^2 draws.
                known_dev = (parts.half.T @ z).T * parts.scale
            else:
                w_dev = _solve_lower(self.posterior.chol, z, transposed=True)
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
        if self._variances is None:
            log_params = self.log_variances
            self._variances = (effect_variances(log_params[:len(RANDOM_EFFECTS)]),
                               np.exp(log_params[len(RANDOM_EFFECTS):]))
        variances, nugget = self._variances
        columns: dict[tuple[str, tuple[object, ...]], int] = (
            self.design.columns if self.design is not None else {})
        p = len(columns)
        n = len(cells)
        few = n < p  # fewer cells than effects: dense rows, and variances through L^-1 phi^T
        phi, (urows, effects, uvals) = _feature_rows(cells, self.context, columns,
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
        unknown_var = np.asarray(_squared(unknown) @ prior).ravel() if len(prior) \
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
                half = _solve_lower(self.posterior.chol, phi.T)
                known_var = np.einsum("ij,ij->j", half, half)
            else:
                known_var = _quadratic_diag(phi, self.posterior.cov)
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
            known_var = np.asarray(_squared(phi) @ prior_var).ravel() if p else np.zeros(n)
        return _QueryParts(phi, known_mean, known_var, unknown, prior, unknown_var, cell_var,
                           scale, offset, half)


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

    def _new_design(self) -> _OnlineDesign:
        return _OnlineDesign(self.measurement_noise**2, self.reference_seconds,
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
        # (a 700 x 700 Cholesky took 2 s with OpenBLAS's threads at load 19, 30 ms without).
        with _one_blas_thread():
            return self._fit(observations)

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
            posterior: _Posterior | None = self._design.posterior(design, params)
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

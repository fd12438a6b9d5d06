"""The weight-space numerics of our throughput learner (:mod:`~bayes_sched.estimation.throughput.
bayesian`): cells' effects as sparse design rows (:func:`feature_rows`, kept per cell by
:class:`QueryRows`), a growing list of reports' design kept across fits (:class:`OnlineDesign`:
its precision's data terms updated by what changed), the effects' Gaussian posterior from one
LAPACK Cholesky (:class:`Posterior`), and the type-II maximum-likelihood objective and gradient
(:func:`condition`). Everything here is exact linear algebra on ``p`` effects; the belief and the
learner that use it are in :mod:`~bayes_sched.estimation.throughput.bayesian`."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import scipy.linalg
import scipy.sparse
from threadpoolctl import ThreadpoolController

from bayes_sched.cells import Cell
from bayes_sched.estimation.throughput.effects import (
    EFFECT_NAMES,
    FIXED_EFFECTS,
    RANDOM_EFFECTS,
    ContextKey,
    Effect,
    FeatureContext,
    FixedPriors,
    batch_centre,
    context_key,
    effect_variances,
    fixed_features,
    load_features,
    type_features,
)
from bayes_sched.estimation.throughput.observations import PooledCell

_THREADPOOLS: ThreadpoolController | None = None


class _OneBlasThread(threading.local):
    """Limits BLAS to one thread for a block (see :func:`one_blas_thread`); a block inside
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


def one_blas_thread() -> AbstractContextManager[None]:
    """Limit BLAS to one thread for a block. The controller (which finds the loaded BLAS
    libraries) is built once: a fresh ``threadpool_limits`` per predict cost more than the
    predict."""
    return _BLAS



@dataclass
class Design:
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
    effect's columns. With them an evaluation of :func:`condition` scatters its products with
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
    def of(cls, design: Design) -> _PaddedRows:
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


def feature_rows(cells: Sequence[Cell], context: FeatureContext,
                  columns: dict[tuple[str, tuple[object, ...]], int], rows: QueryRows,
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


def squared(matrix: Matrix) -> Matrix:
    """Elementwise square of a dense or sparse matrix."""
    return matrix**2 if isinstance(matrix, np.ndarray) else matrix.multiply(matrix)


#: A kept row: the column count it is right at, its known columns and values, its unknown
#: effects ``(name, key)`` and their values.
_Row = tuple[int, np.ndarray, np.ndarray, tuple[Effect, ...], tuple[float, ...]]


class QueryRows:
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
    """A kept row (see :class:`QueryRows`) as of ``columns`` if it is still right there: built
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


class OnlineDesign:
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
        #: Per (cell, batch centres): the columns and values of its effects but the loads.
        self._fixed_rows: dict[tuple[Cell, ContextKey], tuple[np.ndarray, np.ndarray]] = {}
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
        self.query_rows = QueryRows()  # rows of the cells its beliefs are asked about

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
                # The effects but a pair's loads stand while its batch centres do: their
                # columns are kept per (cell, centres) (a pair's loads move with every alone
                # report at its place, re-keying ~150 cells a fit).
                centres = key if cell.partner is None else key[:2]
                fixed = self._fixed_rows.get((cell, centres))
                if fixed is None:
                    features = fixed_features(cell, centres)
                    fixed = self._fixed_rows[(cell, centres)] = (
                        np.array([self._column(name, k) for name, k, _ in features],
                                 dtype=np.int64),
                        np.array([v for _, _, v in features], dtype=float))
                if cell.partner is None:
                    self._rows[i] = fixed
                else:
                    loads = load_features(cell.gpu_type, key)
                    self._rows[i] = (
                        np.concatenate([fixed[0], np.array([self._column(name, k)
                                                            for name, k, _ in loads],
                                                           dtype=np.int64)]),
                        np.concatenate([fixed[1], np.array([v for _, _, v in loads],
                                                           dtype=float)]))
                self._keys[i] = key

    def _column(self, name: str, key: tuple[object, ...]) -> int:
        column = self.columns.get((name, key))
        if column is None:
            column = self.columns[(name, key)] = len(self.columns)
            self._column_effect.append(EFFECT_NAMES.index(name))
            self._column_prior.append(self.fixed_priors.prior(name, key)
                                      if name in FIXED_EFFECTS else (0.0, math.nan))
        return column

    def design(self) -> Design:
        """A snapshot of the training cells."""
        seconds = np.array(self._seconds)
        return Design(list(self.cells), np.array(self._y),
                       self.noise_var_at_reference * self.reference_seconds / seconds,
                       np.array(self._is_pair), list(self._rows), dict(self.columns),
                       np.array(self._column_effect, dtype=int), EFFECT_NAMES,
                       np.array([m for m, _ in self._column_prior]),
                       np.array([v for _, v in self._column_prior]))

    def posterior(self, design: Design, log_params: np.ndarray) -> Posterior:
        """The effects' posterior under ``log_params`` (updating the data terms, or building
        them in full where the nuggets changed)."""
        prior_var, noise = prior_and_noise(design, log_params)
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
class Posterior:
    mean: np.ndarray      # (p,)
    chol: np.ndarray      # (p, p) lower Cholesky factor of the posterior precision
    prior_var: np.ndarray  # (p,)
    noise_var: np.ndarray  # (n,) nugget + measurement
    _cov: np.ndarray | None = None

    @property
    def has_cov(self) -> bool:
        """Whether :attr:`cov` has been formed."""
        return self._cov is not None

    @property
    def cov(self) -> np.ndarray:
        """The effects' posterior covariance ``(p, p)``, on first use (LAPACK ``potri``: twice
        the Cholesky's cost, and most predictions need only a few of its entries' worth)."""
        if self._cov is None:
            self._cov = _inverse_from_cholesky(self.chol)
        return self._cov


def prior_and_noise(design: Design, log_params: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each effect column's prior variance ``(p,)`` and each cell's noise variance (its nugget
    and its measurement variance) ``(n,)`` under ``log_params``."""
    variances = effect_variances(log_params[:len(RANDOM_EFFECTS)])
    nugget = np.exp(log_params[len(RANDOM_EFFECTS):])
    per_effect = np.array([variances.get(name, math.nan) for name in design.effect_names])
    prior_var = per_effect[design.column_effect] if len(design.column_effect) else np.zeros(0)
    prior_var = np.where(np.isnan(design.fixed_var), prior_var, design.fixed_var)
    return prior_var, np.where(design.is_pair, nugget[1], nugget[0]) + design.meas_var


def _posterior_from_terms(gram: np.ndarray, b: np.ndarray, prior_var: np.ndarray,
                          noise: np.ndarray, prior_mean: np.ndarray) -> Posterior:
    """The effects' posterior from the data terms: precision ``gram + diag(1 / prior_var)``,
    mean its inverse times ``b + prior_mean / prior_var``."""
    precision = np.array(gram, order="F")  # LAPACK's order: factored in place
    precision[np.diag_indices_from(precision)] += 1.0 / prior_var
    chol = cholesky_lower(precision)
    mean, info = scipy.linalg.lapack.dpotrs(chol, b + prior_mean / prior_var, lower=1)
    if info != 0:
        raise ValueError(f"potrs failed (info {info})")
    return Posterior(mean, chol, prior_var, noise)


def cholesky_lower(matrix: np.ndarray) -> np.ndarray:
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


def condition(design: Design, log_params: np.ndarray, gradient: bool = True
               ) -> tuple[Posterior, float, np.ndarray]:
    """Posterior of the effects (built in full), the negative log marginal likelihood and its
    gradient with respect to ``log_params`` (learned log variances, then the log nuggets;
    zeros unless ``gradient``)."""
    nugget = np.exp(log_params[len(RANDOM_EFFECTS):])
    prior_var, noise = prior_and_noise(design, log_params)
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


def solve_lower(chol: np.ndarray, rhs: np.ndarray, transposed: bool = False) -> np.ndarray:
    """``chol^-1 rhs`` (``chol^-T rhs`` if ``transposed``) for a lower triangular ``chol`` in
    Fortran order (a factor of :func:`cholesky_lower`): LAPACK ``trtrs`` called as
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


def quadratic_diag(phi: scipy.sparse.csr_matrix, cov: np.ndarray) -> np.ndarray:
    """``diag(phi @ cov @ phi.T)`` for a sparse ``phi`` of shape ``(N, p)``, shape ``(N,)``."""
    idx, val = _padded_csr(phi.tocsr())
    block = cov[idx[:, :, None], idx[:, None, :]]
    return np.einsum("ni,nij,nj->n", val, block, val)

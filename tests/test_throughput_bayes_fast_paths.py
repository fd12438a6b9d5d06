"""Our learner's hyperparameter fit and conditionings take fast paths (padded rows scattered with
``bincount``, the covariance's lower triangle, LAPACK without scipy's wrappers): each must give
the slow path's numbers to the last bit on a real design, so that a faster fit decides the same.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse

from bayes_sched.cells import Cell, CellObservation
from bayes_sched.estimation.throughput.bayesian import BayesianThroughputLearner
from bayes_sched.estimation.throughput.effects import RANDOM_EFFECTS
from bayes_sched.estimation.throughput.observations import table_rate
from bayes_sched.estimation.throughput.weight_space import (
    Design,
    cholesky_lower,
    condition,
    prior_and_noise,
    quadratic_diag,
)
from bayes_sched.throughputs import load_throughputs

SIMULATION = load_throughputs("simulation")
GPUS = ("v100", "p100", "k80")


def _design() -> Design:
    """The design of every alone cell of twelve job types at 1 and 4 GPUs and their pairs on
    one GPU, with noisy rates over varied seconds (as an online fit sees them)."""
    rng = np.random.default_rng(3)
    types = list(SIMULATION.job_types)[::2][:12]
    cells = [Cell(t, s, g) for t in types for s in (1, 4) for g in GPUS]
    cells += [Cell(a, 1, g, b) for a in types[:6] for b in types[:6] for g in GPUS[:2]]
    reports = []
    for cell in cells:
        rate = table_rate(SIMULATION, cell)
        if rate:
            reports.append(CellObservation(cell, rate * float(np.exp(rng.normal(0, 0.05))),
                                           float(rng.uniform(60, 600))))
    learner = BayesianThroughputLearner(max_iterations=0)
    belief = learner.fit(reports)
    assert belief.design is not None and len(belief.design.y) > 100
    return belief.design


def _log_params() -> np.ndarray:
    """Hyperparameters each at its own value (not all equal: every effect's term differs)."""
    base = BayesianThroughputLearner().log_variances
    return base + np.linspace(-2.0, 1.0, len(base))


def test_data_terms_scattered_over_padded_rows_equal_scipys_sparse_products_bitwise() -> None:
    design = _design()
    _, noise = prior_and_noise(design, _log_params())
    phi = design.phi
    weighted = scipy.sparse.diags(1.0 / noise) @ phi
    gram, b = design.padded.data_terms(noise, design.y, len(design.columns))
    assert np.array_equal(gram, (phi.T @ weighted).toarray())
    assert np.array_equal(b, weighted.T @ design.y)


def test_the_fits_gradient_from_the_lower_triangle_equals_the_full_covariances_bitwise() -> None:
    design = _design()
    log_params = _log_params()
    posterior, nll, grad = condition(design, log_params)
    # The slow path: the full symmetric covariance, effects' columns by mask, sparse rows.
    prior_var, noise = prior_and_noise(design, log_params)
    mean, cov = posterior.mean, posterior.cov
    slow = np.zeros_like(log_params)
    per_column = (mean**2 + np.diag(cov)) / prior_var - 1.0
    for i, name in enumerate(RANDOM_EFFECTS):
        e = design.effect_names.index(name)
        slow[i] = -0.5 * per_column[design.column_effect == e].sum()
    resid = design.y - design.phi @ mean
    per_row = (resid**2 + quadratic_diag(design.phi, cov)) / noise**2 - 1.0 / noise
    nugget = np.exp(log_params[len(RANDOM_EFFECTS):])
    for i, is_pair in enumerate((False, True)):
        slow[len(RANDOM_EFFECTS) + i] = -0.5 * nugget[i] * per_row[design.is_pair == is_pair].sum()
    assert np.array_equal(grad, slow)
    assert np.isfinite(nll)
    # ... and the gradient is the likelihood's: a central difference agrees.
    step = 1e-5
    for i in (0, len(RANDOM_EFFECTS)):
        up, down = log_params.copy(), log_params.copy()
        up[i] += step
        down[i] -= step
        numeric = (condition(design, up, gradient=False)[1]
                   - condition(design, down, gradient=False)[1]) / (2 * step)
        assert grad[i] == pytest.approx(numeric, rel=1e-4, abs=1e-6)


def test_cholesky_without_scipys_wrappers_equals_scipys_and_fails_as_it_does() -> None:
    design = _design()
    prior_var, noise = prior_and_noise(design, _log_params())
    gram, _ = design.padded.data_terms(noise, design.y, len(design.columns))
    precision = gram + np.diag(1.0 / prior_var)
    expected = scipy.linalg.cholesky(precision, lower=True)
    assert np.array_equal(cholesky_lower(precision.copy()), expected)
    assert np.array_equal(cholesky_lower(np.asfortranarray(precision)), expected)
    with pytest.raises(np.linalg.LinAlgError):
        cholesky_lower(-precision)
    broken = precision.copy()
    broken[3, 3] = np.nan
    with pytest.raises(ValueError):
        cholesky_lower(broken)

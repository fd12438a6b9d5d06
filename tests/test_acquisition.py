"""The exploration rules over posteriors: one definition each, answering from the posterior's
own mean, quantiles and draws."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from bayes_sched.acquisition import (
    expected_improvement,
    log_expected_improvement,
    quantile,
    thompson,
    worth_trying,
)
from bayes_sched.estimates import DrawsPosterior, PointPosterior

DRAWS = np.random.default_rng(0).normal([1.0, 2.0, 0.5], [0.1, 1.0, 2.0], size=(4000, 3))


def test_thompson_is_one_joint_draw_and_a_point_is_itself() -> None:
    posterior = DrawsPosterior(DRAWS)
    drawn = thompson(posterior, seed=3)
    assert drawn.shape == (3,)
    assert np.array_equal(drawn, posterior.draws(1, 3)[0])
    assert any(np.array_equal(drawn, row) for row in DRAWS)  # a whole row: joint, not marginal
    assert np.array_equal(thompson(PointPosterior([4.0, 5.0]), seed=9), [4.0, 5.0])


def test_quantiles_bound_optimistically_above_the_median_and_pessimistically_below() -> None:
    posterior = DrawsPosterior(DRAWS)
    upper, lower = quantile(posterior, 0.9), quantile(posterior, 0.1)
    assert np.all(upper > posterior.mean()) and np.all(lower < posterior.mean())
    assert upper == pytest.approx(np.quantile(DRAWS, 0.9, axis=0))
    with pytest.raises(ValueError, match="quantile is 1.5"):
        quantile(posterior, 1.5)


def test_expected_improvement_is_taken_draw_by_draw_over_the_incumbent() -> None:
    shared = np.random.default_rng(1).normal(0.0, 5.0, size=(2000, 1))
    # Candidate 1 beats the incumbent 0 by 0.1 in every draw: the shared noise cancels.
    values = np.hstack([shared, shared + 0.1, shared - 0.1])
    gain = expected_improvement(DrawsPosterior(values), incumbent=0, num_draws=2000)
    assert gain == pytest.approx([0.0, 0.1, 0.0])
    independent = expected_improvement(DrawsPosterior(DRAWS), 0, len(DRAWS))
    brute = np.mean(np.maximum(DRAWS - DRAWS[:, :1], 0.0), axis=0)
    assert np.array_equal(independent, brute)


def test_log_expected_improvement_is_the_log_of_the_gaussian_closed_form() -> None:
    mean, std = np.array([0.0, 1.0, -3.0]), np.array([1.0, 0.5, 0.2])
    z = (mean - 0.5) / std
    closed = std * (norm.pdf(z) + z * norm.cdf(z))
    assert np.exp(log_expected_improvement(mean, std, 0.5)) == pytest.approx(closed, rel=1e-9)
    # Far below the best the closed form underflows; the log stays finite and ordered.
    far = log_expected_improvement(np.array([-40.0, -60.0]), np.array([1.0, 1.0]), 0.0)
    assert np.all(np.isfinite(far)) and far[0] > far[1]


def test_value_of_information_tries_when_the_gain_beats_the_trial() -> None:
    assert worth_trying(0.01, 1000.0, -0.5, 10.0) == (True, 10.0, 5.0)
    assert worth_trying(0.01, 100.0, -0.5, 10.0) == (False, 1.0, 5.0)
    assert worth_trying(0.0, 100.0, 0.2, 10.0) == (False, 0.0, 0.0)  # free, but worth nothing

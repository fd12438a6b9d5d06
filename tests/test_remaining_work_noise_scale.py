"""Ours: remaining work from the noise-scale curve (vs Shockwave's Dirichlet), and the curve's
forecast past a trace's end."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from bayes_sched.estimation.remaining_work import DirichletRegimePredictor, NoiseScaleRegimePredictor
from bayes_sched.remaining_work import profile_from
from perfmodel.efficiency import NoiseScaleCurve
from perfmodel.profiles import GradientTrace

SECONDS = {32: 100.0, 64: 60.0, 128: 40.0}


def test_a_job_at_its_largest_batch_is_predicted_to_stay_there() -> None:
    profile = profile_from([32] * 10 + [64] * 10 + [128] * 80, SECONDS)
    predicted = NoiseScaleRegimePredictor().remaining_seconds(profile, 50)
    assert predicted == profile.seconds_done(100) - profile.seconds_done(50)


def test_growth_seen_so_far_is_forecast_and_bounded_by_the_regimes() -> None:
    """Doubling every 20 epochs, seen for 40: ours forecasts more growth (less time than staying
    at 64) within what the regimes allow, and is closer to the truth than the Dirichlet."""
    profile = profile_from([32] * 20 + [64] * 20 + [128] * 60, SECONDS)
    truth = profile.seconds_done(100) - profile.seconds_done(40)
    ours = NoiseScaleRegimePredictor(seed=1).remaining_seconds(profile, 40)
    assert 60 * 40.0 <= ours < 60 * 60.0
    dirichlet = DirichletRegimePredictor().remaining_seconds(profile, 40)
    assert abs(ours - truth) < abs(dirichlet - truth)
    assert NoiseScaleRegimePredictor(seed=1).remaining_seconds(profile, 40) == ours


def test_the_curve_forecasts_past_the_traces_end_with_joint_draws() -> None:
    rng = np.random.default_rng(0)
    progress = np.arange(20) + 0.5
    log_phi = 0.5 + 2.0 * progress / 40 + rng.normal(0, 0.05, 20)
    trace = GradientTrace(32, progress, progress, np.zeros(20), np.ones(20), np.exp(log_phi))
    whole = NoiseScaleCurve.fit(trace, total_progress=40.0)
    assert whole.max_progress == 40.0
    fractions = np.array([0.25, 0.75, 1.0])
    loc, scale = whole.log_noise(fractions)
    assert loc[-1] > 1.5                          # the upward drift carried past the data,
    assert abs(loc[-1] - 2.5) < 3 * scale[-1]     # the truth within the posterior's reach,
    assert scale[-1] > 3 * scale[0]               # and less sure there than where it was read
    draws = whole.sample_log_noise_curves(fractions, 4000, np.random.default_rng(1))
    assert np.all(np.abs(draws.mean(axis=0) - loc) < 6 * scale / np.sqrt(4000) + 0.01)
    assert np.corrcoef(draws[:, 1], draws[:, 2])[0, 1] > 0.5  # one curve per draw
    default = NoiseScaleCurve.fit(trace)
    assert default.max_progress == progress.max()


def test_new_epoch_times_reuse_the_fitted_regime_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    # A learner's every new belief changes the epoch times, not the regimes: the curve is not
    # refitted, and the draws scale with the times.
    fits = []
    fit = NoiseScaleCurve.fit

    def counted(cls: type[NoiseScaleCurve], *args: Any, **kwargs: Any) -> NoiseScaleCurve:
        fits.append(args)
        return fit(*args, **kwargs)

    monkeypatch.setattr(NoiseScaleCurve, "fit", classmethod(counted))
    profile = profile_from([8] * 5 + [16] * 5 + [32] * 10, {8: 40.0, 16: 25.0, 32: 15.0})
    slower = profile_from(profile.regimes, {8: 80.0, 16: 50.0, 32: 30.0})
    ours = NoiseScaleRegimePredictor()
    first = ours.draws(profile, 8)
    assert np.allclose(ours.draws(slower, 8), 2 * first)
    assert len(fits) == 1

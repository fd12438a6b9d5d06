from __future__ import annotations

import numpy as np

from perfmodel.efficiency import (
    EfficiencyModel,
    NoiseScaleCurve,
    efficiency_from_noise,
    statistical_efficiency,
)
from perfmodel.profiles import GradientTrace, load_pollux_gradients


def test_efficiency_formula_limits() -> None:
    assert np.isclose(statistical_efficiency(1.0, 4.0, 128, 128), 1.0)
    # No noise: doubling the batch halves the value of each example.
    assert np.isclose(statistical_efficiency(1.0, 0.0, 128, 256), 0.5)
    # Pure noise (grad_sqr 0): large batches lose nothing.
    assert np.isclose(statistical_efficiency(0.0, 3.0, 128, 1024), 1.0)
    eff = statistical_efficiency(1.0, 10.0, 100, np.array([100, 200, 400, 800]))
    assert np.all(np.diff(eff) < 0)
    assert np.allclose(eff, efficiency_from_noise(10.0, 100, np.array([100, 200, 400, 800])))


def _trace(phi: np.ndarray, seed: int) -> GradientTrace:
    rng = np.random.default_rng(seed)
    noisy = phi * np.exp(0.2 * rng.standard_normal(len(phi)))
    progress = np.linspace(1, 100, len(phi))
    return GradientTrace(64, progress, progress, progress, np.ones_like(phi), noisy)


def test_noise_curve_recovers_trend_with_honest_interval() -> None:
    x = np.linspace(0.01, 1, 60)
    truth = np.exp(1 + 3 * x)
    coverage = []
    for seed in range(20):  # pointwise bands of one run are correlated: average over runs
        curve = NoiseScaleCurve.fit(_trace(truth, seed=seed))
        lo, hi = curve.noise_to_signal(x, 0.05), curve.noise_to_signal(x, 0.95)
        coverage.append(np.mean((truth >= lo) & (truth <= hi)))
        assert np.all(hi / lo < 1.5)  # 60 epochs of noise 0.2 pin the trend down
    assert 0.8 < np.mean(coverage) <= 1.0


def test_fewer_epochs_give_wider_intervals() -> None:
    few = NoiseScaleCurve.fit(_trace(np.exp(1 + 3 * np.linspace(0.1, 1, 8)), seed=1))
    many = NoiseScaleCurve.fit(_trace(np.exp(1 + 3 * np.linspace(0.1, 1, 80)), seed=1))
    def log_width(curve: NoiseScaleCurve) -> float:
        return float(np.log(curve.noise_to_signal(0.5, 0.95) / curve.noise_to_signal(0.5, 0.05)))
    assert log_width(few) > 2 * log_width(many)


def test_real_noise_scale_grows_over_training_and_bands_are_ordered() -> None:
    model = EfficiencyModel.fit(load_pollux_gradients("cifar10"))
    curve = model.curve()
    assert curve.noise_to_signal(0.9) > 10 * curve.noise_to_signal(0.05)
    batch = np.array([256, 1024, 4096])
    lo, mid, hi = (model.efficiency(batch, 0.5, q) for q in (0.05, None, 0.95))
    assert np.all(lo <= mid) and np.all(mid <= hi) and np.all(hi <= 1)
    # Late in training larger batches are more efficient (the noise scale has grown).
    assert np.all(model.efficiency(batch, 0.9) > model.efficiency(batch, 0.1))

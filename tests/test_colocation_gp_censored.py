"""The censored (Tobit) GP co-location model on synthetic pairs with a known law and noise whose
speeds were recorded capped at 1, as Gavel's are: it must recover the noise the Gaussian GP
underestimates and cover the true speeds above the cap."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from bayes_sched.interference import InterferenceInputError, interval_coverage
from bayes_sched.interference.evaluation import coverage_credits
from bayes_sched.interference.gp import ColocationGP
from bayes_sched.interference.gp_censored import CensoredColocationGP
from tests.colocation_pairs import involving, one_torch_thread, synthetic_pairs

NOISE = 0.05


def _capped_pairs(num_jobs: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    # Light neighbours make about a third of the jobs faster than alone; ``speed`` is what a
    # capped record holds (min(true, 1)), ``true`` what the job ran at.
    pairs, solo = synthetic_pairs(num_jobs, seed, offset=0.3, noise=NOISE)
    return pairs.assign(speed=np.minimum(pairs["true"], 1.0)), solo


def test_censored_gp_recovers_the_noise_and_covers_speeds_above_the_cap() -> None:
    pairs, solo = _capped_pairs(16, seed=0)
    assert 0.25 < (pairs["true"] >= 1).mean() < 0.5
    held = involving(pairs, {"job0", "job1"})
    train, test = pairs[~held], pairs[held]
    with one_torch_thread():
        gaussian = ColocationGP.fit(train, solo)
        censored = CensoredColocationGP.fit(train, solo, cap=1.0)
    assert censored.report.converged
    # The noise: within 20% of the truth, and nearer it (in ratio) than the Gaussian fit's,
    # which reads the rows at the cap as exact.
    assert abs(math.log(censored.report.noise / NOISE)) < math.log(1.2)
    assert abs(math.log(censored.report.noise / NOISE)) < abs(
        math.log(gaussian.report.noise / NOISE))
    # Held-out jobs: the censored model predicts what they ran at, above the cap included.
    true = test["true"].to_numpy()
    above = true > 1
    assert above.sum() >= 10
    inside = {}
    for name, model in (("gaussian", gaussian), ("censored", censored)):
        low, high = model.predict_speed(list(test["target"]), list(test["other"])).interval(0.9)
        inside[name] = (true >= low) & (true <= high)
    assert inside["censored"].mean() >= 0.8 and inside["censored"][above].mean() >= 0.8
    assert inside["gaussian"][above].mean() < inside["censored"][above].mean()


def test_censored_gp_refuses_speeds_above_its_cap() -> None:
    pairs, solo = _capped_pairs(4, seed=1)
    with pytest.raises(InterferenceInputError, match="above the cap"):
        CensoredColocationGP.fit(pairs.assign(speed=pairs["true"] * 2.0), solo, cap=1.0)


def test_censored_coverage_of_a_calibrated_model_is_its_level() -> None:
    # Log speeds drawn from exactly the predictive distributions, recorded capped at 0: the
    # credits of the censored records make the coverage the level, where counting a censored
    # record as covered whenever the interval reaches the cap over-covers.
    rng = np.random.default_rng(0)
    mean = rng.uniform(-2.0, 1.0, 40_000)
    true = mean + rng.standard_normal(mean.size)
    recorded = np.minimum(true, 0.0)
    low, high = mean - 1.6449, mean + 1.6449
    below = norm.cdf(0.0 - mean)
    assert 0.2 < (recorded == 0).mean() < 0.5
    coverage = interval_coverage(low, high, recorded, cap=0.0, below_cap=below, level=0.9)
    assert abs(coverage - 0.9) < 0.006
    reaches_cap = interval_coverage(low, np.minimum(high, 0.0), recorded)
    assert reaches_cap > 0.92
    credits = coverage_credits(low, high, recorded, 0.0, below, 0.9)
    assert np.array_equal(credits[recorded < 0], ((recorded >= low) & (recorded <= high))[
        recorded < 0])
    with pytest.raises(ValueError, match="below_cap"):
        interval_coverage(low, high, recorded, cap=0.0)


def test_censored_gp_fits_one_noise_level_per_group() -> None:
    # Targets job8-job15 were measured with five times the noise of job0-job7: one noise level
    # per group recovers both, and the noisy group's held-out speeds are covered where one
    # level for all (between the two) leaves them outside.
    pairs, solo = synthetic_pairs(16, seed=2, offset=0.0, noise=0.02)
    rng = np.random.default_rng(3)
    noisy = pairs["target"].str[3:].astype(int) >= 8
    true = pairs["true"] * np.exp(np.where(noisy, 0.1, 0.0) * rng.standard_normal(len(pairs)))
    pairs = pairs.assign(true=true, speed=np.minimum(true, 1.0))
    held = involving(pairs, {"job0", "job15"})
    train, test = pairs[~held], pairs[held]

    def group(job: str) -> str:
        return "noisy" if int(job[3:]) >= 8 else "quiet"

    with one_torch_thread():
        one = CensoredColocationGP.fit(train, solo, cap=1.0)
        grouped = CensoredColocationGP.fit(train, solo, cap=1.0, noise_group=group)
    assert grouped.report.converged and one.report.noise_groups == {}
    levels = grouped.report.noise_groups
    assert abs(math.log(levels["quiet"] / 0.02)) < math.log(1.5)
    assert abs(math.log(levels["noisy"] / math.hypot(0.02, 0.1))) < math.log(1.3)
    on_noisy = test["target"].map(group).eq("noisy").to_numpy()
    covered = {}
    for name, model in (("one", one), ("grouped", grouped)):
        low, high = model.predict_speed(list(test["target"]), list(test["other"])).interval(0.9)
        covered[name] = (test["true"] >= low) & (test["true"] <= high)
    assert covered["grouped"][on_noisy].mean() >= 0.8
    assert covered["one"][on_noisy].mean() < covered["grouped"][on_noisy].mean()

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
from bayes_sched.interference.evaluation import coverage_credits, expected_censored_coverage
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


def test_a_calibrated_models_coverage_of_its_censored_records_is_what_it_expects() -> None:
    # The same calibrated predictions: on the records at the cap alone (a subset chosen by its
    # outcome) the coverage is not the level but what the model expects of itself there, far
    # below it for predictions that mostly lie below the cap.
    rng = np.random.default_rng(1)
    for centre, expected_range in ((-2.0, (0.02, 0.1)), (-1.0, (0.6, 0.8)), (0.0, (0.88, 0.92))):
        mean = centre + rng.uniform(-0.5, 0.5, 40_000)
        true = mean + rng.standard_normal(mean.size)
        recorded = np.minimum(true, 0.0)
        low, high = mean - 1.6449, mean + 1.6449
        below = norm.cdf(0.0 - mean)
        at_cap = recorded == 0
        realised = float(coverage_credits(low, high, recorded, 0.0, below, 0.9)[at_cap].mean())
        expected = expected_censored_coverage(below, 0.9)
        assert abs(realised - expected) < 0.02
        assert expected_range[0] < expected < expected_range[1]
    assert math.isnan(expected_censored_coverage(np.ones(3), 0.9))


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


def _strong_and_weak(seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    # Targets job8-job15 ("strong") feel their neighbours 2.5 times as much as job0-job7
    # ("weak"); both measured with the same noise.
    pairs, solo = synthetic_pairs(16, seed=seed, offset=0.0, noise=0.0)
    rng = np.random.default_rng(seed + 1)
    strong = pairs["target"].str[3:].astype(int) >= 8
    law = np.log(pairs["true"]) * np.where(strong, 2.5, 1.0)
    true = np.exp(law + 0.02 * rng.standard_normal(len(pairs)))
    return pairs.assign(true=true, speed=np.minimum(true, 1.0)), solo


def _strength(job: str) -> str:
    return "strong" if int(job[3:]) >= 8 else "weak"


def test_censored_gp_fits_one_kernel_amplitude_per_group() -> None:
    # A group whose speeds vary more with the inputs gets a larger amplitude, not a larger
    # noise: both groups' noise levels come back near the 0.02 they were measured with.
    pairs, solo = _strong_and_weak(seed=4)
    with one_torch_thread():
        model = CensoredColocationGP.fit(pairs, solo, cap=1.0, noise_group=_strength,
                                         group_amplitudes=True)
    assert model.report.converged
    amplitudes, noises = model.report.amplitude_groups, model.report.noise_groups
    assert amplitudes["strong"] / amplitudes["weak"] > 1.8
    for group in ("strong", "weak"):
        assert abs(math.log(noises[group] / 0.02)) < math.log(1.6)


def test_censored_gp_draws_an_unseen_groups_levels_from_their_prior() -> None:
    # Fitted on the weak targets only, a strong target's group is unseen: its draws mix over
    # the group's amplitude and noise level (heavier tails than a Gaussian), with the
    # mixture's moments log_speed_moments reports; a seen group's draws are Gaussian.
    pairs, solo = _strong_and_weak(seed=5)
    weak = pairs["target"].map(_strength).eq("weak")
    with one_torch_thread():
        model = CensoredColocationGP.fit(pairs[weak], solo, cap=1.0, noise_group=_strength,
                                         group_amplitudes=True)
    targets, others = ["job12", "job3"], ["job5", "job6"]
    mean, sd = model.log_speed_moments(targets, others)
    draws = np.log(model.predict_speed(targets, others, num_samples=40_000).samples)
    np.testing.assert_allclose(draws.mean(axis=0), mean, atol=0.05 * sd.max())
    np.testing.assert_allclose(draws.std(axis=0), sd, rtol=0.05)
    excess = ((draws - draws.mean(axis=0)) ** 4).mean(axis=0) / draws.var(axis=0) ** 2 - 3
    assert excess[0] > 0.5 and abs(excess[1]) < 0.2


def test_censored_gp_separates_each_jobs_own_effect_from_the_noise() -> None:
    # Jobs job8-job15 show the same solo features as job0-job7, and each target job runs 0.2
    # (sd, log speed) faster or slower next to anyone than its features say: a job's own
    # effect, which no function of the features can tell apart, learned from its other pairs;
    # the fitted noise stays near the 0.02 measured, and held-out pairs of known jobs are
    # predicted within a few noise levels.
    pairs, solo = synthetic_pairs(16, seed=6, offset=0.0, noise=0.0)
    solo.iloc[8:] = solo.iloc[:8].to_numpy()
    twin = {f"job{i}": f"job{i % 8}" for i in range(16)}
    law = -1.2 * pairs["other"].map(twin).map(solo["util"]) * (
        0.3 + pairs["target"].map(twin).map(solo["mem"]))
    pairs = pairs.assign(true=np.exp(law))
    rng = np.random.default_rng(7)
    own = pd.Series(0.2 * rng.standard_normal(len(solo)), index=solo.index)
    true = np.exp(np.log(pairs["true"]) + pairs["target"].map(own)
                  + 0.02 * rng.standard_normal(len(pairs)))
    pairs = pairs.assign(true=true, speed=np.minimum(true, 1.0))
    held = pairs.index.isin(rng.choice(pairs.index, 24, replace=False))
    train, test = pairs[~held], pairs[held & (pairs["speed"] < 1.0)]
    with one_torch_thread():
        model = CensoredColocationGP.fit(train, solo, cap=1.0)
    assert model.report.converged
    assert abs(math.log(model.report.noise / 0.02)) < math.log(1.6)
    mean, _ = model.log_speed_moments(list(test["target"]), list(test["other"]))
    assert np.sqrt(np.mean((mean - np.log(test["speed"])) ** 2)) < 0.06


def _contaminated(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    # Heavy-tailed log-speed noise: most rows within 0.02, one in ten 0.3 off (a wild run).
    wild = rng.uniform(size=shape) < 0.1
    return np.where(wild, 0.3, 0.02) * rng.standard_normal(shape)


def test_student_t_noise_covers_heavy_tailed_fresh_rows_at_every_level() -> None:
    # Fresh measurements of the same pairs (outliers included): the Student-t model's 90%
    # intervals hold about 90% of them and its 50% intervals about half; the Gaussian's noise,
    # stretched to reach the outliers, makes its 50% intervals hold far more than half.
    pairs, solo = synthetic_pairs(16, seed=0, offset=0.0, noise=0.0)
    rng = np.random.default_rng(1)
    law = np.log(pairs["true"].to_numpy())
    true = np.exp(law + _contaminated(rng, law.shape))
    pairs = pairs.assign(true=true, speed=np.minimum(true, 1.0))
    fresh = np.exp(law + _contaminated(rng, (20, len(law))))
    coverage = {}
    with one_torch_thread():
        for name, student_t in (("gaussian", False), ("t", True)):
            model = CensoredColocationGP.fit(pairs, solo, cap=1.0, student_t=student_t)
            assert model.report.converged
            draws = model.predict_speed(list(pairs["target"]), list(pairs["other"]))
            for level in (0.5, 0.9):
                low, high = draws.interval(level)
                coverage[name, level] = float(((fresh >= low) & (fresh <= high)).mean())
    assert abs(coverage["t", 0.9] - 0.9) < 0.04 and abs(coverage["t", 0.5] - 0.5) < 0.15
    assert coverage["gaussian", 0.5] > 0.75
    assert set(model.report.dof_groups) == {""} and model.report.dof_groups[""] < 5


def test_student_t_fit_keeps_the_projects_errors() -> None:
    pairs, solo = _capped_pairs(4, seed=1)
    with pytest.raises(InterferenceInputError, match="above the cap"):
        CensoredColocationGP.fit(pairs.assign(speed=pairs["true"] * 2.0), solo, cap=1.0,
                                 student_t=True)
    with pytest.raises(InterferenceInputError):
        CensoredColocationGP.fit(pairs.assign(speed=np.nan), solo, cap=1.0, student_t=True)

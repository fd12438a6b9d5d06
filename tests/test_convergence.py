"""Convergence that means it (issue 39, item 4): one rule for every iterative fit
(perfmodel.convergence), diverged fits as the project's error, the library's warning category for
unreliable intervals, and no torch warning escaping a Bayesian fit."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from bayes_sched.interference import (
    FitConfig,
    InterferenceFitError,
    InterferenceModel,
    load_gavel_pairs,
    load_gavel_solo_features,
)
from perfmodel import FitError, UnreliableFitWarning
from perfmodel.convergence import DEFAULT_RULE, FitMonitor, judge
from perfmodel.throughput_bayes.fit import fit_throughput_posterior
from tests.cli_inprocess import run_cli
from tests.conftest import ALL_PLACEMENTS, TRUE_PARAMS, synthetic_profile
from tests.test_interference import synthetic_pairs

W = DEFAULT_RULE.window


def test_the_rule_needs_a_flat_loss_and_a_small_gradient() -> None:
    rng = np.random.default_rng(0)
    noise = 0.05 * rng.standard_normal(4 * W)
    flat = judge("f", 100.0 * noise, 0.0, num_observations=100)
    assert flat.converged and flat.message() is None
    # Still falling by 0.1 nat per observation per window: not settled, whatever the gradient.
    falling = judge("f", 100.0 * (noise - 0.1 * np.arange(4 * W) / W), 0.0, 100)
    assert not falling.converged and "loss still moved" in (falling.message() or "")
    # A flat loss with a large gradient (a learning rate too small to move): not converged.
    stuck = judge("f", 100.0 * noise, 2.0, 100)
    assert not stuck.converged and "scaled gradient is 2" in (stuck.message() or "")
    # Fewer than two windows cannot show that the loss stopped moving.
    short = judge("f", noise[:10], 0.0, 1)
    assert not short.converged and "10 steps are fewer than two windows" in (short.message() or "")
    # A loss that scatters wildly but is flat on average is not settled either.
    wild = judge("f", 100.0 * 3.0 * rng.standard_normal(4 * W), 0.0, 100)
    assert not wild.converged and "scatters" in (wild.message() or "")


def test_a_non_finite_loss_names_the_fit_and_the_step() -> None:
    monitor = FitMonitor("toy", num_steps=5, num_observations=1)
    monitor.record(1.0)
    with pytest.raises(FitError) as error:
        monitor.record(math.nan)
    message = str(error.value)
    assert message == ("the toy fit diverged: its loss became non-finite at step 2 of 5; try a "
                       "lower learning rate")


@pytest.fixture(scope="module")
def small_pairs() -> tuple:
    pairs, features, _ = synthetic_pairs(6, seed=2)
    return pairs, features


def _fit(small_pairs: tuple, **settings: float) -> InterferenceModel:
    pairs, features = small_pairs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnreliableFitWarning)
        return InterferenceModel.fit(pairs, features, FitConfig(num_samples=20, **settings))


def test_an_interference_fit_stopped_early_is_not_converged(small_pairs: tuple) -> None:
    pairs, features = small_pairs
    with pytest.warns(UnreliableFitWarning, match="did not converge after 10 steps"):
        early = InterferenceModel.fit(pairs, features, FitConfig(num_steps=10, num_samples=20))
    assert not early.converged
    with pytest.raises(InterferenceFitError, match="try more steps"):
        early.require_converged()
    # A learning rate of 1e-4 barely moves the guide: its loss is nearly flat, its gradient not.
    slow = _fit(small_pairs, num_steps=300, learning_rate=1e-4, final_learning_rate=1e-5)
    assert not slow.converged and slow.convergence.gradient > DEFAULT_RULE.gradient_tolerance


@pytest.mark.slow
def test_an_interference_fit_at_default_settings_converges(small_pairs: tuple) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnreliableFitWarning)
        model = _fit(small_pairs)
    assert model.converged, model.convergence
    assert model.convergence.steps == FitConfig().num_steps


def test_a_normal_interference_fit_converges(small_pairs: tuple) -> None:
    # The fast variant of the test above: the default learning rates over 300 steps (on these
    # 42 observations the loss settles after about 150).
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnreliableFitWarning)
        model = _fit(small_pairs, num_steps=300)
    assert model.converged, model.convergence


def test_a_diverging_interference_fit_raises_the_projects_error(tmp_path) -> None:
    # The case: Gavel's pairs at learning rate 5 (a raw Pyro ValueError before).
    pairs, features = load_gavel_pairs(), load_gavel_solo_features()
    with pytest.raises(InterferenceFitError) as error:
        InterferenceModel.fit(pairs, features, FitConfig(learning_rate=5.0,
                                                         final_learning_rate=0.5))
    assert isinstance(error.value, FitError)
    message = str(error.value)
    assert message.startswith("the interference fit diverged: its ")
    assert "non-finite at step " in message and message.endswith("try a lower learning rate")
    # The command line says the same, in one line, exit status 2.
    pairs[["job_a", "job_b", "speed_a", "speed_b"]].to_csv(tmp_path / "pairs.csv", index=False)
    features.to_csv(tmp_path / "solo.csv")
    done = run_cli("infer", "interference", str(tmp_path / "pairs.csv"),
                   str(tmp_path / "solo.csv"), "--jobs", ",".join(features.index[:2]),
                   "--learning-rate", "5", "--cache-dir", str(tmp_path / "cache"))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"bayes-sched: error: {message}\n"


def _pairs_files(tmp_path, small_pairs: tuple) -> list[str]:
    pairs, features = small_pairs
    pairs.to_csv(tmp_path / "pairs.csv", index=False)
    features.to_csv(tmp_path / "solo.csv")
    return ["infer", "interference", str(tmp_path / "pairs.csv"), str(tmp_path / "solo.csv"),
            "--jobs", "job0,job1", "--cache-dir", str(tmp_path / "cache")]


def test_the_cli_refuses_an_unconverged_fit_in_one_line(tmp_path, small_pairs: tuple
                                                                     ) -> None:
    command = _pairs_files(tmp_path, small_pairs)
    early = run_cli(*command, "--steps", "10")
    assert early.returncode == 2 and early.stdout == ""
    assert early.stderr == ("bayes-sched: error: the interference fit did not converge after 10 "
                            "steps: 10 steps are fewer than two windows of 50, too few to tell "
                            "whether the loss stopped moving; try more steps, or a learning rate "
                            "nearer the default\n")
    slow = run_cli(*command, "--steps", "200", "--learning-rate", "0.0001")
    assert slow.returncode == 2 and slow.stdout == ""
    assert slow.stderr.startswith("bayes-sched: error: the interference fit did not converge "
                                  "after 200 steps: ")
    assert slow.stderr.count("\n") == 1 and "Traceback" not in slow.stderr


def test_the_library_warns_on_unreliable_throughput_intervals() -> None:
    # Two single-node placements and ten steps: a poor proposal (k-hat above 0.7) and too few
    # steps to converge; the library says so itself, in one line.
    profile = synthetic_profile(TRUE_PARAMS, ["1", "2"], noise=0.05, seed=2)
    with pytest.warns(UnreliableFitWarning) as caught:
        posterior = fit_throughput_posterior(profile, num_steps=10, num_samples=50,
                                             fallback=False)
    assert not posterior.diagnostics.reliable
    [warning] = [w for w in caught if issubclass(w.category, UnreliableFitWarning)]
    assert str(warning.message) == posterior.diagnostics.warning(profile.model)
    assert "\n" not in str(warning.message)


def test_no_torch_warning_escapes_a_bayesian_fit() -> None:
    profile = synthetic_profile(TRUE_PARAMS, ALL_PLACEMENTS[:6], noise=0.05, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", UnreliableFitWarning)  # ours, tested above
        posterior = fit_throughput_posterior(profile, num_steps=120, num_samples=50,
                                             fallback=False)
    assert posterior.diagnostics.convergence is not None

"""The interference model on awkward data: speeds above 1, self-pairs, feature choice, runaway
noise and fits that do not converge."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from bayes_sched.interference import (
    FitConfig,
    InterferenceFitError,
    InterferenceInputError,
    InterferenceModel,
    SpeedPrediction,
    check_pairs,
    colocation_observations,
    select_feature_columns,
)
from bayes_sched.interference.model import noise_scale
from bayes_sched.interference.tables import MAX_SPEED
from perfmodel.convergence import judge


def _solo() -> pd.DataFrame:
    return pd.DataFrame({"job": ["a", "b", "c", "d"], "util": [0.2, 0.4, 0.6, 0.8],
                         "mem": [1.0, 2.0, 1.5, 3.0]})


def test_speeds_above_one_are_predicted_above_one() -> None:
    rng = np.random.default_rng(0)
    rows = [(x, y, 1.15 + 0.02 * rng.standard_normal(), 1.15 + 0.02 * rng.standard_normal())
            for i, x in enumerate("abcd") for y in "abcd"[i + 1:]]
    pairs = pd.DataFrame(rows, columns=["job_a", "job_b", "speed_a", "speed_b"])
    model = InterferenceModel.fit(pairs, _solo(), FitConfig(num_steps=400, num_samples=100))
    median = model.predict_speed(["a", "c"], ["b", "d"]).median
    assert np.all(median > 1.08), median


def test_a_job_sharing_with_a_copy_of_itself_gives_one_observation_per_measurement() -> None:
    # "a" beside a copy of itself: two differing speeds are two measurements; "c"'s equal pair
    # is Gavel's record of one (the copies' mean written to both slots), so one observation.
    pairs = check_pairs(pd.DataFrame({"job_a": ["a", "a", "c"], "job_b": ["a", "b", "c"],
                                      "speed_a": [0.7, 0.8, 0.6], "speed_b": [0.75, 0.9, 0.6]}))
    observations = colocation_observations(pairs)
    mine = observations[(observations["target"] == "a") & (observations["other"] == "a")]
    assert sorted(mine["speed"]) == [0.7, 0.75]
    equal = observations[(observations["target"] == "c") & (observations["other"] == "c")]
    assert equal["speed"].tolist() == [0.6]
    assert len(observations) == 5


def test_predictive_draws_are_clipped_to_valid_speeds() -> None:
    prediction = SpeedPrediction(samples=np.array([[-0.5, 3.0], [0.5, 1.0]]),
                                 cold_start=np.array([False, False]))
    low, high = prediction.interval(0.9)
    assert np.all(low > 0) and np.all(high <= MAX_SPEED)


def test_feature_columns_can_be_chosen_and_text_columns_ignored() -> None:
    solo = _solo().assign(gpu=["v100"] * 4)
    with pytest.raises(InterferenceInputError, match="gpu"):
        InterferenceModel.fit(pd.DataFrame({"job_a": ["a"], "job_b": ["b"], "speed_a": [0.8],
                                            "speed_b": [0.9]}), solo,
                              FitConfig(num_steps=1, num_samples=2))
    chosen = select_feature_columns(solo, ["util"])
    assert list(chosen.columns) == ["job", "util"]
    with pytest.raises(InterferenceInputError, match="no feature column 'speed'"):
        select_feature_columns(solo, ["speed"])
    pairs = pd.DataFrame({"job_a": ["a", "b"], "job_b": ["b", "c"], "speed_a": [0.8, 0.7],
                          "speed_b": [0.9, 0.6]})
    model = InterferenceModel.fit(pairs, solo, FitConfig(num_steps=5, num_samples=4),
                                  feature_columns=["util"])
    assert list(model.solo_features.columns) == ["util"]
    # Prediction with the full table (text and extra columns) uses the chosen features only.
    assert model.predict_speed(["a"], ["c"], solo_features=solo).samples.shape == (4, 1)


def test_noise_scale_is_bounded_for_extreme_features() -> None:
    features = torch.tensor([[50.0, -40.0], [0.0, 0.0]])
    scale = noise_scale(torch.tensor(0.1), torch.tensor([3.0, -3.0]), features)
    assert torch.all(scale <= 0.2) and torch.isclose(scale[1], torch.tensor(0.1))


def test_a_fit_whose_loss_runs_away_is_not_converged() -> None:
    pairs = pd.DataFrame({"job_a": ["a", "b"], "job_b": ["b", "c"], "speed_a": [0.8, 0.7],
                          "speed_b": [0.9, 0.6]})
    model = InterferenceModel.fit(pairs, _solo(), FitConfig(num_steps=200, num_samples=4))
    runaway = judge("interference", [*model.elbo_losses[:180], *np.geomspace(10.0, 6e6, 20)],
                    model.convergence.gradient, model.num_observations)
    assert not runaway.converged
    model.convergence = runaway
    assert not model.converged
    with pytest.raises(InterferenceFitError, match="did not converge"):
        model.require_converged()

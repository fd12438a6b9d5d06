"""The packed max-min policy's exploration rule (value of information at the LP's prices): on a
hand-built belief over one unknown pair, the pair is tried exactly when the expected rise of the
LP optimum from knowing its rate, over the horizon its jobs remain, beats a one-round trial's
expected loss; the expected rise equals the brute-force expectation over the belief's draws."""

from __future__ import annotations

import numpy as np
import pytest

from bayes_sched.policies import make_policy
from bayes_sched.policies.gavel_packing import MaxMinFairnessPackedPolicy, class_max_min_program
from bayes_sched.policies.time_sharing import AllocationInputs
from bayes_sched.policies.value_of_information import (
    column_values,
    expected_gain,
    lp_prices,
    max_min_value,
    worth_trying,
)

ROUND = 360.0


def _inputs(pair_rate: float) -> AllocationInputs:
    """Two one-GPU jobs of two classes, alone at 1 step/s on the one GPU of one type, and their
    pair at ``pair_rate`` each."""
    return AllocationInputs(
        names=("a", "b"), throughputs=np.ones((2, 1)), scale_factors=np.ones(2),
        capacities=np.ones(1), elapsed=np.zeros(2), remaining_steps=np.full(2, 1e4),
        pairs=np.array([[0, 1]]), pair_throughputs=np.full((1, 2, 1), pair_rate),
        job_classes=np.array([0, 1]))


def test_an_unknown_pair_is_tried_only_when_its_expected_gain_beats_the_trials_loss() -> None:
    # The belief: the pair fits with probability 1/2 and then runs at 0.8 steps/s each (a
    # mean of 0.4): alone, time-sharing the GPU gives each job 0.5; packed, 0.8.
    fits = np.tile([1.0, 0.0], 500)
    drawn_rate = 0.8 * fits
    mean_rate = float(drawn_rate.mean())
    inputs = _inputs(mean_rate)
    reduced, scores, program = class_max_min_program(inputs)
    prices = lp_prices(program, 2, 1)
    assert prices is not None and prices.value == pytest.approx(0.5)
    assert prices.floor.sum() == pytest.approx(1.0) and prices.gpus == pytest.approx([0.5])
    pair = int(np.flatnonzero(reduced.terms.combination >= 2)[0])
    scores_csc, time = scores.tocsc(), reduced.terms.membership.tocsc()
    gpus = np.asarray(reduced.terms.gpus.sum(axis=0)).ravel()
    # v = 0.5 r_a + 0.5 r_b - 0.5 (the GPU's price): -0.1 at the mean, the mean LP leaves it.
    at_mean = column_values(scores_csc, time, gpus, reduced.terms.gpu_type, prices)
    assert at_mean[pair] == pytest.approx(-0.1)
    ratios = np.ones((len(fits), 2, reduced.terms.num_entries))
    ratios[:, :, pair] = (drawn_rate / mean_rate)[:, None]
    drawn = column_values(scores_csc, time, gpus, reduced.terms.gpu_type, prices, ratios)
    gain = expected_gain(program, prices, pair, np.array([0, 1]), drawn[:, pair],
                         ratios[:, :, pair])
    # Brute force: the optimum with the pair at each draw's rate, averaged over the draws.
    optimum = {rate: max_min_value(class_max_min_program(_inputs(rate))[2]) or 0.5
               for rate in (0.8, 1e-9)}
    brute = np.mean([optimum[0.8] if f else optimum[1e-9] for f in fits]) - prices.value
    assert gain == pytest.approx(brute) and gain == pytest.approx(0.5 * (0.8 - 0.5))
    # A one-round trial loses 0.1 per second at the prices; the answer is worth 0.15 a second
    # for as long as both jobs remain.
    assert worth_trying(gain, ROUND, float(at_mean[pair]), ROUND) == (
        True, pytest.approx(0.15 * ROUND), pytest.approx(0.1 * ROUND))
    assert not worth_trying(gain, ROUND / 2, float(at_mean[pair]), ROUND)[0]
    # A pair that fits but never beats time-sharing is worth nothing, however long the jobs run.
    slow = np.tile([0.45, 0.0], 500)
    ratios[:, :, pair] = (slow / mean_rate)[:, None]
    drawn = column_values(scores_csc, time, gpus, reduced.terms.gpu_type, prices, ratios)
    assert expected_gain(program, prices, pair, np.array([0, 1]), drawn[:, pair],
                         ratios[:, :, pair]) == 0.0


def test_the_value_of_information_rule_decides_on_the_mean() -> None:
    policy = make_policy("max_min_fairness_packed", source="bayes",
                         exploration="value_of_information")
    assert isinstance(policy, MaxMinFairnessPackedPolicy) and policy.thompson is False
    with pytest.raises(ValueError, match="exploration is 'ucb'"):
        make_policy("max_min_fairness_packed", source="bayes", exploration="ucb")

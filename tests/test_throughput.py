from __future__ import annotations

import numpy as np

from perfmodel.profiles import StepTimeProfile, load_pollux_profile
from perfmodel.throughput import (
    ThroughputParams,
    fit_throughput,
    predict_step_time,
    predict_throughput,
    rmsle,
)
from tests.conftest import TRUE_PARAMS


def test_single_gpu_has_no_network_time() -> None:
    t = predict_step_time(TRUE_PARAMS, 1, 1, 32)
    assert np.isclose(t, TRUE_PARAMS.alpha_c + TRUE_PARAMS.beta_c * 32, rtol=1e-6)


def test_network_time_depends_on_link_and_retrogression() -> None:
    p = ThroughputParams(0.01, 0.0, 1.0, 0.1, 0.5, 0.05, 1.0)  # gamma 1: times add up
    within_2 = predict_step_time(p, 1, 2, 1) - 0.01
    within_4 = predict_step_time(p, 1, 4, 1) - 0.01
    across_4 = predict_step_time(p, 2, 4, 1) - 0.01
    assert np.isclose(within_2, 0.5) and np.isclose(within_4, 0.5 + 2 * 0.05)
    assert np.isclose(across_4, 1.0 + 2 * 0.1)


def test_accumulation_adds_compute_steps_and_throughput_counts_examples() -> None:
    t0 = predict_step_time(TRUE_PARAMS, 2, 8, 32, 0)
    t3 = predict_step_time(TRUE_PARAMS, 2, 8, 32, 3)
    assert np.isclose(t3 - t0, 3 * (TRUE_PARAMS.alpha_c + TRUE_PARAMS.beta_c * 32))
    assert np.isclose(predict_throughput(TRUE_PARAMS, 2, 8, 32, 3), 8 * 32 * 4 / t3)


def test_point_fit_recovers_known_parameters(synthetic: StepTimeProfile) -> None:
    fitted = fit_throughput(synthetic)
    pred = predict_step_time(fitted, synthetic.num_nodes, synthetic.num_replicas,
                             synthetic.local_bsz)
    assert rmsle(pred, synthetic.step_time) < 0.05
    assert abs(fitted.beta_c / TRUE_PARAMS.beta_c - 1) < 0.1
    assert abs(fitted.alpha_n / TRUE_PARAMS.alpha_n - 1) < 0.3


def test_point_fit_holds_unidentifiable_parameters_on_single_gpu_data(
        synthetic: StepTimeProfile) -> None:
    single = synthetic.subset(synthetic.num_replicas == 1)
    fitted = fit_throughput(single)
    # No multi-GPU data: network terms stay at their starting values, across >= within.
    assert fitted.alpha_n >= fitted.alpha_r and fitted.beta_n >= fitted.beta_r
    assert abs(fitted.beta_c / TRUE_PARAMS.beta_c - 1) < 0.1


def test_point_fit_on_real_profile_is_accurate() -> None:
    profile = load_pollux_profile("imagenet")
    fitted = fit_throughput(profile)
    pred = predict_step_time(fitted, profile.num_nodes, profile.num_replicas, profile.local_bsz)
    assert rmsle(pred, profile.step_time) < 0.15

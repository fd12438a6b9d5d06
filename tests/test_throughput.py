from __future__ import annotations

import numpy as np
import pytest

from perfmodel import throughput
from perfmodel.profiles import StepTimeProfile, load_pollux_profile
from perfmodel.throughput import (
    ThroughputParams,
    fit_objective,
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


def test_point_fit_pins_unidentifiable_network_terms_at_the_lower_bound(
        synthetic: StepTimeProfile) -> None:
    single = synthetic.subset(synthetic.num_replicas == 1)
    fitted = fit_throughput(single)
    # No multi-GPU data: as Pollux, every network term sits at the lower bound, so several GPUs
    # are predicted to scale perfectly until measured otherwise.
    for name in ("alpha_n", "beta_n", "alpha_r", "beta_r"):
        assert getattr(fitted, name) <= 1.1 * 1e-8, name
    assert abs(fitted.beta_c / TRUE_PARAMS.beta_c - 1) < 0.1
    one = predict_step_time(fitted, 1, 1, 64)
    assert np.isclose(predict_step_time(fitted, 4, 16, 64), one, rtol=1e-3)


def test_cold_start_on_one_node_predicts_across_nodes_like_pollux() -> None:
    profile = load_pollux_profile("ncf")
    fitted = fit_throughput(profile.subset(profile.num_nodes == 1))
    # Across-node links assumed 1.1 times slower than the within-node links measured.
    assert np.isclose(fitted.alpha_n, 1.1 * fitted.alpha_r)
    assert np.isclose(fitted.beta_n, 1.1 * fitted.beta_r)
    two_nodes = profile.placement.astype(str) == "44"
    pred = predict_step_time(fitted, profile.num_nodes[two_nodes], profile.num_replicas[two_nodes],
                             profile.local_bsz[two_nodes])
    # Measured ~0.036 s; holding the network terms at their start values predicted 0.165 s.
    assert rmsle(pred, profile.step_time[two_nodes]) < 0.8
    assert np.all(pred < 0.06)


def test_point_fit_on_real_profile_is_accurate() -> None:
    profile = load_pollux_profile("imagenet")
    fitted = fit_throughput(profile)
    pred = predict_step_time(fitted, profile.num_nodes, profile.num_replicas, profile.local_bsz)
    assert rmsle(pred, profile.step_time) < 0.15


def test_several_starts_escape_a_first_start_that_stalls(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """From a first start of 1 s per term (ncf's steps take milliseconds) one L-BFGS-B run
    stops far from the fit; the extra starts (seeded draws) reach it. From Pollux's own start,
    whether one run stops short on ncf depends on the machine's floating point (it did on one
    machine, by 0.0015; not on another), so the test does not start there."""
    profile = load_pollux_profile("ncf")
    good = fit_objective(fit_throughput(profile).as_array(), profile)
    monkeypatch.setattr(throughput, "POLLUX_START", (1.0,) * 6 + (1.0 + 1e-3,))
    one = fit_objective(fit_throughput(profile, starts=1).as_array(), profile)
    several = fit_objective(fit_throughput(profile).as_array(), profile)
    assert one > 5 * good
    assert several < good + 0.01


def test_several_starts_never_do_worse_than_pollux_start() -> None:
    profile = load_pollux_profile("yolov3")
    rng = np.random.default_rng(0)
    for _ in range(3):
        rows = np.zeros(len(profile), dtype=bool)
        rows[rng.choice(len(profile), 40, replace=False)] = True
        subset = profile.subset(rows)
        one = fit_objective(fit_throughput(subset, starts=1).as_array(), subset)
        several = fit_objective(fit_throughput(subset).as_array(), subset)
        assert several <= one + 1e-9


def test_fit_gradient_equals_autograd_of_the_step_time_model(synthetic: StepTimeProfile) -> None:
    # The point fit's gradient is written out; torch autograd through step_time_terms (the
    # formulas the Bayesian fit differentiates) must agree with it at random parameters.
    import torch

    from perfmodel.throughput import _FitData, _rmsle_objective, profile_tensors, step_time_terms

    data, tensors = _FitData.of(synthetic), profile_tensors(synthetic)
    rng = np.random.default_rng(4)
    for _ in range(20):
        theta = np.append(np.exp(rng.uniform(-7, 0, 6)), rng.uniform(1, 6))
        loss, grad = _rmsle_objective(theta, data)
        t = torch.as_tensor(theta).requires_grad_(True)
        t_c, t_o = step_time_terms(t, tensors["nodes"], tensors["replicas"], tensors["m"])
        reference = (torch.sqrt(torch.mean((torch.log(t_c) - tensors["log_tc"]) ** 2))
                     + torch.sqrt(torch.mean((torch.log(t_o) - tensors["log_to"]) ** 2))
                     + 1e-3 * (t[6] - 1) ** 2
                     + 1e-2 * ((t[3] / t[2]) ** 2 + (t[5] / t[4]) ** 2))
        (expected,) = torch.autograd.grad(reference, t)
        assert np.isclose(loss, float(reference.detach()), rtol=1e-10)
        assert np.allclose(grad, expected.numpy(), rtol=1e-7, atol=1e-12)


def test_fit_gradient_equals_finite_differences(synthetic: StepTimeProfile) -> None:
    # The compiled objective's gradient against central differences of the objective itself,
    # including pinned-looking parameters near the lower bound and a single-GPU-only profile.
    from perfmodel.throughput import _FitData, _rmsle_objective

    rng = np.random.default_rng(7)
    one_gpu = synthetic.subset(synthetic.num_replicas == 1)
    for profile in (synthetic, one_gpu):
        data = _FitData.of(profile)
        for _ in range(10):
            theta = np.append(np.exp(rng.uniform(-6, -1, 6)), rng.uniform(1, 4))
            _, grad = _rmsle_objective(theta, data)
            for j in range(7):
                step = 1e-6 * theta[j]
                up, down = theta.copy(), theta.copy()
                up[j] += step
                down[j] -= step
                numeric = (_rmsle_objective(up, data)[0] - _rmsle_objective(down, data)[0]) / (
                    2 * step)
                assert np.isclose(grad[j], numeric, rtol=1e-4, atol=1e-6), (j, theta)


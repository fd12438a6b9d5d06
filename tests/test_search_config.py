"""Per-job configuration search: candidates, the GP surrogate, LogEI loop and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from botorch.exceptions import ModelFittingError

from bayes_sched.errors import InputError
from bayes_sched.jobs import BatchLimits
from bayes_sched.search import enumerate_candidates, search_configuration
from bayes_sched.search import surrogate as surrogate_module
from bayes_sched.search.prior import model_prior
from bayes_sched.search.surrogate import fit_surrogate
from bayes_sched.sim.trials import PhysicsTrialRunner, profiled_goodput_model


def small_problem(app: str = "cifar10", **runner_args: object):  # noqa: ANN201
    runner = PhysicsTrialRunner(app, num_nodes=4, gpus_per_node=2, seed=1, **runner_args)
    cands = runner.candidates(batch_grid=3, accum_choices=(0, 1))
    prior = model_prior(cands, profiled_goodput_model(app, runner.epoch))
    return runner, cands, prior


def test_candidates_are_feasible_and_encoded_in_unit_box() -> None:
    limits = BatchLimits(64, 1024, 16, 128)
    cands = enumerate_candidates(limits, num_nodes=4, gpus_per_node=4, gpus_per_switch=2)
    assert len(cands) > 10
    assert cands.features.shape == (len(cands), 6)
    assert cands.features.min() >= 0 and cands.features.max() <= 1
    batches = np.array([c.batch_size for c in cands.configs])
    assert batches.min() >= 64 and batches.max() <= 1024
    # Features distinguish every configuration (no ids needed).
    assert len(np.unique(cands.features, axis=0)) == len(cands)


def test_no_feasible_configuration_is_an_input_error() -> None:
    limits = BatchLimits(4096, 8192, 1, 8)  # 8 GPUs x 8 x 4 steps = 256 < 4096
    with pytest.raises(InputError, match="no feasible configuration"):
        enumerate_candidates(limits, num_nodes=2, gpus_per_node=4, accum_choices=(0, 3))


def test_search_finds_near_best_with_few_trials_and_is_seeded() -> None:
    runner, cands, prior = small_problem()
    true = np.array([runner.true_goodput(c) for c in cands.configs])
    result = search_configuration(cands, prior, runner, max_trials=8, seed=3)
    assert result.best is not None and result.stop_reason
    assert len(result.trials) < len(cands)
    assert runner.true_goodput(result.best) >= 0.9 * true.max()
    again = search_configuration(cands, prior, small_problem()[0], max_trials=8, seed=3)
    assert [t.config for t in again.trials] == [t.config for t in result.trials]
    # Later trials carry surrogate predictions with uncertainty.
    assert all(t.predicted_std > 0 for t in result.trials[1:])


def test_failed_and_timed_out_trials_are_kept_and_the_search_goes_on() -> None:
    runner, cands, prior = small_problem(failure_rate=0.5)
    result = search_configuration(cands, prior, runner, max_trials=6, min_trials=6, seed=0)
    assert len(result.trials) == 6
    failed = [t for t in result.trials if t.goodput is None]
    assert failed and all("failed" in t.error for t in failed)
    assert result.finished and result.best in [t.config for t in result.finished]

    runner, cands, prior = small_problem(timeout=1.0)  # startup alone takes 30 s
    result = search_configuration(cands, prior, runner, max_trials=3, seed=0)
    assert len(result.trials) == 3 and result.best is None
    assert all("timed out" in t.error for t in result.trials)
    assert "every trial failed" in result.stop_reason


def test_non_converging_fit_keeps_prior_hyperparameters(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_fit(mll: object) -> None:
        raise ModelFittingError("all attempts to fit the model have failed")

    monkeypatch.setattr(surrogate_module, "fit_gpytorch_mll", broken_fit)
    runner, cands, prior = small_problem()
    model, status = fit_surrogate(cands.features[:2], prior[:2] + 0.1, cands.features, prior,
                                  0.02)
    assert not status.converged and "fit failed" in status.message
    result = search_configuration(cands, prior, runner, max_trials=4, min_trials=4, seed=0)
    assert len(result.trials) == 4 and len(result.fit_problems) == 3

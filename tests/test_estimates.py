"""The estimation stage's contracts: the Estimates bundle and the Posterior adapters, which answer
as the objects they wrap do."""

from __future__ import annotations

import numpy as np
import pytest

from bayes_sched.cells import Cell, CellObservation
from bayes_sched.colocation import SlowdownPosterior
from bayes_sched.estimates import NO_ESTIMATES, DrawsPosterior, Estimate, Estimates, Need
from bayes_sched.estimation.cell_learners import OracleLearner, PerCellLearner
from bayes_sched.estimation.posteriors import JOB_GOODPUT, THROUGHPUT
from bayes_sched.estimation.remaining_work import DirichletRegimePredictor, NoiseScaleRegimePredictor
from bayes_sched.interference.pairs import PairResiduals
from bayes_sched.jobs import BatchLimits, GoodputPosterior, GradientStats, JobModel
from bayes_sched.remaining_work import RegimeProfile, RemainingWorkPosterior
from bayes_sched.throughput_estimates import CellPosterior
from bayes_sched.throughputs import load_gavel_throughputs
from perfmodel.throughput import ThroughputParams


def test_the_bundle_is_keyed_by_need_names_its_estimators_and_is_read_only() -> None:
    belief = OracleLearner(load_gavel_throughputs()).fit([])
    bundle = Estimates([Estimate(THROUGHPUT, "oracle", belief)])
    assert bundle.get(THROUGHPUT) is belief and bundle.require(THROUGHPUT) is belief
    assert bundle.get(JOB_GOODPUT) is None and JOB_GOODPUT not in bundle
    assert bundle.sources() == {"throughput": "oracle"}
    assert bundle.estimator_of("throughput") == "oracle" and list(bundle) == ["throughput"]
    with pytest.raises(KeyError, match="job_goodput"):
        bundle.require(JOB_GOODPUT)
    with pytest.raises(AttributeError, match="read-only"):
        bundle._entries = {}
    with pytest.raises(ValueError, match="published twice"):
        Estimates([Estimate(THROUGHPUT, "oracle", belief), Estimate(THROUGHPUT, "bayes", belief)])
    with pytest.raises(ValueError, match="expected one of"):
        Need("throughputs")
    assert len(NO_ESTIMATES) == 0


def test_a_cell_posterior_answers_as_its_belief() -> None:
    cells = [Cell("A3C", 1, "v100"), Cell("A3C", 1, "k80")]
    reports = [CellObservation(cells[0], 2.0, 360.0), CellObservation(cells[0], 2.2, 360.0)]
    belief = PerCellLearner().fit(reports)
    posterior = CellPosterior(belief, cells)
    assert posterior.shape == (2,)
    np.testing.assert_array_equal(posterior.mean(), belief.predict(cells).mean)
    draws = posterior.draws(32, seed=4)
    assert draws.shape == (32, 2)
    np.testing.assert_array_equal(draws, belief.predict(cells, 32, 4).draws)
    np.testing.assert_array_equal(draws, posterior.draws(32, seed=4))
    low, high = posterior.quantile(0.1), posterior.quantile(0.9)
    assert np.all(low < high)
    # The measured cell is surer than the unmeasured one (its interval is narrower in log).
    assert np.log(high[0] / low[0]) < np.log(high[1] / low[1])
    # A point belief: quantiles are its value, draws repeat it.
    point = CellPosterior(OracleLearner(load_gavel_throughputs()).fit([]), cells)
    np.testing.assert_array_equal(point.quantile(0.05), point.mean())
    np.testing.assert_array_equal(point.draws(3), np.repeat(point.mean()[None], 3, axis=0))


def _model(draws: np.ndarray | None) -> JobModel:
    params = ThroughputParams(0.05, 0.002, 0.1, 0.001, 0.05, 0.0005, 1.5)
    return JobModel("v100", 1, params, GradientStats(1.0, 400.0),
                    BatchLimits(128, 4096, 32, 256), draws)


def test_a_goodput_posterior_answers_as_its_job_model() -> None:
    nodes, replicas = np.array([1, 1, 2]), np.array([1, 4, 8])
    rng = np.random.default_rng(0)
    theta = _model(None).params.as_array()
    draws = theta * np.exp(rng.normal(0.0, 0.1, size=(40, 7)))
    model = _model(draws)
    posterior = GoodputPosterior(model, nodes, replicas)
    assert posterior.shape == (3,)
    np.testing.assert_array_equal(posterior.mean(), model.goodput(nodes, replicas))
    np.testing.assert_array_equal(posterior.quantile(0.2), model.goodput(nodes, replicas, 0.2))
    sampled = posterior.draws(40, seed=0)
    assert sampled.shape == (40, 3) and np.all(sampled > 0)
    assert np.all(sampled.std(axis=0) > 0)  # the draws differ: they are the posterior's
    point = GoodputPosterior(_model(None), nodes, replicas)
    np.testing.assert_allclose(point.draws(2), np.repeat(point.mean()[None], 2, axis=0))


def test_a_slowdown_posterior_sums_the_composition() -> None:
    pairs = PairResiduals(seed=0, draws=50)
    names = ["cifar10", "yolov3", "cifar10", "yolov3"]
    rng = np.random.default_rng(1)
    for _ in range(10):
        allocation = np.array([[1, 0], [1, 0], [0, 1], [0, 1]])
        pairs.observe(allocation, names, [0, 1, 2, 3], list(np.log(0.7) + rng.normal(0, 0.02, 4)))
    pairs.fit()
    states = np.array([[[1, 0], [1, 0], [0, 1], [0, 1]], [[1, 0], [0, 1], [1, 0], [0, 1]]])
    apps = tuple(names)
    posterior = SlowdownPosterior([pairs, pairs], states, apps)
    assert posterior.shape == (2, 4)
    np.testing.assert_allclose(posterior.mean(), 2 * pairs.log_slowdown(states, apps))
    assert posterior.draws(50).shape == (50, 2, 4)
    assert np.all(posterior.mean()[0] < np.log(0.8))  # the pairs learned harmful
    assert np.all(posterior.quantile(0.05) <= posterior.quantile(0.95))


def test_a_remaining_work_posterior_answers_as_its_predictor() -> None:
    profile = RegimeProfile((32, 32, 64, 64, 128, 128), (10.0, 10.0, 6.0, 6.0, 4.0, 4.0))
    dirichlet = RemainingWorkPosterior(DirichletRegimePredictor(), profile, 2)
    seconds = DirichletRegimePredictor().remaining_seconds(profile, 2)
    assert dirichlet.shape == () and float(dirichlet.mean()) == seconds
    assert float(dirichlet.quantile(0.9)) == seconds
    np.testing.assert_array_equal(dirichlet.draws(3), np.full(3, seconds))
    predictor = NoiseScaleRegimePredictor(num_draws=64, seed=0)
    gns = RemainingWorkPosterior(predictor, profile, 3)
    assert float(gns.quantile(0.9)) == predictor.quantile_seconds(profile, 3, 0.9)
    assert gns.draws(64).shape == (64,)
    fixed = DrawsPosterior(np.arange(10.0)[:, None])
    assert fixed.shape == (1,) and float(fixed.mean()[0]) == 4.5
    assert float(fixed.quantile(0.5)[0]) == 4.5

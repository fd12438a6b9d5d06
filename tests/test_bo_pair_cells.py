"""bo's co-location costs from the estimation module's throughput learner (paired cells of job
classes), and the cluster's time origin reaching its contention model."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
import xarray as xr

from bayes_sched.cells import Cell
from bayes_sched.cluster import ClusterState
from bayes_sched.colocation import ColocationRound
from bayes_sched.estimation import JobModelEstimator
from bayes_sched.estimation.pair_cells import (
    NODE_SHARING,
    NODE_SHARING_PRIORS,
    PairPrior,
    class_cell,
    log_slowdown_table,
)
from bayes_sched.estimation.throughput.bayesian import BayesianThroughputLearner
from bayes_sched.estimation.throughput_cells import CellPrediction
from bayes_sched.interference.colocation import ColocationLearning
from bayes_sched.interference.contention_prior import ContentionPrior
from bayes_sched.interference.pairs import ROUND_SECONDS, PairResiduals
from bayes_sched.sim.laws import RunningJob
from bayes_sched.sim.laws.contention import ARTIFACT_NODE, ContentionLaw, job_demands
from tests.agents import job_view, measured_agent


def test_reports_are_alone_and_paired_cells_of_job_classes() -> None:
    """A job sharing no node reports its class alone; one beside one co-runner reports that
    pair; one beside two co-runners reports each pair with the residual less the other's current
    mean (0 before any fit) over half the round's seconds."""
    pairs = PairResiduals(seed=0)
    names = ["cifar10", "bert", "yolov3", "bert", "cifar10"]
    allocation = np.array([[1, 0, 0],    # cifar10 alone
                           [0, 1, 0],    # bert beside yolov3
                           [0, 1, 1],    # yolov3, distributed: bert on node 1, bert+cifar on 2
                           [0, 0, 1],    # bert beside yolov3 (distributed) and cifar10
                           [0, 0, 1]])
    added = pairs.observe(allocation, names, [0, 1, 3], [-0.01, -0.2, -0.3], seconds=60.0)
    assert added == 4
    reports = {o.cell: o for o in pairs.reports.observations()}
    assert reports[Cell("cifar10", 1, NODE_SHARING)].steps_per_second == pytest.approx(
        np.exp(-0.01))
    # bert on node 1 beside distributed yolov3 (60 s at -0.2) and bert on node 2 beside it and
    # cifar10 (30 s at -0.3 each): one cell, pooled.
    beside_yolo = reports[Cell("bert", 1, NODE_SHARING, "yolov3 across nodes")]
    assert beside_yolo.seconds == pytest.approx(90.0)
    assert beside_yolo.steps_per_second == pytest.approx(np.exp((60 * -0.2 + 30 * -0.3) / 90))
    beside_cifar = reports[Cell("bert", 1, NODE_SHARING, "cifar10")]
    assert beside_cifar.seconds == pytest.approx(30.0)
    assert beside_cifar.steps_per_second == pytest.approx(np.exp(-0.3))
    # Forgetting: the next round scales every earlier report's seconds.
    pairs.observe(allocation, names, [], [], seconds=60.0)
    assert {o.cell: o.seconds for o in pairs.reports.observations()}[
        Cell("cifar10", 1, NODE_SHARING)] == pytest.approx(60.0 * pairs.forget)


def test_the_pair_table_is_the_throughput_learners_belief() -> None:
    """One machinery: the table bo searches with is the belief of the estimation module's
    learner fitted to bo's reports -- its mean the paired cell's posterior mean of log steps/s
    less the alone cell's, its draws joint posterior draws around it -- and harmful pairs learned
    from noisy rounds come out harmful."""
    rng = np.random.default_rng(3)
    pairs = PairResiduals(seed=0, draws=200)
    names = ["cifar10", "yolov3", "bert", "cifar10", "yolov3", "bert"]
    harm = {frozenset(("cifar10", "yolov3")): np.log(0.7)}
    for _ in range(40):
        allocation = rng.integers(0, 3, size=(6, 4)) * (rng.random((6, 4)) < 0.3)
        used = allocation > 0
        residuals = []
        for j in range(6):
            worst = 0.0
            for n in np.flatnonzero(used[j]):
                worst = min(worst, sum(harm.get(frozenset((names[j], names[k])), 0.0)
                                       for k in np.flatnonzero(used[:, n]) if k != j))
            residuals.append(worst + rng.normal(0.0, 0.05))
        pairs.observe(allocation, names, list(range(6)), residuals)
    pairs.fit()
    learner = BayesianThroughputLearner(measurement_noise=pairs.noise,
                                        reference_seconds=ROUND_SECONDS,
                                        log_variances=PairPrior().log_variances(),
                                        max_iterations=0, fixed_priors=NODE_SHARING_PRIORS)
    belief = learner.fit(pairs.reports.observations())
    apps = pairs.applications
    classes = pairs.num_classes
    alone = [class_cell(apps, k) for k in range(classes)]
    paired = [class_cell(apps, k, m) for k in range(classes) for m in range(classes)]
    log_mean = belief.log_moments(alone + paired)[0]
    expected = log_mean[classes:].reshape(classes, classes) - log_mean[:classes, None]
    np.testing.assert_allclose(pairs.mean, expected, atol=1e-9)
    assert pairs.draws.shape == (200, classes, classes)
    assert np.all(np.abs(pairs.draws.mean(axis=0) - pairs.mean) < 4 * pairs.std / np.sqrt(200)
                  + 1e-9)
    cifar, yolo, bert = (2 * apps.index(a) for a in ("cifar10", "yolov3", "bert"))
    assert pairs.mean[cifar, yolo] < np.log(0.8) and pairs.mean[yolo, cifar] < np.log(0.8)
    assert abs(pairs.mean[cifar, bert]) < 0.08 and abs(pairs.mean[bert, yolo]) < 0.08
    assert pairs.observed()[cifar, yolo] and pairs.observed_pairs() >= 6
    # A point belief (the draws are its mean) gives the same table from either path.
    point_mean, point_draws = log_slowdown_table(_PointBelief(), ["a", "b"], 4, 0)
    np.testing.assert_allclose(point_draws[0], point_mean)
    assert point_mean[0, 2] == pytest.approx(np.log(0.5))


class _PointBelief:
    """A known table: class 0 ("a" on one node) runs at half speed beside "b"."""

    def predict(self, cells: Sequence[Cell], num_draws: int = 0, seed: int = 0
                ) -> CellPrediction:
        mean = np.array([0.5 if (c.job_type, c.scale_factor, c.partner) == ("a", 1, "b")
                         else 1.0 for c in cells])
        return CellPrediction(mean, mean[None])


def _contention_rounds(origin: float) -> tuple[list[ColocationRound], xr.Dataset]:
    """Four rounds of distributed BERT beside CIFAR-10 under the contention law, and their
    counters with the time axis shifted by ``origin`` seconds (a wall-clock axis)."""
    law = ContentionLaw(demand_spread=0.0, seed=3)
    rng = np.random.default_rng(0)
    layouts = [[[2, 2, 0, 0], [0, 0, 1, 0]], [[0, 2, 2, 0], [1, 0, 0, 0]],
               [[0, 0, 2, 2], [1, 0, 0, 0]], [[2, 0, 0, 2], [0, 1, 0, 0]]]
    windows, rounds = [], []
    for r, (bert, cifar) in enumerate(layouts):
        law.slowdowns({"b": RunningJob("bert", np.array(bert), 4),
                       "c": RunningJob("cifar10", np.array(cifar), 128)})
        windows.append(law.counters(60.0 * r, 60.0, 4, rng))
        rounds.append(ColocationRound(60.0 * r, 60.0 * (r + 1), ("b", "c"), ("bert", "cifar10"),
                                      np.array([bert, cifar]), time_origin=origin))
    counters = xr.concat(windows, dim="time")
    shifted = counters.assign_coords(
        time=counters["time"].values + np.timedelta64(int(origin), "s"))
    return [ColocationRound(**{**vars(r), "counters": shifted, "topology": ARTIFACT_NODE})
            for r in rounds], shifted


def test_the_contention_prior_reads_counters_on_the_clusters_time_origin() -> None:
    """A real cluster's counters carry wall-clock times: with the cluster's time origin the
    rounds find their counters and the demands are learned as on the simulator's axis; read on
    the cluster's own clock (origin 0) no round matches and nothing is learned."""
    epoch = 1_700_000_000.0
    rounds, _ = _contention_rounds(epoch)
    learned = {}
    for told in (epoch, 0.0):
        prior = ContentionPrior(ARTIFACT_NODE, [], every=4, svi_steps=10)
        for observation in rounds:
            prior.learn(ColocationRound(**{**vars(observation), "time_origin": told}))
        assert prior.fits == 1 and prior.problems == []
        learned[told] = prior.demand if prior.known else None
    demand = learned[epoch]
    assert demand is not None
    bert, distributed, nic = 0, 1, 0
    truth = job_demands("bert", (2, 2), 4, ARTIFACT_NODE)[2]
    assert abs(demand[bert, distributed, nic] - truth) / truth < 0.5
    assert learned[0.0] is None


class _Recorder:
    name = "recorder"

    def __init__(self) -> None:
        self.rounds: list[ColocationRound] = []

    def learn(self, observation: ColocationRound) -> None:
        self.rounds.append(observation)

    def log_slowdown(self, states: np.ndarray, applications: object,
                     draws: bool = False) -> np.ndarray:
        return np.zeros(states.shape[:2])

    def diagnostics(self, allocation: np.ndarray, applications: object) -> dict[str, float]:
        return {}


def test_bo_passes_the_clusters_time_origin_to_its_contention_model() -> None:
    recorder = _Recorder()
    learning = ColocationLearning([recorder])
    cluster = ClusterState(2, 4, 600.0, time_origin=1_700_000_000.0)
    agent = measured_agent("a")
    agent.refresh(0.0)
    views = JobModelEstimator().estimate(cluster, [job_view(agent, "cifar10", 600.0, [1, 0])])
    learning.estimate(cluster, views)
    assert recorder.rounds[-1].time_origin == 1_700_000_000.0


def test_hyperparameter_fits_run_every_hyper_every_rounds() -> None:
    """With ``hyper_every=2`` the learner's variances move from the prior's scales on the second
    fit only (the first conditions on the reports)."""
    rng = np.random.default_rng(0)
    pairs = PairResiduals(seed=0, hyper_every=2)
    names = ["cifar10", "yolov3", "bert", "cifar10"]
    for _ in range(15):
        allocation = rng.integers(0, 2, size=(4, 3)) * (rng.random((4, 3)) < 0.5)
        pairs.observe(allocation, names, [0, 1, 2, 3], list(rng.normal(-0.1, 0.1, 4)))
    start = PairPrior().log_variances()
    pairs.fit()
    np.testing.assert_array_equal(pairs.learner.log_variances, start)
    pairs.fit()
    assert pairs.fallback_reason is None
    assert not np.allclose(pairs.learner.log_variances, start)

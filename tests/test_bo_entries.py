"""bo on states by their nonzero entries: co-location features, predictors and predicted rates
read from entries give what the dense states give, and bo's search never builds a dense
population."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from bayes_sched.cluster import ClusterState, validate_allocations
from bayes_sched.colocation import (
    allocation_entries,
    colocation_features,
    entry_features,
    predicted_rate,
    predicted_rates,
    speed_factor,
)
from bayes_sched.errors import AllocationError
from bayes_sched.estimation import JobModelEstimator
from bayes_sched.interference.pairs import PairResiduals
from bayes_sched.mechanisms.genetic_allocation.sparse import SparseStates
from bayes_sched.policies import BayesOptPolicy
from bayes_sched.policies.bo import _allocations_of, _oversubscribed
from bayes_sched.policies.pollux import GAConfig
from tests.agents import decide, job_view, measured_agent

SMALL_GA = GAConfig(population=12, generations=6, seed=0)


def _random_states(rng: np.random.Generator, shape: tuple[int, int, int]) -> np.ndarray:
    return ((rng.random(shape) < rng.random()) * rng.integers(1, 5, shape)).astype(np.int16)


def _brute_features(states: np.ndarray) -> np.ndarray:
    """The co-location flags, job by job and node by node."""
    size, num_jobs, num_nodes = states.shape
    out = np.zeros((size, num_jobs, 3))
    for p in range(size):
        used = states[p] > 0
        distributed = used.sum(axis=1) > 1
        for j in range(num_jobs):
            others = [k for n in np.flatnonzero(used[j]) for k in np.flatnonzero(used[:, n])
                      if k != j]
            out[p, j] = (distributed[j], any(distributed[k] for k in others), bool(others))
    return out


def test_features_from_entries_equal_the_flags_job_by_job() -> None:
    rng = np.random.default_rng(3)
    for _ in range(40):
        states = _random_states(rng, tuple(rng.integers(1, 6, 3)))
        expected = _brute_features(states)
        assert np.array_equal(colocation_features(states), expected)
        assert np.array_equal(colocation_features(SparseStates.of(states)), expected)
        first = states[0]
        assert np.array_equal(entry_features(allocation_entries(list(first)),
                                             (1, *first.shape)), expected[:1])


class _DenseOnly:
    """A predictor that reads dense states only (no ``takes_entries``): sharing a node costs
    every job a fifth."""

    name = "dense only"

    def log_slowdown(self, states: np.ndarray, applications: Sequence[str],
                     draws: bool = False) -> np.ndarray:
        assert isinstance(states, np.ndarray)
        used = states > 0
        return np.where(np.any(used & (used.sum(axis=1, keepdims=True) > 1), axis=2),
                        np.log(0.8), 0.0)


def test_speed_factor_of_entries_equals_the_dense_one() -> None:
    """The pair table reads entries; a predictor that does not is given the dense states."""
    rng = np.random.default_rng(5)
    pairs = PairResiduals(seed=0)
    apps = ("a", "b", "c", "a", "b", "c", "a")
    classes = 2 * len(set(apps))
    pairs.application_index(list(apps))
    pairs.mean = -rng.random((classes, classes)) * 0.3
    pairs.draws = -rng.random((9, classes, classes)) * 0.3
    states = _random_states(rng, (6, 7, 5))
    predictors = [_DenseOnly(), pairs]
    for draws in (False, True):
        dense = speed_factor(predictors, states, apps, draws)  # type: ignore[arg-type]
        sparse = speed_factor(predictors, SparseStates.of(states), apps,  # type: ignore[arg-type]
                              draws)
        assert np.shape(sparse) == ((9, 6, 7) if draws else (6, 7))
        np.testing.assert_allclose(sparse, dense, rtol=1e-12)


def test_predicted_rates_equal_each_jobs_own() -> None:
    cluster = ClusterState(4, 4, 600.0)
    apps = ("cifar10", "bert", "yolov3", "cifar10")
    views = [job_view(measured_agent(f"j{i}", app), app, cluster.now, [0, 0, 0, 0])
             for i, app in enumerate(apps)]
    views = JobModelEstimator().estimate(cluster, views)
    allocations = [np.array(a) for a in ([1, 0, 0, 0], [2, 2, 0, 0], [0, 0, 0, 0], [4, 4, 4, 0])]
    rates = predicted_rates(views, allocations)
    assert rates == [predicted_rate(v, a) for v, a in zip(views, allocations, strict=True)]
    assert rates[2] is None and all(r is not None and r > 0 for r in rates[:2] + rates[3:])


def _round(policy: BayesOptPolicy, cluster: ClusterState, allocations: dict[str, list[int]]
           ) -> dict[str, np.ndarray]:
    apps = ("cifar10", "bert", "yolov3", "cifar10", "bert", "ncf")
    views = [job_view(measured_agent(f"j{i}", app), app, cluster.now, allocations[f"j{i}"],
                      attained=10.0 * i) for i, app in enumerate(apps)]
    return decide(policy, cluster, views)


def test_bo_searches_without_a_dense_population(monkeypatch: pytest.MonkeyPatch) -> None:
    """No state is made dense but the chosen one (one row), and that only for a predictor that
    does not read entries (these all do); the decision fits the cluster and one seed gives one
    decision."""
    cluster = ClusterState(4, 4, 600.0)
    empty = {f"j{i}": [0, 0, 0, 0] for i in range(6)}
    made_dense: list[int] = []
    original = SparseStates.dense

    def counted(self: SparseStates) -> np.ndarray:
        made_dense.append(len(self))
        return original(self)

    monkeypatch.setattr(SparseStates, "dense", counted)
    first = _round(BayesOptPolicy(ga=SMALL_GA), cluster, empty)
    assert made_dense == []
    used = np.sum(list(first.values()), axis=0)
    assert np.all(used <= 4) and used.sum() > 0
    again = _round(BayesOptPolicy(ga=SMALL_GA), cluster, empty)
    assert first.keys() == again.keys()
    assert all(np.array_equal(first[name], again[name]) for name in first)


def test_the_decision_and_its_capacity_check_read_the_chosen_entries() -> None:
    """The decision made from one state's entries is its dense rows of the jobs holding GPUs
    (int64, in job order), and the capacity check finds the first oversubscribed node as
    ``validate_allocations`` would."""
    cluster = ClusterState(4, 4, 0.0)
    names = [f"j{i}" for i in range(5)]
    fits = np.zeros((1, 5, 4), np.int16)
    fits[0, 1] = [2, 0, 0, 4]
    fits[0, 3] = [2, 1, 0, 0]
    state = SparseStates.of(fits)
    decision = _allocations_of(state, names)
    assert list(decision) == ["j1", "j3"]
    assert all(row.dtype == np.int64 for row in decision.values())
    assert np.array_equal(decision["j1"], [2, 0, 0, 4])
    assert np.array_equal(decision["j3"], [2, 1, 0, 0])
    assert _oversubscribed(state, cluster) is None
    validate_allocations(decision, cluster, names)
    over = fits.copy()
    over[0, 4] = [0, 2, 0, 1]                                          # node 3: 4 + 1 GPUs
    over[0, 0] = [0, 0, 3, 0]
    assert _oversubscribed(SparseStates.of(over), cluster) == 3
    with pytest.raises(AllocationError, match="node 3"):
        validate_allocations(_allocations_of(SparseStates.of(over), names), cluster, names)

"""bo's compiled search: its scores from the states' nonzero entries equal the numpy path's
objective (the pair table's mean and draws, and Pollux's objective alone), it applies only where
the predictors are one pair table, and the compiled search returns feasible states best first."""

from __future__ import annotations

import numpy as np
import pytest

from bayes_sched.cluster import ClusterState
from bayes_sched.interference.contention_prior import ContentionPrior
from bayes_sched.interference.pairs import PairResiduals
from bayes_sched.mechanisms.genetic_allocation.search import GAConfig, GeneticSearch
from bayes_sched.mechanisms.genetic_allocation.sparse import SparseStates
from bayes_sched.policies.bo import _NO_PAIRS, _ColocationProblem, evolve_elitist, pair_table

NODES, GPUS, JOBS = 6, 4, 9
APPS = ("a", "b", "c", "a", "b", "c", "a", "b", "c")


def _problem(rng: np.random.Generator, predictors: list[object],
             compiled: bool = True) -> _ColocationProblem:
    cluster = ClusterState(NODES, GPUS, 600.0)
    base = np.zeros((JOBS, NODES), np.int16)
    base[0, 0], base[1, 1:3], base[4, 5] = 2, 1, 4
    tables = np.sort(rng.random((JOBS, NODES + 1, NODES * GPUS + 1)), axis=2)
    tables[:, 0, :] = 0.0
    problem = _ColocationProblem(base, tables, np.full(JOBS, 2 * GPUS), rng.random(JOBS),
                                 cluster, -1.0, 3, np.random.default_rng(1),
                                 predictors, APPS)  # type: ignore[arg-type]
    problem.compiled = compiled
    return problem


def _pairs(rng: np.random.Generator) -> PairResiduals:
    pairs = PairResiduals(draws=5, seed=0)
    pairs.application_index(list(APPS))
    pairs.mean = -rng.random((6, 6)) * 0.4
    pairs.draws = -rng.random((5, 6, 6)) * 0.4
    return pairs


def _states(rng: np.random.Generator) -> SparseStates:
    dense = ((rng.random((7, JOBS, NODES)) < 0.25)
             * rng.integers(1, GPUS + 1, (7, JOBS, NODES))).astype(np.int16)
    dense[0] = 0                                                       # a state with no GPUs
    return SparseStates.of(dense)


def test_compiled_scores_equal_the_numpy_objective() -> None:
    rng = np.random.default_rng(0)
    pairs = _pairs(rng)
    predictors = [ContentionPrior(), pairs]
    compiled, numpy_path = _problem(rng, predictors), _problem(np.random.default_rng(0),
                                                               predictors, compiled=False)
    numpy_path.tables = compiled.tables
    numpy_path.penalty = compiled.penalty
    states = _states(rng)
    assert compiled.pair_table() is not None and numpy_path.pair_table() is None
    for kwargs in ({}, {"draws": True}, {"models_only": True}):
        fast = compiled.fitness(states, **kwargs)
        slow = numpy_path.fitness(states, **kwargs)
        assert fast.shape == slow.shape
        np.testing.assert_allclose(fast, slow, rtol=1e-12)
    # The co-location factor matters here: the objective with it differs from the one without.
    assert not np.allclose(compiled.fitness(states), compiled.fitness(states, models_only=True))


def test_only_one_pair_table_is_compiled() -> None:
    rng = np.random.default_rng(2)
    pairs = _pairs(rng)
    assert pair_table([ContentionPrior(), pairs], APPS)[1].shape == (6, 6)
    assert pair_table([ContentionPrior()], APPS) is _NO_PAIRS
    assert pair_table([pairs, _pairs(rng)], APPS) is None          # classes need not agree
    known = ContentionPrior()
    known.known = True
    assert pair_table([known, pairs], APPS) is None                 # shared capacity
    assert pair_table([object(), pairs], APPS) is None              # says nothing: numpy path


@pytest.mark.parametrize("avoid", [False, True])
def test_compiled_search_is_feasible_best_first_and_seeded(avoid: bool) -> None:
    rng = np.random.default_rng(3)
    pairs = _pairs(rng)
    results = []
    for _ in range(2):
        problem = _problem(np.random.default_rng(3), [pairs])
        problem.avoid_interference = avoid
        search = GeneticSearch(GAConfig(population=10, generations=6, seed=4, search="elitist"))
        names = [f"j{i}" for i in range(JOBS)]
        population, fitness = evolve_elitist(search, problem, names, problem.fitness,
                                             problem.pair_table())
        results.append((population.dense(), fitness))
        dense = population.dense()
        assert np.all(dense.sum(axis=1) <= GPUS)                         # node capacity
        assert np.all((dense > 0).sum(axis=2) <= problem.max_nodes)
        if avoid:
            distributed = (dense > 0).sum(axis=2) > 1                    # (P, J)
            assert np.all(((dense > 0) & distributed[:, :, None]).sum(axis=1) <= 1)
        assert np.all(np.diff(fitness) <= 0)
        problem.avoid_interference = False
        np.testing.assert_allclose(fitness, problem.fitness(population), rtol=1e-12)
        assert search._population is population
    assert np.array_equal(results[0][0], results[1][0])
    assert np.array_equal(results[0][1], results[1][1])

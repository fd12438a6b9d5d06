"""The NSGA-II search run whole as one compiled kernel
(bayes_sched.mechanisms.genetic_allocation.generations) and the compiled generator it draws from:
repeats found as the byte keys find them, a final population that is feasible, distinct and scored
as the numpy formulas score it, one result per seed, and draws from the stated distributions."""

from __future__ import annotations

import numpy as np

from bayes_sched.cluster import ClusterState
from bayes_sched.mechanisms.genetic_allocation import generations, kernels
from bayes_sched.mechanisms.genetic_allocation.search import (
    AllocationProblem,
    GAConfig,
    GeneticSearch,
)
from bayes_sched.mechanisms.genetic_allocation.sparse import (
    SparseStates,
    _first_occurrences,
    _row_keys,
)
from tests.test_search_scale import _dense_problem, _sparse_states


def test_first_occurrences_equal_the_byte_keys() -> None:
    rng = np.random.default_rng(3)
    for trial in range(20):
        shape = (30 + trial, 2 + trial % 5, 3 + trial % 4)
        states = _sparse_states(rng, shape, np.int16, 0.1 + 0.02 * trial)
        # Many repeats: copies of a few states, the empty state among them.
        states[rng.integers(shape[0], size=shape[0] // 2)] = states[rng.integers(3, size=1)]
        states[-1] = 0
        states[-2] = 0
        sparse = SparseStates.of(states)
        p, j, n, v = (np.asarray(a, np.int64) for a in sparse.entries)
        bounds = np.searchsorted(p, np.arange(shape[0] + 1))
        first = generations.first_occurrences(j, n, v, bounds, shape[2])
        assert np.array_equal(np.flatnonzero(first), _first_occurrences(_row_keys(states)))


def _problem(avoid: bool) -> AllocationProblem:
    """12 jobs on 6 nodes of 4 GPUs, random tables, and a feasible status quo."""
    rough = _dense_problem(np.random.default_rng(17), 12, 6, avoid=avoid)
    return AllocationProblem(rough.repair(rough.base[None])[0], rough.tables, rough.max_replicas,
                             rough.penalty, ClusterState(6, 4, 0.0), -1.0, avoid, 3,
                             np.random.default_rng(0))


def _search(seed: int, avoid: bool, rounds: int = 2) -> list[tuple[np.ndarray, np.ndarray]]:
    problem = _problem(avoid)
    search = GeneticSearch(GAConfig(population=20, generations=12, seed=seed))
    problem.rng = search.rng
    assert problem.fused
    names = [f"job-{i}" for i in range(12)]
    return [search.evolve(problem, names) for _ in range(rounds)]  # warm start included


def test_the_fused_search_is_feasible_distinct_and_scored_as_numpy_scores() -> None:
    for avoid in (True, False):
        problem = _problem(avoid)
        for population, fitness in _search(1, avoid):
            assert population.shape[0] == fitness.size <= 20
            assert np.all(population.sum(axis=1) <= problem.capacity)
            assert np.all(population.sum(axis=2) <= problem.max_replicas)
            assert np.all(np.count_nonzero(population, axis=2) <= problem.max_nodes)
            if avoid:
                distributed = np.count_nonzero(population, axis=2) > 1
                assert np.all(((population > 0) & distributed[:, :, None]).sum(axis=1) <= 1)
            # Repair leaves a feasible state as it is, so these are what repair gives.
            assert np.array_equal(problem.repair(population), population)
            assert len({state.tobytes() for state in population}) == len(population)
            expected_fitness, expected_utility = problem.objectives(population)
            np.testing.assert_allclose(fitness, expected_fitness, rtol=1e-12)
            # The status quo is the first initial state, and the fittest state always survives.
            assert fitness.max() >= problem.objectives(problem.base[None])[0][0] - 1e-12


def test_the_fused_search_is_the_same_twice_for_one_seed_and_differs_by_seed() -> None:
    first, again, other = _search(4, True), _search(4, True), _search(5, True)
    for (a, a_fit), (b, b_fit) in zip(first, again, strict=True):
        assert np.array_equal(a, b) and np.array_equal(a_fit, b_fit)
    assert any(a.shape != c.shape or not np.array_equal(a, c)
               for (a, _), (c, _) in zip(first, other, strict=True))


def test_the_fused_search_grows_allocations_from_an_empty_cluster() -> None:
    # No job holds GPUs, so the population starts as one state without entries; growth onto the
    # free nodes must still give feasible allocations, and better ones than none.
    rough = _problem(avoid=True)
    problem = AllocationProblem(np.zeros_like(rough.base), rough.tables, rough.max_replicas,
                                rough.penalty, ClusterState(6, 4, 0.0), -1.0, True, 3,
                                np.random.default_rng(0))
    search = GeneticSearch(GAConfig(population=10, generations=6, seed=0))
    problem.rng = search.rng
    population, fitness = search.evolve(problem, [f"job-{i}" for i in range(12)])
    assert population.any()
    assert np.array_equal(problem.repair(population), population)
    assert fitness.max() > problem.objectives(problem.base[None])[0][0]


def test_join_counts_are_binomial() -> None:
    from scipy.stats import binom

    for jobs in (1, 2, 7, 160, 4000):
        cdf = kernels.join_cdf(jobs)
        assert cdf[-1] == 1.0 and np.all(np.diff(cdf) >= 0)
        np.testing.assert_allclose(cdf[:-1], binom.cdf(np.arange(cdf.size - 1), jobs, 1 / jobs),
                                   rtol=1e-9, atol=1e-15)
        assert binom.sf(cdf.size - 1, jobs, 1 / jobs) < 1e-15
    assert np.array_equal(kernels.join_cdf(0), [1.0])


def test_the_numpy_path_still_runs_step_by_step() -> None:
    problem = _problem(avoid=True)
    problem.compiled = False
    assert not problem.fused
    search = GeneticSearch(GAConfig(population=20, generations=4, seed=2))
    problem.rng = search.rng
    population, fitness = search.evolve(problem, [f"job-{i}" for i in range(12)])
    np.testing.assert_allclose(fitness, problem.objectives(population)[0], rtol=1e-12)


def test_compiled_draws_follow_their_distributions() -> None:
    state = kernels.seeded_state(np.random.default_rng(0))
    draws = np.array([kernels.uniform(state) for _ in range(20_000)])
    assert draws.min() >= 0.0 and draws.max() < 1.0
    assert abs(draws.mean() - 0.5) < 0.01 and abs(draws.var() - 1 / 12) < 0.005
    counts = np.bincount([kernels.below(state, 5) for _ in range(20_000)], minlength=5)
    assert counts.size == 5 and np.all(np.abs(counts / 20_000 - 0.2) < 0.015)
    for prob in (0.02, 0.1, 0.5):
        gaps = np.array([kernels.gap(state, kernels.log_miss(prob)) for _ in range(20_000)])
        mean = (1 - prob) / prob   # failures before a success: geometric
        assert abs(gaps.mean() - mean) < 5 * np.sqrt((1 - prob) / prob**2 / gaps.size)
    assert kernels.gap(state, kernels.log_miss(0.0)) >= 2**62   # never
    assert kernels.gap(state, kernels.log_miss(1.0)) == 0       # always, at once

"""The compiled kernels of the allocation search (bayes_sched.mechanisms.genetic_allocation.kernels)
against the numpy path: repair and scoring equal to the bit, the mutation drawn from the same
distribution, and every compiled step the same twice for one seed."""

from __future__ import annotations

import numpy as np

from bayes_sched.cluster import ClusterState
from bayes_sched.mechanisms.genetic_allocation import kernels, nsga2
from bayes_sched.mechanisms.genetic_allocation.search import AllocationProblem, GAConfig, GeneticSearch
from bayes_sched.mechanisms.genetic_allocation.sparse import SparseStates, nonzero_entries
from tests.test_search_scale import _dense_problem, _sparse_states


def test_compiled_repair_and_scores_equal_the_numpy_ones() -> None:
    rng = np.random.default_rng(13)
    for trial in range(12):
        for avoid in (True, False):
            problem = _dense_problem(rng, 5 + 3 * trial, 4 + trial % 5, avoid=avoid)
            states = _sparse_states(rng, (25, 5 + 3 * trial, 4 + trial % 5), np.int16,
                                    0.1 + 0.05 * trial)
            drawn = problem.rng.bit_generator.state
            problem.compiled = False
            expected = problem.repair(states)
            expected_scores = problem.objectives(expected)
            problem.rng.bit_generator.state = drawn
            problem.compiled = True
            assert np.array_equal(problem.repair(states), expected)
            for mine, theirs in zip(problem.objectives(expected), expected_scores, strict=True):
                assert np.array_equal(mine, theirs)


def _mean_mutation(problem: AllocationProblem, state: np.ndarray, ga: GAConfig,
                   copies: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error of the GPU counts per (job, node) over ``copies`` mutations of
    ``state``."""
    mutated = problem._mutate_sparse(SparseStates.of(np.repeat(state[None], copies, axis=0)),
                                     ga).dense().astype(float)
    return mutated.mean(axis=0), mutated.std(axis=0) / np.sqrt(copies)


def test_compiled_mutation_draws_from_the_numpy_mutations_distribution() -> None:
    rng = np.random.default_rng(4)
    ga = GAConfig(reset_prob=0.3, zero_prob=0.5)
    for avoid in (True, False):
        problem = _dense_problem(rng, 6, 4, avoid=avoid)
        state = problem.repair(_sparse_states(rng, (1, 6, 4), np.int16, 0.4))[0]
        problem.compiled = False
        numpy_mean, numpy_error = _mean_mutation(problem, state, ga, 6000)
        problem.compiled = True
        compiled_mean, compiled_error = _mean_mutation(problem, state, ga, 6000)
        # 5 standard errors of the difference (plus a floor for cells that never change).
        bound = 5 * np.hypot(numpy_error, compiled_error) + 1e-9
        assert np.all(np.abs(compiled_mean - numpy_mean) <= bound), (compiled_mean, numpy_mean)


def test_compiled_mutation_keeps_full_nodes_and_resets_rows() -> None:
    # Every node full: no growth, so with no reset and no drop nothing changes, and with every row
    # reset to a full status quo every state is the status quo.
    cluster = ClusterState(3, 4, 0.0)
    base = np.array([[4, 0, 2], [0, 4, 2]], dtype=np.int16)
    states = np.array([[[2, 4, 0], [2, 0, 4]], [[4, 4, 4], [0, 0, 0]]], dtype=np.int16)
    problem = AllocationProblem(base, np.ones((2, 4, 13)), np.full(2, 12), np.ones(2), cluster,
                                -1.0, False, 3, np.random.default_rng(0))
    same = problem._mutate_sparse(SparseStates.of(states), GAConfig(reset_prob=0.0,
                                                                     zero_prob=0.0))
    assert np.array_equal(same.dense(), states)
    reset = problem._mutate_sparse(SparseStates.of(states), GAConfig(reset_prob=1.0,
                                                                      zero_prob=0.0))
    assert np.array_equal(reset.dense(), np.repeat(base[None], 2, axis=0))
    assert all(np.array_equal(a, b) for a, b in zip(reset.entries,
                                                     nonzero_entries(reset.dense()), strict=True))


def test_the_compiled_search_is_the_same_twice_for_one_seed() -> None:
    runs = []
    for _ in range(2):
        problem = _dense_problem(np.random.default_rng(2), 14, 8, avoid=True)
        search = GeneticSearch(GAConfig(population=16, generations=6, seed=5))
        problem.rng = search.rng
        names = [f"job-{i}" for i in range(14)]
        runs.append([search.evolve(problem, names) for _ in range(2)])  # warm start included
        assert np.all(runs[-1][-1][0] <= problem.capacity)
    for (first, first_fit), (second, second_fit) in zip(*runs, strict=True):
        assert np.array_equal(first, second) and np.array_equal(first_fit, second_fit)


def test_compiled_survival_equals_nsga2_survivors() -> None:
    rng = np.random.default_rng(6)
    for trial in range(40):
        size = 1 + trial * 3
        # Few distinct values: ties, repeated points and fronts of one or two candidates.
        first = rng.integers(0, 2 + trial % 7, size=size).astype(float) / 3
        second = rng.integers(0, 2 + trial % 5, size=size).astype(float) / 7
        if trial % 3 == 0:
            first, second = rng.random(size), rng.random(size)
        count = max(1, size // 2)
        kept, crowding = kernels.survivors(first, second, count)
        expected_kept, expected_crowding = nsga2.survivors(first, second, count)
        assert np.array_equal(kept, expected_kept)
        assert np.array_equal(crowding, expected_crowding)


def _reference_tournament(a: np.ndarray, b: np.ndarray, coin: np.ndarray, fitness: np.ndarray,
                          utility: np.ndarray, crowding: np.ndarray) -> np.ndarray:
    a_wins = (fitness[a] >= fitness[b]) & (utility[a] >= utility[b])
    b_wins = (fitness[b] >= fitness[a]) & (utility[b] >= utility[a])
    by_crowding = np.where(crowding[a] > crowding[b], a,
                           np.where(crowding[b] > crowding[a], b, np.where(coin < 0.5, a, b)))
    return np.where(a_wins & ~b_wins, a, np.where(b_wins & ~a_wins, b, by_crowding))


def test_compiled_mating_equals_tournaments_and_sparse_crossover() -> None:
    rng = np.random.default_rng(12)
    for trial in range(15):
        size, num_jobs = 4 + trial, 3 + trial % 6
        population = SparseStates.of(_sparse_states(rng, (size, num_jobs, 5), np.int16, 0.3))
        # Few distinct objective values: ties between the tournament rules.
        fitness, utility = rng.integers(0, 3, size=(2, size)).astype(float)
        crowding = rng.choice([0.0, 1.0, np.inf], size=size)
        half = 3 + trial
        draws, coins = rng.integers(size, size=(2, 2, half)), rng.random((2, half))
        point = rng.integers(num_jobs + 1, size=half)
        count = 2 * half - trial % 2
        p, j, n, v = (np.asarray(a, np.int64) for a in population.entries)
        children = kernels.mate(p, j, n, v, size, fitness, utility, crowding, draws, coins,
                                point, count)
        first, second = (_reference_tournament(draws[r, 0], draws[r, 1], coins[r], fitness,
                                               utility, crowding) for r in range(2))
        expected = population.crossover(np.concatenate([first, second]),
                                        np.concatenate([second, first]),
                                        np.concatenate([point, point])).rows(np.arange(count))
        assert all(np.array_equal(a, b) for a, b in zip(children, expected.entries, strict=True))

"""One NSGA-II generation of the allocation search on the dense population, whole-population numpy.

On the clusters most rounds see (tens of nodes, tens of jobs) a population of ``(P, J, N)`` GPU
counts is a few tens of thousands of small integers, and the search's cost is the number of numpy
calls per generation, not their size: the sparse form (:class:`~bayes_sched.search.allocation.
SparseStates`), which keeps large clusters cheap, needs several times more calls for its grouped
sums and merges. Here every operator is a handful of calls over the whole population: crossover a
``np.where`` over jobs, repair cumulative sums along the job and node axes, scoring reductions over
nodes. :class:`~bayes_sched.search.allocation.GeneticSearch` takes this path while the brood's
dense size stays under :data:`DENSE_ELEMENTS`.

The operators are the ones :mod:`bayes_sched.search.allocation` documents (the artifact's
mutation, the same repair rules, the same objectives, computed exactly alike); their random draws
are taken in another order than the sparse path's, so a seed gives another (equally distributed)
search.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from bayes_sched.search.allocation import AllocationProblem, GAConfig

#: Largest brood (``2 x population x jobs x nodes`` GPU counts) searched densely: above it the
#: sparse path's calls cost less than the dense arrays' size.
DENSE_ELEMENTS = 400_000


def tournament(rng: np.random.Generator, fitness: np.ndarray, utility: np.ndarray,
               crowding: np.ndarray, count: int) -> np.ndarray:
    """``count`` winners of the artifact's binary tournaments among ``len(fitness)`` candidates:
    by domination over ``(fitness, utility)``, then by crowding distance, then a coin."""
    a, b = rng.integers(fitness.size, size=(2, count))
    a_wins = (fitness[a] >= fitness[b]) & (utility[a] >= utility[b])
    b_wins = (fitness[b] >= fitness[a]) & (utility[b] >= utility[a])
    same = a_wins & b_wins
    a_dom, b_dom = a_wins & ~same, b_wins & ~same
    by_crowding = np.where(crowding[a] > crowding[b], a,
                           np.where(crowding[b] > crowding[a], b,
                                    np.where(rng.random(count) < 0.5, a, b)))
    return np.where(a_dom, a, np.where(b_dom, b, by_crowding))


def offspring(problem: AllocationProblem, population: np.ndarray, fitness: np.ndarray,
              utility: np.ndarray, crowding: np.ndarray, count: int, ga: GAConfig) -> np.ndarray:
    """``count`` children ``(count, J, N)`` of ``population`` ``(P, J, N)``: tournaments, one-point
    crossover over jobs (two complementary children per pair), the artifact's mutation, repair."""
    rng = problem.rng
    num_jobs = population.shape[1]
    half = (count + 1) // 2
    first = tournament(rng, fitness, utility, crowding, half)
    second = tournament(rng, fitness, utility, crowding, half)
    point = rng.integers(num_jobs, size=half)
    point = np.where(rng.random(half) < ga.crossover_prob, point, num_jobs)
    a, b = np.concatenate([first, second])[:count], np.concatenate([second, first])[:count]
    cut = np.concatenate([point, point])[:count]
    before = np.arange(num_jobs)[None, :, None] < cut[:, None, None]
    children = np.where(before, population[a], population[b])
    return repair(problem, mutate(problem, children, ga))


def mutate(problem: AllocationProblem, states: np.ndarray, ga: GAConfig) -> np.ndarray:
    """The artifact's mutation (:meth:`~bayes_sched.search.allocation.AllocationProblem.
    mutate_artifact`) of ``states`` ``(C, J, N)``, returned (``states`` may change too).

    Draws: two per job row, one per GPU-holding entry of a row being emptied, a binomial count of
    jobs per free node and a distinct job for each, one per entry of a job on a free node, and one
    count per grown entry (none per ``(row, node)``)."""
    from bayes_sched.search.allocation import _distinct_draws

    rng = problem.rng
    size, num_jobs, num_nodes = states.shape
    capacity = problem.capacity
    reset = rng.random((size, num_jobs)) < ga.reset_prob
    states = np.where(reset[:, :, None], problem.base[None], states)
    flat = states.reshape(-1)
    held = np.flatnonzero(flat)
    emptied = (rng.random((size, num_jobs)) < ga.zero_prob).reshape(-1)[held // num_nodes]
    drop = held[emptied][rng.random(int(emptied.sum())) < ga.zero_prob]
    flat[drop] = 0
    on = states > 0
    is_free = states.sum(axis=1) < capacity                                      # (C, N)
    # Any job onto a free node: a binomial count of distinct jobs per free node (a coin of one
    # over the number of jobs per (job, node), drawn at the cost of the hits only).
    free_c, free_n = np.nonzero(is_free)
    counts = rng.binomial(num_jobs, 1.0 / num_jobs, size=free_c.size)
    grow_j = _distinct_draws(np.repeat(np.arange(free_c.size), counts), num_jobs, rng)
    grown = np.zeros(states.shape, dtype=bool)
    grown[np.repeat(free_c, counts), grow_j, np.repeat(free_n, counts)] = True
    # A job already on a free node: one over the number of jobs on that node.
    own = np.flatnonzero(on & is_free[:, None, :])
    sharing = on.sum(axis=1).reshape(-1)                                         # (C * N,)
    node_of = (own // (num_jobs * num_nodes)) * num_nodes + own % num_nodes
    grown.reshape(-1)[own[rng.random(own.size) * sharing[node_of] < 1.0]] = True
    index = np.flatnonzero(grown)
    flat[index] = rng.integers(flat[index], capacity + 1)
    return states


def repair(problem: AllocationProblem, states: np.ndarray) -> np.ndarray:
    """``states`` ``(C, J, N)`` made feasible by the rules (and in the order) of
    :meth:`~bayes_sched.search.allocation.AllocationProblem.repair`; may change ``states``."""
    capacity = problem.capacity
    if problem.avoid_interference:
        # At most one distributed job per node: later (lower-priority) ones leave it (only the
        # nodes that two or more share are scanned).
        on = states > 0
        spread = on & (np.count_nonzero(states, axis=2) > 1)[:, :, None]
        shared_c, shared_n = np.nonzero(spread.sum(axis=1) > 1)
        if shared_c.size:
            column = spread[shared_c, :, shared_n]                               # (K, J)
            ranked = column & (np.cumsum(column, axis=1) > 1)
            states[shared_c[:, None], np.arange(states.shape[1]), shared_n[:, None]] *= ~ranked
    # Per job: at most max_replicas GPUs and max_nodes nodes, trimmed in a random node order.
    over_c, over_j = np.nonzero((states.sum(axis=2) > problem.max_replicas)
                                | (np.count_nonzero(states, axis=2) > problem.max_nodes))
    if over_c.size:
        rows = states[over_c, over_j].astype(np.int64)                           # (R, N)
        order = np.argsort(problem.rng.random(rows.shape), axis=1)
        values = np.take_along_axis(rows, order, axis=1)
        cap = problem.max_replicas[over_j][:, None]
        total = np.cumsum(values, axis=1)
        kept = np.minimum(total, cap) - np.minimum(total - values, cap)
        kept[np.cumsum(kept > 0, axis=1) > problem.max_nodes] = 0
        np.put_along_axis(rows, order, kept, axis=1)
        states[over_c, over_j] = rows
    # Node capacity, higher-priority jobs (lower index) first, on the nodes over it.
    full_c, full_n = np.nonzero(states.sum(axis=1) > capacity)
    if full_c.size:
        column = states[full_c, :, full_n].astype(np.int64)                     # (K, J)
        total = np.cumsum(column, axis=1)
        states[full_c[:, None], np.arange(states.shape[1]), full_n[:, None]] = (
            np.minimum(total, capacity) - np.minimum(total - column, capacity))
    return states


def objectives(problem: AllocationProblem, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fitness and cluster utility of ``states`` ``(C, J, N)``, each ``(C,)``, as
    :meth:`~bayes_sched.search.allocation.AllocationProblem.objectives` scores them."""
    from bayes_sched.search.allocation import AllocationProblem, power_mean

    if type(problem).fitness is not AllocationProblem.fitness:  # a subclass's own fitness
        return problem.fitness(states), problem.utility(states)
    nodes = np.count_nonzero(states, axis=2)
    replicas = states.sum(axis=2, dtype=np.int64)
    table = problem.tables[problem.job_index, nodes, replicas]                   # (C, J)
    speedup = table * problem.scale
    changed = (states != problem.base).any(axis=2)
    fitness = power_mean(np.where(changed, speedup * problem.penalty, speedup) + 1e-3, problem.p)
    active = np.count_nonzero(states.sum(axis=1), axis=1)
    return fitness, table.sum(axis=1) / np.maximum(active * problem.capacity, 1)


def row_keys(states: np.ndarray) -> list[bytes]:
    """One key per state of ``(C, J, N)``, equal exactly where the states are equal."""
    return [row.tobytes() for row in states.reshape(len(states), -1)]

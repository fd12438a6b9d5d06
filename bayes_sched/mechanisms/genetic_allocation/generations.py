"""The NSGA-II search's whole run as one compiled kernel: every generation's mating, mutation,
repair, removal of repeated states, scoring and survival, with no Python between them.

:meth:`~bayes_sched.mechanisms.genetic_allocation.search.GeneticSearch.evolve_sparse` hands
:func:`evolve` the initial (unrepaired) population by its nonzero entries ``(p, j, n, v)`` (int64,
in (state, job, node) order) and the round's problem, and gets the final population and its two
objectives back. Each step is the kernel of
:mod:`~bayes_sched.mechanisms.genetic_allocation.kernels` the step-by-step path runs
(:func:`~bayes_sched.mechanisms.genetic_allocation.kernels.mate`,
:func:`~bayes_sched.mechanisms.genetic_allocation.kernels.mutate_entries`,
:func:`~bayes_sched.mechanisms.genetic_allocation.kernels.repair_state`,
:func:`~bayes_sched.mechanisms.genetic_allocation.kernels.score_state`,
:func:`~bayes_sched.mechanisms.genetic_allocation.kernels.survivors`); every draw comes from the
compiled generator whose state the caller seeds from the search's numpy generator, so one seed
gives one search. Repeated states are found by a hash of their entries
(:func:`~bayes_sched.mechanisms.genetic_allocation.kernels.state_hash`) and an exact comparison
where hashes meet, in place of the step-by-step path's byte keys in a Python set.

The problem travels as two tuples (numba passes them as typed tuples):

* ``arrays``: ``(base, base_n, base_v, base_bounds, base_nodes, tables, penalty,
  max_replicas)``: the status quo ``(J, N)``, its entries' nodes and GPUs with each job's span of
  them ``(J + 1,)``, its nodes per job ``(J,)``, the speedup tables ``(J, Nmax + 1, Rmax + 1)``, the
  restart penalties ``(J,)`` and the replica caps ``(J,)``;
* ``numbers``: ``(num_jobs, num_nodes, capacity, max_nodes, avoid_interference, scale,
  exponent, reset_prob, zero_prob, crossover_prob)``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from bayes_sched.mechanisms.genetic_allocation.kernels import (
    below,
    empty_row_terms,
    mate,
    mutate_entries,
    repair_scratch,
    repair_state,
    score_state,
    state_hash,
    survivors,
    uniform,
)

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
               np.ndarray, np.ndarray]
Numbers = tuple[int, int, int, int, bool, float, float, float, float, float]
Entries = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@njit(cache=True)
def _bounds(p: np.ndarray, size: int) -> np.ndarray:
    """Where each of ``size`` states' entries start (and the last ends), ``(size + 1,)``."""
    return np.searchsorted(p, np.arange(size + 1))


@njit(cache=True)
def _take_states(j: np.ndarray, n: np.ndarray, v: np.ndarray, bounds: np.ndarray,
                 rows: np.ndarray) -> Entries:
    """The entries of states ``rows`` (indices into ``bounds``), renumbered ``0..len(rows)-1``."""
    total = 0
    for r in rows:
        total += bounds[r + 1] - bounds[r]
    out_p = np.empty(total, np.int64)
    out_j = np.empty(total, np.int64)
    out_n = np.empty(total, np.int64)
    out_v = np.empty(total, np.int64)
    at = 0
    for i in range(rows.size):
        for e in range(bounds[rows[i]], bounds[rows[i] + 1]):
            out_p[at], out_j[at], out_n[at], out_v[at] = i, j[e], n[e], v[e]
            at += 1
    return out_p, out_j, out_n, out_v


@njit(cache=True)
def _same_state(j: np.ndarray, n: np.ndarray, v: np.ndarray, bounds: np.ndarray, a: int,
                b: int) -> bool:
    """Whether states ``a`` and ``b`` have the same entries."""
    lo_a, lo_b = bounds[a], bounds[b]
    length = bounds[a + 1] - lo_a
    if bounds[b + 1] - lo_b != length:
        return False
    for e in range(length):
        if (j[lo_a + e] != j[lo_b + e] or n[lo_a + e] != n[lo_b + e]
                or v[lo_a + e] != v[lo_b + e]):
            return False
    return True


@njit(cache=True)
def first_occurrences(j: np.ndarray, n: np.ndarray, v: np.ndarray, bounds: np.ndarray,
                      num_nodes: int) -> np.ndarray:
    """Whether each state (``bounds``: ``(S + 1,)``) is the first with its entries, ``(S,)``
    (:func:`~bayes_sched.mechanisms.genetic_allocation.sparse._first_occurrences` of the row
    keys), by an open-addressing table of the states' hashes."""
    count = bounds.size - 1
    width = 4
    while width < 2 * count:
        width *= 2
    table = np.full(width, -1, np.int64)
    hashes = np.empty(count, np.uint64)
    first = np.zeros(count, np.bool_)
    mask = np.uint64(width - 1)
    for s in range(count):
        h = state_hash(j, n, v, bounds[s], bounds[s + 1], num_nodes)
        hashes[s] = h
        slot = np.int64(h & mask)
        while True:
            other = table[slot]
            if other < 0:
                table[slot] = s
                first[s] = True
                break
            if hashes[other] == h and _same_state(j, n, v, bounds, other, s):
                break
            slot = (slot + 1) & (width - 1)
    return first


@njit(cache=True)
def _repaired(p: np.ndarray, j: np.ndarray, n: np.ndarray, v: np.ndarray, size: int,
              arrays: Arrays, numbers: Numbers, rng: np.ndarray) -> Entries:
    """States ``size`` by their entries, repaired (``AllocationProblem.repair_sparse``; each
    over-limit job's node order drawn from ``rng``), zeros dropped."""
    max_replicas = arrays[7]
    num_jobs, num_nodes, capacity, max_nodes, avoid = (numbers[0], numbers[1], numbers[2],
                                                       numbers[3], numbers[4])
    out = v.copy()
    keys = np.empty(p.size)
    bounds = _bounds(p, size)
    scratch = repair_scratch(num_nodes)
    for s in range(size):
        repair_state(j, n, out, bounds[s], bounds[s + 1], num_jobs, keys, True, rng,
                     max_replicas, max_nodes, capacity, avoid, scratch, s)
    keep = out > 0
    return p[keep], j[keep], n[keep], out[keep]


@njit(cache=True)
def _offspring(p: np.ndarray, j: np.ndarray, n: np.ndarray, v: np.ndarray, size: int,
               fitness: np.ndarray, utility: np.ndarray, crowding: np.ndarray, count: int,
               arrays: Arrays, numbers: Numbers, rng: np.ndarray) -> Entries:
    """``count`` children of the ``size`` states ``(p, j, n, v)``
    (``AllocationProblem.offspring_sparse``): tournaments and one-point crossover
    (:func:`mate`), mutation and repair, every draw from ``rng``."""
    base_n, base_v, base_bounds = arrays[1], arrays[2], arrays[3]
    num_jobs, num_nodes, capacity = numbers[0], numbers[1], numbers[2]
    reset_prob, zero_prob, crossover_prob = numbers[7], numbers[8], numbers[9]
    half = (count + 1) // 2
    draws = np.empty((2, 2, half), np.int64)
    coins = np.empty((2, half))
    for r in range(2):
        for side in range(2):
            for i in range(half):
                draws[r, side, i] = below(rng, size)
        for i in range(half):
            coins[r, i] = uniform(rng)
    point = np.empty(half, np.int64)
    for i in range(half):
        cut = below(rng, max(num_jobs, 1))
        point[i] = cut if uniform(rng) < crossover_prob else num_jobs
    q, k, m, w = mate(p, j, n, v, size, fitness, utility, crowding, draws, coins, point, count)
    q, k, m, w = mutate_entries(q, k, m, w, count, num_jobs, num_nodes, base_n, base_v,
                                base_bounds, capacity, reset_prob, zero_prob, rng)
    return _repaired(q, k, m, w, count, arrays, numbers, rng)


@njit(cache=True)
def _scores(j: np.ndarray, n: np.ndarray, v: np.ndarray, bounds: np.ndarray, rows: np.ndarray,
            arrays: Arrays, numbers: Numbers) -> tuple[np.ndarray, np.ndarray]:
    """Fitness and utility (:func:`score_state`) of the states ``rows``, ``(len(rows),)`` each."""
    base, base_nodes, tables, penalty = arrays[0], arrays[4], arrays[5], arrays[6]
    num_jobs, num_nodes, capacity = numbers[0], numbers[1], numbers[2]
    scale, exponent = numbers[5], numbers[6]
    stamp = np.full(num_nodes, -1, np.int64)
    empty = empty_row_terms(tables, base_nodes, penalty, scale, exponent)
    fitness = np.empty(rows.size)
    utility = np.empty(rows.size)
    for i in range(rows.size):
        fitness[i], utility[i] = score_state(j, n, v, bounds[rows[i]], bounds[rows[i] + 1],
                                             num_jobs, tables, base, base_nodes, penalty, scale,
                                             exponent, capacity, empty, stamp, i)
    return fitness, utility


@njit(cache=True)
def evolve(p: np.ndarray, j: np.ndarray, n: np.ndarray, v: np.ndarray, size: int,
           generations: int, arrays: Arrays, numbers: Numbers, rng: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The artifact's NSGA-II from the ``size`` initial states ``(p, j, n, v)`` (unrepaired) for
    ``generations`` generations (``GeneticSearch.evolve_sparse``): the initial states repaired and
    their repeats dropped; then each generation ``2 * size`` children, those repeating a
    candidate or an earlier child dropped and the first ``size`` others kept, and NSGA-II survival
    of ``size`` from parents and children. Returns the final population's entries ``(p, j, n,
    v)`` (its states best first) and its fitness and utility; ``rng`` (the compiled generator's
    state, :func:`~bayes_sched.mechanisms.genetic_allocation.kernels.seeded_state`) is advanced
    in place."""
    num_nodes = numbers[1]
    p, j, n, v = _repaired(p, j, n, v, size, arrays, numbers, rng)
    bounds = _bounds(p, size)
    kept = np.flatnonzero(first_occurrences(j, n, v, bounds, num_nodes))
    p, j, n, v = _take_states(j, n, v, bounds, kept)
    count = kept.size
    bounds = _bounds(p, count)
    fitness, utility = _scores(j, n, v, bounds, np.arange(count), arrays, numbers)
    crowding = survivors(fitness, utility, size)[1]
    for _ in range(generations):
        q, k, m, w = _offspring(p, j, n, v, count, fitness, utility, crowding, 2 * size,
                                arrays, numbers, rng)
        # Parents, then children, in one set of entries: a child is new when no candidate
        # before it has its entries (the parents are distinct already).
        all_j = np.concatenate((j, k))
        all_n = np.concatenate((n, m))
        all_v = np.concatenate((v, w))
        all_bounds = np.concatenate((bounds[:-1], p.size + _bounds(q, 2 * size)))
        new = np.flatnonzero(first_occurrences(all_j, all_n, all_v, all_bounds,
                                               num_nodes)[count:])[:size] + count
        child_fitness, child_utility = _scores(all_j, all_n, all_v, all_bounds, new, arrays,
                                               numbers)
        merged_fitness = np.concatenate((fitness, child_fitness))
        merged_utility = np.concatenate((utility, child_utility))
        keep, merged_crowding = survivors(merged_fitness, merged_utility, size)
        rows = np.concatenate((np.arange(count), new))[keep]
        p, j, n, v = _take_states(all_j, all_n, all_v, all_bounds, rows)
        count = rows.size
        bounds = _bounds(p, count)
        fitness, utility = merged_fitness[keep], merged_utility[keep]
        crowding = merged_crowding[keep]
    return p, j, n, v, fitness, utility

"""The NSGA-II search's whole run as one compiled kernel: every generation's mating, mutation,
repair, removal of repeated states, scoring and survival, with no Python between them.

:meth:`~bayes_sched.mechanisms.genetic_allocation.search.GeneticSearch.evolve_sparse` hands
:func:`evolve` the initial (unrepaired) population by its nonzero entries ``(p, j, n, v)`` (int64,
in (state, job, node) order) and the round's problem, and gets the final population and its two
objectives back. Each step is a kernel of
:mod:`~bayes_sched.mechanisms.genetic_allocation.kernels`
(:func:`~bayes_sched.mechanisms.genetic_allocation.kernels.tournament`,
:func:`~bayes_sched.mechanisms.genetic_allocation.kernels.mutate_spans`,
:func:`~bayes_sched.mechanisms.genetic_allocation.kernels.repair_state`,
:func:`~bayes_sched.mechanisms.genetic_allocation.kernels.score_state`,
:func:`~bayes_sched.mechanisms.genetic_allocation.kernels.survivors`); every draw comes from the
compiled generator whose state the caller seeds from the search's numpy generator, so one seed
gives one search. Children are made one at a time (crossover, mutation, repair) and checked at
once against the parents and the children kept so far, by a hash of their entries
(:func:`~bayes_sched.mechanisms.genetic_allocation.kernels.state_hash`) and an exact comparison
where hashes meet; the artifact keeps the first ``P`` new ones of ``2 P`` children, so making
children stops there, and those it would drop are never made.

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
    MutationWork,
    below,
    crossed_spans,
    empty_row_terms,
    join_cdf,
    log_miss,
    mutate_spans,
    mutation_work,
    repair_scratch,
    repair_state,
    score_state,
    state_hash,
    survivors,
    tournament,
    uncounted,
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


@uncounted
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


@uncounted
def _mating_draws(size: int, num_jobs: int, crossover_prob: float, rng: np.ndarray,
                  draws: np.ndarray, coins: np.ndarray, point: np.ndarray) -> None:
    """The draws of :func:`_matings`, in its order, into ``draws`` ``(2, 2, H)``, ``coins``
    ``(2, H)`` and ``point`` ``(H,)``."""
    half = point.size
    for r in range(2):
        for side in range(2):
            for i in range(half):
                draws[r, side, i] = below(rng, size)
        for i in range(half):
            coins[r, i] = uniform(rng)
    for i in range(half):
        cut = below(rng, max(num_jobs, 1))
        point[i] = cut if uniform(rng) < crossover_prob else num_jobs


@njit(cache=True)
def _matings(size: int, count: int, num_jobs: int, fitness: np.ndarray, utility: np.ndarray,
             crowding: np.ndarray, crossover_prob: float,
             rng: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parents and crossover points of ``count`` children of ``size`` states
    (``AllocationProblem.offspring_sparse``): two rounds of binary tournaments
    (:func:`~bayes_sched.mechanisms.genetic_allocation.kernels.tournament`) give the pairs'
    first and second parents, ``(H,)`` each for ``H = ceil(count / 2)``, and each pair a cut
    (``num_jobs`` where it does not cross over)."""
    half = (count + 1) // 2
    draws = np.empty((2, 2, half), np.int64)
    coins = np.empty((2, half))
    point = np.empty(half, np.int64)
    _mating_draws(size, num_jobs, crossover_prob, rng, draws, coins, point)
    first = tournament(draws[0, 0], draws[0, 1], coins[0], fitness, utility, crowding)
    second = tournament(draws[1, 0], draws[1, 1], coins[1], fitness, utility, crowding)
    return first, second, point


@njit(cache=True)
def _room(store: tuple[np.ndarray, np.ndarray, np.ndarray],
          needed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``store`` with room for ``needed`` entries (longer arrays, at least doubled, if not)."""
    size = store[0].size
    if needed <= size:
        return store
    size = max(2 * size, needed)
    larger = (np.empty(size, np.int64), np.empty(size, np.int64), np.empty(size, np.int64))
    for a in range(3):
        larger[a][: store[a].size] = store[a]
    return larger


@uncounted
def _known(store: tuple[np.ndarray, np.ndarray, np.ndarray], bounds: np.ndarray, state: int,
           num_nodes: int, table: np.ndarray, hashes: np.ndarray) -> bool:
    """Whether a state before ``state`` (entries ``bounds[s]:bounds[s + 1]`` of ``store``) has
    ``state``'s entries, by the open-addressing ``table`` of their ``hashes`` (``state`` entered
    there when it is new)."""
    j, n, v = store
    h = state_hash(j, n, v, bounds[state], bounds[state + 1], num_nodes)
    hashes[state] = h
    slot = np.int64(h & np.uint64(table.size - 1))
    while table[slot] >= 0:
        other = table[slot]
        if hashes[other] == h and _same_state(j, n, v, bounds, other, state):
            return True
        slot = (slot + 1) & (table.size - 1)
    table[slot] = state
    return False


@uncounted
def _append(work: MutationWork, length: int, store: tuple[np.ndarray, np.ndarray, np.ndarray],
            start: int) -> int:
    """Copy the first ``length`` mutated entries of ``work`` (its last three arrays) into
    ``store`` from ``start`` on, zeros dropped; where they end."""
    out_j, out_n, out_v = work[6], work[7], work[8]
    at = start
    for e in range(length):
        if out_v[e] > 0:
            store[0][at], store[1][at], store[2][at] = out_j[e], out_n[e], out_v[e]
            at += 1
    return at


@njit(cache=True)
def _children(j: np.ndarray, n: np.ndarray, v: np.ndarray, bounds: np.ndarray, size: int,
              fitness: np.ndarray, utility: np.ndarray, crowding: np.ndarray, count: int,
              wanted: int, arrays: Arrays, numbers: Numbers, rng: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """The ``size`` distinct states ``(j, n, v)`` (``bounds``: ``(size + 1,)``) followed by the
    first ``wanted`` of their ``count`` children (:func:`_matings`, then crossover, mutation and
    repair, ``AllocationProblem.offspring_sparse``) that repeat no state before them: the joined
    entries, their bounds and how many children. A child is made only while fewer than
    ``wanted`` are kept, so the ones that would be dropped cost nothing."""
    base_n, base_v, base_bounds, max_replicas = arrays[1], arrays[2], arrays[3], arrays[7]
    num_jobs, num_nodes, capacity, max_nodes, avoid = (numbers[0], numbers[1], numbers[2],
                                                       numbers[3], numbers[4])
    first, second, point = _matings(size, count, num_jobs, fitness, utility, crowding,
                                    numbers[9], rng)
    half = point.size
    longest = 0
    for s in range(size):
        longest = max(longest, bounds[s + 1] - bounds[s])
    cdf = join_cdf(num_jobs)
    work = mutation_work(2 * longest, num_nodes, base_bounds[num_jobs], cdf.size - 1)
    keys = np.empty(work[6].size)
    scratch = repair_scratch(num_nodes)
    log_reset = log_miss(numbers[7])
    room = 2 * j.size + 64
    store = (np.empty(room, np.int64), np.empty(room, np.int64), np.empty(room, np.int64))
    store[0][: j.size], store[1][: j.size], store[2][: j.size] = j, n, v
    all_bounds = np.empty(size + wanted + 1, np.int64)
    all_bounds[: size + 1] = bounds[: size + 1]
    width = 4
    while width < 2 * (size + wanted):
        width *= 2
    table = np.full(width, -1, np.int64)
    hashes = np.empty(size + wanted, np.uint64)
    for s in range(size):  # the parents are distinct
        _known(store, all_bounds, s, num_nodes, table, hashes)
    kept = 0
    for c in range(count):
        if kept == wanted:
            break
        pair = c % half
        x, y = (first[pair], second[pair]) if c < half else (second[pair], first[pair])
        x_lo, x_hi, y_lo, y_hi = crossed_spans(j, bounds, x, y, point[pair])
        length = mutate_spans(j, n, v, x_lo, x_hi, y_lo, y_hi, num_jobs, num_nodes, base_n,
                              base_v, base_bounds, capacity, log_reset, numbers[8], cdf, rng,
                              work)
        repair_state(work[6], work[7], work[8], 0, length, num_jobs, keys, True, rng, max_replicas,
                     max_nodes, capacity, avoid, scratch, c)
        start = all_bounds[size + kept]
        if start + length > store[0].size:
            store = _room(store, start + length)
        all_bounds[size + kept + 1] = _append(work, length, store, start)
        if not _known(store, all_bounds, size + kept, num_nodes, table, hashes):
            kept += 1
    end = all_bounds[size + kept]
    return (store[0][:end], store[1][:end], store[2][:end], all_bounds[: size + kept + 1],
            kept)


@njit(cache=True)
def _scores(j: np.ndarray, n: np.ndarray, v: np.ndarray, bounds: np.ndarray, rows: np.ndarray,
            arrays: Arrays, numbers: Numbers,
            empty: tuple[np.ndarray, np.ndarray, float, float]) -> tuple[np.ndarray, np.ndarray]:
    """Fitness and utility (:func:`score_state`) of the states ``rows``, ``(len(rows),)`` each.
    ``empty``: the problem's :func:`empty_row_terms` (the same for every generation of a
    search, so taken once per search)."""
    base, base_nodes, tables, penalty = arrays[0], arrays[4], arrays[5], arrays[6]
    num_jobs, num_nodes, capacity = numbers[0], numbers[1], numbers[2]
    scale, exponent = numbers[5], numbers[6]
    stamp = np.full(num_nodes, -1, np.int64)
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
    their repeats dropped; then each generation the first ``size`` of ``2 * size`` children
    that repeat no candidate nor earlier child (:func:`_children`), and NSGA-II survival
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
    empty = empty_row_terms(arrays[5], arrays[4], arrays[6], numbers[5], numbers[6])
    fitness, utility = _scores(j, n, v, bounds, np.arange(count), arrays, numbers, empty)
    crowding = survivors(fitness, utility, size)[1]
    for _ in range(generations):
        all_j, all_n, all_v, all_bounds, kept_children = _children(
            j, n, v, bounds, count, fitness, utility, crowding, 2 * size, size, arrays, numbers,
            rng)
        new = np.arange(count, count + kept_children)
        child_fitness, child_utility = _scores(all_j, all_n, all_v, all_bounds, new, arrays,
                                               numbers, empty)
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

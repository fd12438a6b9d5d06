"""The ``bo`` policy's elitist search as one compiled kernel, scored by Pollux's objective with each
job's speedup times its co-location speed factor under a class pair table.

:func:`~bayes_sched.policies.bo.evolve_elitist` runs the elitist search step by step (numpy between
compiled steps), which suits any slowdown predictor. Where the round's predictors reduce to one
additive pair table over job classes (:meth:`~bayes_sched.interference.pairs.PairResiduals.pair_table`;
the contention prior before it knows any demand adds nothing), :func:`evolve` runs the whole search
in machine code instead: binary tournaments by fitness, one-point crossover over jobs, the
artifact's mutation (:func:`~bayes_sched.mechanisms.genetic_allocation.kernels.mutate_entries`),
repair (:func:`~bayes_sched.mechanisms.genetic_allocation.kernels.repair_state`) and scoring, every
draw from the compiled generator the caller seeds
(:func:`~bayes_sched.mechanisms.genetic_allocation.kernels.seeded_state`): one seed gives one
search, not the step-by-step path's draws.

A state is scored from its nonzero entries alone (jobs without GPUs share no node, so their speed
factor is 1, and their terms are summed once per round:
:func:`~bayes_sched.mechanisms.genetic_allocation.kernels.empty_row_terms`): the cost follows
the GPUs in use, not jobs x nodes. A job's class is ``2 * application + distributed``; on each
node it uses, its log slowdown is the sum over its co-runners there of
``table[own class, co-runner class]``, and it goes at the pace of its worst node (at most 0):
the definition :func:`~bayes_sched.interference.pair_kernel.worst_node_log_factor` computes for
many states at once.

numba ``@njit(cache=True)``; import this module lazily (importing numba is slow).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from bayes_sched.mechanisms.genetic_allocation.kernels import (
    _power,
    _row_reads,
    below,
    empty_row_terms,
    mutate_entries,
    repair_scratch,
    repair_state,
)

#: ``(base, base_n, base_v, base_bounds, base_nodes, tables, penalty, max_replicas, apps,
#: table)``: the status quo ``(J, N)``, its entries' nodes and GPUs with each job's span of them
#: ``(J + 1,)``, its nodes per job ``(J,)``, the speedup tables ``(J, Nmax + 1, Rmax + 1)``, the
#: restart penalties ``(J,)``, the replica caps ``(J,)``, each job's application index ``(J,)``
#: and the pair table ``(K, K)`` (``K = 0``: no co-location factor).
Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
               np.ndarray, np.ndarray, np.ndarray, np.ndarray]
#: ``(num_jobs, num_nodes, capacity, max_nodes, avoid_interference, scale, exponent,
#: reset_prob, zero_prob)``.
Numbers = tuple[int, int, int, int, bool, float, float, float, float]
Entries = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@njit(cache=True)
def _take(p: np.ndarray, j: np.ndarray, n: np.ndarray, v: np.ndarray, size: int,
          rows: np.ndarray) -> Entries:
    """The entries of states ``rows`` of the ``size`` states ``(p, j, n, v)``, renumbered
    ``0..len(rows)-1``."""
    bounds = np.searchsorted(p, np.arange(size + 1))
    total = 0
    for r in rows:
        total += bounds[r + 1] - bounds[r]
    out = (np.empty(total, np.int64), np.empty(total, np.int64), np.empty(total, np.int64),
           np.empty(total, np.int64))
    at = 0
    for i in range(rows.size):
        for e in range(bounds[rows[i]], bounds[rows[i] + 1]):
            out[0][at], out[1][at], out[2][at], out[3][at] = i, j[e], n[e], v[e]
            at += 1
    return out


@njit(cache=True)
def _crossover(p: np.ndarray, j: np.ndarray, n: np.ndarray, v: np.ndarray, size: int,
               first: np.ndarray, second: np.ndarray, point: np.ndarray) -> Entries:
    """Child ``c`` takes jobs ``< point[c]`` from state ``first[c]`` and the rest from state
    ``second[c]`` (``SparseStates.crossover``)."""
    bounds = np.searchsorted(p, np.arange(size + 1))
    count = first.size
    spans = np.empty((count, 4), np.int64)
    total = 0
    for c in range(count):
        x, y = first[c], second[c]
        x_lo = bounds[x]
        x_hi = x_lo + np.searchsorted(j[bounds[x]:bounds[x + 1]], point[c])
        y_lo = bounds[y] + np.searchsorted(j[bounds[y]:bounds[y + 1]], point[c])
        spans[c] = (x_lo, x_hi, y_lo, bounds[y + 1])
        total += x_hi - x_lo + bounds[y + 1] - y_lo
    out = (np.empty(total, np.int64), np.empty(total, np.int64), np.empty(total, np.int64),
           np.empty(total, np.int64))
    at = 0
    for c in range(count):
        for lo, hi in ((spans[c, 0], spans[c, 1]), (spans[c, 2], spans[c, 3])):
            for e in range(lo, hi):
                out[0][at], out[1][at], out[2][at], out[3][at] = c, j[e], n[e], v[e]
                at += 1
    return out


@njit(cache=True)
def _repaired(p: np.ndarray, j: np.ndarray, n: np.ndarray, v: np.ndarray, size: int,
              arrays: Arrays, numbers: Numbers, rng: np.ndarray) -> Entries:
    """The ``size`` states ``(p, j, n, v)`` repaired (each over-limit job's node order drawn from
    ``rng``), zeros dropped."""
    out = v.copy()
    keys = np.empty(p.size)
    bounds = np.searchsorted(p, np.arange(size + 1))
    scratch = repair_scratch(numbers[1])
    for s in range(size):
        repair_state(j, n, out, bounds[s], bounds[s + 1], numbers[0], keys, True, rng,
                     arrays[7], numbers[3], numbers[2], numbers[4], scratch, s)
    keep = out > 0
    return p[keep], j[keep], n[keep], out[keep]


@njit(cache=True)
def scores(p: np.ndarray, j: np.ndarray, n: np.ndarray, v: np.ndarray, size: int,
           arrays: Arrays, numbers: Numbers, tables: np.ndarray) -> np.ndarray:
    """The fitness of each of the ``size`` states ``(p, j, n, v)`` under each pair table of
    ``tables`` ``(S, K, K)`` (``K = 0``: none), ``(S, size)``: the power mean (``exponent``,
    nonzero) over jobs of ``speedup * exp(log slowdown) + 0.001``, the speedup penalised where
    the job's row differs from the status quo (``AllocationProblem.fitness`` times the worst-node
    pair factor, summed over the nonzero rows only)."""
    base, base_nodes, speedup_tables, penalty, apps = (arrays[0], arrays[4], arrays[5],
                                                       arrays[6], arrays[8])
    num_jobs, num_nodes = numbers[0], numbers[1]
    scale, exponent = numbers[5], numbers[6]
    draws, classes = max(tables.shape[0], 1), tables.shape[1]
    empty_powered, _, empty_total, _ = empty_row_terms(speedup_tables, base_nodes, penalty,
                                                       scale, exponent)
    bounds = np.searchsorted(p, np.arange(size + 1))
    stamp = np.full(num_nodes, -1, np.int64)
    on_node = np.zeros(max(num_nodes * classes, 1), np.int64)   # class counts per node
    out = np.empty((draws, size))
    own = np.empty(p.size, np.int64)
    # One state's rows (job, first entry, penalised speedup) and each entry's co-runner classes
    # on its node with their counts (entry e's run: first[e] to first[e + 1]), listed once and
    # read draw by draw.
    row_job = np.empty(num_jobs, np.int64)
    row_start = np.empty(num_jobs + 1, np.int64)
    row_speedup = np.empty(num_jobs)
    first = np.zeros(p.size + 1, np.int64)
    partners = np.empty(max(p.size * classes, 1), np.int64)
    counts = np.empty(max(p.size * classes, 1))
    for s in range(size):
        lo, hi = bounds[s], bounds[s + 1]
        rows = 0
        at = lo
        while at < hi:
            jj = j[at]
            row_job[rows], row_start[rows] = jj, at
            at, nodes, replicas, changed, _ = _row_reads(j, n, v, at, hi, jj, base, base_nodes,
                                                         stamp, s)
            read = speedup_tables[jj, nodes, replicas]
            row_speedup[rows] = read * scale * penalty[jj] if changed else read * scale
            if classes > 0:
                for e in range(row_start[rows], at):
                    own[e] = 2 * apps[jj] + (1 if nodes > 1 else 0)
                    on_node[n[e] * classes + own[e]] += 1
            rows += 1
        row_start[rows] = hi
        found = 0
        first[lo] = 0
        for e in range(lo, hi):
            if classes > 0:
                for k in range(classes):
                    count = on_node[n[e] * classes + k] - (1 if k == own[e] else 0)
                    if count != 0:
                        partners[found], counts[found] = k, count
                        found += 1
            first[e + 1] = found
        if classes > 0:
            for e in range(lo, hi):
                on_node[n[e] * classes + own[e]] = 0
        for d in range(draws):
            powered = empty_total
            for r in range(rows):
                speedup = row_speedup[r]
                worst = 0.0
                for e in range(row_start[r], row_start[r + 1]):
                    if first[e] == first[e + 1]:  # alone on its node: nothing to add
                        continue
                    total = 0.0
                    for i in range(first[e], first[e + 1]):
                        total += tables[d, own[e], partners[i]] * counts[i]
                    worst = min(worst, total)
                if worst < 0.0:
                    speedup = speedup * np.exp(worst)
                powered += _power(speedup + 1e-3, exponent) - empty_powered[row_job[r]]
            out[d, s] = _power(powered / max(num_jobs, 1), 1.0 / exponent)
    return out


@njit(cache=True)
def evolve(p: np.ndarray, j: np.ndarray, n: np.ndarray, v: np.ndarray, size: int,
           generations: int, arrays: Arrays, numbers: Numbers, rng: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The elitist search from the ``size`` repaired states ``(p, j, n, v)`` (int64, in (state,
    job, node) order) for ``generations`` generations: each generation ``size`` children (parents
    by binary tournaments on fitness, one-point crossover over jobs, mutation, repair) and the
    fittest ``size`` of parents and children kept (ties: parents first, then by index). Returns the
    final population's entries (best first) and its fitness ``(size,)``; ``rng`` is advanced in
    place."""
    num_jobs, num_nodes, capacity = numbers[0], numbers[1], numbers[2]
    base_n, base_v, base_bounds = arrays[1], arrays[2], arrays[3]
    pairs = arrays[9]
    table = pairs.reshape((1, pairs.shape[0], pairs.shape[1]))
    fitness = scores(p, j, n, v, size, arrays, numbers, table)[0]
    for _ in range(generations):
        first = np.empty(size, np.int64)
        second = np.empty(size, np.int64)
        for parents in (first, second):
            for i in range(size):
                a, b = below(rng, size), below(rng, size)
                parents[i] = a if fitness[a] >= fitness[b] else b
        point = np.empty(size, np.int64)
        for i in range(size):
            point[i] = below(rng, num_jobs + 1)
        q, k, m, w = _crossover(p, j, n, v, size, first, second, point)
        q, k, m, w = mutate_entries(q, k, m, w, size, num_jobs, num_nodes, base_n, base_v,
                                    base_bounds, capacity, numbers[7], numbers[8], rng)
        q, k, m, w = _repaired(q, k, m, w, size, arrays, numbers, rng)
        merged = np.concatenate((fitness, scores(q, k, m, w, size, arrays, numbers, table)[0]))
        keep = np.argsort(-merged, kind="mergesort")[:size]
        p, j, n, v = _take(np.concatenate((p, q + size)), np.concatenate((j, k)),
                           np.concatenate((n, m)), np.concatenate((v, w)), 2 * size, keep)
        fitness = merged[keep]
    return p, j, n, v, fitness

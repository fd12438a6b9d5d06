"""Compiled loops of the allocation search: mutation, repair and scoring over the nonzero entries.

The NSGA-II search (:mod:`bayes_sched.mechanisms.genetic_allocation.search`) carries a population
``(P, J, N)`` of GPU counts as its nonzero entries ``(p, j, n, v)`` in (state, job, node) order
(:class:`~bayes_sched.mechanisms.genetic_allocation.sparse.SparseStates`). At 64 GPUs those are a
few thousand entries, where each numpy call costs more in dispatch than in work; these kernels walk
the entries once in machine code instead (numba ``@njit(cache=True)``: compiled on first use and
kept on disk next to this module, or under ``NUMBA_CACHE_DIR``).

Each kernel keeps its numpy counterpart's semantics (the methods of
:class:`~bayes_sched.mechanisms.genetic_allocation.search.AllocationProblem` of the same name).
:func:`repair_values` takes its random node order from the caller's draws, so it equals the numpy
repair exactly given the same draws; :func:`mutate_entries` draws inside the kernel from numba's
generator seeded by the caller (a seed drawn from the search's numpy generator), so one seed gives
one result, but not the numpy mutation's draws. Only the search imports this module, lazily:
importing numba is slow.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def mutate_entries(p: np.ndarray, j: np.ndarray, n: np.ndarray, v: np.ndarray, size: int,
                   num_jobs: int, num_nodes: int, base_n: np.ndarray, base_v: np.ndarray,
                   base_bounds: np.ndarray, capacity: int, reset_prob: float, zero_prob: float,
                   seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The artifact's mutation (``AllocationProblem._mutate_sparse``) of the entries ``(p, j, n,
    v)`` (each ``(K,)``, int64, in (state, job, node) order) of states ``(size, num_jobs,
    num_nodes)``; the mutated entries, in order, zeros dropped.

    Per job row: with ``reset_prob``, back to the status quo (its entries ``base_n[a:b]``,
    ``base_v[a:b]`` for ``a, b = base_bounds[j], base_bounds[j + 1]``); with ``zero_prob``, each
    of its nodes dropped with ``zero_prob``. On every node with fewer than ``capacity`` GPUs in
    use: each job grows onto it with probability 1 / ``num_jobs``, and each
    job already there grows with one over the number of jobs there; a grown entry takes a uniform
    count from its current one up to ``capacity``. Draws come from numba's generator seeded with
    ``seed``.
    """
    np.random.seed(seed)
    base_total = base_bounds[num_jobs]
    bound = p.size + size * base_total
    q = np.empty(bound, np.int64)
    k = np.empty(bound, np.int64)
    m = np.empty(bound, np.int64)
    w = np.empty(bound, np.int64)
    load = np.zeros(size * num_nodes, np.int64)
    jobs_on = np.zeros(size * num_nodes, np.int64)
    count = 0
    at = 0
    for pp in range(size):
        for jj in range(num_jobs):
            start = at
            while at < p.size and p[at] == pp and j[at] == jj:
                at += 1
            reset = np.random.random() < reset_prob
            zero = np.random.random() < zero_prob
            if reset:
                lo, hi = base_bounds[jj], base_bounds[jj + 1]
            else:
                lo, hi = start, at
            for e in range(lo, hi):
                node = base_n[e] if reset else n[e]
                value = base_v[e] if reset else v[e]
                if zero and np.random.random() < zero_prob:
                    continue
                q[count], k[count], m[count], w[count] = pp, jj, node, value
                load[pp * num_nodes + node] += value
                jobs_on[pp * num_nodes + node] += 1
                count += 1
    # Growth keys (state, job, node) flattened: any job onto a free node, and own entries.
    grow = np.empty(16 + count + 4 * size * num_nodes, np.int64)
    grown = 0
    # Each job joins a free node with probability 1 / num_jobs (a Binomial(num_jobs, 1 / num_jobs)
    # count of distinct jobs): the gaps between the jobs that join are geometric, drawn by
    # inversion, so a node costs a draw per job that joins plus one.
    log_stay = np.log1p(-1.0 / num_jobs)
    for slot in range(size * num_nodes):
        if load[slot] >= capacity:
            continue
        pp, node = slot // num_nodes, slot % num_nodes
        jj = -1
        while True:
            jj += 1 + int(np.floor(np.log(1.0 - np.random.random()) / log_stay))
            if jj >= num_jobs:
                break
            if grown == grow.size:
                grow = _grown_buffer(grow)
            grow[grown] = (pp * num_jobs + jj) * num_nodes + node
            grown += 1
    for e in range(count):
        slot = q[e] * num_nodes + m[e]
        if load[slot] < capacity and np.random.random() * jobs_on[slot] < 1.0:
            if grown == grow.size:
                grow = _grown_buffer(grow)
            grow[grown] = (q[e] * num_jobs + k[e]) * num_nodes + m[e]
            grown += 1
    keys = _distinct_sorted(grow[:grown])
    # Merge: kept entries and grown keys, both in order; a grown entry draws from its current count.
    total = count + keys.size
    out_p = np.empty(total, np.int64)
    out_j = np.empty(total, np.int64)
    out_n = np.empty(total, np.int64)
    out_v = np.empty(total, np.int64)
    a = 0
    b = 0
    out = 0
    while a < count or b < keys.size:
        entry_key = (q[a] * num_jobs + k[a]) * num_nodes + m[a] if a < count else -1
        if b < keys.size and (a >= count or keys[b] <= entry_key):
            key = keys[b]
            current = 0
            if a < count and keys[b] == entry_key:
                current = w[a]
                a += 1
            b += 1
            value = np.random.randint(current, capacity + 1)
            if value == 0:
                continue
            rest = key % (num_jobs * num_nodes)
            out_p[out], out_j[out], out_n[out] = key // (num_jobs * num_nodes), \
                rest // num_nodes, rest % num_nodes
            out_v[out] = value
        else:
            out_p[out], out_j[out], out_n[out], out_v[out] = q[a], k[a], m[a], w[a]
            a += 1
        out += 1
    return out_p[:out], out_j[:out], out_n[:out], out_v[:out]


@njit(cache=True)
def _distinct_sorted(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` (numba's builds Python lists: several times slower)."""
    ordered = np.sort(values)
    distinct = 0
    for i in range(ordered.size):
        if i == 0 or ordered[i] != ordered[distinct - 1]:
            ordered[distinct] = ordered[i]
            distinct += 1
    return ordered[:distinct]


@njit(cache=True)
def _grown_buffer(grow: np.ndarray) -> np.ndarray:
    """``grow`` in a buffer twice as long."""
    larger = np.empty(2 * grow.size, np.int64)
    larger[: grow.size] = grow
    return larger


@njit(cache=True)
def repair_values(p: np.ndarray, j: np.ndarray, n: np.ndarray, v: np.ndarray, size: int,
                  num_jobs: int, num_nodes: int, draws: np.ndarray, max_replicas: np.ndarray,
                  max_nodes: int, capacity: int, avoid_interference: bool) -> np.ndarray:
    """The repaired value of each entry ``(p, j, n, v)`` (each ``(K,)``, int64, in (state, job,
    node) order) of states ``(size, num_jobs, num_nodes)``, 0 where it goes, ``(K,)``
    (``AllocationProblem._repaired_values``). In job priority order (lower index first): with
    ``avoid_interference``, at most one distributed job per node; per job at most
    ``max_replicas[j]`` GPUs and ``max_nodes`` nodes, trimmed in the order of ``draws`` (``(K,)``,
    one per entry; ties by entry); then each node's ``capacity``.
    """
    out = v.copy()
    row_start = np.searchsorted(p * num_jobs + j, np.arange(size * num_jobs + 1))
    stamp = np.full(num_nodes, -1, np.int64)
    running = np.zeros(num_nodes, np.int64)
    for pp in range(size):
        lo_state, hi_state = row_start[pp * num_jobs], row_start[(pp + 1) * num_jobs]
        if avoid_interference:
            for row in range(pp * num_jobs, (pp + 1) * num_jobs):
                lo, hi = row_start[row], row_start[row + 1]
                if hi - lo <= 1:
                    continue
                for e in range(lo, hi):
                    if stamp[n[e]] == pp:
                        out[e] = 0
                    else:
                        stamp[n[e]] = pp
        for row in range(pp * num_jobs, (pp + 1) * num_jobs):
            lo, hi = row_start[row], row_start[row + 1]
            replicas = 0
            nodes = 0
            for e in range(lo, hi):
                replicas += out[e]
                if out[e] > 0:
                    nodes += 1
            jj = row - pp * num_jobs
            if replicas <= max_replicas[jj] and nodes <= max_nodes:
                continue
            order = lo + np.argsort(draws[lo:hi], kind="mergesort")
            cap = max_replicas[jj]
            total = 0
            used = 0
            for e in order:
                value = out[e]
                total += value
                kept = min(total, cap) - min(total - value, cap)
                if kept > 0:
                    used += 1
                out[e] = kept if used <= max_nodes else 0
        # Node capacity, lower job index first (the entries' own order).
        for e in range(lo_state, hi_state):
            running[n[e]] = 0
        for e in range(lo_state, hi_state):
            value = out[e]
            total = running[n[e]] + value
            running[n[e]] = total
            out[e] = min(total, capacity) - min(total - value, capacity)
    return out


@njit(cache=True)
def table_reads(p: np.ndarray, j: np.ndarray, n: np.ndarray, v: np.ndarray, size: int,
                num_jobs: int, num_nodes: int, tables: np.ndarray, base: np.ndarray,
                base_nodes: np.ndarray, penalty: np.ndarray, scale: float
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What the objectives of states ``(size, num_jobs, num_nodes)`` given by their nonzero
    entries ``(p, j, n, v)`` (int64, in (state, job, node) order) read
    (``AllocationProblem.objectives_sparse``): every job's table speedup ``tables[j, nodes,
    GPUs]``, ``(size, num_jobs)``; the same times ``scale`` and, where the job's row differs from
    ``base`` (``(J, N)``, ``base_nodes`` its nonzero count per row), ``penalty[j]``; and the
    number of nodes in use per state, ``(size,)``."""
    table = np.empty((size, num_jobs))
    speedup = np.empty((size, num_jobs))
    active = np.zeros(size, np.int64)
    stamp = np.full(num_nodes, -1, np.int64)
    at = 0
    for pp in range(size):
        for jj in range(num_jobs):
            nodes = 0
            replicas = 0
            matched = 0
            changed = False
            while at < p.size and p[at] == pp and j[at] == jj:
                node = n[at]
                nodes += 1
                replicas += v[at]
                if base[jj, node] == v[at]:
                    matched += 1
                else:
                    changed = True
                if stamp[node] != pp:
                    stamp[node] = pp
                    active[pp] += 1
                at += 1
            read = tables[jj, nodes, replicas]
            table[pp, jj] = read
            if changed or matched != base_nodes[jj]:
                speedup[pp, jj] = read * scale * penalty[jj]
            else:
                speedup[pp, jj] = read * scale
    return table, speedup, active


@njit(cache=True)
def _lexsort2(minor: np.ndarray, major: np.ndarray) -> np.ndarray:
    """``np.lexsort((minor, major))``: indices ordering by ``major``, ties by ``minor``, then by
    index."""
    order = np.argsort(minor, kind="mergesort")
    return order[np.argsort(major[order], kind="mergesort")]


@njit(cache=True)
def survivors(first: np.ndarray, second: np.ndarray,
              count: int) -> tuple[np.ndarray, np.ndarray]:
    """NSGA-II survival for two maximised objectives ``first`` and ``second`` (``(M,)`` each), as
    :func:`bayes_sched.mechanisms.genetic_allocation.nsga2.survivors` computes it (the same
    fronts, crowding distances and order, to the bit): the indices of the ``count`` candidates
    kept, best first, and every candidate's crowding distance, ``(M,)``."""
    size = first.size
    # Fronts: in order of first (descending), then second, each candidate joins the first front
    # whose latest member's negated (second, first) is not below its own (a bisection).
    order = _lexsort2(-second, -first)
    tail_a = np.empty(size)
    tail_b = np.empty(size)
    fronts = 0
    front = np.empty(size, np.int64)
    for i in order:
        a, b = -second[i], -first[i]
        lo, hi = 0, fronts
        while lo < hi:
            mid = (lo + hi) // 2
            if tail_a[mid] < a or (tail_a[mid] == a and tail_b[mid] < b):
                lo = mid + 1
            else:
                hi = mid
        if lo == fronts:
            fronts += 1
        tail_a[lo], tail_b[lo] = a, b
        front[i] = lo
    # Crowding distance within each front, repeats of a point at 0 and skipped by neighbours.
    order = _lexsort2(-second, -first)
    order = order[np.argsort(front[order], kind="mergesort")]
    kept = np.empty(size, np.int64)
    distinct = 0
    for i in range(size):
        c = order[i]
        if i > 0:
            d = order[i - 1]
            if front[c] == front[d] and first[c] == first[d] and second[c] == second[d]:
                continue
        kept[distinct] = c
        distinct += 1
    kept = kept[:distinct]
    distance = np.zeros(distinct)
    for values in (first[kept], second[kept]):
        start = 0
        while start < distinct:
            end = start
            while end + 1 < distinct and front[kept[end + 1]] == front[kept[start]]:
                end += 1
            span = abs(values[start] - values[end])
            for i in range(start, end + 1):
                gap = abs(values[min(i + 1, distinct - 1)] - values[max(i - 1, 0)])
                if span > 0:
                    distance[i] += gap / span
            start = end + 1
    crowding = np.zeros(size)
    members = np.bincount(front)
    for i in range(distinct):
        crowding[kept[i]] = distance[i]
        if i == 0 or front[kept[i]] != front[kept[i - 1]]:
            crowding[kept[i]] = np.inf
        if i == distinct - 1 or front[kept[i]] != front[kept[i + 1]]:
            crowding[kept[i]] = np.inf
    for i in range(size):
        if members[front[i]] <= 2:
            crowding[i] = np.inf
    return _lexsort2(-crowding, front)[:count], crowding


@njit(cache=True)
def _tournament(a: np.ndarray, b: np.ndarray, coin: np.ndarray, fitness: np.ndarray,
                utility: np.ndarray, crowding: np.ndarray) -> np.ndarray:
    """Winners of the binary tournaments ``a[i]`` against ``b[i]``: the dominating candidate,
    else the more crowded-apart one, else ``a[i]`` where ``coin[i] < 0.5``."""
    winners = np.empty(a.size, np.int64)
    for i in range(a.size):
        x, y = a[i], b[i]
        x_wins = fitness[x] >= fitness[y] and utility[x] >= utility[y]
        y_wins = fitness[y] >= fitness[x] and utility[y] >= utility[x]
        if x_wins and not y_wins:
            winners[i] = x
        elif y_wins and not x_wins:
            winners[i] = y
        elif crowding[x] > crowding[y]:
            winners[i] = x
        elif crowding[y] > crowding[x]:
            winners[i] = y
        else:
            winners[i] = x if coin[i] < 0.5 else y
    return winners


@njit(cache=True)
def mate(p: np.ndarray, j: np.ndarray, n: np.ndarray, v: np.ndarray, size: int,
         fitness: np.ndarray, utility: np.ndarray, crowding: np.ndarray, draws: np.ndarray,
         coins: np.ndarray, point: np.ndarray, count: int
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``count`` children of the states ``(size, J, N)`` given by their entries ``(p, j, n, v)``
    (int64, in (state, job, node) order), as ``AllocationProblem.offspring_sparse`` mates them
    before mutation: parents by two rounds of binary tournaments (candidates ``draws[r]``,
    ``(2, H)`` each, ties by ``coins[r]``, ``(H,)``), then one-point crossover over jobs at
    ``point`` (``(H,)``) giving two complementary children per pair (the first ``H`` children
    ``(first, second)``, then ``(second, first)``); the children's entries, in order."""
    half = point.size
    first = _tournament(draws[0, 0], draws[0, 1], coins[0], fitness, utility, crowding)
    second = _tournament(draws[1, 0], draws[1, 1], coins[1], fitness, utility, crowding)
    bounds = np.searchsorted(p, np.arange(size + 1))
    # Per child: its first parent's entries of jobs below the cut, the second's from it on.
    spans = np.empty((count, 4), np.int64)
    total = 0
    for c in range(count):
        pair = c % half
        x, y = (first[pair], second[pair]) if c < half else (second[pair], first[pair])
        cut = point[pair]
        x_lo = bounds[x]
        x_hi = x_lo + np.searchsorted(j[bounds[x]:bounds[x + 1]], cut)
        y_lo = bounds[y] + np.searchsorted(j[bounds[y]:bounds[y + 1]], cut)
        y_hi = bounds[y + 1]
        spans[c] = (x_lo, x_hi, y_lo, y_hi)
        total += x_hi - x_lo + y_hi - y_lo
    out_p = np.empty(total, np.int64)
    out_j = np.empty(total, np.int64)
    out_n = np.empty(total, np.int64)
    out_v = np.empty(total, np.int64)
    at = 0
    for c in range(count):
        for lo, hi in ((spans[c, 0], spans[c, 1]), (spans[c, 2], spans[c, 3])):
            for e in range(lo, hi):
                out_p[at], out_j[at], out_n[at], out_v[at] = c, j[e], n[e], v[e]
                at += 1
    return out_p, out_j, out_n, out_v

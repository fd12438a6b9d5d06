"""The pair table's co-location log slowdown of many candidate states, as one compiled loop.

:meth:`~bayes_sched.interference.pairs.PairResiduals.log_factor` runs every generation of the
``bo`` policy's search; as numpy calls over the candidates' nonzero entries it builds an
``(entries, classes)`` count array and, under the table's draws, an ``(draws, entries)`` product
per class. This loop walks the entries once instead, skipping the classes absent from a node
(most entries share their node with no one). numba ``@njit(cache=True)``: compiled on first use
and kept on disk; imported lazily (importing numba is slow).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def worst_node_log_factor(p: np.ndarray, j: np.ndarray, n: np.ndarray, size: int,
                          num_jobs: int, num_nodes: int, apps: np.ndarray,
                          table: np.ndarray) -> np.ndarray:
    """Log slowdown of every job in every state at its worst node, ``(S, size * num_jobs)``.

    ``p, j, n`` (each ``(E,)``, int64): the nonzero entries of states ``(size, num_jobs,
    num_nodes)`` in (state, job, node) order; ``apps`` ``(num_jobs,)``: each job's application
    index; ``table`` ``(S, K, K)``: the pair table (its mean as ``S = 1``, or its draws), row
    the job's class ``2 * app + distributed``, column the co-runner's. On a node, a job's log
    slowdown is the sum over its co-runners there of ``table[own class, co-runner class]``; the
    result is the least of those over its nodes and 0.
    """
    draws, classes = table.shape[0], table.shape[1]
    cells = size * num_jobs
    out = np.zeros((draws, cells))
    spans = np.zeros(cells, np.int64)
    for e in range(p.size):
        spans[p[e] * num_jobs + j[e]] += 1
    own = np.empty(p.size, np.int64)
    on_node = np.zeros(size * num_nodes * classes, np.int64)
    for e in range(p.size):
        row = p[e] * num_jobs + j[e]
        own[e] = 2 * apps[j[e]] + (1 if spans[row] > 1 else 0)
        on_node[(p[e] * num_nodes + n[e]) * classes + own[e]] += 1
    # Each entry's co-runner classes on its node and their counts, listed once (a run per
    # entry: ``first[e]`` to ``first[e + 1]``), then read draw by draw in entry order.
    first = np.zeros(p.size + 1, np.int64)
    partners = np.empty(p.size * classes, np.int64)
    counts = np.empty(p.size * classes, np.float64)
    found = 0
    for e in range(p.size):
        base = (p[e] * num_nodes + n[e]) * classes
        for k in range(classes):
            count = on_node[base + k] - (1 if k == own[e] else 0)
            if count != 0:
                partners[found] = k
                counts[found] = count
                found += 1
        first[e + 1] = found
    for s in range(draws):
        for e in range(p.size):
            if first[e] == first[e + 1]:  # alone on this node: nothing to add
                continue
            total = 0.0
            for i in range(first[e], first[e + 1]):
                total += table[s, own[e], partners[i]] * counts[i]
            row = p[e] * num_jobs + j[e]
            if total < out[s, row]:
                out[s, row] = total
    return out

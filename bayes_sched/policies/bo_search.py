"""The ``bo`` policy's elitist search as one compiled kernel, scored by Pollux's objective with each
job's speedup times its co-location speed factor under a class pair table.

:func:`~bayes_sched.policies.bo.evolve_elitist` runs the elitist search step by step (numpy between
compiled steps), which suits any slowdown predictor. Where the round's predictors reduce to one
additive pair table over job classes (:meth:`~bayes_sched.interference.pairs.PairResiduals.pair_table`;
the contention prior before it knows any demand adds nothing), :func:`evolve` runs the whole search
in machine code instead: binary tournaments by fitness, one-point crossover over jobs
(:func:`~bayes_sched.mechanisms.genetic_allocation.kernels.crossed_spans`: the child as two spans
of its parents' entries), the artifact's mutation read straight from those spans
(:func:`~bayes_sched.mechanisms.genetic_allocation.kernels.mutate_spans`), repair
(:func:`~bayes_sched.mechanisms.genetic_allocation.kernels.repair_state`) and scoring, every
draw from the compiled generator the caller seeds
(:func:`~bayes_sched.mechanisms.genetic_allocation.kernels.seeded_state`): one seed gives one
search, not the step-by-step path's draws. A generation's children are made into one store
(all crossed and mutated in turn, then all repaired in turn: the draws of mutating every child
come before those of repairing any) and scored from it, and the survivors copied out of it.

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
    _FNV_OFFSET,
    _power,
    _row_reads,
    below,
    crossed_spans,
    empty_row_terms,
    fnv1a_step,
    join_cdf,
    log_miss,
    mutate_spans,
    mutation_work,
    repair_scratch,
    repair_state,
    uncounted,
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
#: Work arrays of :func:`_state_rows` (:func:`_score_work`): a per-node stamp and class counts
#: per node; each entry's own class; each row's job, first entry and penalised speedup; each
#: entry's first co-runner (entry ``e``'s run: ``first[e]`` to ``first[e + 1]``), co-runner
#: classes and counts; each row's term where it shares no node (its powered speedup less an
#: empty row's) and whether it shares one.
ScoreWork = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                  np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
Store = tuple[np.ndarray, np.ndarray, np.ndarray]


@njit(cache=True)
def _score_work(num_jobs: int, num_nodes: int, classes: int, entries: int) -> ScoreWork:
    """Work arrays for :func:`_state_rows` on states of at most ``entries`` entries."""
    return (np.full(num_nodes, -1, np.int64), np.zeros(max(num_nodes * classes, 1), np.int64),
            np.empty(max(entries, 1), np.int64), np.empty(num_jobs, np.int64),
            np.empty(num_jobs + 1, np.int64), np.empty(num_jobs),
            np.zeros(entries + 1, np.int64), np.empty(max(entries * classes, 1), np.int64),
            np.empty(max(entries * classes, 1)), np.empty(num_jobs), np.empty(num_jobs, np.bool_))


@uncounted
def _state_rows(j: np.ndarray, n: np.ndarray, v: np.ndarray, lo: int, hi: int, arrays: Arrays,
                numbers: Numbers, classes: int, empty_powered: np.ndarray, work: ScoreWork,
                stamp_id: int) -> int:
    """The rows of the state whose entries are ``lo:hi`` of ``(j, n, v)`` written to ``work``
    (:func:`_score_work`, sized for ``hi - lo`` entries; entries numbered from ``lo``): each
    row's job, first entry and penalised, scaled speedup, each entry's co-runner classes on
    its node with their counts (``classes`` classes; 0: none), and for each row that shares no
    node its term of the power mean (a pair table changes nothing there), less
    ``empty_powered`` ``(J,)`` (:func:`empty_row_terms`). Returns the number of rows.
    ``stamp_id``: distinct per state read with one ``work``."""
    base, base_nodes, speedup_tables, penalty, apps = (arrays[0], arrays[4], arrays[5],
                                                       arrays[6], arrays[8])
    scale, exponent = numbers[5], numbers[6]
    stamp, on_node, own, row_job, row_start, row_speedup, first, partners, counts = work[:9]
    row_alone_term, row_shares = work[9], work[10]
    rows = 0
    at = lo
    while at < hi:
        jj = j[at]
        row_job[rows], row_start[rows] = jj, at - lo
        at, nodes, replicas, changed, _ = _row_reads(j, n, v, at, hi, jj, base, base_nodes,
                                                     stamp, stamp_id)
        read = speedup_tables[jj, nodes, replicas]
        row_speedup[rows] = read * scale * penalty[jj] if changed else read * scale
        if classes > 0:
            for e in range(row_start[rows], at - lo):
                own[e] = 2 * apps[jj] + (1 if nodes > 1 else 0)
                on_node[n[lo + e] * classes + own[e]] += 1
        rows += 1
    row_start[rows] = hi - lo
    found = 0
    first[0] = 0
    for e in range(hi - lo):
        if classes > 0:
            for k in range(classes):
                count = on_node[n[lo + e] * classes + k] - (1 if k == own[e] else 0)
                if count != 0:
                    partners[found], counts[found] = k, count
                    found += 1
        first[e + 1] = found
    if classes > 0:
        for e in range(hi - lo):
            on_node[n[lo + e] * classes + own[e]] = 0
    for r in range(rows):
        row_shares[r] = first[row_start[r]] != first[row_start[r + 1]]
        if not row_shares[r]:
            row_alone_term[r] = (_power(row_speedup[r] + 1e-3, exponent)
                                 - empty_powered[row_job[r]])
    return rows


#: Most distinct co-runner signatures whose speed factors one memo (:func:`_factor_memo`) keeps,
#: and the key words they may take in all (a row's key: its class, then per shared node its
#: co-runner classes with their counts).
MEMO_ROWS = 1024
MEMO_WORDS = 16 * MEMO_ROWS
#: :func:`_factor_memo`: an open-addressing table of signature numbers ``(2 * MEMO_ROWS,)``,
#: each signature's hash, where its key words start ``(MEMO_ROWS + 1,)`` and the words, its
#: speed factors ``(MEMO_ROWS, S)``, how many signatures are kept ``(1,)`` and a row's key
#: being built.
FactorMemo = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                   np.ndarray]


@njit(cache=True)
def _factor_memo(draws: int) -> FactorMemo:
    """An empty memo of speed factors under ``draws`` pair tables, for :func:`_state_values`
    (valid while the tables are the same)."""
    return (np.full(2 * MEMO_ROWS, -1, np.int64), np.empty(MEMO_ROWS, np.uint64),
            np.zeros(MEMO_ROWS + 1, np.int64), np.empty(MEMO_WORDS, np.int64),
            np.empty((MEMO_ROWS, max(draws, 1))), np.zeros(1, np.int64),
            np.empty(MEMO_WORDS, np.int64))


@uncounted
def _row_factors(by_draw: np.ndarray, r: int, work: ScoreWork, factor: np.ndarray,
                 total: np.ndarray) -> None:
    """Row ``r``'s speed factor (:func:`_state_rows` wrote it to ``work``) under each pair table
    ``by_draw[:, :, d]``, written to ``factor`` ``(S,)``: ``exp`` of its worst node's summed
    pair effects where that is below 0, else 1 (a row goes at the pace of its worst node).
    ``total``: an ``(S,)`` work array."""
    own, row_start, first, partners, counts = work[2], work[4], work[6], work[7], work[8]
    draws = factor.size
    factor[:] = 0.0  # the worst node's log factor first
    for e in range(row_start[r], row_start[r + 1]):
        if first[e] == first[e + 1]:  # alone on its node: nothing to add
            continue
        total[:] = 0.0
        for i in range(first[e], first[e + 1]):
            pair = by_draw[own[e], partners[i]]
            for d in range(draws):
                total[d] += pair[d] * counts[i]
        for d in range(draws):
            factor[d] = min(factor[d], total[d])
    for d in range(draws):
        factor[d] = np.exp(factor[d]) if factor[d] < 0.0 else 1.0


@uncounted
def _memo_row(by_draw: np.ndarray, r: int, work: ScoreWork, memo: FactorMemo,
              total: np.ndarray, scratch: np.ndarray) -> int:
    """The memo's signature number of row ``r``'s speed factors (:func:`_row_factors`), found
    by the row's key (its class, then per node it shares its co-runner classes and counts, in
    order: the factors' every input, so equal keys give equal factors to the bit) or entered
    now; -1 where the memo is full or the key too long, with the factors written to
    ``scratch`` ``(S,)`` instead. ``total``: an ``(S,)`` work array."""
    own, row_start, first, partners, counts = work[2], work[4], work[6], work[7], work[8]
    table, hashes, starts, words, factors, used, key = memo
    length = 1
    key[0] = own[row_start[r]]
    for e in range(row_start[r], row_start[r + 1]):
        found = first[e + 1] - first[e]
        if found == 0:
            continue
        if length + 1 + 2 * found > key.size:
            _row_factors(by_draw, r, work, scratch, total)
            return -1
        key[length] = found
        length += 1
        for i in range(first[e], first[e + 1]):
            key[length], key[length + 1] = partners[i], np.int64(counts[i])
            length += 2
    h = _FNV_OFFSET
    for w in range(length):
        h = fnv1a_step(h, np.uint64(key[w]))
    mask = table.size - 1
    slot = np.int64(h & np.uint64(mask))
    while table[slot] >= 0:
        m = table[slot]
        if hashes[m] == h and starts[m + 1] - starts[m] == length:
            same = True
            for w in range(length):
                if words[starts[m] + w] != key[w]:
                    same = False
                    break
            if same:
                return m
        slot = (slot + 1) & mask
    m = used[0]
    if m >= hashes.size or starts[m] + length > words.size:
        _row_factors(by_draw, r, work, scratch, total)
        return -1
    _row_factors(by_draw, r, work, factors[m], total)
    for w in range(length):
        words[starts[m] + w] = key[w]
    starts[m + 1] = starts[m] + length
    hashes[m] = h
    table[slot] = m
    used[0] = m + 1
    return m


@uncounted
def _state_values(by_draw: np.ndarray, rows: int, work: ScoreWork, empty_powered: np.ndarray,
                  empty_total: float, num_jobs: int, exponent: float,
                  sums: tuple[np.ndarray, np.ndarray, np.ndarray], memo: FactorMemo) -> None:
    """The fitness of the state whose rows :func:`_state_rows` wrote to ``work`` under each
    pair table ``by_draw[:, :, d]`` (``(K, K, S)``; ``K = 0``: none), written to ``sums[0]``
    ``(S,)``: the power mean over jobs of ``speedup * exp(worst-node log slowdown) + 0.001``,
    the jobs without GPUs counted by ``empty_powered`` ``(J,)`` and ``empty_total``
    (:func:`empty_row_terms`). A row that shares no node adds its term as read; a row that
    shares one, its speedup times its speed factors (:func:`_row_factors`: 1 where it is not
    slowed, which leaves the speedup as it is), kept in ``memo`` (:func:`_factor_memo`, for
    ``by_draw``) by the row's co-runner signature, since many rows share one (in a full
    cluster, ``exp`` of every row under every draw costs more than the rest). The draws are
    the innermost loop; each draw's sums run term by term in the order of one draw's.
    ``sums``: three ``(S,)`` work arrays."""
    row_job, row_speedup = work[3], work[5]
    row_alone_term, row_shares = work[9], work[10]
    powered, scratch, total = sums
    factors = memo[4]
    draws = powered.size
    powered[:] = empty_total
    for r in range(rows):
        if not row_shares[r]:
            for d in range(draws):
                powered[d] += row_alone_term[r]
            continue
        m = _memo_row(by_draw, r, work, memo, total, scratch)
        factor = scratch if m < 0 else factors[m]
        empty = empty_powered[row_job[r]]
        speedup = row_speedup[r]
        for d in range(draws):
            powered[d] += _power(speedup * factor[d] + 1e-3, exponent) - empty
    for d in range(draws):
        powered[d] = _power(powered[d] / max(num_jobs, 1), 1.0 / exponent)


@uncounted
def _plain_value(j: np.ndarray, n: np.ndarray, v: np.ndarray, lo: int, hi: int, arrays: Arrays,
                 numbers: Numbers, empty_powered: np.ndarray, empty_total: float,
                 stamp: np.ndarray, stamp_id: int) -> float:
    """The fitness of the state whose entries are ``lo:hi`` of ``(j, n, v)`` with no pair table
    (``K = 0``): what :func:`_state_rows` and :func:`_state_values` give there (no row shares a
    class, so each adds its term as read), in one pass over the entries with the same
    arithmetic in the same order, so to the bit (the rule search's, and bo's before any pair
    effect is learned). ``stamp``: ``(N,)``, with ``stamp_id`` distinct per state read."""
    base, base_nodes, speedup_tables, penalty = arrays[0], arrays[4], arrays[5], arrays[6]
    num_jobs, scale, exponent = numbers[0], numbers[5], numbers[6]
    powered = empty_total
    at = lo
    while at < hi:
        jj = j[at]
        at, nodes, replicas, changed, _ = _row_reads(j, n, v, at, hi, jj, base, base_nodes,
                                                     stamp, stamp_id)
        read = speedup_tables[jj, nodes, replicas]
        speedup = read * scale * penalty[jj] if changed else read * scale
        powered += _power(speedup + 1e-3, exponent) - empty_powered[jj]
    return _power(powered / max(num_jobs, 1), 1.0 / exponent)


@njit(cache=True)
def scores(p: np.ndarray, j: np.ndarray, n: np.ndarray, v: np.ndarray, size: int,
           arrays: Arrays, numbers: Numbers, tables: np.ndarray) -> np.ndarray:
    """The fitness of each of the ``size`` states ``(p, j, n, v)`` under each pair table of
    ``tables`` ``(S, K, K)`` (``K = 0``: none), ``(S, size)``: the power mean (``exponent``,
    nonzero) over jobs of ``speedup * exp(log slowdown) + 0.001``, the speedup penalised where
    the job's row differs from the status quo (``AllocationProblem.fitness`` times the worst-node
    pair factor, summed over the nonzero rows only). Each state's rows and co-runner lists are
    read once (:func:`_state_rows`), then scored under every draw (:func:`_state_values`)."""
    num_jobs, num_nodes, exponent = numbers[0], numbers[1], numbers[6]
    draws, classes = max(tables.shape[0], 1), tables.shape[1]
    empty_powered, _, empty_total, _ = empty_row_terms(arrays[5], arrays[4], arrays[6],
                                                       numbers[5], exponent)
    bounds = np.searchsorted(p, np.arange(size + 1))
    longest = 0
    for s in range(size):
        longest = max(longest, bounds[s + 1] - bounds[s])
    work = _score_work(num_jobs, num_nodes, classes, longest)
    by_draw = np.ascontiguousarray(tables.transpose(1, 2, 0))                  # (K, K, S)
    sums = (np.empty(draws), np.empty(draws), np.empty(draws))
    memo = _factor_memo(draws)
    out = np.empty((draws, size))
    for s in range(size):
        if classes == 0:  # every draw the same
            out[:, s] = _plain_value(j, n, v, bounds[s], bounds[s + 1], arrays, numbers,
                                     empty_powered, empty_total, work[0], s)
            continue
        rows = _state_rows(j, n, v, bounds[s], bounds[s + 1], arrays, numbers, classes,
                           empty_powered, work, s)
        _state_values(by_draw, rows, work, empty_powered, empty_total, num_jobs, exponent, sums,
                      memo)
        out[:, s] = sums[0]
    return out


@njit(cache=True)
def _room(store: Store, needed: int) -> Store:
    """``store`` with room for ``needed`` entries (longer arrays, at least doubled, if not)."""
    if needed <= store[0].size:
        return store
    size = max(2 * store[0].size, needed)
    larger = (np.empty(size, np.int64), np.empty(size, np.int64), np.empty(size, np.int64))
    for a in range(3):
        larger[a][: store[a].size] = store[a]
    return larger


@njit(cache=True)
def _children(parents: Store, bounds: np.ndarray, size: int, first: np.ndarray,
              second: np.ndarray, point: np.ndarray, arrays: Arrays, numbers: Numbers,
              rng: np.ndarray, store: Store, stamp_id: int) -> tuple[Store, np.ndarray]:
    """The ``size`` children of the parents ``(j, n, v)`` (``bounds``: ``(size + 1,)``): child
    ``c`` takes jobs ``< point[c]`` from parent ``first[c]`` and the rest from ``second[c]``,
    then the artifact's mutation, all children in turn; then each is repaired (an over-limit
    job's node order drawn from ``rng``) and its zeros dropped, in turn. Written to ``store``
    (grown as needed); returns it and the children's bounds ``(size + 1,)``. ``stamp_id`` and
    the ``size - 1`` after it: distinct per state repaired."""
    base_n, base_v, base_bounds, max_replicas = arrays[1], arrays[2], arrays[3], arrays[7]
    num_jobs, num_nodes, capacity, max_nodes, avoid = (numbers[0], numbers[1], numbers[2],
                                                       numbers[3], numbers[4])
    longest = 0
    for s in range(size):
        longest = max(longest, bounds[s + 1] - bounds[s])
    cdf = join_cdf(num_jobs)
    work = mutation_work(2 * longest, num_nodes, base_bounds[num_jobs], cdf.size - 1)
    log_reset = log_miss(numbers[7])
    out_j, out_n, out_v = work[6], work[7], work[8]
    child_bounds = np.empty(size + 1, np.int64)
    child_bounds[0] = 0
    at = 0
    for c in range(size):
        x_lo, x_hi, y_lo, y_hi = crossed_spans(parents[0], bounds, first[c], second[c], point[c])
        length = mutate_spans(parents[0], parents[1], parents[2], x_lo, x_hi, y_lo, y_hi,
                              num_jobs, num_nodes, base_n, base_v, base_bounds, capacity,
                              log_reset, numbers[8], cdf, rng, work)
        store = _room(store, at + length)
        store[0][at: at + length] = out_j[:length]
        store[1][at: at + length] = out_n[:length]
        store[2][at: at + length] = out_v[:length]
        at += length
        child_bounds[c + 1] = at
    keys = np.empty(at)
    scratch = repair_scratch(num_nodes)
    for c in range(size):
        repair_state(store[0], store[1], store[2], child_bounds[c], child_bounds[c + 1],
                     num_jobs, keys, True, rng, max_replicas, max_nodes, capacity, avoid,
                     scratch, stamp_id + c)
    kept = 0
    for c in range(size):
        lo, hi = child_bounds[c], child_bounds[c + 1]
        child_bounds[c] = kept
        for e in range(lo, hi):
            if store[2][e] > 0:
                store[0][kept], store[1][kept], store[2][kept] = (store[0][e], store[1][e],
                                                                  store[2][e])
                kept += 1
    child_bounds[size] = kept
    return store, child_bounds


@njit(cache=True)
def _survivors(parents: Store, bounds: np.ndarray, children: Store, child_bounds: np.ndarray,
               keep: np.ndarray, size: int) -> tuple[Store, np.ndarray]:
    """The states ``keep`` (indices below ``size``: parents; from ``size`` on: children) in
    that order, and their bounds ``(len(keep) + 1,)``."""
    total = 0
    for r in keep:
        total += (bounds[r + 1] - bounds[r] if r < size
                  else child_bounds[r - size + 1] - child_bounds[r - size])
    out = (np.empty(total, np.int64), np.empty(total, np.int64), np.empty(total, np.int64))
    out_bounds = np.empty(keep.size + 1, np.int64)
    out_bounds[0] = 0
    at = 0
    for i in range(keep.size):
        r = keep[i]
        source, lo, hi = ((parents, bounds[r], bounds[r + 1]) if r < size else
                          (children, child_bounds[r - size], child_bounds[r - size + 1]))
        for e in range(lo, hi):
            out[0][at], out[1][at], out[2][at] = source[0][e], source[1][e], source[2][e]
            at += 1
        out_bounds[i + 1] = at
    return out, out_bounds


@njit(cache=True)
def _fitness(states: Store, bounds: np.ndarray, arrays: Arrays, numbers: Numbers,
             table: np.ndarray, work: ScoreWork, stamp_id: int, empty_powered: np.ndarray,
             empty_total: float, memo: FactorMemo) -> np.ndarray:
    """:func:`scores` under the one pair table ``table`` ``(K, K, 1)`` of the states ``states``
    (``bounds``: ``(S + 1,)``), ``(S,)``, with ``work`` sized for the longest; ``stamp_id``
    and the ``S - 1`` after it: distinct per state. ``empty_powered``, ``empty_total``: the
    problem's :func:`empty_row_terms` (the same for every generation of a search, so taken
    once per search); ``memo``: :func:`_factor_memo` for ``table``."""
    num_jobs, exponent = numbers[0], numbers[6]
    sums = (np.empty(1), np.empty(1), np.empty(1))
    out = np.empty(bounds.size - 1)
    for s in range(out.size):
        if table.shape[0] == 0:
            out[s] = _plain_value(states[0], states[1], states[2], bounds[s], bounds[s + 1],
                                  arrays, numbers, empty_powered, empty_total, work[0],
                                  stamp_id + s)
            continue
        rows = _state_rows(states[0], states[1], states[2], bounds[s], bounds[s + 1], arrays,
                           numbers, table.shape[0], empty_powered, work, stamp_id + s)
        _state_values(table, rows, work, empty_powered, empty_total, num_jobs, exponent, sums,
                      memo)
        out[s] = sums[0][0]
    return out


@njit(cache=True)
def evolve(p: np.ndarray, j: np.ndarray, n: np.ndarray, v: np.ndarray, size: int,
           generations: int, arrays: Arrays, numbers: Numbers, rng: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The elitist search from the ``size`` repaired states ``(p, j, n, v)`` (int64, in (state,
    job, node) order) for ``generations`` generations: each generation ``size`` children (parents
    by binary tournaments on fitness, one-point crossover over jobs, mutation, repair:
    :func:`_children`) and the fittest ``size`` of parents and children kept (ties: parents
    first, then by index). Returns the final population's entries (best first) and its fitness
    ``(size,)``; ``rng`` is advanced in place."""
    num_jobs, num_nodes, capacity = numbers[0], numbers[1], numbers[2]
    pairs = arrays[9]
    table = pairs.reshape((pairs.shape[0], pairs.shape[1], 1))
    bounds = np.searchsorted(p, np.arange(size + 1))
    parents = (j.copy(), n.copy(), v.copy())
    # A repaired state holds at most one entry per GPU; the initial ones may hold more.
    longest = num_nodes * capacity
    for s in range(size):
        longest = max(longest, bounds[s + 1] - bounds[s])
    work = _score_work(num_jobs, num_nodes, pairs.shape[0], longest)
    empty_powered, _, empty_total, _ = empty_row_terms(arrays[5], arrays[4], arrays[6],
                                                       numbers[5], numbers[6])
    memo = _factor_memo(1)
    fitness = _fitness(parents, bounds, arrays, numbers, table, work, 0, empty_powered,
                       empty_total, memo)
    stamp_id = size
    store = (np.empty(2 * j.size + 64, np.int64), np.empty(2 * j.size + 64, np.int64),
             np.empty(2 * j.size + 64, np.int64))
    first = np.empty(size, np.int64)
    second = np.empty(size, np.int64)
    point = np.empty(size, np.int64)
    for _ in range(generations):
        for parent in (first, second):
            for i in range(size):
                a, b = below(rng, size), below(rng, size)
                parent[i] = a if fitness[a] >= fitness[b] else b
        for i in range(size):
            point[i] = below(rng, num_jobs + 1)
        store, child_bounds = _children(parents, bounds, size, first, second, point, arrays,
                                        numbers, rng, store, stamp_id)
        merged = np.concatenate((fitness, _fitness(store, child_bounds, arrays, numbers, table,
                                                   work, stamp_id, empty_powered, empty_total,
                                                   memo)))
        stamp_id += size
        keep = np.argsort(-merged, kind="mergesort")[:size]
        parents, bounds = _survivors(parents, bounds, store, child_bounds, keep, size)
        fitness = merged[keep]
    out_p = np.empty(bounds[size], np.int64)
    for s in range(size):
        out_p[bounds[s]: bounds[s + 1]] = s
    return out_p, parents[0], parents[1], parents[2], fitness

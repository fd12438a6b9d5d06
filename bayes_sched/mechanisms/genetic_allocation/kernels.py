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
repair exactly given the same draws; :func:`mutate_entries` draws inside the kernel from the
search's own compiled generator (:func:`uniform`: xoshiro256**, its state a ``(4,)`` uint64 array
the caller seeds from the search's numpy generator with :func:`seeded_state` and the kernel
advances), so one seed gives one result, but not the numpy mutation's draws. The fused NSGA-II
loop (:mod:`~bayes_sched.mechanisms.genetic_allocation.generations`) calls these kernels from
compiled code. Only the search imports this module, lazily: importing numba is slow.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

#: The decorator of the kernels called per row, per event or per state: compiled as ``njit`` but
#: without numba's reference counting (``_nrt=False``). With it, every array a compiled function
#: receives (tuples' arrays too) has its count raised on entry and lowered on exit, each an atomic
#: operation, and a function inlined in a loop pays that on every pass: on these loops, which read
#: a few entries per call, more than the work. Only for functions that allocate no array (numba
#: refuses to compile one that does) and return none (the caller would release it once more
#: than it was counted): each returns numbers or nothing and writes into its caller's arrays.
_NO_REFCOUNTS: dict[str, Any] = {"_nrt": False}
uncounted = njit(cache=True, **_NO_REFCOUNTS)

#: Multiplier and start of the 64-bit FNV-1a hash (:func:`fnv1a_step`).
_FNV_PRIME = np.uint64(0x100000001B3)
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)


def seeded_state(rng: np.random.Generator) -> np.ndarray:
    """A fresh state ``(4,)`` uint64 for the compiled generator, drawn from ``rng`` (never all
    zero, which xoshiro256** cannot leave)."""
    state = rng.integers(0, 2**64 - 1, size=4, dtype=np.uint64, endpoint=True)
    state[0] |= np.uint64(1)
    return state


@njit(cache=True, inline="always")
def _rotl(x: np.uint64, k: int) -> np.uint64:
    return (x << np.uint64(k)) | (x >> np.uint64(64 - k))


@njit(cache=True, inline="always")
def next_u64(state: np.ndarray) -> np.uint64:
    """The next 64 random bits of xoshiro256** (Blackman and Vigna), advancing ``state``
    (``(4,)`` uint64) in place: a few machine instructions where numba's ``np.random`` costs a call
    into its thread-local generator per draw."""
    result = _rotl(state[1] * np.uint64(5), 7) * np.uint64(9)
    shifted = state[1] << np.uint64(17)
    state[2] ^= state[0]
    state[3] ^= state[1]
    state[1] ^= state[2]
    state[0] ^= state[3]
    state[2] ^= shifted
    state[3] = _rotl(state[3], 45)
    return result


@njit(cache=True, inline="always")
def uniform(state: np.ndarray) -> float:
    """A uniform draw in ``[0, 1)`` (53 random bits) from the generator ``state``."""
    return float(next_u64(state) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True, inline="always")
def below(state: np.ndarray, count: int) -> int:
    """A uniform integer in ``[0, count)`` (``count`` small against 2**53)."""
    return min(int(uniform(state) * count), count - 1)


@njit(cache=True)
def log_miss(prob: float) -> float:
    """``log(1 - prob)``, the argument :func:`gap` takes for events of probability ``prob``."""
    return np.log1p(-min(prob, 1.0)) if prob < 1.0 else -np.inf


@uncounted
def gap(state: np.ndarray, log_stay: float) -> int:
    """Trials that fail before the next success, for independent trials each succeeding with
    probability ``1 - exp(log_stay)``: geometric, drawn by inversion, so a run of rare events costs
    one draw per event rather than one per trial (``2**62`` where success is impossible)."""
    if log_stay == 0.0:
        return 2**62
    count = np.floor(np.log(1.0 - uniform(state)) / log_stay)
    return int(count) if count < 2.0**62 else 2**62


@uncounted
def fnv1a_step(h: np.uint64, word: np.uint64) -> np.uint64:
    """One step of the 64-bit FNV-1a hash: ``h`` (from :data:`_FNV_OFFSET`) with ``word`` mixed
    in. The state hashes (:func:`state_hash`) and bo's co-location memo
    (:mod:`bayes_sched.policies.bo_search`) hash their words with it."""
    return (h ^ word) * _FNV_PRIME


@uncounted
def state_hash(j: np.ndarray, n: np.ndarray, v: np.ndarray, lo: int, hi: int,
               num_nodes: int) -> np.uint64:
    """A 64-bit hash of the state whose entries are ``lo:hi`` of ``(j, n, v)`` (FNV-1a over the
    words ``(j * num_nodes + n) << 16 | v``, as the row keys of
    :func:`~bayes_sched.mechanisms.genetic_allocation.sparse._row_keys_of`), for finding repeated
    states; equal states hash alike, and the callers compare the entries where hashes meet."""
    h = _FNV_OFFSET
    for e in range(lo, hi):
        h = fnv1a_step(h, np.uint64(((j[e] * num_nodes + n[e]) << 16) | v[e]))
    return h ^ (h >> np.uint64(29))


#: Scratch of :func:`mutate_state`: the kept entries' jobs, nodes and GPUs; GPUs and jobs per
#: node; grown keys; the mutated entries' jobs, nodes and GPUs (:func:`mutation_work`).
MutationWork = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                     np.ndarray, np.ndarray, np.ndarray]


@njit(cache=True)
def join_cdf(num_jobs: int) -> np.ndarray:
    """Cumulative probabilities of Binomial(``num_jobs``, 1 / ``num_jobs``) at 0, 1, ...: how
    many jobs grow onto one free node in :func:`mutate_state`. Cut where a count's probability
    falls below 1e-17, the last value set to 1 (an inversion then always ends)."""
    if num_jobs <= 1:
        return np.ones(1) if num_jobs == 0 else np.array([0.0, 1.0])
    prob = 1.0 / num_jobs
    mass = np.exp(num_jobs * np.log1p(-prob))
    cdf = np.empty(num_jobs + 1)
    total = 0.0
    for k in range(num_jobs + 1):
        total += mass
        cdf[k] = min(total, 1.0)
        if k == num_jobs or total >= 1.0 or (k >= 1 and mass < 1e-17):
            cdf[k] = 1.0
            return cdf[: k + 1]
        mass *= (num_jobs - k) / (k + 1) * prob / (1.0 - prob)
    return cdf


@njit(cache=True)
def mutation_work(entries: int, num_nodes: int, base_total: int, joins: int) -> MutationWork:
    """Scratch for :func:`mutate_state` on states of at most ``entries`` entries, with a status
    quo of ``base_total`` entries and at most ``joins`` jobs growing onto a node
    (``join_cdf(J).size - 1``)."""
    kept = entries + base_total
    grown = kept + num_nodes * joins
    return (np.empty(kept, np.int64), np.empty(kept, np.int64), np.empty(kept, np.int64),
            np.zeros(num_nodes, np.int64), np.zeros(num_nodes, np.int64),
            np.empty(grown, np.int64), np.empty(kept + grown, np.int64),
            np.empty(kept + grown, np.int64), np.empty(kept + grown, np.int64))


@uncounted
def _kept_rows(j: np.ndarray, n: np.ndarray, v: np.ndarray, lo: int, hi: int, next_lo: int,
               next_hi: int, num_jobs: int, base_n: np.ndarray, base_v: np.ndarray,
               base_bounds: np.ndarray, log_reset: float, zero_prob: float, state: np.ndarray,
               work: MutationWork) -> int:
    """The reset and drop steps of :func:`mutate_spans` on the state whose entries are ``lo:hi``
    then ``next_lo:next_hi`` of ``(j, n, v)``: the entries kept, written to ``work``'s first
    three arrays (their GPUs and jobs per node counted in the next two); how many."""
    kj, kn, kv, load, jobs_on = work[0], work[1], work[2], work[3], work[4]
    for node in range(load.size):
        load[node] = 0
        jobs_on[node] = 0
    count = 0
    e = lo
    # Geometric gaps between the reset rows (over all rows) and between the rows whose nodes
    # may drop (over the rows with entries): the draws follow the events, not the rows.
    reset_at = gap(state, log_reset)
    log_zero = log_miss(zero_prob)
    zero_in = gap(state, log_zero)
    while True:
        if e == hi and next_lo < next_hi:  # on to the second span (a job's row is in one)
            e, hi, next_lo = next_lo, next_hi, next_hi
        entry_job = j[e] if e < hi else num_jobs
        job = min(entry_job, reset_at)
        if job >= num_jobs:
            return count
        row_hi = e
        while row_hi < hi and j[row_hi] == job:
            row_hi += 1
        reset = reset_at == job
        if reset:
            src_lo, src_hi = base_bounds[job], base_bounds[job + 1]
            reset_at = job + 1 + gap(state, log_reset)
        else:
            src_lo, src_hi = e, row_hi
        e = row_hi
        if src_lo == src_hi:
            continue
        zero = zero_in == 0
        zero_in = gap(state, log_zero) if zero else zero_in - 1
        for s in range(src_lo, src_hi):
            if zero and uniform(state) < zero_prob:
                continue
            node = base_n[s] if reset else n[s]
            kj[count], kn[count], kv[count] = job, node, base_v[s] if reset else v[s]
            load[node] += kv[count]
            jobs_on[node] += 1
            count += 1


@uncounted
def _heap_sort(keys: np.ndarray, count: int) -> None:
    """Sort ``keys[:count]`` in place (heapsort: no scratch, so no allocation)."""
    for start in range(count // 2 - 1, -1, -1):
        _sift_down(keys, start, count)
    for end in range(count - 1, 0, -1):
        keys[0], keys[end] = keys[end], keys[0]
        _sift_down(keys, 0, end)


@njit(cache=True, inline="always", **_NO_REFCOUNTS)
def _sift_down(keys: np.ndarray, root: int, end: int) -> None:
    """Move ``keys[root]`` down the max-heap ``keys[:end]`` to its place."""
    while True:
        child = 2 * root + 1
        if child >= end:
            return
        if child + 1 < end and keys[child + 1] > keys[child]:
            child += 1
        if keys[root] >= keys[child]:
            return
        keys[root], keys[child] = keys[child], keys[root]
        root = child


@uncounted
def _sorted_distinct(keys: np.ndarray, count: int) -> int:
    """Sort ``keys[:count]`` in place and drop repeats; how many remain."""
    if count > 32:
        _heap_sort(keys, count)
    else:
        for i in range(1, count):
            key = keys[i]
            at = i
            while at > 0 and keys[at - 1] > key:
                keys[at] = keys[at - 1]
                at -= 1
            keys[at] = key
    distinct = 0
    for i in range(count):
        if i == 0 or keys[i] != keys[distinct - 1]:
            keys[distinct] = keys[i]
            distinct += 1
    return distinct


@uncounted
def mutate_state(j: np.ndarray, n: np.ndarray, v: np.ndarray, lo: int, hi: int, num_jobs: int,
                 num_nodes: int, base_n: np.ndarray, base_v: np.ndarray,
                 base_bounds: np.ndarray, capacity: int, log_reset: float, zero_prob: float,
                 cdf: np.ndarray, state: np.ndarray, work: MutationWork) -> int:
    """The artifact's mutation (``AllocationProblem._mutate_sparse``) of one state, its entries
    ``lo:hi`` of ``(j, n, v)`` (:func:`mutate_spans` of that one span)."""
    return mutate_spans(j, n, v, lo, hi, hi, hi, num_jobs, num_nodes, base_n, base_v,
                        base_bounds, capacity, log_reset, zero_prob, cdf, state, work)


@uncounted
def mutate_spans(j: np.ndarray, n: np.ndarray, v: np.ndarray, lo: int, hi: int, next_lo: int,
                 next_hi: int, num_jobs: int, num_nodes: int, base_n: np.ndarray,
                 base_v: np.ndarray, base_bounds: np.ndarray, capacity: int, log_reset: float,
                 zero_prob: float, cdf: np.ndarray, state: np.ndarray, work: MutationWork) -> int:
    """The artifact's mutation (``AllocationProblem._mutate_sparse``) of one state, its entries
    ``lo:hi`` then ``next_lo:next_hi`` of ``(j, n, v)`` (in (job, node) order, the first span's
    jobs below the second's: a crossed child read from its two parents without copying it);
    the mutated entries (zeros dropped, in order) go to ``work``'s last three arrays
    (:func:`mutation_work`, sized for the spans' entries); returns how many.

    Per job row: with probability ``1 - exp(log_reset)`` (:func:`log_miss` of the reset
    probability), back to the status quo (its entries ``base_n[a:b]``, ``base_v[a:b]`` for ``a,
    b = base_bounds[j], base_bounds[j + 1]``); with ``zero_prob``, each of its nodes dropped with
    ``zero_prob``. On every node with fewer than ``capacity`` GPUs in use: each job grows onto it
    with probability 1 / ``num_jobs`` (a count from ``cdf``, :func:`join_cdf`, then that many
    distinct jobs), and each job already there grows with one over the number of jobs there; a
    grown entry takes a uniform count from its current one up to ``capacity``. The draws follow
    the events, not the rows: the reset rows and the dropping rows (among those with entries)
    by geometric gaps. Draws come from the generator ``state``, advanced in place.
    """
    kj, kn, kv, load, jobs_on, grow, out_j, out_n, out_v = work
    count = _kept_rows(j, n, v, lo, hi, next_lo, next_hi, num_jobs, base_n, base_v,
                       base_bounds, log_reset, zero_prob, state, work)
    grown = 0
    for node in range(num_nodes):
        if load[node] >= capacity:
            continue
        u = uniform(state)
        picks = 0
        while u >= cdf[picks]:
            picks += 1
        start = grown
        while grown - start < picks:
            key = below(state, num_jobs) * num_nodes + node
            repeat = False
            for g in range(start, grown):
                repeat = repeat or grow[g] == key
            if not repeat:
                grow[grown] = key
                grown += 1
    for e in range(count):
        node = kn[e]
        if load[node] < capacity and uniform(state) * jobs_on[node] < 1.0:
            grow[grown] = kj[e] * num_nodes + node
            grown += 1
    grown = _sorted_distinct(grow, grown)
    # Merge the kept entries and the grown keys, both in order; a grown entry draws from its
    # current count.
    a = 0
    b = 0
    out = 0
    while a < count or b < grown:
        entry_key = kj[a] * num_nodes + kn[a] if a < count else -1
        if b < grown and (a >= count or grow[b] <= entry_key):
            key = grow[b]
            current = 0
            if a < count and key == entry_key:
                current = kv[a]
                a += 1
            b += 1
            value = current + below(state, capacity + 1 - current)
            if value == 0:
                continue
            out_j[out], out_n[out], out_v[out] = key // num_nodes, key % num_nodes, value
        else:
            out_j[out], out_n[out], out_v[out] = kj[a], kn[a], kv[a]
            a += 1
        out += 1
    return out


@njit(cache=True)
def mutate_entries(p: np.ndarray, j: np.ndarray, n: np.ndarray, v: np.ndarray, size: int,
                   num_jobs: int, num_nodes: int, base_n: np.ndarray, base_v: np.ndarray,
                   base_bounds: np.ndarray, capacity: int, reset_prob: float, zero_prob: float,
                   state: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`mutate_state` of each of the states ``(size, num_jobs, num_nodes)`` given by their
    entries ``(p, j, n, v)`` (each ``(K,)``, int64, in (state, job, node) order), with reset
    probability ``reset_prob``; the mutated entries, in order, zeros dropped."""
    bounds = np.searchsorted(p, np.arange(size + 1))
    longest = 0
    for s in range(size):
        longest = max(longest, bounds[s + 1] - bounds[s])
    cdf = join_cdf(num_jobs)
    work = mutation_work(longest, num_nodes, base_bounds[num_jobs], cdf.size - 1)
    log_reset = log_miss(reset_prob)
    parts = []
    total = 0
    for s in range(size):
        count = mutate_state(j, n, v, bounds[s], bounds[s + 1], num_jobs, num_nodes, base_n,
                             base_v, base_bounds, capacity, log_reset, zero_prob, cdf, state,
                             work)
        parts.append((work[6][:count].copy(), work[7][:count].copy(), work[8][:count].copy()))
        total += count
    out_p = np.empty(total, np.int64)
    out_j = np.empty(total, np.int64)
    out_n = np.empty(total, np.int64)
    out_v = np.empty(total, np.int64)
    at = 0
    for s in range(size):
        part_j, part_n, part_v = parts[s]
        out_p[at: at + part_j.size] = s
        out_j[at: at + part_j.size] = part_j
        out_n[at: at + part_j.size] = part_n
        out_v[at: at + part_j.size] = part_v
        at += part_j.size
    return out_p, out_j, out_n, out_v


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
    bounds = np.searchsorted(p, np.arange(size + 1))
    scratch = repair_scratch(num_nodes)
    unused = np.zeros(4, np.uint64)
    for pp in range(size):
        repair_state(j, n, out, bounds[pp], bounds[pp + 1], num_jobs, draws, False,
                     unused, max_replicas, max_nodes, capacity,
                     avoid_interference, scratch, pp)
    return out


@njit(cache=True)
def repair_scratch(num_nodes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Work arrays :func:`repair_state` reuses across states: a per-node stamp and running count,
    and a node order of one job, ``(num_nodes + 1,)`` each."""
    return (np.full(num_nodes + 1, -1, np.int64), np.zeros(num_nodes + 1, np.int64),
            np.empty(num_nodes + 1, np.int64))


@uncounted
def _stable_order(keys: np.ndarray, lo: int, hi: int, order: np.ndarray) -> int:
    """The indices ``lo:hi`` ordered by ``keys`` (ties by index: ``lo + np.argsort(keys[lo:hi],
    kind="mergesort")``), written to ``order[:hi - lo]`` by insertion (a job's entries, one per
    node at most, so ``order`` of :func:`repair_scratch` holds them); returns ``hi - lo``."""
    count = hi - lo
    if count > order.size:
        raise ValueError("a job has more entries than nodes: its entries repeat a node")
    for i in range(count):
        index = lo + i
        key = keys[index]
        at = i
        while at > 0 and keys[order[at - 1]] > key:
            order[at] = order[at - 1]
            at -= 1
        order[at] = index
    return count


@uncounted
def repair_state(j: np.ndarray, n: np.ndarray, out: np.ndarray, lo_state: int, hi_state: int,
                 num_jobs: int, keys: np.ndarray, draw: bool, rng: np.ndarray,
                 max_replicas: np.ndarray, max_nodes: int, capacity: int,
                 avoid_interference: bool, scratch: tuple[np.ndarray, np.ndarray, np.ndarray],
                 stamp_id: int) -> None:
    """Repair one state, its entries ``lo_state:hi_state`` of ``(j, n, out)`` (in (job, node)
    order), in place in ``out`` (:func:`repair_values`): a job over its limits is trimmed in the
    order of its entries' ``keys`` (with ``draw``, first drawn from the generator ``rng`` for that
    job's entries alone). ``scratch``: :func:`repair_scratch`; ``stamp_id``: distinct per state
    repaired with one scratch."""
    stamp, running, order_buffer = scratch
    if avoid_interference:
        lo = lo_state
        while lo < hi_state:
            hi = lo + 1
            while hi < hi_state and j[hi] == j[lo]:
                hi += 1
            if hi - lo > 1:
                for e in range(lo, hi):
                    if stamp[n[e]] == stamp_id:
                        out[e] = 0
                    else:
                        stamp[n[e]] = stamp_id
            lo = hi
    lo = lo_state
    while lo < hi_state:
        jj = j[lo]
        hi = lo + 1
        while hi < hi_state and j[hi] == jj:
            hi += 1
        replicas = 0
        nodes = 0
        for e in range(lo, hi):
            replicas += out[e]
            if out[e] > 0:
                nodes += 1
        if replicas > max_replicas[jj] or nodes > max_nodes:
            if draw:
                for e in range(lo, hi):
                    keys[e] = uniform(rng)
            cap = max_replicas[jj]
            total = 0
            used = 0
            for i in range(_stable_order(keys, lo, hi, order_buffer)):
                e = order_buffer[i]
                value = out[e]
                total += value
                kept = min(total, cap) - min(total - value, cap)
                if kept > 0:
                    used += 1
                out[e] = kept if used <= max_nodes else 0
        lo = hi
    # Node capacity, lower job index first (the entries' own order).
    for e in range(lo_state, hi_state):
        running[n[e]] = 0
    for e in range(lo_state, hi_state):
        value = out[e]
        total = running[n[e]] + value
        running[n[e]] = total
        out[e] = min(total, capacity) - min(total - value, capacity)


@njit(cache=True, inline="always")
def _row_reads(j: np.ndarray, n: np.ndarray, v: np.ndarray, at: int, hi: int, jj: int,
               base: np.ndarray, base_nodes: np.ndarray, stamp: np.ndarray,
               stamp_id: int) -> tuple[int, int, int, bool, int]:
    """Job ``jj``'s row of a state whose entries ``at:hi`` of ``(j, n, v)`` start at that row:
    where its entries end, its nodes and GPUs, whether it differs from ``base[jj]``, and how many
    of its nodes no earlier row of the state marked in ``stamp`` (marked now with
    ``stamp_id``)."""
    nodes = 0
    replicas = 0
    matched = 0
    changed = False
    fresh = 0
    while at < hi and j[at] == jj:
        node = n[at]
        nodes += 1
        replicas += v[at]
        if base[jj, node] == v[at]:
            matched += 1
        else:
            changed = True
        if stamp[node] != stamp_id:
            stamp[node] = stamp_id
            fresh += 1
        at += 1
    return at, nodes, replicas, changed or matched != base_nodes[jj], fresh


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
    bounds = np.searchsorted(p, np.arange(size + 1))
    for pp in range(size):
        at, hi = bounds[pp], bounds[pp + 1]
        for jj in range(num_jobs):
            at, nodes, replicas, changed, fresh = _row_reads(j, n, v, at, hi, jj, base,
                                                             base_nodes, stamp, pp)
            active[pp] += fresh
            read = tables[jj, nodes, replicas]
            table[pp, jj] = read
            speedup[pp, jj] = read * scale * penalty[jj] if changed else read * scale
    return table, speedup, active


@njit(cache=True, inline="always")
def _power(x: float, exponent: float) -> float:
    """``x ** exponent``, the common exponents without a call to ``pow``."""
    if exponent == -1.0:
        return 1.0 / x
    if exponent == 1.0:
        return x
    return x**exponent


@njit(cache=True)
def empty_row_terms(tables: np.ndarray, base_nodes: np.ndarray, penalty: np.ndarray,
                    scale: float, exponent: float) -> tuple[np.ndarray, np.ndarray, float, float]:
    """What a job without GPUs adds to :func:`score_state`'s sums, ``(J,)`` each: its powered
    term and its table read; and their totals over the jobs. A state's jobs are mostly without
    GPUs, so a state is scored from these totals and its nonzero rows alone."""
    num_jobs = base_nodes.size
    powered = np.empty(num_jobs)
    reads = np.empty(num_jobs)
    for jj in range(num_jobs):
        read = tables[jj, 0, 0]
        speedup = read * scale * penalty[jj] if base_nodes[jj] != 0 else read * scale
        powered[jj] = _power(speedup + 1e-3, exponent)
        reads[jj] = read
    return powered, reads, powered.sum(), reads.sum()


@uncounted
def score_state(j: np.ndarray, n: np.ndarray, v: np.ndarray, lo: int, hi: int, num_jobs: int,
                tables: np.ndarray, base: np.ndarray, base_nodes: np.ndarray,
                penalty: np.ndarray, scale: float, exponent: float, capacity: int,
                empty: tuple[np.ndarray, np.ndarray, float, float], stamp: np.ndarray,
                stamp_id: int) -> tuple[float, float]:
    """The two objectives of the state whose entries are ``lo:hi`` of ``(j, n, v)``
    (``AllocationProblem.objectives_sparse`` of one state, from the reads of
    :func:`table_reads`): the power mean (``exponent``, nonzero) of the penalised, scaled speedups
    plus 0.001, and the summed table speedups over the GPUs of the nodes in use. ``empty``:
    :func:`empty_row_terms` (the jobs without entries count as there; the work follows the
    entries, not the jobs); ``stamp``: ``(N,)``, with ``stamp_id`` distinct per state scored
    with it."""
    empty_powered, empty_reads, powered, summed = empty
    at = lo
    active = 0
    while at < hi:
        jj = j[at]
        at, nodes, replicas, changed, fresh = _row_reads(j, n, v, at, hi, jj, base, base_nodes,
                                                         stamp, stamp_id)
        active += fresh
        read = tables[jj, nodes, replicas]
        speedup = read * scale * penalty[jj] if changed else read * scale
        powered += _power(speedup + 1e-3, exponent) - empty_powered[jj]
        summed += read - empty_reads[jj]
    return (_power(powered / max(num_jobs, 1), 1.0 / exponent),
            summed / max(active * capacity, 1))


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
def tournament(a: np.ndarray, b: np.ndarray, coin: np.ndarray, fitness: np.ndarray,
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


@uncounted
def crossed_spans(j: np.ndarray, bounds: np.ndarray, x: int, y: int,
                  cut: int) -> tuple[int, int, int, int]:
    """The child of states ``x`` and ``y`` crossed at job ``cut`` (``x``'s rows below it,
    ``y``'s from it on), as two spans of the entries ``j`` (states delimited by ``bounds``):
    ``x``'s and ``y``'s, ``(lo, hi)`` each."""
    x_lo = bounds[x]
    x_hi = x_lo + np.searchsorted(j[bounds[x]:bounds[x + 1]], cut)
    y_lo = bounds[y] + np.searchsorted(j[bounds[y]:bounds[y + 1]], cut)
    return x_lo, x_hi, y_lo, bounds[y + 1]


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
    first = tournament(draws[0, 0], draws[0, 1], coins[0], fitness, utility, crowding)
    second = tournament(draws[1, 0], draws[1, 1], coins[1], fitness, utility, crowding)
    bounds = np.searchsorted(p, np.arange(size + 1))
    # Per child: its first parent's entries of jobs below the cut, the second's from it on.
    spans = np.empty((count, 4), np.int64)
    total = 0
    for c in range(count):
        pair = c % half
        x, y = (first[pair], second[pair]) if c < half else (second[pair], first[pair])
        x_lo, x_hi, y_lo, y_hi = crossed_spans(j, bounds, x, y, point[pair])
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

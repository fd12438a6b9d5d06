"""Allocation states by their nonzero entries, and the array helpers the allocation search shares.

A cluster state is a ``(J, N)`` array of GPUs per node for ``J`` jobs on ``N`` nodes, and a
population ``(P, J, N)``; a job holds few of many nodes, so the search
(:mod:`bayes_sched.mechanisms.genetic_allocation.search`) carries populations as their nonzero entries
(:class:`SparseStates`) and works on them with the grouped sums, merges and row keys here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: ``(p, j, n, values)`` of the nonzero entries of a ``(P, J, N)`` array (:func:`nonzero_entries`).
Entries = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class SparseStates:
    """States ``(P, J, N)`` given by their nonzero entries, as the NSGA-II search carries its
    population: a job holds few of many nodes, so a state is mostly zeros, and on a large cluster
    copying the dense array costs more than all of the search's work on the entries.

    Attributes:
        entries: ``(p, j, n, values)``, each ``(K,)``, in (state, job, node) order: what
            :func:`nonzero_entries` gives of the dense array.
        shape: ``(P, J, N)``.
    """

    entries: Entries
    shape: tuple[int, int, int]

    @classmethod
    def of(cls, states: np.ndarray) -> SparseStates:
        return cls(nonzero_entries(states), states.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def dense(self) -> np.ndarray:
        """The states as an array ``(P, J, N)`` of the entries' dtype."""
        p, j, n, v = self.entries
        out = np.zeros(self.shape, dtype=v.dtype)
        out[p, j, n] = v
        return out

    def rows(self, rows: np.ndarray) -> SparseStates:
        """``states[rows]`` for integer ``rows`` (in any order, repeats allowed)."""
        p, j, n, v = self.entries
        rows = np.asarray(rows, dtype=np.int64)
        bounds = np.searchsorted(p, np.arange(self.shape[0] + 1))
        lengths = bounds[rows + 1] - bounds[rows]
        index = _ranges(bounds[rows], lengths)
        return SparseStates((np.repeat(np.arange(rows.size, dtype=p.dtype), lengths), j[index],
                             n[index], v[index]), (rows.size, *self.shape[1:]))

    def concat(self, other: SparseStates) -> SparseStates:
        """These states, then ``other``'s (of the same jobs and nodes)."""
        (p, j, n, v), (q, k, m, w) = self.entries, other.entries
        return SparseStates(
            (np.concatenate([p, q + len(self)]), np.concatenate([j, k]), np.concatenate([n, m]),
             np.concatenate([v, w])),
            (len(self) + len(other), *self.shape[1:]))

    def crossover(self, first: np.ndarray, second: np.ndarray,
                  point: np.ndarray) -> SparseStates:
        """One-point crossover over jobs: child ``c`` takes jobs ``< point[c]`` from state
        ``first[c]`` and the rest from state ``second[c]`` (as :func:`_crossover`)."""
        _, num_jobs, _ = self.shape
        p, j, n, v = self.entries
        row = p * num_jobs + j                                     # sorted: entries are in order
        cut = np.clip(point, 0, num_jobs)
        first_start = np.searchsorted(row, first * num_jobs)
        first_end = np.searchsorted(row, first * num_jobs + cut)
        second_start = np.searchsorted(row, second * num_jobs + cut)
        second_end = np.searchsorted(row, (second + 1) * num_jobs)
        starts = np.stack([first_start, second_start], axis=1).reshape(-1)
        lengths = np.stack([first_end - first_start, second_end - second_start],
                           axis=1).reshape(-1)
        index = _ranges(starts, lengths)
        child = np.repeat(np.arange(len(first), dtype=p.dtype), lengths.reshape(-1, 2).sum(1))
        return SparseStates((child, j[index], n[index], v[index]), (len(first), *self.shape[1:]))

    def row_keys(self) -> list[bytes]:
        """:func:`_row_keys` of these states."""
        return _row_keys_of(self.entries, self.shape)


def _sparse(states: np.ndarray, entries: Entries | None) -> SparseStates:
    return SparseStates(nonzero_entries(states) if entries is None else entries,
                        states.shape)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``np.concatenate([np.arange(a, a + k) for a, k in zip(starts, lengths)])``, int64."""
    total = int(lengths.sum())
    offsets = np.cumsum(lengths) - lengths
    return np.arange(total, dtype=np.int64) + np.repeat(starts - offsets, lengths)


def _merge(first: Entries, first_key: np.ndarray, second: Entries,
           second_key: np.ndarray) -> Entries:
    """The entries of ``first`` and ``second`` (each in order of its flat positions ``*_key``, no
    position in both) together, in order."""
    # A stable sort of two sorted runs is a merge (timsort finds the runs): linear time.
    order = np.argsort(np.concatenate([first_key, second_key]), kind="stable")
    return tuple(np.concatenate([a, b])[order]  # type: ignore[return-value]
                 for a, b in zip(first, second, strict=True))


def _unique_rows(states: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of each distinct state, in order."""
    return _first_occurrences(_row_keys(states))


def _row_keys(states: np.ndarray, entries: Entries | None = None) -> list[bytes]:
    """One key per state of a ``(P, J, N)`` array, equal exactly where the states are equal: the
    positions and values of its nonzero entries (a few hundred bytes, where the state's own bytes
    are ``J x N`` elements: comparing those, or ``np.unique`` over them, costs far more).
    ``entries``: ``nonzero_entries(states)`` where the caller has them."""
    return _row_keys_of(nonzero_entries(states) if entries is None else entries,
                        states.shape)


def _row_keys_of(entries: Entries, shape: tuple[int, int, int]) -> list[bytes]:
    size, num_jobs, num_nodes = shape
    p, j, n, v = entries
    # Position and count in one word (counts are GPUs on one node: below 2**16).
    words = ((j * num_nodes + n).astype(np.int64) << 16) | v.astype(np.int64)
    bounds = np.searchsorted(p, np.arange(size + 1)).tolist()
    return [words[a:b].tobytes() for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def _first_occurrences(keys: Sequence[bytes], seen: Sequence[bytes] = ()) -> np.ndarray:
    """Indices of the first occurrence of each distinct key that is not in ``seen``, in order."""
    known = set(seen)
    first = []
    for i, key in enumerate(keys):
        if key not in known:
            known.add(key)
            first.append(i)
    return np.array(first, dtype=np.int64)


def _take_merged(population: np.ndarray, children: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``np.concatenate([population, children])[keep]`` without building the concatenation."""
    out = np.empty((len(keep), *population.shape[1:]), dtype=population.dtype)
    old = keep < len(population)
    out[old] = population[keep[old]]
    out[~old] = children[keep[~old] - len(population)]
    return out


def nonzero_entries(states: np.ndarray) -> Entries:
    """``np.nonzero(states)`` of a ``(P, J, N)`` integer array and the values there: ``(p, j, n,
    values)``, each ``(K,)``, in the same (C) order.

    A cluster state is mostly zeros (a job holds few of many nodes); scanning it eight bytes at a
    time and looking inside the nonzero words only is an order of magnitude faster than
    ``np.nonzero`` on a 3-D array.
    """
    flat = np.ascontiguousarray(states).reshape(-1)
    per_word = 8 // flat.dtype.itemsize if 8 % flat.dtype.itemsize == 0 else 0
    if per_word == 0 or flat.size < per_word:
        p, j, n = np.nonzero(states)
        return p, j, n, states[p, j, n]
    whole = flat.size - flat.size % per_word
    words = np.flatnonzero(flat[:whole].view(np.uint64) != 0)
    index = (words[:, None] * per_word + np.arange(per_word)).reshape(-1)
    index = np.concatenate([index, np.arange(whole, flat.size)])
    values = flat[index]
    keep = values != 0
    index = index[keep]
    p, j, n = np.unravel_index(index, states.shape)
    return p, j, n, values[keep]


def _crossover(population: np.ndarray, first: np.ndarray, second: np.ndarray,
               point: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """One-point crossover over jobs: child ``c`` takes jobs ``< point[c]`` from
    ``population[first[c]]`` and the rest from ``population[second[c]]``, shape
    ``(len(first), J, N)`` (row copies, not a dense ``np.where`` over every child), written into
    ``out`` where given."""
    children = (np.empty((len(first), *population.shape[1:]), dtype=population.dtype)
                if out is None else out)
    for c, (a, b, cut) in enumerate(zip(first.tolist(), second.tolist(), point.tolist(),
                                        strict=True)):
        cut = min(max(cut, 0), population.shape[1])
        children[c, :cut] = population[a, :cut]
        children[c, cut:] = population[b, cut:]
    return children


def _distinct_draws(groups: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """A uniform draw from ``range(count)`` per element, distinct within each run of equal,
    sorted ``groups`` (no run may be longer than ``count``): repeats are redrawn until none is
    left, which takes few rounds when runs are short against ``count``."""
    draws = rng.integers(count, size=groups.size)
    if groups.size < 2 or bool(np.all(groups[1:] != groups[:-1])):
        return draws  # no run of two or more: nothing can repeat (most calls: ~1 job a node)
    while True:
        key = groups.astype(np.int64) * count + draws
        order = np.argsort(key, kind="stable")
        repeat = order[1:][key[order[1:]] == key[order[:-1]]]
        if repeat.size == 0:
            return draws
        draws[repeat] = rng.integers(count, size=repeat.size)


def power_mean(values: np.ndarray, p: float) -> np.ndarray:
    """Power mean with exponent ``p`` over the last axis (``p = 0``: the geometric mean)."""
    if p == 0:
        return np.exp(np.mean(np.log(values), axis=-1))
    return np.mean(values**p, axis=-1) ** (1.0 / p)


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` of a 1-D array, by a sort (cheaper on the small arrays here)."""
    values = np.sort(values)
    if values.size == 0:  # nothing drawn (e.g. no job may grow): the mask below needs one entry
        return values
    return values[np.concatenate([[True], values[1:] != values[:-1]])]


def _group_cumsum(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Inclusive cumulative sum of ``values`` within runs of equal ``groups`` (sorted), shape kept."""
    if values.size == 0:
        return values.copy()
    total = np.cumsum(values)
    # np.concatenate, not np.r_: this runs thousands of times a round on small arrays.
    start = np.flatnonzero(np.concatenate([[True], groups[1:] != groups[:-1]]))
    lengths = np.diff(np.concatenate([start, [values.size]]))
    return total - np.repeat(total[start] - values[start], lengths)

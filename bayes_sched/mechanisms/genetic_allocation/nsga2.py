"""NSGA-II ranking for two objectives, both maximised (Deb et al., 2002).

Survival keeps whole non-dominated fronts in order and splits the last one by crowding distance (the
candidates farthest from their neighbours along the front first). Pollux's search uses it with the
fitness and the cluster utility as the objectives, as the Pollux artifact's NSGA-II does (its
tournaments, in :mod:`bayes_sched.mechanisms.genetic_allocation.search`, compare by domination, then
crowding).
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np


def front_ranks(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """0-based non-dominated front of every candidate, shape ``(M,)``, for objectives ``first``
    and ``second`` (shape ``(M,)`` each, maximised).

    With two objectives a front is a staircase: taken in order of ``first`` (descending, then
    ``second`` descending), a candidate is dominated by a front exactly when that front's latest
    member has a ``second`` at least as high (and is not an equal point), and fronts are nested,
    so a binary search over fronts places each candidate (``O(M log M)``).
    """
    order = np.lexsort((-second, -first))
    # Front ``f`` dominates a candidate exactly when its latest member's ``(second, first)`` is
    # lexicographically greater; negated, the tails stay in ascending order, so the C bisection
    # of the standard library finds the candidate's front (the same search, without a Python
    # loop per step).
    keys = list(zip((-second[order]).tolist(), (-first[order]).tolist(), strict=True))
    tails: list[tuple[float, float]] = []   # the latest member of each front so far, negated
    ranks = []
    for key in keys:
        lo = bisect_left(tails, key)
        if lo == len(tails):
            tails.append(key)
        else:
            tails[lo] = key
        ranks.append(lo)
    front = np.empty(first.size, np.int64)
    front[order] = ranks
    return front


def crowding_distance(first: np.ndarray, second: np.ndarray, front: np.ndarray) -> np.ndarray:
    """Crowding distance of every candidate within its front, shape ``(M,)``: per objective, the
    gap between its two neighbours along the front over the front's range, summed. The two ends
    of a front are infinitely far (they are always kept). A candidate whose objectives repeat an
    earlier candidate's in its front has distance 0, and its neighbours skip it, as pymoo's NSGA-II
    (the artifact's) does: many allocations tie in objectives (the same GPU counts on other nodes),
    and this keeps the population spread over distinct trade-offs rather than copies of one.
    """
    order = np.lexsort((-second, -first, front))  # stable: the earliest of equal points first
    a, b, r = first[order], second[order], front[order]
    # np.concatenate, not np.r_ (slow on small arrays; this runs every generation).
    repeat = np.concatenate([[False], (r[1:] == r[:-1]) & (a[1:] == a[:-1]) & (b[1:] == b[:-1])])
    order, a, b, r = order[~repeat], a[~repeat], b[~repeat], r[~repeat]
    starts = np.flatnonzero(np.concatenate([[True], r[1:] != r[:-1]]))
    ends = np.concatenate([starts[1:] - 1, [r.size - 1]])
    lengths = ends - starts + 1
    distance = np.zeros(r.size)
    for values in (a, b):
        span = np.repeat(np.abs(values[starts] - values[ends]), lengths)
        gap = np.abs(np.concatenate([values[1:], values[-1:]])
                     - np.concatenate([values[:1], values[:-1]]))
        with np.errstate(divide="ignore", invalid="ignore"):
            distance += np.where(span > 0, gap / span, 0.0)
    distance[starts] = np.inf
    distance[ends] = np.inf
    crowding = np.zeros(first.size)
    crowding[order] = distance
    # pymoo leaves fronts of one or two candidates wholly infinite, repeats included.
    small = np.bincount(front)[front] <= 2
    crowding[small] = np.inf
    return crowding


def survivors(first: np.ndarray, second: np.ndarray,
              count: int) -> tuple[np.ndarray, np.ndarray]:
    """NSGA-II survival: the indices of the ``count`` candidates kept, best first (by front, then
    crowding distance, descending), and every candidate's crowding distance, shape ``(M,)``."""
    front = front_ranks(first, second)
    crowding = crowding_distance(first, second, front)
    return np.lexsort((-crowding, front))[:count], crowding

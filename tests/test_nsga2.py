"""NSGA-II ranking against brute force, and its survival rule."""

from __future__ import annotations

import numpy as np
import pytest

from bayes_sched.mechanisms.genetic_allocation import nsga2


def _brute_force_fronts(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Peel non-dominated sets one at a time (O(M^2) per front)."""
    left = set(range(first.size))
    front = np.full(first.size, -1)
    rank = 0
    while left:
        current = [i for i in left
                   if not any(first[k] >= first[i] and second[k] >= second[i]
                              and (first[k] > first[i] or second[k] > second[i]) for k in left)]
        front[current] = rank
        left -= set(current)
        rank += 1
    return front


def test_front_ranks_match_brute_force_with_ties() -> None:
    rng = np.random.default_rng(11)
    for _ in range(30):
        size = int(rng.integers(1, 60))
        # Few distinct values, so that ties and duplicate points are common.
        first = rng.integers(0, 6, size).astype(float)
        second = rng.integers(0, 6, size).astype(float)
        assert np.array_equal(nsga2.front_ranks(first, second),
                              _brute_force_fronts(first, second))


def test_crowding_keeps_the_ends_and_prefers_sparse_points() -> None:
    # One front (a staircase): points 1 and 2 are packed together, point 4 sits alone.
    first = np.array([10.0, 9.0, 8.9, 5.0, 2.0, 0.0])
    second = np.array([0.0, 1.0, 1.1, 5.0, 8.0, 10.0])
    front = nsga2.front_ranks(first, second)
    assert np.all(front == 0)
    crowding = nsga2.crowding_distance(first, second, front)
    assert np.isinf(crowding[0]) and np.isinf(crowding[5])
    assert crowding[3] > crowding[1] and crowding[3] > crowding[2]


def test_crowding_gives_repeated_objectives_zero_and_skips_them() -> None:
    # Points 1 and 2 tie in both objectives: the later one counts 0, and the earlier one's
    # distance is what it would be were the repeat absent (as pymoo computes it).
    first = np.array([10.0, 5.0, 5.0, 0.0, 4.0])
    second = np.array([0.0, 5.0, 5.0, 10.0, 4.0])
    front = nsga2.front_ranks(first, second)
    assert list(front) == [0, 0, 0, 0, 1]
    crowding = nsga2.crowding_distance(first, second, front)
    alone = nsga2.crowding_distance(first[[0, 1, 3]], second[[0, 1, 3]], front[[0, 1, 3]])
    assert crowding[2] == 0.0
    assert crowding[1] == pytest.approx(alone[1]) and crowding[1] == pytest.approx(2.0)
    assert np.isinf(crowding[4])  # a front of one is wholly kept
    assert set(nsga2.survivors(first, second, 3)[0]) == {0, 1, 3}


def test_survivors_fill_by_front_then_spread() -> None:
    first = np.array([10.0, 9.0, 8.9, 5.0, 0.0, 4.0, 1.0])
    second = np.array([0.0, 1.0, 1.1, 5.0, 10.0, 4.0, 1.0])
    # Front 0: points 0-4; front 1: point 5; front 2: point 6.
    kept, _ = nsga2.survivors(first, second, 4)
    assert set(kept) <= {0, 1, 2, 3, 4}
    assert {0, 3, 4} <= set(kept)  # both ends and the lone middle point beat the packed pair
    assert set(nsga2.survivors(first, second, 6)[0]) == {0, 1, 2, 3, 4, 5}

"""Placement helpers: ``keep_or_pack`` against its one-by-one statement."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bayes_sched.mechanisms.placement import Request, keep_or_pack, pack


def one_by_one(requests: list[Request], free: np.ndarray) -> tuple[dict, list[str]]:
    """The rule as its docstring states it: in order, a job keeps the GPUs it holds where they
    are exactly its GPUs, on nodes it may use, and still free; the rest are packed, most GPUs
    first."""
    out: dict[str, np.ndarray] = {}
    rest = []
    for name, gpus, held, allowed in requests:
        if held.sum() == gpus and np.all(allowed[held > 0]) and np.all(held <= free):
            out[name] = held.copy()
            free -= held
        else:
            rest.append((name, gpus, allowed))
    unplaced = []
    for name, gpus, allowed in sorted(rest, key=lambda r: -r[1]):
        counts = pack(gpus, np.where(allowed, free, 0))
        if counts is None:
            unplaced.append(name)
            continue
        free -= counts
        out[name] = counts
    return out, unplaced


@st.composite
def placements(draw: st.DrawFn) -> tuple[list[Request], np.ndarray]:
    nodes = draw(st.integers(1, 5))
    free = np.array(draw(st.lists(st.integers(0, 6), min_size=nodes, max_size=nodes)))
    requests: list[Request] = []
    for j in range(draw(st.integers(0, 7))):
        held = np.array(draw(st.lists(st.integers(0, 3), min_size=nodes, max_size=nodes)))
        allowed = np.array(draw(st.lists(st.booleans(), min_size=nodes, max_size=nodes)))
        gpus = int(held.sum()) if draw(st.booleans()) else draw(st.integers(1, 8))
        requests.append((f"j{j}", gpus, held, allowed))
    return requests, free


@settings(max_examples=300, deadline=None)
@given(placements())
def test_keep_or_pack_decides_as_one_job_at_a_time(case: tuple[list[Request], np.ndarray]
                                                   ) -> None:
    requests, free = case
    expected_free = free.copy()
    expected, expected_unplaced = one_by_one(requests, expected_free)
    got, unplaced = keep_or_pack(requests, free)
    assert list(got) == list(expected) and unplaced == expected_unplaced
    for name, counts in expected.items():
        np.testing.assert_array_equal(got[name], counts)
    np.testing.assert_array_equal(free, expected_free)


def test_two_jobs_holding_the_same_gpus_the_first_keeps_them_the_second_is_packed() -> None:
    held = np.array([2, 0])
    anywhere = np.array([True, True])
    free = np.array([2, 2])
    out, unplaced = keep_or_pack([("a", 2, held, anywhere), ("b", 2, held, anywhere)], free)
    assert unplaced == [] and list(out) == ["a", "b"]
    np.testing.assert_array_equal(out["a"], [2, 0])
    np.testing.assert_array_equal(out["b"], [0, 2])
    np.testing.assert_array_equal(free, [0, 0])

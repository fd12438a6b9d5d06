"""Placement helpers: ``keep_or_pack`` against its one-by-one statement."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bayes_sched.mechanisms.placement import Request, keep_or_pack


def kept_one_by_one(requests: list[Request], free: np.ndarray) -> list[str]:
    """The jobs that keep their GPUs as the rule states it: in order, a job keeps the GPUs it
    holds where they are exactly its GPUs, on nodes it may use, and still free."""
    kept = []
    for name, gpus, held, allowed in requests:
        if held.sum() == gpus and np.all(allowed[held > 0]) and np.all(held <= free):
            kept.append(name)
            free = free - held
    return kept


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
    before = free.copy()
    kept = kept_one_by_one(requests, free.copy())
    got, unplaced = keep_or_pack(requests, free)
    held = {name: h for name, _, h, _ in requests}
    assert list(got)[:len(kept)] == kept  # the kept jobs first, in the requests' order
    for name in kept:
        np.testing.assert_array_equal(got[name], held[name])
    others = [name for name, *_ in requests if name not in kept]
    assert sorted([*list(got)[len(kept):], *unplaced]) == sorted(others)
    np.testing.assert_array_equal(before - free, sum(got.values(), np.zeros_like(before)))


def test_two_jobs_holding_the_same_gpus_the_first_keeps_them_the_second_is_packed() -> None:
    held = np.array([2, 0])
    anywhere = np.array([True, True])
    free = np.array([2, 2])
    out, unplaced = keep_or_pack([("a", 2, held, anywhere), ("b", 2, held, anywhere)], free)
    assert unplaced == [] and list(out) == ["a", "b"]
    np.testing.assert_array_equal(out["a"], [2, 0])
    np.testing.assert_array_equal(out["b"], [0, 2])
    np.testing.assert_array_equal(free, [0, 0])

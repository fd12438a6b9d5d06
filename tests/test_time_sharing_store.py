"""The round mechanism's per-combination state held as rows of arrays (``ComboStore``): rows
reused, a departed job's pairs dropped through its members, Gavel's time reset bitwise the
per-combination arithmetic, and a packed run's state matching its jobs and pairs in force."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.mechanisms.combo_store import ComboStore
from bayes_sched.mechanisms.rounds import Rounds
from bayes_sched.policies import make_policy
from bayes_sched.policies.gavel.time_sharing import TimeSharingPolicy
from bayes_sched.sim.gavel_jobs import generate_continuous_jobs
from bayes_sched.sim.table_cluster import TableCluster
from bayes_sched.sim.table_run import run_table_simulation


def test_store_drops_a_departed_jobs_pairs_and_reuses_their_rows() -> None:
    store = ComboStore(3)
    for combo in [("a",), ("b",), ("c",), ("a", "b"), ("b", "c")]:
        store.add(combo, 180.0)
    store.time[store.index[("a", "b")], 1] += 42.0
    gone = store.remove_jobs({"a"})
    assert sorted(gone) == [("a",), ("a", "b")]
    assert set(store.index) == {("b",), ("c",), ("b", "c")}
    assert store.names() == {"b", "c"}
    freed = {0, 3}  # the rows of ("a",) and ("a", "b")
    row = store.add(("c", "d"), 180.0)
    assert row in freed  # a freed row is reused, its state reset
    assert np.array_equal(store.time[row], np.full(3, 180.0))
    assert not store.deficit[row].any() and not store.allocated[row]
    assert store.remove_jobs({"b"}) and set(store.index) == {("c",), ("c", "d")}


def test_adding_many_takes_the_rows_one_by_one_adds_would() -> None:
    one, many = ComboStore(2), ComboStore(2)
    first = [(f"j{i}",) for i in range(70)]  # past the first 64 rows
    for store in (one, many):
        for combo in first:
            store.add(combo, 5.0)
        store.remove_jobs({"j3", "j40", "j41"})  # three rows free, among the used ones
    later = [(f"k{i}",) for i in range(100)] + [("j0", "k1"), ("k2", "k3")]
    rows_one = [one.add(combo, 7.0) for combo in later]
    rows_many = many.add_many(later, 7.0)
    assert rows_many.tolist() == rows_one
    assert one.index == many.index and one._members == many._members
    live = one.live_rows()
    for name in ("time", "deficit", "fraction", "allocated"):
        assert np.array_equal(getattr(one, name)[live], getattr(many, name)[live])
    assert set(rows_one[:3]) == {3, 40, 41}  # the freed rows are taken first
    assert np.all(many.time[rows_many] == 7.0)


def test_reset_is_the_per_combination_arithmetic_bitwise() -> None:
    rng = np.random.default_rng(3)
    rounds = Rounds(("v100", "p100", "k80"))
    store = rounds.store
    combos = [(str(i),) for i in range(50)] + [(str(i), str(i + 1)) for i in range(0, 49, 2)]
    for combo in combos:
        store.add(combo, 180.0)
    store.time[store.live_rows()] += rng.uniform(0, 5000, (len(combos), 3))
    store.deficit[store.live_rows()] = rng.normal(0, 1000, (len(combos), 3))
    allocated = combos[::3]
    fractions = rng.uniform(0, 1, (len(allocated), 3)) / 3.0
    store.set_allocation(allocated, fractions)
    owed_by = dict(zip(allocated, fractions, strict=True))
    before_time = {c: store.time[store.index[c]].copy() for c in combos}
    before_deficit = {c: store.deficit[store.index[c]].copy() for c in combos}
    rounds.last_reset = 1234.5
    rounds.reset_time(1234.5 + 1920.0, 180.0)
    worker = np.zeros(3)
    for combo in combos:  # Gavel's _reset_time_run_so_far, one combination at a time
        owed = owed_by.get(combo, np.zeros(3)) * 1920.0
        expected = before_deficit[combo] + (owed - (before_time[combo] - 180.0))
        assert np.array_equal(store.deficit[store.index[combo]], expected)
        assert np.array_equal(store.time[store.index[combo]], np.full(3, 180.0))
        worker += 180.0
    assert np.array_equal(rounds.worker_time, worker)


def test_a_packed_runs_state_holds_its_jobs_and_pairs_in_force() -> None:
    spec = replace(load_cluster_spec("v100:8,p100:8,k80:8"), round_interval=360.0)
    policy = make_policy("min_total_duration_packed")
    assert isinstance(policy, TimeSharingPolicy)
    checked = []

    def check(cluster: TableCluster) -> None:
        active = {name for name, job in cluster.jobs.items() if job.completion_time is None}
        store = policy._rounds.store
        # Every combination admitted is of jobs the last decision saw; the pairs the policy may
        # place are exactly the pairs of the allocation in force, each admitted with its row.
        assert store.names() <= active | set(policy._rounds.attained)
        in_force = store.allocation()
        assert {c for c in in_force if len(c) == 2} == set(policy._pair_usable)
        assert all(store.in_force(c) for c in policy._pair_usable)
        assert int(store.allocated[store.live_rows()].sum()) == len(in_force)
        assert set(policy.pair_fractions()) == set(policy._pair_usable)
        checked.append(len(policy._pair_usable))

    run_table_simulation(generate_continuous_jobs(2.0, 0, multi_gpu=True), policy, spec,
                         max_time=30 * 3600.0, on_round=check)
    assert max(checked) > 0  # pairs were in force

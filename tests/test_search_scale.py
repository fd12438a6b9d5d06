"""The allocation search's fast paths against the dense formulas they replace (seeded random
states), the shared fit and speedup-table caches, and the long-workload generator."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bayes_sched.cluster import ClusterState
from bayes_sched.errors import InputError
from bayes_sched.estimation.job_models import _FIT_MEMO, fit_measurements, profile_of
from bayes_sched.jobs import Observation
from bayes_sched.mechanisms.genetic_allocation.search import AllocationProblem, GAConfig
from bayes_sched.mechanisms.genetic_allocation.sparse import (
    SparseStates,
    _crossover,
    _first_occurrences,
    _row_keys,
    _take_merged,
    _unique_rows,
    nonzero_entries,
    power_mean,
)
from bayes_sched.sim.workload import (
    SHIPPED_WINDOW_SECONDS,
    generate_workload,
    read_workload,
    shipped_workloads_dir,
    write_workload,
)
from perfmodel.throughput import fit_throughput


def _sparse_states(rng: np.random.Generator, shape: tuple[int, int, int], dtype: type,
                   density: float) -> np.ndarray:
    states: np.ndarray = rng.integers(1, 5, size=shape).astype(dtype)
    states[rng.random(shape) >= density] = 0
    return states


@pytest.mark.parametrize("shape", [(3, 7, 5), (4, 20, 16), (2, 1, 1), (5, 9, 3), (1, 0, 4)])
@pytest.mark.parametrize("dtype", [np.int16, np.int64, np.int8, np.int32])
def test_nonzero_entries_equal_numpy_nonzero(shape: tuple[int, int, int], dtype: type) -> None:
    rng = np.random.default_rng(11)
    for density in (0.0, 0.05, 0.5, 1.0):
        states = _sparse_states(rng, shape, dtype, density)
        p, j, n, v = nonzero_entries(states)
        reference = np.nonzero(states)
        for mine, theirs in zip((p, j, n), reference, strict=True):
            assert np.array_equal(mine, theirs) and mine.dtype == theirs.dtype
        assert np.array_equal(v, states[reference]) and v.dtype == states.dtype
    # A view that is not contiguous reads the same.
    wide = _sparse_states(rng, (shape[0], shape[1], 2 * shape[2]), dtype, 0.3)[:, :, ::2]
    assert all(np.array_equal(a, b) for a, b in zip(nonzero_entries(wide)[:3], np.nonzero(wide),
                                                    strict=True))


def _dense_problem(rng: np.random.Generator, num_jobs: int, num_nodes: int,
                   avoid: bool) -> AllocationProblem:
    cluster = ClusterState(num_nodes, 4, 0.0)
    base = _sparse_states(rng, (1, num_jobs, num_nodes), np.int16, 0.2)[0]
    tables = rng.random((num_jobs, num_nodes + 1, 4 * num_nodes + 1))
    return AllocationProblem(base, tables, rng.integers(1, 9, size=num_jobs),
                             rng.random(num_jobs), cluster, -1.0, avoid, 3,
                             np.random.default_rng(0))


def test_scores_equal_the_dense_formulas() -> None:
    rng = np.random.default_rng(5)
    for trial in range(20):
        problem = _dense_problem(rng, 6 + trial, 5, avoid=trial % 2 == 0)
        states = problem.repair(_sparse_states(rng, (12, 6 + trial, 5), np.int16, 0.3))
        states[0] = problem.base  # the status quo: unchanged everywhere
        nodes, replicas = np.count_nonzero(states, axis=2), states.sum(axis=2)
        table = problem.tables[problem.job_index, nodes, replicas]
        assert np.array_equal(problem.table_speedups(states), table)
        changed = np.any(states != problem.base, axis=2)
        assert np.array_equal(problem.changed(states), changed)
        assert not problem.changed(states)[0].any()
        speedup = table * problem.scale
        expected = power_mean(np.where(changed, speedup * problem.penalty, speedup) + 1e-3, -1.0)
        assert np.array_equal(problem.fitness(states), expected)
        active = np.count_nonzero(states.any(axis=1), axis=1)
        assert np.array_equal(problem.utility(states),
                              table.sum(axis=1) / np.maximum(active * problem.capacity, 1))


def test_repair_in_place_equals_a_repaired_copy() -> None:
    rng = np.random.default_rng(9)
    problem = _dense_problem(rng, 10, 6, avoid=True)
    states = _sparse_states(rng, (30, 10, 6), np.int16, 0.4)
    state_rng = problem.rng.bit_generator.state
    copy = problem.repair(states)
    problem.rng.bit_generator.state = state_rng
    in_place = states.copy()
    assert problem.repair(in_place, in_place=True) is in_place
    assert np.array_equal(in_place, copy) and not np.array_equal(states, copy)


def test_crossover_equals_the_dense_where() -> None:
    rng = np.random.default_rng(2)
    population = _sparse_states(rng, (8, 13, 4), np.int16, 0.4)
    first, second = rng.integers(8, size=(2, 10))
    point = rng.integers(14, size=10)
    take_first = (np.arange(13) < point[:, None])[:, :, None]
    expected = np.where(take_first, population[first], population[second])
    assert np.array_equal(_crossover(population, first, second, point), expected)


def test_distinct_states_equal_numpy_unique() -> None:
    rng = np.random.default_rng(4)
    rows = _sparse_states(rng, (6, 9, 5), np.int16, 0.2)
    states = rows[rng.integers(6, size=40)]               # many repeats
    flat = states.reshape(len(states), -1)
    _, first = np.unique(flat, axis=0, return_index=True)
    assert np.array_equal(_unique_rows(states), np.sort(first))
    # Keys are equal exactly where states are.
    keys = _row_keys(states)
    same = (flat[:, None] == flat[None]).all(axis=2)
    assert np.array_equal(np.array([[a == b for b in keys] for a in keys]), same)
    # Children repeating the population or an earlier child are dropped, as over the merge.
    population, children = states[:10], states[10:]
    merged_first = _unique_rows(np.concatenate([population, children]))
    new = _first_occurrences(_row_keys(children), seen=_row_keys(population))
    assert np.array_equal(new, merged_first[merged_first >= 10] - 10)
    keep = rng.permutation(40)[:15]
    assert np.array_equal(_take_merged(population, children, keep), states[keep])


def _observations(step_scale: float) -> list[Observation]:
    return [Observation(1, 1, 64, 0.1 * step_scale, 0.0), Observation(1, 2, 64, 0.12 * step_scale,
                                                                      0.03 * step_scale),
            Observation(1, 1, 128, 0.18 * step_scale, 0.0)]


def test_equal_measurements_share_one_fit_equal_to_a_fresh_one() -> None:
    _FIT_MEMO.clear()
    observations = _observations(1.0)
    fresh = fit_throughput(profile_of("a", observations), starts=1)
    first = fit_measurements("a", observations)
    assert first == fresh and len(_FIT_MEMO) == 1
    assert fit_measurements("b", list(observations)) is first            # another job, same data
    other = fit_measurements("c", _observations(1.5))
    assert other != first and len(_FIT_MEMO) == 2
    assert fit_measurements("d", observations[::-1]) == fit_throughput(
        profile_of("d", observations[::-1]), starts=1)                   # order is part of the key


def test_generated_workload_is_drawn_from_the_shipped_rows() -> None:
    workload = generate_workload(960, 48, seed=3)
    again = generate_workload(960, 48, seed=3)
    assert workload.jobs == again.jobs and generate_workload(960, 48, seed=4).jobs != workload.jobs
    assert len(workload) == 960
    times = np.array([job.submit_time for job in workload.jobs])
    assert np.all(np.diff(times) >= 0) and 0 <= times[0] and times[-1] < 48 * 3600
    counts = np.bincount((times // SHIPPED_WINDOW_SECONDS).astype(int), minlength=6)
    assert counts.tolist() == [160] * 6
    folder = shipped_workloads_dir()
    pool = {(job.submit_time, job.application, job.num_replicas, job.batch_size)
            for i in range(1, 9) for job in read_workload(folder / f"workload-{i}.csv").jobs}
    for job in workload.jobs:
        assert (job.submit_time % SHIPPED_WINDOW_SECONDS, job.application, job.num_replicas,
                job.batch_size) in pool
    assert len({job.name for job in workload.jobs}) == 960


def test_generated_workload_round_trips_and_refuses_bad_lengths(tmp_path: Path) -> None:
    workload = generate_workload(50, 16, seed=1)
    path = tmp_path / "w.csv"
    write_workload(workload, path)
    assert read_workload(path).jobs == workload.jobs
    assert [p.name for p in tmp_path.iterdir()] == ["w.csv"]
    for hours in (0, 12, -8):
        with pytest.raises(InputError, match="multiple of 8"):
            generate_workload(10, hours)
    with pytest.raises(InputError, match="num_jobs"):
        generate_workload(0, 8)


def _reference_repair(problem: AllocationProblem, states: np.ndarray) -> np.ndarray:
    """The repair as first written (lexsorts over np.nonzero of the dense states)."""
    from bayes_sched.mechanisms.genetic_allocation.sparse import _group_cumsum

    size, num_jobs, num_nodes = states.shape
    p, j, n = np.nonzero(states)
    v = states[p, j, n].astype(np.int64)
    if problem.avoid_interference:
        job_key = p * num_jobs + j
        distributed = np.bincount(job_key, minlength=size * num_jobs)[job_key] > 1
        d = np.flatnonzero(distributed)
        order = d[np.lexsort((j[d], p[d] * num_nodes + n[d]))]
        rank = _group_cumsum(np.ones(order.size, np.int64), (p * num_nodes + n)[order])
        v[order[rank > 1]] = 0
    job_key = p * num_jobs + j
    order = np.lexsort((problem.rng.random(p.size), job_key))
    values, cap = v[order], problem.max_replicas[j[order]]
    total = _group_cumsum(values, job_key[order])
    kept = np.minimum(total, cap) - np.minimum(total - values, cap)
    nodes_used = _group_cumsum((kept > 0).astype(np.int64), job_key[order])
    kept[nodes_used > problem.max_nodes] = 0
    v[order] = kept
    node_key = p * num_nodes + n
    order = np.lexsort((j, node_key))
    values = v[order]
    total = _group_cumsum(values, node_key[order])
    v[order] = np.minimum(total, problem.capacity) - np.minimum(total - values, problem.capacity)
    repaired = np.zeros_like(states)
    repaired[p, j, n] = v
    return repaired


@pytest.mark.parametrize("avoid", [True, False])
def test_repair_equals_the_reference(avoid: bool) -> None:
    rng = np.random.default_rng(13)
    for trial in range(15):
        problem = _dense_problem(rng, 5 + 3 * trial, 4 + trial % 5, avoid=avoid)
        states = _sparse_states(rng, (25, 5 + 3 * trial, 4 + trial % 5), np.int16,
                                0.1 + 0.05 * trial)
        state_rng = problem.rng.bit_generator.state
        expected = _reference_repair(problem, states)
        problem.rng.bit_generator.state = state_rng
        assert np.array_equal(problem.repair(states), expected)
        problem.rng.bit_generator.state = state_rng
        fitness, utility = problem.objectives(expected)
        assert np.array_equal(fitness, problem.fitness(expected))
        assert np.array_equal(utility, problem.utility(expected))


#: The policies whose runs hang on fits and the allocation search (the scale work's subject), and
#: a baseline without either, run on the first 10 jobs of workload 1 by ``compare``.
FITTED_POLICIES = ("pollux", "bo")
BASELINE = "tiresias"


def _compare_run(out: Path, cache: Path, hash_seed: str) -> pd.DataFrame:
    """``bayes-sched compare`` of :data:`FITTED_POLICIES` and :data:`BASELINE` on workload-1's first
    10 jobs (seed 0), in a fresh process with its own fit cache and string-hash seed; the per-job
    table it writes (``jobs.csv``)."""
    env = {**os.environ, "BAYES_SCHED_CACHE": str(cache), "PYTHONHASHSEED": hash_seed}
    done = subprocess.run(
        [sys.executable, "-m", "bayes_sched", "compare", "--workloads", "workload-1",
         "--max-jobs", "10", "--policies", *FITTED_POLICIES, BASELINE, "--processes", "1",
         "--out", str(out), "--json", "--no-progress"],
        capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parents[1],
        timeout=600)
    assert done.returncode == 0, done.stderr
    return pd.read_csv(out / "jobs.csv")


@pytest.fixture(scope="module")
def twice(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The same seeded runs twice in this test session, on this machine: two processes that share
    no fit cache and hash strings differently."""
    root = tmp_path_factory.mktemp("same-seed")
    return (_compare_run(root / "first", root / "cache-first", "1"),
            _compare_run(root / "second", root / "cache-second", "2"))


def test_the_same_seed_twice_gives_the_same_jobs(
        twice: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    """Determinism (one seed, one machine, one result): every job's start, completion, JCT,
    restarts and GPU time are equal between the two runs, to the last bit. Replaces a pin of
    these JCTs recorded on another machine: their last bits follow the machine's BLAS and libm
    kernels, so only a comparison within one run is a test of behaviour."""
    first, second = twice
    assert set(first["policy"]) == {*FITTED_POLICIES, BASELINE}
    assert len(first) == 10 * (len(FITTED_POLICIES) + 1)
    fields = ["policy", "job", "start_time", "completion_time", "jct", "restarts", "gpu_time"]
    a, b = first[fields], second[fields]
    differing = a[~((a == b) | (a.isna() & b.isna())).all(axis=1)]
    assert differing.empty, f"the same seed gave other jobs:\n{differing}\nagainst\n" \
                            f"{b.loc[differing.index]}"


def test_fitted_policies_beat_a_non_adaptive_baseline_on_the_window(
        twice: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    """Quality, as a margin that machines cannot move: Pollux's and bo's average JCT on the
    window is at most 95 % of Tiresias's (same run, same jobs), and every job finished."""
    # Why 95 %: Tiresias runs no fits, so its 942.3 s is the same on any machine. On an AVX-512
    # Xeon (seeds 0-3) Pollux's average is 729-790 s and bo's 771-806 s; the JCTs once pinned
    # from another machine (seed 0) average 752 s and 799 s: ratios 0.77-0.86. The machine alone
    # moved Pollux's seed-0 average by 5 %, as much as a seed does. The bound sits beyond that
    # spread, and a fitted policy that lost its advantage (ratio near 1) fails it.
    jobs = twice[0]
    assert jobs["jct"].notna().all()
    average = jobs.groupby("policy")["jct"].mean()
    for policy in FITTED_POLICIES:
        assert average[policy] <= 0.95 * average[BASELINE], average.to_dict()


def test_entries_kept_through_repair_and_selection_equal_fresh_ones() -> None:
    rng = np.random.default_rng(21)
    problem = _dense_problem(rng, 12, 6, avoid=True)
    states = _sparse_states(rng, (20, 12, 6), np.int16, 0.3)
    repaired, entries = problem._repair(states.copy(), in_place=True)
    fresh = nonzero_entries(repaired)
    assert all(np.array_equal(a, b) and a.dtype == b.dtype
               for a, b in zip(entries, fresh, strict=True))
    sparse = SparseStates(entries, repaired.shape)
    for rows in (np.sort(rng.choice(20, size=7, replace=False)), rng.integers(20, size=30),
                 np.array([], dtype=np.int64)):
        selected = sparse.rows(rows)
        assert all(np.array_equal(a, b) for a, b in zip(selected.entries,
                                                         nonzero_entries(repaired[rows]),
                                                         strict=True))
        assert np.array_equal(selected.dense(), repaired[rows])
    assert _row_keys(repaired, entries) == _row_keys(repaired) == sparse.row_keys()


def test_sparse_crossover_and_concat_equal_the_dense_ones() -> None:
    rng = np.random.default_rng(3)
    for trial in range(10):
        population = _sparse_states(rng, (6, 5 + trial, 4), np.int16, 0.3)
        sparse = SparseStates.of(population)
        first, second = rng.integers(6, size=(2, 12))
        point = rng.integers(-1, 7 + trial, size=12)
        children = sparse.crossover(first, second, point)
        expected = _crossover(population, first, second, point)
        assert all(np.array_equal(a, b) for a, b in zip(children.entries,
                                                         nonzero_entries(expected), strict=True))
        both = sparse.concat(children)
        assert np.array_equal(both.dense(), np.concatenate([population, expected]))


def _reference_mutate_artifact(problem: AllocationProblem, states: np.ndarray,
                               ga: GAConfig) -> np.ndarray:
    """The artifact's mutation as first written, on the dense states."""
    from bayes_sched.mechanisms.genetic_allocation.sparse import _distinct_draws, _sorted_unique

    rng = problem.rng
    size, num_jobs, num_nodes = states.shape
    reset = rng.random((size, num_jobs)) < ga.reset_prob
    rp, rj = np.nonzero(reset)
    states[rp, rj] = problem.base[rj]
    p, j, n, v = nonzero_entries(states)
    drop = (rng.random((size, num_jobs)) < ga.zero_prob)[p, j] & (rng.random(p.size)
                                                                   < ga.zero_prob)
    states[p[drop], j[drop], n[drop]] = 0
    p, j, n, v = p[~drop], j[~drop], n[~drop], v[~drop]
    load = np.bincount(p * num_nodes + n, weights=v, minlength=size * num_nodes)
    is_free = load.reshape(size, num_nodes) < problem.capacity
    free_p, free_n = np.nonzero(is_free)
    counts = rng.binomial(num_jobs, 1.0 / num_jobs, size=free_p.size)
    grow_p, grow_n = np.repeat(free_p, counts), np.repeat(free_n, counts)
    grow_j = _distinct_draws(np.repeat(np.arange(free_p.size), counts), num_jobs, rng)
    own = is_free[p, n]
    p, j, n = p[own], j[own], n[own]
    node = p * num_nodes + n
    pick = rng.random(p.size) * np.bincount(node, minlength=size * num_nodes)[node] < 1.0
    key = _sorted_unique(np.concatenate([(grow_p * num_jobs + grow_j) * num_nodes + grow_n,
                                         (p[pick] * num_jobs + j[pick]) * num_nodes + n[pick]]))
    p, rest = np.divmod(key, num_jobs * num_nodes)
    j, n = np.divmod(rest, num_nodes)
    states[p, j, n] = rng.integers(states[p, j, n], problem.capacity + 1)
    return states


def test_sparse_mutation_equals_the_dense_reference() -> None:
    rng = np.random.default_rng(17)
    ga = GAConfig(reset_prob=0.3, zero_prob=0.3)
    for trial in range(12):
        problem = _dense_problem(rng, 4 + 2 * trial, 3 + trial % 4, avoid=trial % 2 == 0)
        problem.compiled = False  # the numpy mutation (the compiled one draws its own numbers)
        states = problem.repair(_sparse_states(rng, (9, 4 + 2 * trial, 3 + trial % 4), np.int16,
                                               0.25))
        state_rng = problem.rng.bit_generator.state
        expected = _reference_mutate_artifact(problem, states.copy(), ga)
        after = problem.rng.bit_generator.state
        problem.rng.bit_generator.state = state_rng
        assert np.array_equal(problem.mutate_artifact(states.copy(), ga), expected)
        assert problem.rng.bit_generator.state == after         # the same draws, in order


def test_sorted_unique_of_nothing_is_empty() -> None:
    from bayes_sched.mechanisms.genetic_allocation.sparse import _sorted_unique

    assert _sorted_unique(np.array([], dtype=np.int64)).size == 0
    np.testing.assert_array_equal(_sorted_unique(np.array([3, 1, 3, 2])), [1, 2, 3])


def test_gpu_timeline_kept_as_changes_equals_the_stacked_rows() -> None:
    from bayes_sched.sim.simulator import GpuTimeline

    rng = np.random.default_rng(8)
    rows = rng.integers(0, 3, size=(40, 7)) * (rng.random((40, 7)) < 0.3)
    rows[10:20] = rows[9]                                  # rounds with no change are not stored
    timeline = GpuTimeline(7)
    for row in rows:
        timeline.append(row)
    assert np.array_equal(timeline.dense(), rows) and len(timeline._changes) <= 31
    assert GpuTimeline(3).dense().shape == (0, 3)

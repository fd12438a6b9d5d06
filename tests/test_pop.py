"""POP (``bayes_sched.mechanisms.pop``): random splits of jobs and GPUs, seeded; each sub-problem
solved by the policy's own program; the joined allocation feasible, exact at one partition, and
close to the exact optimum on a small problem; bad settings refused in one line."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from itertools import islice

import numpy as np
import pytest

from bayes_sched.cluster import ClusterState
from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.errors import InputError
from bayes_sched.mechanisms.pop import (
    Partitioner,
    check_partitions,
    labels,
    pairs_within,
    partition_count,
    solve_partitioned,
    split,
    sticky_labels,
)
from bayes_sched.mechanisms.time_fraction_lp import effective_rates
from bayes_sched.policies import make_policy
from bayes_sched.policies.gavel.time_sharing import AllocationInputs, TimeSharingPolicy
from bayes_sched.policies.sia import config_utilities, normalized_goodputs
from bayes_sched.policies.sia_program import partitioned_assignment, solve_assignment
from bayes_sched.sim.gavel_jobs import generate_continuous_jobs
from bayes_sched.sim.oracles import oracle_estimates
from bayes_sched.sim.table_cluster import TableCluster
from bayes_sched.throughputs import load_gavel_throughputs
from tests.test_gavel_packing import assert_within_capacity

TABLE = load_gavel_throughputs()
#: The round's estimates: the world's oracle, Gavel's measured table.
ESTIMATES = oracle_estimates(TABLE)
CLUSTER = "v100:4x4,p100:4x4,k80:4x4"  # 16 GPUs of each type


def _problem(num_jobs: int = 40, cluster: str = CLUSTER):
    spec = replace(load_cluster_spec(cluster), round_interval=360.0)
    jobs = [replace(job, submit_time=0.0) for job in
            islice(generate_continuous_jobs(1.0, 0, True), num_jobs)]
    views = [replace(v, age=3600.0) for v in TableCluster(jobs, spec, TABLE).job_views()]
    return ClusterState(spec=spec, now=3600.0), views


def _policy(name: str, **options: object) -> TimeSharingPolicy:
    policy = make_policy(name, **options)
    assert isinstance(policy, TimeSharingPolicy)
    return policy


def _captured(name: str, num_jobs: int = 40) -> tuple[TimeSharingPolicy, AllocationInputs]:
    """A fresh policy ``name`` and the whole problem's inputs it built in one decision."""
    seen: list[AllocationInputs] = []
    policy = _policy(name, partitions=1)  # one call: the whole problem
    solve = policy.allocate_combinations

    def capture(inputs: AllocationInputs) -> np.ndarray | None:
        seen.append(inputs)
        return solve(inputs)

    policy.allocate_combinations = capture  # type: ignore[method-assign]
    state, views = _problem(num_jobs)
    policy.decide(state, views, ESTIMATES)
    return _policy(name), seen[0]


def test_split_is_seeded_and_covers_every_job_and_gpu_once() -> None:
    capacities = np.array([37, 16, 5])
    strata = np.arange(101) % 7
    first = split(101, capacities, 4, np.random.default_rng(3), strata)
    again = split(101, capacities, 4, np.random.default_rng(3), strata)
    other = split(101, capacities, 4, np.random.default_rng(4), strata)
    assert all(np.array_equal(a.jobs, b.jobs) and np.array_equal(a.capacities, b.capacities)
               for a, b in zip(first, again, strict=True))
    assert any(not np.array_equal(a.jobs, b.jobs) for a, b in zip(first, other, strict=True))
    assert np.array_equal(np.sort(np.concatenate([p.jobs for p in first])), np.arange(101))
    assert np.array_equal(sum(p.capacities for p in first), capacities)
    assert max(len(p.jobs) for p in first) - min(len(p.jobs) for p in first) <= 1
    # Each type's GPUs as evenly as they go; each stratum spread within one job per group.
    assert all(np.ptp([p.capacities[t] for p in first]) <= 1 for t in range(3))
    label = labels(first, 101)
    for stratum in range(7):
        counts = np.bincount(label[strata == stratum], minlength=4)
        assert counts.max() - counts.min() <= 1


def test_sticky_groups_keep_each_job_s_group_and_fill_the_smallest() -> None:
    kept: dict[object, int] = {}
    first = sticky_labels([f"j{i}" for i in range(10)], 3, kept, np.arange(10) % 2)
    assert np.bincount(first, minlength=3).tolist() == [4, 3, 3]
    # j0..j4 leave, j10..j13 arrive: the stayers keep their groups, newcomers fill the
    # groups that lost most, and the groups' sizes end within one of each other.
    names = [f"j{i}" for i in range(5, 14)]
    second = sticky_labels(names, 3, kept, np.arange(9) % 2)
    assert second[:5].tolist() == first[5:].tolist()
    assert set(kept) == set(names)
    assert np.ptp(np.bincount(second, minlength=3)) <= 1
    # Given each job's GPUs, a new job joins the group that asked for the fewest: the two
    # 8-GPU jobs land apart, where counting jobs alone would put them together.
    demands = np.array([8, 1, 8, 1])
    keys = [f"d{i}" for i in range(4)]
    by_count = sticky_labels(keys, 2, {})
    by_demand = sticky_labels(keys, 2, {}, demands=demands)
    assert by_count[0] == by_count[2]
    assert by_demand[0] != by_demand[2]
    assert np.bincount(by_demand, weights=demands).tolist() == [9.0, 9.0]
    with pytest.raises(ValueError, match="distinct"):
        sticky_labels(["a", "a"], 2, {})


def test_a_sticky_partitioner_keeps_groups_and_sub_clusters_across_calls() -> None:
    redrawn = Partitioner(3, 0, None)
    sticky = Partitioner(3, 0, None, "sticky")
    names = [f"j{i}" for i in range(12)]
    capacities = np.array([10, 7])
    calls = [sticky.parts(12, capacities, keys=names) or [] for _ in range(3)]
    assert all(np.array_equal(a.jobs, b.jobs) and np.array_equal(a.capacities, b.capacities)
               for call in calls[1:] for a, b in zip(calls[0], call, strict=True))
    assert np.array_equal(sum(p.capacities for p in calls[0]), capacities)
    drawn = [labels(redrawn.parts(12, capacities) or [], 12) for _ in range(3)]
    assert any(not np.array_equal(drawn[0], d) for d in drawn[1:])  # the split is redrawn
    # A new count (two jobs: two groups) deals every job afresh, balanced again.
    assert len(sticky.parts(2, capacities, keys=names[:2]) or []) == 2
    again = sticky.parts(12, capacities, keys=names) or []
    assert [len(p.jobs) for p in again] == [4, 4, 4]
    with pytest.raises(ValueError, match="one key per job"):
        sticky.parts(12, capacities)
    with pytest.raises(ValueError, match="partition_groups"):
        Partitioner(3, 0, None, "often")
    with pytest.raises(InputError, match="partition_groups"):
        make_policy("sia", partition_groups="often")


def test_pairs_within_groups_are_the_full_pairs_filtered() -> None:
    candidates = np.array([0, 2, 3, 5, 8, 9, 11])
    groups = np.array([0, 1, 1, 0, 2, 1, 0, 2, 1, 1, 0, 1])
    first, second = pairs_within(candidates, groups)
    i, j = np.triu_indices(len(candidates), k=1)
    same = groups[candidates[i]] == groups[candidates[j]]
    assert np.array_equal(first, candidates[i][same])
    assert np.array_equal(second, candidates[j][same])


def test_automatic_count_is_exact_below_the_measured_size() -> None:
    capacities = np.array([688, 680, 680])
    assert partition_count("auto", 100, capacities, 128) == 1
    assert partition_count("auto", 255, capacities, 128) == 1
    assert partition_count("auto", 1900, capacities, 128) == 15
    assert partition_count("auto", 1900, capacities, None) == 1
    assert partition_count("auto", 1900, np.array([16, 16, 16]), 128) == 2  # 8 GPUs of a type
    assert partition_count(4, 3, capacities, None) == 3  # no more groups than jobs


@pytest.mark.parametrize("name", ["max_min_fairness_perf", "max_min_fairness_packed",
                                  "finish_time_fairness_packed", "min_total_duration"])
def test_one_partition_is_the_exact_solve(name: str) -> None:
    policy, inputs = _captured(name)
    exact = policy.allocate_combinations(inputs)
    assert exact is not None
    whole = split(inputs.num_jobs, inputs.capacities.astype(int), 1, np.random.default_rng(0))
    joined = solve_partitioned(inputs, whole, _policy(name).allocate_combinations)
    assert joined is not None and np.array_equal(joined, exact)
    state, views = _problem()
    exact_policy, one = _policy(name), _policy(name, partitions=1)
    exact_policy.decide(state, views, ESTIMATES)
    one.decide(state, views, ESTIMATES)
    assert exact_policy.fractions() == one.fractions()
    assert exact_policy.pair_fractions() == one.pair_fractions()


@pytest.mark.parametrize("name", ["max_min_fairness_perf", "max_min_fairness_packed",
                                  "finish_time_fairness_packed", "min_total_duration_packed",
                                  "max_sum_throughput_perf"])
def test_pop_allocation_is_feasible_per_group_and_whole(name: str) -> None:
    policy, inputs = _captured(name)
    parts = split(inputs.num_jobs, inputs.capacities.astype(int), 3, np.random.default_rng(1),
                  inputs.job_classes)
    x = solve_partitioned(inputs, parts, policy.allocate_combinations)
    assert x is not None
    assert_within_capacity(x, inputs, inputs.capacities)
    label = labels(parts, inputs.num_jobs)
    crossing = label[inputs.pairs[:, 0]] != label[inputs.pairs[:, 1]]
    assert np.all(x[inputs.num_jobs:][crossing] == 0)  # no pair across groups
    for i, part in enumerate(parts):
        mine = np.zeros_like(x)
        mine[part.jobs] = x[part.jobs]
        pairs = inputs.num_jobs + np.flatnonzero((label[inputs.pairs[:, 0]] == i) & ~crossing)
        mine[pairs] = x[pairs]
        assert_within_capacity(mine, inputs, part.capacities)


def test_pop_objective_is_close_to_the_exact_optimum_on_a_small_problem() -> None:
    policy, inputs = _captured("max_sum_throughput_perf", 60)
    exact = policy.allocate_combinations(inputs)
    parts = split(inputs.num_jobs, inputs.capacities.astype(int), 2, np.random.default_rng(0),
                  inputs.job_classes)
    pop = solve_partitioned(inputs, parts, policy.allocate_combinations)
    assert exact is not None and pop is not None
    total = effective_rates(exact, inputs.throughputs, inputs.pairs,
                            inputs.pair_throughputs).sum()
    joined = effective_rates(pop, inputs.throughputs, inputs.pairs,
                             inputs.pair_throughputs).sum()
    assert joined <= total * (1 + 1e-6)
    assert joined >= 0.95 * total


def test_policy_decisions_with_partitions_are_deterministic_per_seed() -> None:
    state, views = _problem(60)
    runs = []
    for seed in (0, 0, 1):
        policy = _policy("max_min_fairness_packed", partitions=3, seed=seed)
        policy.decide(state, views, ESTIMATES)
        assert policy.partitioner.last_count == 3
        runs.append((policy.fractions(), policy.pair_fractions()))
    assert runs[0] == runs[1]
    assert runs[0][1] != runs[2][1]  # another seed, other groups: other pairs


@pytest.mark.parametrize("name", ["max_min_fairness_packed", "sia"])
def test_sticky_groups_deal_every_job_once_and_keep_it_when_jobs_leave(name: str) -> None:
    state, views = _problem(60)
    policy = make_policy(name, partitions=3, partition_groups="sticky")
    policy.decide(state, views, ESTIMATES)
    kept = dict(policy.partitioner._kept)
    assert sorted(kept) == sorted(view.name for view in views)
    gpus = {view.name: view.requested_replicas for view in views}
    asked = np.bincount(list(kept.values()), weights=[gpus[name] for name in kept], minlength=3)
    assert np.ptp(asked) <= max(gpus.values())  # the groups' GPUs asked for, balanced
    stayers = views[10:]  # ten jobs finished: the rest keep their groups
    policy.decide(replace(state, now=state.now + 2000.0), stayers, ESTIMATES)
    assert policy.partitioner._kept == {v.name: kept[v.name] for v in stayers}


def test_sia_partitioned_assignment_respects_each_sub_cluster() -> None:
    from bayes_sched.policies.sia import SiaPolicy

    state, views = _problem(80)
    sia = SiaPolicy()
    sia.read_throughputs(ESTIMATES)
    types = ("v100", "p100", "k80")
    capacities = np.array([16, 16, 16])
    configs = sia.configurations(state, views, types, capacities)
    utility = config_utilities(normalized_goodputs(configs, len(views)), -0.5, 1.1)
    parts = split(len(views), capacities, 2, np.random.default_rng(0))
    chosen = partitioned_assignment(utility, configs, parts)
    exact = solve_assignment(utility, configs, capacities, len(views))
    assert chosen is not None and exact is not None
    label = labels(parts, len(views))
    for i, part in enumerate(parts):
        mine = chosen[part.jobs]
        picked = mine[mine >= 0]
        used = np.bincount(configs.gpu_type[picked], weights=configs.num_gpus[picked],
                           minlength=3)
        assert np.all(used <= part.capacities)
        assert np.all(label[configs.job[picked]] == i)
    value, best = utility[chosen[chosen >= 0]].sum(), utility[exact[exact >= 0]].sum()
    assert value <= best + 1e-9 and value >= 0.9 * best


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "many"])
def test_bad_partitions_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="partitions is"):
        check_partitions(bad)
    with pytest.raises(ValueError, match="partitions is"):
        Partitioner(bad, 0, None)
    with pytest.raises(InputError, match="option partitions") as caught:
        make_policy("finish_time_fairness_packed", partitions=bad)
    assert "\n" not in str(caught.value)
    with pytest.raises(InputError, match="partitions"):
        make_policy("gandiva", partitions=2)  # solves no program to partition
    with pytest.raises(InputError, match="partition_groups"):
        make_policy("fifo", partition_groups="sticky")


def test_bad_partitions_on_the_command_line_is_one_line_and_exit_2() -> None:
    bad = subprocess.run([sys.executable, "-m", "bayes_sched", "simulate", "--trace",
                          "small_test", "--policy", "finish_time_fairness_packed",
                          "--policy-opt", "partitions=0"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2, bad.stderr
    lines = [line for line in bad.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "partitions" in lines[0], bad.stderr

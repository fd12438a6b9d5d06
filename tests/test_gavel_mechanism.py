"""Gavel's round mechanism and the throughput-table world: fractions honoured over many rounds,
no GPU type oversubscribed, lease extension, a failing solver keeps the allocation, the table
physics."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bayes_sched.cluster import ClusterState
from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.policies.gavel.time_sharing import TimeSharingPolicy
from bayes_sched.sim.gavel_jobs import make_job
from bayes_sched.sim.oracles import oracle_estimates
from bayes_sched.sim.table_cluster import TableCluster, pair_steps_per_second
from bayes_sched.sim.table_run import run_table_simulation
from bayes_sched.throughputs import load_gavel_throughputs

TABLE = load_gavel_throughputs()
ORACLE = oracle_estimates(TABLE)  # the truth, as the world's oracle publishes it
ROUND = 360.0


class FixedFractions(TimeSharingPolicy):
    """The real mechanism under a given allocation (rows in job submission order)."""

    name = "fixed"
    heterogeneity_aware = True

    def __init__(self, fractions: np.ndarray, fail_after: int | None = None) -> None:
        super().__init__()
        self.given = fractions
        self.calls = 0
        self.fail_after = fail_after

    def allocate(self, throughputs: np.ndarray, scale_factors: np.ndarray,
                 capacities: np.ndarray) -> np.ndarray | None:
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            if self.calls % 2:
                raise RuntimeError("solver crashed")
            return None
        return self.given[: len(throughputs)]


class Recorder:
    """Wraps a cluster's apply to record every decision per GPU type."""

    def __init__(self, cluster: TableCluster) -> None:
        self.cluster = cluster
        self.rounds: list[dict[str, np.ndarray]] = []
        inner = cluster.apply

        def apply(allocations):  # noqa: ANN001, ANN202
            self.rounds.append({k: np.asarray(v).copy() for k, v in allocations.items()})
            inner(allocations)

        cluster.apply = apply  # type: ignore[method-assign]


def _spec(text: str):  # noqa: ANN202
    return replace(load_cluster_spec(text), round_interval=ROUND)


def test_fractions_are_honoured_over_many_rounds() -> None:
    """Eight long single-GPU jobs on 4 V100 + 4 K80 under fixed fractions that fill both types:
    over 300 rounds each job's share of rounds on each type is its fraction, within 0.05; no
    type is ever oversubscribed and every job holds exactly its GPUs of one type."""
    spec = _spec("v100:4,k80:4")
    fractions = np.array([[0.75, 0.25]] * 4 + [[0.25, 0.75]] * 4)
    jobs = [make_job(str(i), 0.0, "ResNet-18 (batch size 64)", 1, 1e12) for i in range(8)]
    policy = FixedFractions(fractions)
    cluster = TableCluster(jobs, spec, TABLE, max_time=301 * ROUND)
    recorder = Recorder(cluster)
    from bayes_sched.loop import run_loop
    from bayes_sched.sim.oracles import ThroughputOracle

    stats = run_loop(cluster, policy, ROUND, max_rounds=301, estimators=[ThroughputOracle(TABLE)])
    assert not stats.rejected
    node_types = np.array(spec.gpu_types)
    share = np.zeros((8, 2))
    for decision in recorder.rounds:
        used = {"v100": 0, "k80": 0}
        for name, counts in decision.items():
            types = set(node_types[counts > 0])
            assert len(types) == 1 and counts.sum() == 1
            gpu = types.pop()
            used[gpu] += int(counts.sum())
            share[int(name), ("v100", "k80").index(gpu)] += 1
        assert used["v100"] <= 4 and used["k80"] <= 4
    share /= len(recorder.rounds)
    assert np.abs(share - fractions).max() < 0.05, share
    # Jobs kept on their GPUs round after round have their leases extended (no restart).
    assert policy.lease_extensions > 0.3 * policy.lease_opportunities
    assert policy.solver_failures == 0


def test_a_failing_solver_keeps_the_previous_allocation() -> None:
    spec = _spec("v100:4")
    policy = FixedFractions(np.full((8, 1), 0.5), fail_after=1)
    cluster = ClusterState(spec=spec, now=ROUND)
    from bayes_sched.sim.table_cluster import TableCluster as Cluster

    jobs = [make_job(str(i), 0.0, "A3C", 1, 1e9) for i in range(8)]
    world = Cluster(jobs, spec, TABLE)
    first = policy.decide(cluster, world.job_views()[:6], ORACLE)
    kept = policy.fractions()
    assert len(first) == 4 and set(kept) == {str(i) for i in range(6)}
    # The job set changes twice (the solver returns None, then raises): both are counted and
    # the allocation in force stays the one computed before.
    later = ClusterState(spec=spec, now=ROUND + 2000.0)
    policy.decide(later, world.job_views()[:7], ORACLE)
    policy.decide(ClusterState(spec=spec, now=ROUND + 4000.0), world.job_views()[:8], ORACLE)
    assert policy.solver_failures == 2
    assert policy.fractions() == kept


def test_allocation_is_recomputed_only_when_the_job_set_changes() -> None:
    spec = _spec("v100:4")
    policy = FixedFractions(np.full((8, 1), 0.5))
    jobs = [make_job(str(i), 0.0, "A3C", 1, 1e9) for i in range(8)]
    world = TableCluster(jobs, spec, TABLE)
    views = world.job_views()
    for k in range(10):  # the same jobs for ten rounds: one LP
        policy.decide(ClusterState(spec=spec, now=ROUND * (k + 1)), views, ORACLE)
    assert policy.calls == 1
    # A departure is a change; within Gavel's 1920 s of the last reset it waits, then counts.
    policy = FixedFractions(np.full((8, 1), 0.5))
    policy.decide(ClusterState(spec=spec, now=ROUND), views, ORACLE)
    policy.decide(ClusterState(spec=spec, now=ROUND * 3), views[:-1], ORACLE)
    assert policy.calls == 1
    policy.decide(ClusterState(spec=spec, now=ROUND * 7), views[:-1], ORACLE)
    assert policy.calls == 2 and set(policy.fractions()) == {v.name for v in views[:-1]}


def test_table_physics_runs_jobs_at_measured_rates() -> None:
    """One ResNet-50 job alone on a V100: it finishes ``steps / rate`` seconds into the round
    it starts in (floor(rate x round) steps per round, as Gavel counts them); held on two GPUs it
    cannot use, it makes no progress."""
    spec = _spec("v100:4,k80:4")
    rate = TABLE.steps_per_second("ResNet-50 (batch size 32)", 1, "v100")
    assert rate is not None and rate > 0
    steps = 3 * np.floor(rate * ROUND) + 10
    job = make_job("0", 0.0, "ResNet-50 (batch size 32)", 1, steps)
    cluster = TableCluster([job], spec, TABLE)
    cluster.apply({"0": np.array([1] + [0] * (spec.num_nodes - 1))})
    for _ in range(4):
        cluster.advance(ROUND)
    done = cluster.jobs["0"]
    assert done.completion_time == pytest.approx(3 * ROUND + 10 / rate)
    assert done.attained_service == pytest.approx(steps / rate)  # GPU-seconds of its steps
    misfit = TableCluster([make_job("1", 0.0, "A3C", 1, 100.0)], spec, TABLE)
    misfit.apply({"1": np.array([2] + [0] * (spec.num_nodes - 1))})
    misfit.advance(ROUND)
    assert misfit.jobs["1"].steps_done == 0 and misfit.misfit_rounds == 1


def test_pair_rates_come_from_the_table() -> None:
    a = make_job("a", 0.0, "ResNet-18 (batch size 16)", 1, 1.0)
    b = make_job("b", 0.0, "ResNet-18 (batch size 256)", 1, 1.0)
    assert pair_steps_per_second(TABLE, a, b, "v100") == pytest.approx(
        (24.45464779058787, 10.300256501360458))
    assert pair_steps_per_second(TABLE, b, a, "v100") == pytest.approx(
        (10.300256501360458, 24.45464779058787))
    wide = make_job("c", 0.0, "ResNet-18 (batch size 16)", 2, 1.0)
    assert pair_steps_per_second(TABLE, a, wide, "v100") == (0.0, 0.0)  # not measured


def test_a_job_no_gpu_type_can_run_is_refused() -> None:
    from bayes_sched.errors import InputError

    with pytest.raises(InputError, match="job '0'.*can run on no GPU type"):
        TableCluster([make_job("0", 0.0, "ResNet-50 (batch size 32)", 8, 10.0)],
                     _spec("v100:4"), TABLE)


def test_end_to_end_on_a_shipped_trace() -> None:
    from bayes_sched.policies import make_policy
    from bayes_sched.sim.gavel_jobs import read_gavel_trace, shipped_gavel_trace

    jobs = read_gavel_trace(shipped_gavel_trace("medium_test"))
    result = run_table_simulation(jobs, make_policy("max_min_fairness_perf"),
                                  _spec("v100:4,p100:4,k80:4"))
    assert result.summary["finished"] == len(jobs) and not result.rejected
    fastest = {job.name: job.total_steps / max(
        TABLE.steps_per_second(job.job_type, job.scale_factor, g) or 0 for g in
        ("v100", "p100", "k80")) for job in jobs}
    for row in result.jobs.itertuples():
        assert row.jct >= fastest[row.job] - 1e-6

"""Gavel's LP policies: valid time fractions, and heterogeneity-awareness pays on a small case."""

from __future__ import annotations

import numpy as np
import pytest

from bayes_sched.cluster import ClusterState, validate_allocations
from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.mechanisms.rounds import cluster_types
from bayes_sched.policies import make_policy
from bayes_sched.policies.gavel.throughput_reading import measured_throughputs
from bayes_sched.sim.gavel_jobs import make_job
from bayes_sched.sim.oracles import oracle_estimates
from bayes_sched.sim.table_cluster import TableCluster
from bayes_sched.throughputs import gavel_job_types, load_gavel_throughputs

TABLE = load_gavel_throughputs()
ORACLE = oracle_estimates(TABLE)  # the truth, as the world's oracle publishes it
LP_POLICIES = ("max_min_fairness", "max_min_fairness_perf", "max_sum_throughput_perf")


def _case(seed: int, num_jobs: int, cluster: str = "v100:8,p100:4,k80:8"):  # noqa: ANN202
    rng = np.random.default_rng(seed)
    spec = load_cluster_spec(cluster)
    types = gavel_job_types()
    jobs = []
    for i in range(num_jobs):
        job_type, distributed = types[int(rng.integers(len(types)))]
        scale = int(rng.choice([1, 2, 4])) if distributed else 1
        jobs.append(make_job(str(i), 0.0, job_type, scale, 1e9))
    views = TableCluster(jobs, spec, TABLE).job_views()
    return ClusterState(spec=spec, now=360.0), views


@pytest.mark.parametrize("name", LP_POLICIES)
@pytest.mark.parametrize("seed", range(4))
def test_fractions_are_valid(name: str, seed: int) -> None:
    """Each job's fractions sum to at most 1; per GPU type, fractions x scale factors fit the
    type's GPUs; the round's decision oversubscribes no node."""
    cluster, views = _case(seed, 6 + 5 * seed)
    policy = make_policy(name)
    decision = policy.decide(cluster, views, ORACLE)
    validate_allocations(decision, cluster, [v.name for v in views])
    fractions = policy.fractions()
    assert set(fractions) == {v.name for v in views}
    types = cluster_types(cluster)
    x = np.array([[fractions[v.name][t] for t in types] for v in views])
    sizes = np.array([v.requested_replicas for v in views])
    assert np.all(x >= 0) and np.all(x.sum(axis=1) <= 1 + 1e-6)
    capacity = np.array([cluster.gpus_of_type(t) for t in types])
    assert np.all((sizes[:, None] * x).sum(axis=0) <= capacity + 1e-6)
    assert policy.solver_failures == 0


def _effective(name: str, cluster: ClusterState, views: list, solver: str
               ) -> tuple[np.ndarray, np.ndarray]:
    """Steps/s each job gets from its fractions, and the same normalised by its steps/s under an
    equal share of the cluster (Gavel's normalisation)."""
    policy = make_policy(name, solver=solver)
    policy.decide(cluster, views, ORACLE)
    types = cluster_types(cluster)
    rates = measured_throughputs(views, types, cluster, TABLE)
    x = np.array([[policy.fractions()[v.name][t] for t in types] for v in views])
    capacity = np.array([cluster.gpus_of_type(t) for t in types], dtype=float)
    effective = (rates * x).sum(axis=1)
    return effective, effective / (rates @ (capacity / capacity.sum()))


@pytest.mark.parametrize("solver", ["HIGHS", "CLARABEL"])
def test_heterogeneity_awareness_raises_effective_throughput(solver: str) -> None:
    """12 single-GPU jobs of mixed types on 4 V100 + 4 P100 + 4 K80: Gavel's heterogeneity-
    aware max-min gives every job at least as much normalised throughput as the agnostic LAS
    gives its worst-off job, and more in total; max-sum-throughput gets the most steps/s."""
    types = [t for t, _ in gavel_job_types()]
    jobs = [make_job(str(i), 0.0, types[(5 * i) % len(types)], 1, 1e9) for i in range(12)]
    spec = load_cluster_spec("v100:4,p100:4,k80:4")
    views = TableCluster(jobs, spec, TABLE).job_views()
    cluster = ClusterState(spec=spec, now=360.0)
    agnostic_raw, agnostic = _effective("max_min_fairness", cluster, views, solver)
    aware_raw, aware = _effective("max_min_fairness_perf", cluster, views, solver)
    most_raw, _ = _effective("max_sum_throughput_perf", cluster, views, solver)
    assert aware.min() >= agnostic.min() - 1e-6
    if solver == "CLARABEL":
        # The agnostic LP is indifferent to which type a job's time is on; the interior-point
        # answer spreads it, a simplex vertex may happen to land on fast types (HiGHS does
        # here), so the totals compare only for the former.
        assert aware.sum() > 1.05 * agnostic.sum()
    assert most_raw.sum() >= max(aware_raw.sum(), agnostic_raw.sum()) - 1e-6


def test_unknown_job_types_get_gavels_default_throughput() -> None:
    """A job the table does not cover (here a Pollux-world job type) counts as 1 step/s on every
    type (Gavel's DEFAULT_THROUGHPUT), and 0 where the type has too few GPUs for it."""
    spec = load_cluster_spec("v100:4,k80:8")
    jobs = [make_job("0", 0.0, "cifar10", 8, 10.0), make_job("1", 0.0, "A3C", 1, 10.0)]

    class View:  # what measured_throughputs reads of a job view
        def __init__(self, job) -> None:  # noqa: ANN001
            self.application, self.requested_replicas = job.job_type, job.scale_factor

    rates = measured_throughputs([View(j) for j in jobs], ("v100", "k80"),
                                 ClusterState(spec=spec, now=0.0), TABLE)
    assert rates[0].tolist() == [0.0, 1.0]
    assert rates[1].tolist() == [TABLE.steps_per_second("A3C", 1, "v100"),
                                 TABLE.steps_per_second("A3C", 1, "k80")]


def test_cli_simulates_a_gavel_trace_end_to_end() -> None:
    """``bayes-sched simulate --trace`` on a shipped trace, Gavel's cluster, JSON out: every job
    finishes, stdout is strict JSON (the solver prints nothing there)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "bayes_sched", "simulate", "--trace", "small_test", "--cluster",
         "v100:36,p100:36,k80:36", "--policy", "max_min_fairness_perf", "--seed", "0",
         "--json"], capture_output=True, text=True, cwd=root, timeout=300,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["finished"] == row["jobs"] == 20
    assert row["round_s"] == 360.0 and row["solver_failures"] == 0
    assert row["cluster"] == "9x4:v100,9x4:p100,9x4:k80"

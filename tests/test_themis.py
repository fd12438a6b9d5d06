"""Themis's auction between apps (Sia's per-tenant term: tests/test_sia_tenants.py)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from bayes_sched.cluster_spec import ClusterSpec
from bayes_sched.fair_shares import tenant_job_weights
from bayes_sched.policies import make_policy
from bayes_sched.policies.base import Policy
from bayes_sched.policies.themis import (
    Apps,
    partial_allocation,
    proportionally_fair,
    themis_allocation,
)
from bayes_sched.sim.gavel_jobs import TableJobSpec, make_job
from bayes_sched.sim.table_cluster import TableCluster
from bayes_sched.sim.table_run import run_table_simulation
from bayes_sched.sim.tenant_cluster import TenantTableCluster
from bayes_sched.tenants import TenantSpec
from bayes_sched.throughputs import load_gavel_throughputs
from tests.cli_inprocess import run_cli

JOB_TYPE = "ResNet-18 (batch size 64)"


def _apps(rng: np.random.Generator, num_apps: int, num_types: int) -> Apps:
    efficiency = rng.uniform(0.2, 1.0, (num_apps, num_types))
    efficiency[np.arange(num_apps), rng.integers(0, num_types, num_apps)] = 1.0
    return Apps(rng.uniform(0, 3600, num_apps), rng.uniform(600, 36000, num_apps), efficiency,
                rng.integers(1, 12, num_apps).astype(float))


def test_the_app_with_the_worst_rho_is_served_first() -> None:
    # Three equal apps, each able to use all 8 GPUs; only the worst (f -> 1: one app offered).
    apps = Apps(np.zeros(3), np.full(3, 8 * 3600.0), np.ones((3, 1)), np.full(3, 8.0))
    gpus, offered, auction = themis_allocation(apps, np.array([1.2, 3.0, 2.0]), np.array([8.0]),
                                               f=0.9)
    assert offered.tolist() == [1] and auction.kept.tolist() == [1.0]
    assert gpus[1, 0] == pytest.approx(8.0, abs=1e-6) and gpus[[0, 2]].sum() < 1e-6
    # f = 0.5 offers ceil(1.5) = 2 apps, worst first; the third gets what they leave.
    _, offered, _ = themis_allocation(apps, np.array([1.2, 3.0, 2.0]), np.array([8.0]), f=0.5)
    assert offered.tolist() == [1, 2]


@pytest.mark.parametrize("seed", range(6))
def test_the_auction_never_allocates_more_than_the_cluster_or_an_app_can_use(seed: int) -> None:
    rng = np.random.default_rng(seed)
    apps = _apps(rng, 5, 3)
    capacities = rng.integers(2, 16, 3).astype(float)
    for f in (0.0, 0.5, 0.8):
        for leftover in ("others", "all"):
            gpus, _, _ = themis_allocation(apps, rng.uniform(0.5, 3, 5), capacities, f, leftover)
            assert (gpus >= 0).all()
            assert (gpus.sum(axis=0) <= capacities + 1e-6).all()
            assert (gpus.sum(axis=1) <= apps.demand + 1e-6).all()
    # Work conserving with leftover="all": all GPUs used, or every app at its demand.
    used = gpus.sum()
    assert used == pytest.approx(min(capacities.sum(), apps.demand.sum()), rel=1e-3)
    withheld, _, auction = themis_allocation(apps, np.ones(5), capacities, 0.0, "others")
    assert withheld.sum() < used and (auction.kept < 1).any()


def test_the_optimum_maximises_the_product_of_inverse_rho() -> None:
    rng = np.random.default_rng(7)
    apps, capacities = _apps(rng, 3, 2), np.array([6.0, 6.0])
    best = np.log(apps.finish_times(proportionally_fair(apps, capacities))).sum()
    for _ in range(200):  # no feasible random allocation does better
        trial = rng.dirichlet(np.ones(4), 2).T[:3] * capacities
        trial *= np.minimum(1.0, apps.demand / trial.sum(axis=1))[:, None]
        assert np.log(apps.finish_times(trial)).sum() >= best - 1e-6


def test_the_partial_allocation_withholds_what_an_app_costs_the_others() -> None:
    apps = Apps(np.array([100.0, 0.0, 50.0]), np.array([8.0, 2.0, 20.0]) * 3600,
                np.array([[1.0, 0.5], [1.0, 0.3], [1.0, 0.9]]), np.array([8.0, 4.0, 16.0]))
    capacities = np.array([8.0, 8.0])
    auction = partial_allocation(apps, capacities)
    for a in range(3):
        others = [b for b in range(3) if b != a]
        rest = dataclasses.replace(apps, shared=apps.shared[others], work=apps.work[others],
                                   efficiency=apps.efficiency[others], demand=apps.demand[others])
        alone = rest.finish_times(proportionally_fair(rest, capacities))
        with_a = apps.finish_times(auction.optimum)[others]
        expected = math.prod(alone / with_a)  # prod 1/rho(x*) over prod 1/rho(x^-a)
        assert auction.kept[a] == pytest.approx(expected, rel=1e-4)
        assert auction.gpus[a] == pytest.approx(expected * auction.optimum[a], abs=1e-6)
    assert (auction.kept < 1.0).all()  # every app here costs the others something


def _spec(gpus: int, *tenants: TenantSpec) -> ClusterSpec:
    base = ClusterSpec.homogeneous(gpus // 4, 4, "v100", round_interval=360.0)
    return dataclasses.replace(base, tenants=tenants)


def _job(name: str, at: float, tenant: str, hours: float, gpus: int = 1) -> TableJobSpec:
    rate = load_gavel_throughputs().steps_per_second(JOB_TYPE, gpus, "v100") or 0.0
    return make_job(name, at, JOB_TYPE, gpus, hours * 3600 * rate, tenant=tenant)


def _gpu_seconds(jobs: list[TableJobSpec], policy: Policy, spec: ClusterSpec, until: float = 1e9
                 ) -> tuple[dict[str, float], list[dict[str, list[int]]]]:
    """GPU-seconds per tenant over the rounds decided before ``until`` seconds, and every round's
    allocations."""
    held: dict[str, float] = {}
    rounds: list[dict[str, list[int]]] = []

    def record(cluster: TableCluster) -> None:
        allocations = cluster.allocations()
        rounds.append({name: counts.tolist() for name, counts in sorted(allocations.items())})
        for name, counts in allocations.items():
            if cluster.state.now < until:
                tenant = cluster.jobs[name].spec.tenant
                held[tenant] = held.get(tenant, 0.0) + float(counts.sum()) * 360.0

    run_table_simulation(jobs, policy, spec, cluster_type=TenantTableCluster, on_round=record,
                         measurement_noise=0.0)
    return held, rounds


def test_themis_runs_on_tenants_and_serves_the_tenant_left_behind() -> None:
    spec = _spec(4, TenantSpec("early"), TenantSpec("late"))
    jobs = [_job(f"e{i}", 0.0, "early", 3.0) for i in range(4)]
    jobs += [_job(f"l{i}", 1800.0, "late", 3.0) for i in range(4)]
    held = {}
    for name in ("themis", "fifo"):
        gpu_s, _ = _gpu_seconds(jobs, make_policy(name), spec, until=3 * 3600.0)
        held[name] = gpu_s.get("late", 0.0) / sum(gpu_s.values())
    # The late tenant's rho is the worst when it arrives (no GPUs): it is served first.
    assert held["themis"] > 0.5 and held["fifo"] < 0.1


def test_tenant_job_weights_are_one_for_equal_tenants_and_follow_the_weights() -> None:
    assert tenant_job_weights(["a", "a", "b", "b"], {"a": 1.0, "b": 1.0}) == [1.0] * 4
    assert tenant_job_weights(["x", "x", "x"], {}) == [1.0] * 3
    omega = tenant_job_weights(["a", "b", "b", "b"], {"a": 2.0, "b": 1.0})
    assert omega[0] == pytest.approx(8 / 3) and omega[1] == pytest.approx(4 / 9)
    assert sum(omega) == pytest.approx(4.0)


def test_a_bad_fairness_knob_is_one_line() -> None:
    trace = "bayes_sched/data/gavel/traces/small_test.trace"
    done = run_cli("simulate", "--trace", trace, "--cluster", "v100:1x4", "--max-jobs", "2",
                   "--no-progress", "--policy", "themis", "--policy-opt", "f=1.5")
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert "f is 1.5" in done.stderr and "Traceback" not in done.stderr

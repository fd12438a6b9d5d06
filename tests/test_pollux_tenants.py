"""Pollux with per-tenant weights (:mod:`bayes_sched.policies.pollux_tenants`): one tenant is
Pollux's fitness, the fitness's best split follows the tenants' weights whatever their job
counts, and the policy decides through Pollux's search on a cluster with tenants."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bayes_sched.agent import JobAgent
from bayes_sched.cluster import ClusterState
from bayes_sched.cluster_spec import ClusterSpec
from bayes_sched.jobs import JobSettings
from bayes_sched.mechanisms.genetic_allocation.sparse import power_mean
from bayes_sched.policies import make_policy
from bayes_sched.policies.pollux import GAConfig
from bayes_sched.policies.pollux_tenants import tenant_power_mean
from bayes_sched.sim.physics import get_application
from bayes_sched.tenants import TenantSpec
from tests.agents import decide, job_view


def test_one_tenant_is_pollux_fitness_and_equal_tenants_keep_its_scale() -> None:
    rng = np.random.default_rng(0)
    speedups = rng.uniform(0.1, 3.0, (5, 6))
    one = tenant_power_mean(speedups, np.zeros(6, dtype=np.int64), np.array([2.0]), -1.0)
    assert np.array_equal(one, power_mean(speedups, -1.0))
    flat = np.full((1, 6), 1.7)
    two = tenant_power_mean(flat, np.array([0, 0, 0, 1, 1, 1]), np.array([1.0, 1.0]), -1.0)
    assert two == pytest.approx([1.7])


@pytest.mark.parametrize("p", [-1.0, -0.5, 0.5])
def test_the_best_split_follows_the_weights_not_the_job_counts(p: float) -> None:
    # Tenant 0 (weight 2) has 1 job, tenant 1 (weight 1) has 5; speedups linear in GPUs: every
    # split of 30 GPUs, each tenant's GPUs shared evenly among its jobs.
    tenant, weights = np.array([0, 1, 1, 1, 1, 1]), np.array([2.0, 1.0])
    splits = np.arange(1, 30)
    speedups = np.array([[g, *[(30 - g) / 5] * 5] for g in splits], dtype=float)
    best = splits[np.argmax(tenant_power_mean(speedups, tenant, weights, p))]
    assert best == 20  # 2 : 1
    # Pollux's own mean over jobs gives the lone job far less than two thirds.
    assert splits[np.argmax(power_mean(speedups, p))] < 15


def test_the_policy_decides_validly_on_a_cluster_with_weighted_tenants() -> None:
    spec = dataclasses.replace(ClusterSpec.homogeneous(2, 4, "t4"),
                               tenants=(TenantSpec("a", weight=3.0), TenantSpec("b")))
    cluster = ClusterState(spec=spec, now=600.0)
    limits = get_application("cifar10").limits
    policy = make_policy("pollux_tenants", ga=GAConfig(population=12, generations=4, seed=0))
    jobs = [dataclasses.replace(job_view(JobAgent(f"j{i}", limits, JobSettings()),
                                         "cifar10", cluster.now, [0, 0]),
                                tenant="a" if i < 2 else "b") for i in range(6)]
    decision = decide(policy, cluster, jobs)
    held = sum((counts for counts in decision.values()), np.zeros(2, dtype=np.int64))
    assert (held <= 4).all() and decision

"""Sia with per-tenant weights (:mod:`bayes_sched.policies.sia_tenants`): the integer program
against brute force on the exact objective, one tenant deciding as Sia, and tenants receiving
GPU-time in proportion to their weights instead of the heaviest taking everything."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from bayes_sched.policies import make_policy
from bayes_sched.policies.sia import config_utilities, normalized_goodputs
from bayes_sched.policies.sia_program import Configurations, tenant_assignment
from bayes_sched.policies.sia_tenants import (
    tenant_objective,
    tenant_parts,
    tenant_utility,
)
from bayes_sched.tenants import TenantSpec
from tests.test_themis import _gpu_seconds, _job, _spec


def _brute_force(utility: np.ndarray, normalized: np.ndarray, configs: Configurations,
                 capacities: np.ndarray, tenant: np.ndarray, weights: np.ndarray,
                 p: float) -> float:
    best = -np.inf
    num_jobs = len(tenant)
    options = [[-1, *np.flatnonzero(configs.job == j).tolist()] for j in range(num_jobs)]
    for pick in itertools.product(*options):
        chosen = np.array(pick)
        used = chosen[chosen >= 0]
        load = np.bincount(configs.gpu_type[used], weights=configs.num_gpus[used],
                           minlength=len(capacities))
        if (load <= capacities).all():
            best = max(best, tenant_objective(chosen, utility, normalized, configs.job, tenant,
                                              weights, float(capacities.sum()), p))
    return best


@pytest.mark.parametrize(("seed", "solver"), [*((s, "HIGHS") for s in range(8)),
                                             (0, "SCIPY"), (1, "SCIPY")])
def test_the_program_finds_the_exact_objectives_optimum(seed: int, solver: str) -> None:
    # HiGHS through the data cvxpy's interface takes; SCIPY through a cvxpy problem (the path
    # SCIP takes, which CI does not install).
    rng = np.random.default_rng(seed)
    num_jobs, num_types = 6, 2
    job = np.repeat(np.arange(num_jobs), num_types)
    gpu_type = np.tile(np.arange(num_types), num_jobs)
    configs = Configurations(job, gpu_type, rng.choice([1, 2, 4], num_jobs)[job],
                             rng.uniform(1.0, 3.0, num_jobs * num_types))
    normalized = normalized_goodputs(configs, num_jobs)
    utility = config_utilities(normalized, -0.5, 1.1)
    capacities = np.array([4, 3])
    tenant, weights = rng.integers(0, 3, num_jobs), np.array([1.0, 2.0, 0.5])
    chosen = tenant_assignment(utility, normalized, configs, capacities, num_jobs, tenant,
                               weights, -0.5, solver)
    assert chosen is not None
    got = tenant_objective(chosen, utility, normalized, configs.job, tenant, weights,
                           float(capacities.sum()), -0.5)
    best = _brute_force(utility, normalized, configs, capacities, tenant, weights, -0.5)
    # The tangents over-approximate phi between breakpoints: the optimum may be missed by
    # at most that approximation's error.
    assert got >= best - 1e-3 * abs(best)


def test_the_tenant_term_is_concave_and_the_parts_follow_the_weights() -> None:
    s = np.linspace(0.0, 5.0, 51)
    for p in (-2.0, -0.5, 0.5):
        phi = tenant_utility(s, p)
        assert phi[0] == 0.0 and (np.diff(phi) > 0).all() and (np.diff(phi, 2) < 0).all()
    parts = tenant_parts(np.array([0, 0, 2]), np.array([2.0, 5.0, 1.0]), 12.0)
    assert parts.tolist() == [8.0, 0.0, 4.0]  # tenant 1 has no jobs: no part


def test_sia_with_one_tenant_weighted_decides_as_without() -> None:
    spec = _spec(8, TenantSpec("a", weight=3.0))
    jobs = [_job(f"a{i}", 300.0 * i, "a", 1.0 + i % 4, gpus=(1, 2, 4)[i % 3]) for i in range(10)]
    _, plain = _gpu_seconds(jobs, make_policy("sia"), spec)
    _, weighted = _gpu_seconds(jobs, make_policy("sia", tenant_weights=True), spec)
    assert weighted == plain and len(plain) > 10


@pytest.mark.parametrize("first", ["light", "heavy"])
def test_a_tenant_of_weight_2_gets_about_twice_the_gpu_time(first: str) -> None:
    spec = _spec(8, TenantSpec("heavy", weight=2.0), TenantSpec("light"))
    second = "heavy" if first == "light" else "light"
    jobs = [_job(f"{first}{i}", 0.0, first, 2.0) for i in range(8)]  # submitted first
    jobs += [_job(f"{second}{i}", 0.0, second, 2.0) for i in range(8)]
    gpu_s, _ = _gpu_seconds(jobs, make_policy("sia", tenant_weights=True), spec,
                            until=1.5 * 3600.0)
    share = gpu_s.get("heavy", 0.0) / sum(gpu_s.values())
    # 8 GPUs split 2:1 -> 5.33 : 2.67; whole GPUs: 5 : 3 or 6 : 2. Neither takes all.
    assert 0.6 <= share <= 0.76, share


def test_a_tenant_of_few_large_jobs_is_not_starved_nor_starves_the_others() -> None:
    spec = _spec(16, TenantSpec("large"), TenantSpec("small"))
    jobs = [_job(f"l{i}", 0.0, "large", 3.0, gpus=8) for i in range(3)]
    jobs += [_job(f"s{i}", 0.0, "small", 3.0) for i in range(24)]
    gpu_s, _ = _gpu_seconds(jobs, make_policy("sia", tenant_weights=True), spec,
                            until=2 * 3600.0)
    share = gpu_s.get("large", 0.0) / sum(gpu_s.values())
    assert share == pytest.approx(0.5, abs=0.01), share


def test_tenant_weights_need_a_concave_term() -> None:
    with pytest.raises(ValueError, match="p < 1"):
        make_policy("sia", p=1.5, tenant_weights=True)

"""The policy contract, for every registered policy: valid allocations on odd and random cluster
states and job models built only from what jobs report. That the scheduling side never imports
the simulator is an import contract (pyproject.toml's [tool.importlinter], run by lint-imports)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import cache

import numpy as np
import pytest

from bayes_sched.agent import JobAgent
from bayes_sched.cluster import ClusterState, validate_allocations
from bayes_sched.colocation import predicted_rate
from bayes_sched.estimates import NO_ESTIMATES
from bayes_sched.estimation import JobModelEstimator, profile_of
from bayes_sched.interference.pairs import PairResiduals
from bayes_sched.jobs import JobSettings, JobSpec, JobView
from bayes_sched.policies import POLICIES, BayesOptPolicy, PolluxPolicy
from bayes_sched.policies.base import Policy
from bayes_sched.policies.pollux import GAConfig
from bayes_sched.sim.physics import APPLICATION_NAMES, get_application
from perfmodel.throughput import fit_throughput
from tests.agents import decide, job_view

SMALL_GA = GAConfig(population=12, generations=4, seed=0)

#: Every registered policy; the genetic searches small and Shockwave's horizon short, so hundreds
#: of states stay quick.
FACTORIES: dict[str, Callable[[], Policy]] = {
    **POLICIES,
    "pollux": lambda: PolluxPolicy(ga=SMALL_GA),
    "pollux_tenants": lambda: POLICIES.make("pollux_tenants", ga=SMALL_GA),
    "bo": lambda: BayesOptPolicy(ga=SMALL_GA, candidates=4),
    "shockwave": lambda: POLICIES.make("shockwave", future_rounds=4),
    # The posterior state's weights fit one node topology (switches per node), which random
    # clusters vary; a cluster they do not fit is refused in one line (test_learned_policies).
    "banerjee": lambda: POLICIES.make("banerjee", state="counters"),
}
assert FACTORIES.keys() == POLICIES.keys()

#: Placements a random job may have been measured on.
PLACEMENTS = ((1,), (2,), (4,), (2, 2), (1, 1), (4, 4))


@cache
def _measurements(app: str, shapes: int) -> tuple[tuple[tuple[int, ...], int, float, float], ...]:
    """True step times of ``app`` on its first ``shapes`` placements at two micro-batches."""
    application = get_application(app)
    limits = application.limits
    rows = []
    for placement in PLACEMENTS[:shapes]:
        for m in (limits.min_local_bsz, min(4 * limits.min_local_bsz, limits.max_local_bsz)):
            rows.append((placement, m, *application.step_time(placement, m)))
    return tuple(rows)


def _agent(name: str, app: str, settings: JobSettings, shapes: int) -> JobAgent:
    application = get_application(app)
    agent = JobAgent(name, application.limits, settings, min_refit_interval=0.0)
    for placement, m, step, sync in _measurements(app, shapes):
        agent.record(len(placement), sum(placement), m, step, sync,
                     *application.grad_stats(application.limits.init_batch_size, 1))
    return agent


@cache
def _pool_agent(index: int, settings: JobSettings) -> JobAgent:
    """Job ``index`` of the pool: always the same application and measurements (a job's reports
    only grow), so agents and the estimation stage fit each once."""
    app = APPLICATION_NAMES[index % len(APPLICATION_NAMES)]
    return _agent(f"job{index}", app, settings, index % 4)  # index % 4 == 0: no observation


def _random_allocations(rng: np.random.Generator, num_jobs: int, num_nodes: int,
                        gpus_per_node: int) -> np.ndarray:
    """Existing allocations ``(J, N)`` that fit the nodes (some jobs hold nothing)."""
    free = np.full(num_nodes, gpus_per_node)
    allocation = np.zeros((num_jobs, num_nodes), dtype=np.int64)
    for j in range(num_jobs):
        if rng.random() < 0.4:
            continue
        for n in rng.choice(num_nodes, size=rng.integers(1, num_nodes + 1), replace=False):
            take = int(rng.integers(0, free[n] + 1))
            allocation[j, n] += take
            free[n] -= take
    return allocation


def _random_jobs(rng: np.random.Generator, policy: Policy, cluster: ClusterState,
                 pool: int) -> list[JobView]:
    num_jobs = int(rng.integers(0, 2 * cluster.total_gpus + 2))
    names = rng.choice(pool, size=min(num_jobs, pool), replace=False)
    allocation = _random_allocations(rng, len(names), cluster.num_nodes, cluster.gpus_per_node)
    jobs = []
    for j, index in enumerate(names):
        app = APPLICATION_NAMES[int(index) % len(APPLICATION_NAMES)]
        limits = get_application(app).limits
        replicas = (1, 2, 4)[int(index) % 3]
        spec = JobSpec(f"job{index}", 0.0, app, replicas, limits.init_batch_size * replicas)
        agent = _pool_agent(int(index), policy.job_settings(spec))
        submit = float(cluster.now - rng.integers(0, 36000))
        jobs.append(job_view(agent, app, cluster.now, allocation[j].tolist(), submit=submit,
                             attained=float(rng.integers(0, 10**5)), replicas=replicas,
                             batch=spec.batch_size, num_restarts=int(rng.integers(0, 30)),
                             progress=float(rng.random() * 10)))
    return jobs


def _check(decision: dict[str, np.ndarray], cluster: ClusterState, jobs: list[JobView]) -> None:
    for counts in decision.values():
        assert np.asarray(counts).shape == (cluster.num_nodes,)
    validate_allocations(decision, cluster, [job.name for job in jobs])  # raises if invalid


def _random_rounds(name: str, seeds: int, rounds: int) -> int:
    """Consecutive rounds of one policy per seed on a random cluster shape; returns the states."""
    states = 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        policy = FACTORIES[name]()
        num_nodes, gpus = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        for round_ in range(rounds):
            cluster = ClusterState(num_nodes, gpus, 60.0 * (round_ + 1))
            jobs = _random_jobs(rng, policy, cluster, pool=8)
            _check(decide(policy, cluster, jobs), cluster, jobs)
            states += 1
    return states


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_decides_validly_on_random_cluster_states(name: str) -> None:
    """Seeded random clusters, jobs with and without observations, random existing allocations,
    ages and restarts, over consecutive rounds of one policy: no exception, no oversubscription,
    one ``(num_nodes,)`` array per job."""
    assert _random_rounds(name, 8, 25) == 200


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_policy_contract(name: str) -> None:
    """Zero jobs, more jobs than GPUs, jobs with no observation yet: a valid allocation each."""
    policy = FACTORIES[name]()
    cluster = ClusterState(2, 2, 600.0)
    assert decide(policy, cluster, []) == {}
    specs = [JobSpec(f"j{i}", 0.0, "cifar10", 1, 128) for i in range(7)]
    fresh = [job_view(JobAgent(s.name, get_application("cifar10").limits,
                               policy.job_settings(s)), "cifar10", cluster.now, [0, 0])
             for s in specs]
    assert all(job.model is None and not job.observations for job in fresh)
    decision = decide(policy, cluster, fresh)
    _check(decision, cluster, fresh)
    assert sum(int(c.sum()) for c in decision.values()) <= cluster.total_gpus
    measured = [job_view(_agent(s.name, "cifar10", policy.job_settings(s), 2), "cifar10",
                         cluster.now, [0, 0]) for s in specs]
    _check(decide(policy, cluster, measured), cluster, measured)


def test_job_models_are_built_only_from_reported_observations() -> None:
    """The estimation stage's model of a job that reports no fit is the fit of its reported step
    times, and nothing else: the same reports give the same model whatever built them."""
    limits = get_application("imagenet").limits
    agent = _agent("j", "imagenet", JobSettings(batch_size=800), 3)
    view = job_view(agent, "imagenet", 600.0, [0, 0], settings=JobSettings(batch_size=800))
    assert view.fit is None  # a fixed-batch job fits nothing for itself
    (estimated,) = JobModelEstimator().estimate(ClusterState(2, 4, 600.0), [view])
    model = estimated.model
    assert model is not None and model.version == 1
    profile = profile_of("j", list(view.observations.values()))
    # Only the identifiable terms are compared (the uninformed ones are pinned, Pollux-style).
    fitted = fit_throughput(profile)
    assert model.params.alpha_c == pytest.approx(fitted.alpha_c, rel=1e-6)
    assert model.params.beta_c == pytest.approx(fitted.beta_c, rel=1e-6)
    # A view built by hand from the same reports (no agent, no simulator) gets the same model.
    by_hand = JobView(name="j", application="imagenet", submit_time=0.0, age=600.0,
                      attained_service=0.0, allocation=np.zeros(2, np.int64), num_restarts=0,
                      requested_replicas=1, requested_batch_size=800,
                      settings=JobSettings(batch_size=800), limits=limits,
                      observations=dict(view.observations), gradient=view.gradient)
    (again,) = JobModelEstimator().estimate(ClusterState(2, 4, 600.0), [by_hand])
    assert again.model is not None and again.model.params == model.params


def test_job_views_and_models_are_read_only() -> None:
    agent = _agent("j", "cifar10", JobSettings(), 2)
    (view,) = JobModelEstimator().estimate(ClusterState(2, 4, 600.0),
                                           [job_view(agent, "cifar10", 600.0, [1, 0])])
    with pytest.raises(ValueError):
        view.allocation[0] = 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.progress = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        view.observations[(9, 9, 9)] = next(iter(view.observations.values()))  # type: ignore[index]
    with pytest.raises(TypeError):
        view.models["other"] = view.models["default"]  # type: ignore[index]
    model = view.model
    assert model is not None and model.version == agent.num_refits == 1
    with pytest.raises(AttributeError):
        model.version = 2  # type: ignore[misc]
    with pytest.raises(ValueError):
        model.goodput_model().theta[0, 0] = 0.0
    # The agent measuring more changes the next report, not the one a policy already holds.
    agent.record(3, 12, 64, 1.0, 0.5, 1.0, 1.0)
    assert (3, 12, 64) not in view.observations


def test_empty_job_lists_and_all_zero_allocations_do_not_crash_pollux_or_bo() -> None:
    cluster = ClusterState(2, 4, 60.0)
    assert PolluxPolicy(ga=SMALL_GA).decide(cluster, [], NO_ESTIMATES) == {}
    assert BayesOptPolicy(ga=SMALL_GA).decide(cluster, [], NO_ESTIMATES) == {}
    pairs = PairResiduals(draws=5)
    apps = pairs.application_index(["cifar10", "bert", "cifar10"])
    pairs.fit()
    nothing = np.zeros((2, 3, 2), np.int16)  # nobody runs anywhere
    assert np.array_equal(pairs.log_factor(nothing, apps), np.zeros((2, 3)))
    assert pairs.log_factor(nothing, apps, pairs.draws).shape == (5, 2, 3)


def test_bo_predicts_the_rate_of_the_batch_the_job_itself_chooses() -> None:
    """The job accumulates on one GPU beyond ``B0`` (its gradient-noise estimate needs two
    micro-batches); bo's predicted progress rate must be the goodput of that batch."""
    app = get_application("cifar10")
    agent = _agent("j", "cifar10", JobSettings(), 3)
    job_models = JobModelEstimator()
    cluster = ClusterState(2, 4, 600.0)
    for grad_var in (1.0, 10.0, 100.0):
        agent.grad_sqr, agent.grad_var = 1.0, grad_var
        (view,) = job_models.estimate(cluster, [job_view(agent, "cifar10", 600.0, [1, 0])])
        local, accum = agent.choose_batch((1,))
        model = agent.goodput_model()
        assert model is not None
        expected = float(model.goodput(1, 1, local, accum)[0]) / app.limits.init_batch_size
        assert predicted_rate(view, np.array([1, 0])) == pytest.approx(expected)


def test_library_fits_leave_the_callers_pyro_param_store_alone() -> None:
    """The contention network's fit (as bo's estimation stage runs it) scopes Pyro's parameter
    store: a parameter the caller holds survives it."""
    import pyro
    import torch

    from bayes_sched.contention.inference import fit_svi, prepare
    from bayes_sched.sim.laws.contention import ContentionLaw
    from bayes_sched.topology import NodeTopology

    law = ContentionLaw()
    counters = law.counters(0.0, 120.0, 2, np.random.default_rng(0))
    pyro.clear_param_store()
    pyro.param("callers_own", torch.tensor(3.0))
    window = prepare(counters, NodeTopology(gpus_per_switch=(2, 2), switch_numa=(0, 0)),
                     where="test counters")
    fit_svi(window, num_steps=2, num_samples=2)
    assert "callers_own" in pyro.get_param_store()
    assert float(pyro.param("callers_own").detach()) == 3.0

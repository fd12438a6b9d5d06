"""Policies on small hand-made situations: what each must and must not do."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from bayes_sched.agent import JobAgent
from bayes_sched.cluster import ClusterState
from bayes_sched.estimates import NO_ESTIMATES
from bayes_sched.estimation import JobModelEstimator
from bayes_sched.jobs import JobSettings, JobSpec, JobView, split_batch
from bayes_sched.policies import FifoPolicy, OptimusPolicy, PolluxPolicy, TiresiasPolicy
from bayes_sched.policies.pollux import GAConfig
from bayes_sched.sim.physics import get_application
from tests.agents import decide, job_view, measured_agent

CLUSTER = ClusterState(num_nodes=4, gpus_per_node=4, now=600.0)


def _view(name: str, replicas: int = 1, batch: int = 256, submit: float = 0.0,
          allocation: list[int] | None = None, attained: float = 0.0,
          settings: JobSettings | None = None, app: str = "cifar10",
          agent: JobAgent | None = None) -> JobView:
    limits = get_application(app).limits
    settings = settings or JobSettings(batch, replicas)
    agent = agent or JobAgent(name, limits, settings)
    return job_view(agent, app, CLUSTER.now, allocation or [0] * CLUSTER.num_nodes, submit=submit,
                    attained=attained, replicas=replicas, batch=batch, settings=settings)


def _check_capacity(allocations: dict[str, np.ndarray]) -> np.ndarray:
    used = np.sum(list(allocations.values()), axis=0) if allocations else np.zeros(4)
    assert np.all(used <= CLUSTER.gpus_per_node)
    return used


def test_fifo_is_strict_and_keeps_running_jobs() -> None:
    jobs = [_view("a", 12, submit=0), _view("b", 8, submit=1), _view("c", 1, submit=2)]
    decision = FifoPolicy().decide(CLUSTER, jobs, NO_ESTIMATES)
    assert set(decision) == {"a"} and decision["a"].sum() == 12
    _check_capacity(decision)
    jobs[0] = _view("a", 12, submit=0, allocation=decision["a"].tolist())
    assert np.array_equal(FifoPolicy().decide(CLUSTER, jobs, NO_ESTIMATES)["a"], decision["a"])


def test_tiresias_skips_what_does_not_fit_and_demotes_long_runners() -> None:
    policy = TiresiasPolicy(thresholds=(3600.0,))
    jobs = [_view("a", 12, submit=0), _view("b", 8, submit=1), _view("c", 4, submit=2)]
    first = policy.decide(CLUSTER, jobs, NO_ESTIMATES)
    assert set(first) == {"a", "c"}  # b does not fit; c, smaller, is backfilled
    assert all(np.count_nonzero(v) == v.sum() // 4 for v in first.values())  # consolidated
    # After an hour on 12 GPUs, a passes the 1 GPU-hour threshold and yields to b.
    later = ClusterState(CLUSTER.num_nodes, CLUSTER.gpus_per_node, CLUSTER.now + 3600)
    jobs = [_view("a", 12, submit=0, allocation=first["a"].tolist()), _view("b", 8, submit=1),
            _view("c", 4, submit=2, allocation=first["c"].tolist())]
    second = policy.decide(later, jobs, NO_ESTIMATES)
    assert "b" in second and second["b"].sum() == 8 and "a" not in second
    _check_capacity(second)


def test_optimus_gives_spare_gpus_to_the_job_that_gains_most() -> None:
    agent = measured_agent("fast")
    fast = _view("fast", 1, 2048, settings=JobSettings(2048), agent=agent)
    new = _view("new", 1, 256, submit=5)
    decision = decide(OptimusPolicy(), CLUSTER, [fast, new])
    _check_capacity(decision)
    assert decision["new"].sum() == 1  # no model yet: one GPU
    assert decision["fast"].sum() >= 4  # one node; a fifth GPU would cross nodes


def test_pollux_respects_capacity_caps_and_interference_avoidance() -> None:
    agents = [measured_agent(f"j{i}") for i in range(6)]
    jobs = [_view(f"j{i}", settings=JobSettings(), agent=agents[i], attained=i)
            for i in range(6)]
    policy = PolluxPolicy(ga=GAConfig(population=24, generations=15, seed=1))
    decision = decide(policy, CLUSTER, jobs)
    used = _check_capacity(decision)
    assert used.sum() >= 12  # a goodput-driven policy does not leave the cluster idle
    for name, counts in decision.items():
        cap = 2 * agents[int(name[1:])].max_profiled_replicas
        assert counts.sum() <= cap
    distributed = [c > 0 for c in decision.values() if np.count_nonzero(c) > 1]
    if distributed:
        assert np.all(np.sum(distributed, axis=0) <= 1)


def test_pollux_search_beats_the_status_quo_and_is_seeded() -> None:
    agents = [measured_agent(f"j{i}") for i in range(4)]
    base = [[4, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    jobs = [_view(f"j{i}", settings=JobSettings(), agent=agents[i], allocation=base[i])
            for i in range(4)]
    decisions = [decide(PolluxPolicy(ga=GAConfig(population=24, generations=20, seed=3)),
                        CLUSTER, jobs) for _ in range(2)]
    assert decisions[0].keys() == decisions[1].keys()
    assert all(np.array_equal(decisions[0][k], decisions[1][k]) for k in decisions[0])
    assert len(decisions[0]) == 4  # every waiting job gets GPUs (fairness, p = -1)


def test_pollux_runs_ncf_at_the_artifact_setting() -> None:
    spec = JobSpec("n", 0.0, "ncf", 1, 32768)
    assert PolluxPolicy().job_settings(spec) == JobSettings(32768, 1)
    assert PolluxPolicy().job_settings(JobSpec("c", 0.0, "cifar10", 1, 128)) == JobSettings()


def test_pollux_repair_makes_random_states_feasible_and_keeps_feasible_ones() -> None:
    from bayes_sched.mechanisms.genetic_allocation.search import AllocationProblem as _Problem

    rng = np.random.default_rng(7)
    num_jobs, num_nodes = 9, 6
    cluster = ClusterState(num_nodes, 4, 0.0)
    max_replicas = rng.integers(1, 9, size=num_jobs)
    problem = _Problem(np.zeros((num_jobs, num_nodes), np.int16),
                       np.zeros((num_jobs, 7, 33)), max_replicas, np.ones(num_jobs), cluster,
                       -1.0, True, 3, rng)
    states = rng.integers(0, 5, size=(50, num_jobs, num_nodes)).astype(np.int16)
    states[rng.random(states.shape) < 0.6] = 0
    fixed = problem.repair(states)
    assert np.all(fixed <= states) and np.all(fixed >= 0)
    assert np.all(fixed.sum(axis=1) <= 4)                                   # node capacity
    assert np.all(fixed.sum(axis=2) <= max_replicas)                        # replica caps
    assert np.all(np.count_nonzero(fixed, axis=2) <= 3)                     # nodes per job
    distributed = np.count_nonzero(fixed, axis=2) > 1
    assert np.all(((fixed > 0) & distributed[:, :, None]).sum(axis=1) <= 1)  # avoidance
    assert np.array_equal(problem.repair(fixed), fixed)                     # idempotent


def test_pollux_mutation_grows_only_onto_free_gpus() -> None:
    # As the artifact's mutation: growth never lands on a full node, so on a full cluster only
    # resets and removals change a state, and a job's GPUs only grow where GPUs were free.
    from bayes_sched.mechanisms.genetic_allocation.search import AllocationProblem as _Problem

    rng = np.random.default_rng(3)
    num_jobs, num_nodes = 5, 4
    cluster = ClusterState(num_nodes, 4, 0.0)
    base = np.zeros((num_jobs, num_nodes), np.int16)
    problem = _Problem(base, np.zeros((num_jobs, 5, 17)), np.full(num_jobs, 16),
                       np.ones(num_jobs), cluster, -1.0, False, num_nodes, rng)
    ga = GAConfig(reset_prob=0.0, zero_prob=0.0, grow_prob=1.0)
    full = np.zeros((20, num_jobs, num_nodes), np.int16)
    full[:, np.arange(num_nodes), np.arange(num_nodes)] = 4                  # jobs 0-3 fill it
    assert np.array_equal(problem.mutate(full.copy(), ga), full)
    half = full.copy()
    half[:, :, 2:] = 0                                                       # nodes 2, 3 free
    grown = problem.mutate(half.copy(), ga)
    assert np.array_equal(grown[:, :, :2], half[:, :, :2])
    assert np.any(grown[:, :, 2:] > 0) and np.all(grown >= half)


def _artifact_growth_probability(state: np.ndarray, capacity: int) -> np.ndarray:
    """The artifact's growth probability per (job, node) entry, written densely as it does: any
    job onto a node with free GPUs with one over the number of jobs, and a job already there with
    one over the number of jobs on the node, as independent events."""
    free = state.sum(axis=0) < capacity                                      # (N,)
    any_job = np.broadcast_to(free / state.shape[0], state.shape)
    on_node = (state > 0) & free
    own = on_node / np.maximum(on_node.sum(axis=0), 1)
    return any_job + own - any_job * own


def test_pollux_artifact_mutation_grows_each_entry_as_the_artifact_does() -> None:
    # Node 0 is full; node 1 has one free GPU and two jobs on it; nodes 2 and 3 are empty. An
    # entry that grows takes a uniform count from its current one to the capacity, so it changes
    # with its growth probability times (capacity - current) / (capacity - current + 1).
    from bayes_sched.mechanisms.genetic_allocation.search import AllocationProblem as _Problem

    rng = np.random.default_rng(5)
    num_jobs, num_nodes, capacity, samples = 5, 4, 4, 6000
    cluster = ClusterState(num_nodes, capacity, 0.0)
    problem = _Problem(np.zeros((num_jobs, num_nodes), np.int16), np.zeros((num_jobs, 5, 17)),
                       np.full(num_jobs, 16), np.ones(num_jobs), cluster, -1.0, False,
                       num_nodes, rng)
    ga = GAConfig(reset_prob=0.0, zero_prob=0.0)
    state = np.zeros((num_jobs, num_nodes), np.int16)
    state[0, 0], state[1, 1], state[2, 1] = 4, 2, 1
    grown = problem.mutate_artifact(np.broadcast_to(state, (samples, *state.shape)).copy(), ga)
    assert np.all(grown >= state) and np.all(grown <= capacity)
    expected = (_artifact_growth_probability(state, capacity)
                * (capacity - state) / (capacity - state + 1))
    assert expected[1, 1] == pytest.approx(0.6 * 2 / 3) and expected[3, 2] == pytest.approx(0.16)
    observed = (grown != state).mean(axis=0)
    assert np.abs(observed - expected).max() < 0.025
    assert not np.any(grown[:, :, 0] != state[:, 0])                         # full node untouched


def test_pollux_utility_is_summed_speedup_over_the_gpus_of_used_nodes() -> None:
    from bayes_sched.mechanisms.genetic_allocation.search import AllocationProblem as _Problem

    cluster = ClusterState(4, 4, 0.0)
    tables = np.zeros((2, 3, 9))
    tables[:, 1, 1:5] = [0.5, 1.0, 1.4, 1.7]                                 # one node
    tables[:, 2, 2:9] = [0.9, 1.2, 1.5, 1.8, 2.0, 2.2, 2.4]                  # two nodes
    problem = _Problem(np.zeros((2, 4), np.int16), tables, np.full(2, 8), np.ones(2), cluster,
                       -1.0, False, 2, np.random.default_rng(0))
    packed = np.array([[[4, 0, 0, 0], [0, 2, 0, 0]]], np.int16)              # 2 nodes in use
    spread = np.array([[[2, 2, 0, 0], [0, 0, 1, 1]]], np.int16)              # 4 nodes in use
    assert problem.utility(packed)[0] == pytest.approx((1.7 + 1.0) / 8)
    assert problem.utility(spread)[0] == pytest.approx((1.5 + 0.9) / 16)
    with pytest.raises(ValueError, match="search"):
        GAConfig(search="random")


def _agent_measured_on_one_node(name: str, step_times: dict[int, float],
                                batch: int) -> JobAgent:
    """A cifar10 agent measured on 1..4 GPUs of one node at the micro-batches a fixed batch of
    ``batch`` uses there (sync time: a tenth of each step)."""
    limits = get_application("cifar10").limits
    agent = JobAgent(name, limits, JobSettings(batch))
    for replicas, seconds in step_times.items():
        local_bsz, _ = split_batch(batch, replicas, limits)
        agent.record(1, replicas, local_bsz, seconds, 0.1 * seconds, 1.0, 1.0)
    return agent


def test_optimus_trusts_a_measured_step_time_over_its_model() -> None:
    # Measured: 4 GPUs are no faster than 3 (e.g. an uneven split); a smooth fit says otherwise.
    times = {1: 2.0, 2: 1.0, 3: 0.7, 4: 0.75}
    agent = _agent_measured_on_one_node("j", times, 256)
    job = _view("j", 1, 256, settings=JobSettings(256), agent=agent)
    policy = OptimusPolicy()
    assert job.fit is None and job.model is None  # a fixed-batch job fits no model for itself
    (job,) = JobModelEstimator().estimate(CLUSTER, [job])  # the estimation stage fits its reports
    curve = policy.step_times(job, 4, CLUSTER.gpus_per_node)
    assert curve is not None
    _, accum_on_one = split_batch(256, 1, job.limits)
    assert curve[0] == pytest.approx(2.0 + 0.9 * 2.0 * accum_on_one)
    assert curve[1:4] == pytest.approx([1.0, 0.7, 0.75])
    assert decide(policy, CLUSTER, [job])["j"].sum() == 3  # the fourth GPU would buy nothing


def test_optimus_estimates_remaining_steps_from_the_training_left() -> None:
    # Early in training the gradient noise is small (gain ~1 at any batch); the estimate must not
    # read that as 16x more steps than the remaining examples need at the user's batch.
    agent = _agent_measured_on_one_node("j", {1: 2.0, 2: 1.0}, 2048)
    agent.grad_sqr, agent.grad_var = 1.0, 1e-6
    job = _view("j", 1, 2048, settings=JobSettings(2048), agent=agent)
    assert job.epochs == 0 and job.target_epochs == 100
    half = dataclasses.replace(job, epochs=job.target_epochs / 2)
    policy = OptimusPolicy()
    # The epochs its user asked for, not the simulator's progress traces, set the work left.
    expected = job.target_epochs / 2 * job.examples_per_epoch / 2048
    assert policy.remaining_steps(half) == pytest.approx(expected)
    assert policy.remaining_steps(job) == pytest.approx(2 * expected)


def _one_job_problem(num_nodes: int, seed: int) -> tuple[Any, np.ndarray]:
    """One job holding 1 GPU on nodes 0 and 1 of ``num_nodes`` nodes of 4 GPUs, and its problem."""
    from bayes_sched.mechanisms.genetic_allocation.search import AllocationProblem as _Problem

    cluster = ClusterState(num_nodes, 4, 0.0)
    state = np.zeros((1, num_nodes), np.int16)
    state[0, :2] = 1
    problem = _Problem(state, np.zeros((1, num_nodes + 1, 4 * num_nodes + 1)),
                       np.full(1, 4 * num_nodes), np.ones(1), cluster, -1.0, False, num_nodes,
                       np.random.default_rng(seed))
    return problem, state


def test_elitist_mutation_picks_nodes_uniformly_with_draws_per_row() -> None:
    # bo's (elitist) mutation grows a row once onto one of its own nodes with free GPUs and once
    # onto any node with free GPUs, each picked uniformly; it draws per row, never per node, so
    # the same rows on a cluster eight times larger use the generator alike.
    ga = GAConfig(reset_prob=0.0, zero_prob=0.0, grow_prob=1.0)
    rows = 4000
    problem, state = _one_job_problem(8, seed=5)
    grown = problem.mutate(np.broadcast_to(state, (rows, *state.shape)).copy(), ga)[:, 0]
    # Nodes 2..7 gain GPUs only by the "any node" draw: picked 1/8 each, then a count uniform
    # in 0..4 (0 a fifth of the time).
    share = np.count_nonzero(grown[:, 2:] > 0, axis=0) / rows
    assert np.all(np.abs(share - 1 / 8 * 4 / 5) < 0.02), share
    # Own nodes 0 and 1 are picked alike (by the own draw, and by the any draw 1/8 each).
    own = np.count_nonzero(grown[:, :2] > 1, axis=0) / rows
    assert abs(own[0] - own[1]) < 0.05, own
    large, large_state = _one_job_problem(64, seed=5)
    small, small_state = _one_job_problem(8, seed=5)
    for problem, state in ((small, small_state), (large, large_state)):
        problem.mutate(np.broadcast_to(state, (50, *state.shape)).copy(), ga)
    assert small.rng.bit_generator.state == large.rng.bit_generator.state

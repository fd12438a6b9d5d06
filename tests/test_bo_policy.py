"""The Bayesian-optimised policy: capacity, learning co-location costs from realised progress,
EI choice, the loop and the CLI."""

from __future__ import annotations

import numpy as np
import pytest

from bayes_sched.cluster import ClusterState
from bayes_sched.jobs import JobAgent, JobSettings, JobView
from bayes_sched.policies import POLICIES, BayesOptPolicy, make_policy
from bayes_sched.policies.pollux import GAConfig
from bayes_sched.sim import SimConfig, Workload, read_workload, run_simulation
from bayes_sched.sim.physics import get_application
from tests.agents import measured_agent

SMALL_GA = GAConfig(population=16, generations=8, seed=0)


def _agent(name: str, app: str = "cifar10") -> JobAgent:
    agent = measured_agent(name, app)
    agent.refresh(0.0)
    return agent


def _views(cluster: ClusterState, allocations: dict[str, list[int]], progress: dict[str, float],
           agents: dict[str, JobAgent]) -> list[JobView]:
    app = get_application("cifar10")
    return [JobView(name=name, application="cifar10", submit_time=0.0, age=cluster.now,
                    attained_service=100.0 * i, allocation=np.array(allocations[name]),
                    num_restarts=0, requested_replicas=1, requested_batch_size=256,
                    settings=JobSettings(), limits=app.limits, progress=progress[name],
                    target_progress=app.target_progress, agent=agents[name])
            for i, name in enumerate(sorted(allocations))]


def test_registered_and_decisions_respect_capacity() -> None:
    assert "bo" in POLICIES and make_policy("bo").name == "bo"
    cluster = ClusterState(4, 4, 600.0)
    agents = {n: _agent(n) for n in "abcde"}
    empty = {n: [0, 0, 0, 0] for n in agents}
    decision = BayesOptPolicy(ga=SMALL_GA).decide(cluster, _views(cluster, empty,
                                                                 dict.fromkeys(agents, 0.0),
                                                                 agents))
    used = np.sum(list(decision.values()), axis=0)
    assert np.all(used <= 4) and used.sum() > 0


def test_learns_that_shared_distributed_jobs_deliver_less() -> None:
    """Two distributed jobs share nodes and deliver half the predicted progress; a single-node job
    delivers as predicted. The surrogate must learn a clearly negative residual for the first
    co-location and about zero for the other, and the history must record the rounds."""
    policy = BayesOptPolicy(ga=SMALL_GA, seed=1)
    agents = {n: _agent(n) for n in ("a", "b", "c")}
    allocation = {"a": [2, 2, 0, 0], "b": [2, 2, 0, 0], "c": [0, 0, 1, 0]}
    progress = dict.fromkeys(agents, 0.0)
    interval = 60.0
    for round_index in range(6):
        cluster = ClusterState(4, 4, interval * (round_index + 1))
        views = _views(cluster, allocation, progress, agents)
        # What the round delivers: half the predicted progress for the shared distributed jobs.
        policy._observe(cluster, views)
        policy._previous = {v.name: (v.allocation.copy(), v.progress) for v in views}
        policy._previous_time = cluster.now
        for view in views:
            rate = policy._predicted_rate(view, view.allocation)
            assert rate is not None
            progress[view.name] += rate * (0.5 if view.name in ("a", "b") else 1.0) * interval
    model = policy._surrogate()
    _, mean, draws = policy._residual_grid(model, 8)
    gpu4, gpu1 = 4, 1
    assert mean[1, 1, 1, gpu4] < np.log(0.7)          # learned: sharing distributed hurts
    assert abs(mean[0, 0, 0, gpu1]) < 0.15            # alone on one node: as predicted
    assert draws.shape[0] == policy.posterior_draws and np.std(draws[:, 1, 1, 1, gpu4]) > 0


def test_runs_in_the_loop_and_records_predicted_vs_realised() -> None:
    jobs = [job for job in read_workload("workload-1").jobs if job.num_replicas <= 16][:8]
    policy = BayesOptPolicy(ga=SMALL_GA, seed=0)
    config = SimConfig(num_nodes=4, gpus_per_node=4, interference=0.5, max_time=1800.0)
    result = run_simulation(Workload("w1-slice", tuple(jobs)), policy, config)
    assert result.rejected == [] and result.summary["finished"] >= 1
    history = policy.history
    assert len(history) == len(result.decision_seconds)
    realised = np.array([r.realised for r in history])
    predicted = np.array([r.predicted_mean for r in history])
    assert np.isfinite(realised).sum() >= len(history) // 2
    assert np.all(np.isfinite(predicted)) and np.all(predicted > 0)
    assert any(np.isfinite(r.surrogate_std) for r in history)


def test_cli_offers_the_policy(capsys: pytest.CaptureFixture[str]) -> None:
    from bayes_sched.cli import main
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    assert "bo" in capsys.readouterr().out


def test_sparse_colocation_features_match_the_dense_definition() -> None:
    from bayes_sched.policies.bo import _ColocationProblem

    rng = np.random.default_rng(0)
    states = (rng.random((5, 7, 6)) < 0.3) * rng.integers(1, 3, (5, 7, 6))
    dense = BayesOptPolicy().features(states)
    problem = _ColocationProblem.__new__(_ColocationProblem)
    problem.residual = np.zeros((2, 2, 2, 65))
    distributed, shares_dist, shares, _, nodes, replicas = problem.colocation(states)
    assert np.array_equal(dense[..., 0], distributed)
    assert np.array_equal(dense[..., 1], shares_dist)
    assert np.array_equal(dense[..., 2], shares)
    assert np.array_equal(replicas, states.sum(axis=2))
    assert np.array_equal(nodes, np.count_nonzero(states, axis=2))
    # Two distributed jobs on node 0 share it; a single-node job alone does not.
    one = np.array([[[1, 1, 0], [1, 0, 1], [0, 0, 0]]])
    one[0, 2, 1] = 0
    _, sd, sh, _, _, _ = problem.colocation(one)
    assert sd[0].tolist() == [1, 1, 0] and sh[0].tolist() == [1, 1, 0]

"""The Bayesian-optimised policy: capacity, learning co-location costs from realised progress,
EI choice, the loop and the CLI."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from bayes_sched.agent import JobAgent
from bayes_sched.cluster import ClusterState
from bayes_sched.colocation import ColocationRound, predicted_rate, speed_factor
from bayes_sched.estimation import JobModelEstimator, estimate_round
from bayes_sched.interference.colocation import ColocationLearning, colocation_learning
from bayes_sched.interference.pairs import PairResiduals
from bayes_sched.jobs import JobView
from bayes_sched.mechanisms.genetic_allocation.sparse import SparseStates
from bayes_sched.policies import POLICIES, BayesOptPolicy, make_policy
from bayes_sched.policies.bo import RoundRecord
from bayes_sched.policies.pollux import GAConfig
from bayes_sched.sim import SimConfig, Workload, read_workload, run_simulation
from tests.agents import decide, job_view, measured_agent

SMALL_GA = GAConfig(population=16, generations=8, seed=0)


def _agent(name: str, app: str = "cifar10") -> JobAgent:
    agent = measured_agent(name, app)
    agent.refresh(0.0)
    return agent


def _views(cluster: ClusterState, allocations: dict[str, list[int]], progress: dict[str, float],
           agents: dict[str, JobAgent], applications: dict[str, str] | None = None
           ) -> list[JobView]:
    """The jobs' reports, with the job models the estimation stage attaches."""
    applications = applications or {}
    views = [job_view(agents[name], applications.get(name, "cifar10"), cluster.now,
                      allocations[name], attained=100.0 * i, progress=progress[name])
             for i, name in enumerate(sorted(allocations))]
    return JobModelEstimator().estimate(cluster, views)


def test_registered_and_decisions_respect_capacity() -> None:
    assert "bo" in POLICIES and make_policy("bo").name == "bo"
    cluster = ClusterState(4, 4, 600.0)
    agents = {n: _agent(n) for n in "abcde"}
    empty = {n: [0, 0, 0, 0] for n in agents}
    decision = decide(BayesOptPolicy(ga=SMALL_GA), cluster,
                      _views(cluster, empty, dict.fromkeys(agents, 0.0), agents))
    used = np.sum(list(decision.values()), axis=0)
    assert np.all(used <= 4) and used.sum() > 0


def _play(learning: ColocationLearning, layouts: list[dict[str, list[int]]],
          applications: dict[str, str], speed: dict[frozenset[str], float],
          rounds_each: int = 4) -> None:
    """Feed bo's co-location learning rounds of ``layouts`` in which every job delivers its predicted progress
    times the product of ``speed[{own application, co-runner's}]`` over its co-runners on its
    node (1 when absent from ``speed``)."""
    agents = {n: _agent(n, applications[n]) for n in applications}
    progress = dict.fromkeys(agents, 0.0)
    interval, now = 60.0, 0.0
    for layout in layouts:
        allocation = {n: layout.get(n, [0, 0, 0, 0]) for n in agents}
        for _ in range(rounds_each):
            now += interval
            cluster = ClusterState(4, 4, now)
            views = _views(cluster, allocation, progress, agents, applications)
            learning.estimate(cluster, views)
            for view in views:
                if not view.allocation.any():
                    continue
                factor = 1.0
                for other in views:
                    if other.name != view.name and np.any((other.allocation > 0)
                                                          & (view.allocation > 0)):
                        factor *= speed.get(frozenset((view.application, other.application)),
                                            1.0)
                rate = predicted_rate(view, view.allocation)
                assert rate is not None
                progress[view.name] += rate * factor * interval


def test_learns_which_applications_hurt_each_other() -> None:
    """CIFAR-10 sharing a node with YOLOv3 delivers 60% of the prediction; sharing with BERT, all
    of it. Every job also runs alone for a while (its model error). The pair learner must learn a
    clearly negative effect for (cifar10, yolov3) and about none for (cifar10, bert), and the
    policy's search objective must prefer pairing CIFAR-10 with BERT -- which co-location
    features that ignore the applications cannot tell apart."""
    learning = colocation_learning(seed=1)
    applications = {"c1": "cifar10", "c2": "cifar10", "y": "yolov3", "b": "bert"}
    speed = {frozenset(("cifar10", "yolov3")): 0.6}
    alone = {"c1": [1, 0, 0, 0], "c2": [0, 1, 0, 0], "y": [0, 0, 1, 0], "b": [0, 0, 0, 1]}
    shared = [{"c1": [1, 0, 0, 0], "y": [1, 0, 0, 0], "c2": [0, 1, 0, 0], "b": [0, 1, 0, 0]},
              {"c1": [0, 0, 1, 0], "b": [0, 0, 1, 0], "c2": [0, 0, 0, 1], "y": [0, 0, 0, 1]}]
    _play(learning, [alone, *shared, alone, *shared], applications, speed)
    pairs = learning.predictor(PairResiduals)
    pairs.fit()
    apps = pairs.applications
    cifar, yolo, bert = (2 * apps.index(a) for a in ("cifar10", "yolov3", "bert"))
    mean, std = pairs.mean, pairs.std
    assert mean[cifar, yolo] < np.log(0.75) and mean[yolo, cifar] < np.log(0.75)
    assert abs(mean[cifar, bert]) < 0.1 and abs(mean[bert, cifar]) < 0.1
    assert std[cifar, yolo] < pairs.prior.apps  # evidence narrowed it
    assert pairs.observed()[cifar, yolo] and not pairs.observed()[yolo, yolo]
    # The search objective: c1 with b and c2 alone beats c1 with y, all else equal.
    index = pairs.application_index(["cifar10", "yolov3", "bert"])
    with_yolo = np.array([[[1, 0], [1, 0], [0, 1]]], dtype=np.int16)
    with_bert = np.array([[[1, 0], [0, 1], [1, 0]]], dtype=np.int16)
    assert pairs.log_factor(with_yolo, index)[0, 0] < np.log(0.8)
    assert pairs.log_factor(with_bert, index)[0, 0] > np.log(0.92)
    assert pairs.draws.shape == (pairs.num_draws, len(apps) * 2, len(apps) * 2)


class SharingPenalty:
    """A slowdown predictor that knows one thing: a job sharing a node runs at ``speed``; it keeps
    the rounds it learns from."""

    name = "sharing penalty"

    def __init__(self, speed: float) -> None:
        self.log_speed = float(np.log(speed))
        self.rounds: list[ColocationRound] = []

    def learn(self, observation: ColocationRound) -> None:
        self.rounds.append(observation)

    def log_slowdown(self, states: np.ndarray, applications: Sequence[str],
                     draws: bool = False) -> np.ndarray:
        used = states > 0
        shares = np.any(used & (used.sum(axis=1, keepdims=True) > 1), axis=2)
        return np.where(shares, self.log_speed, 0.0)

    def diagnostics(self, allocation: np.ndarray, applications: Sequence[str]
                    ) -> dict[str, float]:
        return {f"log_speed_{self.log_speed:.3f}": self.log_speed}


def test_each_predictor_learns_what_the_ones_before_it_leave_unexplained() -> None:
    """bo composes predictors through the protocol: sharing costs every job 20%; a first
    predictor that knows it sees the full residual log(0.8), a second one after it sees ~0, the
    search multiplies their factors, and the report carries both predictors' diagnostics."""
    knows, after = SharingPenalty(0.8), SharingPenalty(1.0)
    learning = ColocationLearning([knows, after])
    applications = {"c1": "cifar10", "c2": "cifar10", "y": "yolov3", "b": "bert"}
    costly = {frozenset(pair): 0.8 for pair in (("cifar10", "yolov3"), ("cifar10", "bert"))}
    alone = {"c1": [1, 0, 0, 0], "c2": [0, 1, 0, 0], "y": [0, 0, 1, 0], "b": [0, 0, 0, 1]}
    shared = {"c1": [1, 0, 0, 0], "y": [1, 0, 0, 0], "c2": [0, 1, 0, 0], "b": [0, 1, 0, 0]}
    _play(learning, [alone, shared], applications, costly)
    for mine, next_one in zip(knows.rounds, after.rounds, strict=True):
        if mine.residuals is None:  # the first round: nothing measured
            assert next_one.residuals is None
            continue
        predicted = knows.log_slowdown(mine.allocation[None], mine.applications)[0]
        assert next_one.residuals == pytest.approx(
            {j: r - predicted[j] for j, r in mine.residuals.items()})
    # The last round was shared all through: the first sees the cost, the second nothing.
    assert len(knows.rounds[-1].residuals or {}) == 4
    assert np.allclose(list((knows.rounds[-1].residuals or {}).values()), np.log(0.8))
    assert np.allclose(list((after.rounds[-1].residuals or {}).values()), 0.0, atol=1e-9)
    together = np.array([[[1, 0], [1, 0]]], dtype=np.int16)
    apart = np.array([[[1, 0], [0, 1]]], dtype=np.int16)
    assert np.allclose(speed_factor(learning.predictors, together, ("cifar10", "bert")), 0.8)
    assert np.allclose(speed_factor(learning.predictors, apart, ("cifar10", "bert")), 1.0)
    cluster = ClusterState(4, 4, 3600.0)
    agents = {n: _agent(n, applications[n]) for n in applications}
    policy = BayesOptPolicy(ga=SMALL_GA)
    policy.decide(cluster, *estimate_round([learning], cluster, _views(
        cluster, alone, dict.fromkeys(agents, 0.0), agents, applications)))
    assert set(policy.history[-1].learned) == {"log_speed_-0.223", "log_speed_0.000"}


def test_runs_in_the_loop_and_records_predicted_vs_realised() -> None:
    jobs = [job for job in read_workload("workload-1").jobs if job.num_replicas <= 16][:8]
    policy = BayesOptPolicy(ga=SMALL_GA)
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


def test_pair_log_factor_matches_the_dense_definition() -> None:
    """The vectorised co-runner factor equals, per job, the minimum over its nodes of the summed
    pair effects of the other jobs on that node (classes: application x distributed)."""

    rng = np.random.default_rng(0)
    pairs = PairResiduals(seed=0)
    apps = pairs.application_index(["a", "b", "c", "a", "b", "c", "a"])
    table = -rng.random((6, 6)) * 0.3
    states = (rng.random((5, 7, 6)) < 0.3) * rng.integers(1, 3, (5, 7, 6))
    fast = pairs.log_factor(states, apps, table[None])[0]
    for p in range(states.shape[0]):
        used = states[p] > 0
        cls = apps * 2 + (used.sum(axis=1) > 1)
        for j in range(states.shape[1]):
            per_node = [sum(table[cls[j], cls[k]] for k in np.flatnonzero(used[:, n]) if k != j)
                        for n in np.flatnonzero(used[j])]
            expected = min([0.0, *per_node])
            assert fast[p, j] == pytest.approx(expected)


def _chosen(choice: tuple[SparseStates, RoundRecord]) -> tuple[np.ndarray, RoundRecord]:
    """``_choose``'s state, dense ``(J, N)``, and its record."""
    return choice[0].dense()[0], choice[1]


def test_offers_pollux_avoid_rule_choice_and_takes_it_when_sharing_hurts() -> None:
    """With the pair table certain that distributed jobs sharing a node lose 60%, EI must pick
    Pollux's avoid-rule choice even when the genetic search's population lacks it."""
    policy = BayesOptPolicy(ga=SMALL_GA)
    cluster = ClusterState(2, 4, 600.0)
    agents = {n: _agent(n) for n in ("a", "b")}
    empty = {n: [0, 0] for n in agents}
    views = _views(cluster, empty, dict.fromkeys(agents, 0.0), agents)
    decision = decide(policy, cluster, views)  # sets up classes and the problem's state
    assert all(np.count_nonzero(v) >= 1 for v in decision.values())
    from bayes_sched.mechanisms.genetic_allocation.search import STATE_DTYPE as _STATE
    from bayes_sched.policies.bo import _ColocationProblem

    pollux = policy.pollux
    jobs = sorted(views, key=lambda j: (j.attained_service, j.submit_time, j.name))
    max_replicas = np.array([8, 8])
    tables = pollux.speedup_tables(jobs, cluster, max_replicas)
    pairs = policy.predictor(PairResiduals)
    index = pairs.application_index(["cifar10", "cifar10"])
    problem = _ColocationProblem(np.zeros((2, 2), _STATE), tables, max_replicas, np.ones(2),
                                 cluster, pollux.p, 2, pollux.rng, policy.predictors,
                                 ("cifar10", "cifar10"))
    shared = np.array([[[2, 2], [2, 2]]], dtype=_STATE)     # both distributed on both nodes
    apart = np.array([[4, 0], [0, 4]], dtype=_STATE)        # one node each
    classes = pairs.num_classes
    pairs.draws = np.zeros((pairs.num_draws, classes, classes))
    distributed = 2 * index[0] + 1
    pairs.draws[:, distributed, distributed] = np.log(0.4)
    pairs.mean = pairs.draws[0]
    fitness = problem.fitness(shared)
    sparse = SparseStates.of
    chosen, record = _chosen(policy._choose(problem, sparse(shared), fitness,
                                             sparse(apart[None]), cluster.now))
    assert np.array_equal(chosen, apart) and record.avoiding_choice
    # Without the avoid-rule candidate only the harmful co-location is on offer.
    chosen, record = _chosen(policy._choose(problem, sparse(shared), fitness, None, cluster.now))
    assert np.array_equal(chosen, shared[0]) and not record.avoiding_choice
    # Pollux's choice is left when another candidate expects a clear gain over it: here it
    # starves job b while the candidate serves both jobs apart.
    starving = np.array([[4, 0], [0, 0]], dtype=_STATE)
    chosen, record = _chosen(policy._choose(problem, sparse(apart[None]),
                                             problem.fitness(apart[None]),
                                             sparse(starving[None]), cluster.now))
    assert np.array_equal(chosen, apart) and not record.avoiding_choice
    # ... and kept when no candidate expects to gain more than min_gain over it.
    policy.min_gain = 1e6
    chosen, record = _chosen(policy._choose(problem, sparse(apart[None]),
                                             problem.fitness(apart[None]),
                                             sparse(starving[None]), cluster.now))
    assert np.array_equal(chosen, starving) and record.avoiding_choice


def test_a_failed_surrogate_fit_is_reported_and_the_round_still_decides(
        monkeypatch: pytest.MonkeyPatch) -> None:

    def fail(self: PairResiduals) -> None:
        raise np.linalg.LinAlgError("Matrix is not positive definite")

    monkeypatch.setattr(PairResiduals, "fit", fail)
    policy = BayesOptPolicy(ga=SMALL_GA)
    cluster = ClusterState(2, 4, 600.0)
    agents = {n: _agent(n) for n in ("a", "b", "c")}
    views = _views(cluster, {n: [0, 0] for n in agents}, dict.fromkeys(agents, 0.0), agents)
    learning = colocation_learning()
    decision = policy.decide(cluster, *estimate_round([learning], cluster, views))
    assert np.all(np.sum(list(decision.values()), axis=0) <= 4) and decision
    problems = learning.fit_problems
    assert len(problems) == 1 and "not positive definite" in problems[0]
    assert learning.stats() == {"colocation_fit_problems": 1}


def test_the_learning_skips_the_round_after_a_job_moved_as_a_restart() -> None:
    """bo's co-location learning knows a job's GPUs only from the reports: a job whose GPUs
    changed at the last round restarted then (30 s of the 60 s round lost), so that round is not
    measured; the round after it is."""
    recorder = SharingPenalty(1.0)
    learning = ColocationLearning([recorder])
    agents = {"a": _agent("a"), "b": _agent("b")}
    progress = dict.fromkeys(agents, 0.0)
    layouts = [{"a": [1, 0], "b": [0, 1]}] * 2 + [{"a": [0, 1], "b": [0, 1]}] * 3
    for k, layout in enumerate(layouts):
        cluster = ClusterState(2, 4, 60.0 * (k + 1))
        views = _views(cluster, layout, progress, agents)
        learning.estimate(cluster, views)
        for view in views:
            rate = predicted_rate(view, view.allocation)
            assert rate is not None
            progress[view.name] += rate * 60.0
    measured = [set(r.residuals or {}) for r in recorder.rounds]
    # Rows in priority order: a (attained 0), b. Round 1 has nothing before it; a moved at
    # round 3 (its GPUs at round 3 differ from round 2's), so round 3 measures b alone.
    assert measured == [set(), {0, 1}, {1}, {0, 1}, {0, 1}]

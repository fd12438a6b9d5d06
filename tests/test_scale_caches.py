"""Caches of the scale work (issue 19) give what the uncached code gives: the agent's batch choice
per model, and the search's fitness from the entries repair found."""

from __future__ import annotations

import numpy as np

from bayes_sched.agent import JobAgent
from bayes_sched.cluster import ClusterState
from bayes_sched.mechanisms.genetic_allocation.search import AllocationProblem, GAConfig
from bayes_sched.sim.physics import get_application

APP = get_application("cifar10")


def _measure(agent: JobAgent, placement: tuple[int, ...], m: int, epoch: int = 5) -> None:
    step, sync = APP.step_time(placement, m)
    agent.record(len(placement), sum(placement), m, step, sync, *APP.grad_stats(256, epoch))


def test_batch_choice_is_the_models_and_follows_a_new_model() -> None:
    agent = JobAgent("t", APP.limits)
    for placement in ((1,), (2,), (4,)):
        _measure(agent, placement, 128)
    shapes = ((1,), (4,), (2, 2), (4, 4, 4, 4))
    first = [agent.choose_batch(p) for p in shapes]
    model = agent.goodput_model()
    assert model is not None
    assert first == [agent._tuned_batch(model, sum(1 for c in p if c), sum(p)) for p in shapes]
    assert [agent.choose_batch(p) for p in shapes] == first   # from the cache
    # New gradient statistics make a new model: the choices are the new model's.
    _measure(agent, (4,), 128, epoch=60)
    model = agent.goodput_model()
    assert model is not None
    again = [agent.choose_batch(p) for p in shapes]
    assert again == [agent._tuned_batch(model, sum(1 for c in p if c), sum(p)) for p in shapes]


def test_fitness_from_repairs_entries_equals_the_scan() -> None:
    rng = np.random.default_rng(5)
    jobs, nodes = 12, 6
    tables = rng.random((jobs, 3, 9)) + 0.1
    base = np.zeros((jobs, nodes), dtype=np.int16)
    base[np.arange(jobs) % nodes == 0, 0] = 1
    problem = AllocationProblem(base, tables, np.full(jobs, 8), rng.random(jobs),
                                ClusterState(nodes, 4, 0.0), -1.0, True, 2, rng)
    population = rng.integers(0, 3, size=(10, jobs, nodes)).astype(np.int16)
    population[rng.random(population.shape) < 0.7] = 0
    population = problem.repair(population)
    children, entries = problem.offspring_entries(population, problem.fitness(population),
                                                  GAConfig())
    assert np.array_equal(problem.fitness_with_entries(children, entries),
                          problem.fitness(children))
    assert problem._known is None   # the entries are read only while that call runs

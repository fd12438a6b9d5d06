"""Compile every numba loop the policies run, once, into its on-disk cache, ahead of first use.

The allocation search's loops (:mod:`~bayes_sched.mechanisms.genetic_allocation.kernels`,
:mod:`~bayes_sched.mechanisms.genetic_allocation.generations`) and the ``bo`` policy's pair-table
loop (:mod:`bayes_sched.interference.pair_kernel`) are ``@njit(cache=True)``: compiled on first use
for the argument types of that call and kept on disk (next to their modules, or under
``NUMBA_CACHE_DIR``), where a later process loads them instead of compiling. Processes started at
once from a cold cache (a test suite's parallel workers) would each compile them;
``python -m bayes_sched.precompile`` (run by ``scripts/test.sh`` before the tests) compiles them
first, by running every path that reaches them on a tiny problem through the same calls the
policies make, so the cached argument types are the policies':

* the NSGA-II search run whole as one compiled kernel (``pollux``'s);
* the step-by-step NSGA-II of a problem with its own fitness (``bo``'s): the compiled mating,
  mutation, repair and survival;
* the compiled table reads of the objectives (``bo``'s rule-based search, ``evolve_elitist``);
* the elitist search's repair (``GAConfig.search = "elitist"``);
* the pair table's worst-node log slowdown, under the posterior mean and under draws;
* the mating, mutation, table reads and pair loop again on entries read from dense states
  (``np.nonzero``'s strided views, which numba compiles as another signature than contiguous
  arrays), as ``bo`` hands them;
* the point throughput fit's objective and gradient (:mod:`perfmodel.rmsle_kernel`) and the point
  models' batch choice (:mod:`perfmodel.goodput_kernel`), one job's (broadcast parameters) and
  many jobs' at once (contiguous), as the agents and the Pollux problem call them;
* last, ``pollux`` and ``bo`` each deciding a few rounds of a shipped workload's first jobs
  (:func:`~bayes_sched.sim.run.run_simulation`), which reaches whatever the steps above missed
  (``bo``'s compiled elitist search and scores, :mod:`bayes_sched.policies.bo_search`).

A run on a warm cache only loads the loops. It prints the seconds it took.
"""

from __future__ import annotations

import time

import numpy as np

from bayes_sched.cluster import ClusterState
from bayes_sched.mechanisms.genetic_allocation.search import (
    STATE_DTYPE,
    AllocationProblem,
    GAConfig,
    GeneticSearch,
)
from bayes_sched.mechanisms.genetic_allocation.sparse import SparseStates

#: The tiny problem: jobs, nodes and GPUs per node (the loops' types do not depend on sizes).
JOBS, NODES, GPUS_PER_NODE = 4, 3, 4
#: Application classes of the pair table (two per application: single-node and distributed).
APPLICATIONS = 2


class _OwnFitness(AllocationProblem):
    """A problem with a fitness of its own (as ``bo``'s), which the search runs step by step."""

    def fitness(self, states: np.ndarray) -> np.ndarray:
        return super().fitness(states)


def _problem(kind: type[AllocationProblem], avoid_interference: bool) -> AllocationProblem:
    """A tiny problem of ``kind``: random speedup tables, job 0 on 2 GPUs of node 0."""
    rng = np.random.default_rng(0)
    base = np.zeros((JOBS, NODES), dtype=STATE_DTYPE)
    base[0, 0] = 2
    tables = np.cumsum(rng.random((JOBS, NODES + 1, NODES * GPUS_PER_NODE + 1)), axis=2)
    return kind(base, tables, np.full(JOBS, NODES * GPUS_PER_NODE, dtype=np.int64),
                rng.random(JOBS), ClusterState(NODES, GPUS_PER_NODE, 0.0), -1.0,
                avoid_interference, NODES, rng)


def _search(problem: AllocationProblem, search: str) -> SparseStates:
    """Two rounds (the second warm-started) of a short search on ``problem``; the last
    population, by the entries the search keeps (contiguous arrays)."""
    genetic = GeneticSearch(GAConfig(population=8, generations=2, search=search))
    problem.rng = genetic.rng
    names = [f"job-{j}" for j in range(JOBS)]
    genetic.evolve_sparse(problem, names)
    return genetic.evolve_sparse(problem, names)[0]


def _pair_loop(states: SparseStates) -> None:
    """The pair table's loop on ``states`` (as ``PairResiduals.log_factor`` calls it), under a
    mean table ``(1, K, K)`` and under draws ``(S, K, K)``."""
    from bayes_sched.interference import pair_kernel

    size, num_jobs, num_nodes = states.shape
    p, j, n = (np.asarray(a, dtype=np.int64) for a in states.entries[:3])
    apps = np.arange(num_jobs, dtype=np.int64) % APPLICATIONS
    classes = 2 * APPLICATIONS
    for draws in (1, 3):
        table = np.ascontiguousarray(np.full((draws, classes, classes), -0.1), dtype=np.float64)
        pair_kernel.worst_node_log_factor(p, j, n, size, num_jobs, num_nodes, apps, table)


def _from_dense(problem: AllocationProblem, population: SparseStates) -> None:
    """The step-by-step operators and the pair loop on ``population``'s entries as read from its
    dense states (strided views)."""
    dense = population.dense()
    strided = SparseStates.of(dense)
    fitness, utility = problem.objectives_sparse(strided)
    crowding = np.ones_like(fitness)
    problem.offspring_nsga2(dense, fitness, utility, crowding, len(population),
                            GAConfig(population=len(population)))
    problem.mutate_artifact(dense.copy(), GAConfig())
    _pair_loop(strided)


def _perfmodel_loops() -> None:
    """The point fit of a shipped profile, then the batch choice of its point model for one job
    (:meth:`GoodputModel.optimize`) and for several (:func:`optimize_each`)."""
    from perfmodel.goodput import GoodputModel, optimize_each
    from perfmodel.profiles import load_pollux_profile
    from perfmodel.throughput import fit_throughput

    theta = fit_throughput(load_pollux_profile("cifar10"), starts=1).as_array()
    nodes, replicas = np.array([1.0, 1.0, 2.0]), np.array([1.0, 4.0, 8.0])
    GoodputModel(theta, 1.0, 1.0, 128).optimize(nodes, replicas, 4096, (16, 256))
    count = len(nodes)
    optimize_each(np.tile(theta, (count, 1)), np.ones(count), np.full(count, 128.0), nodes,
                  replicas, np.full(count, 4096.0), np.full(count, 16.0), np.full(count, 256.0),
                  np.full(count, 15.0))


def precompile() -> None:
    """Run every compiled path once (see the module docstring), compiling what the cache lacks."""
    for avoid in (True, False):
        fused = _problem(AllocationProblem, avoid)
        population = _search(fused, "nsga2")
        fused.objectives_sparse(population)
        _search(_problem(_OwnFitness, avoid), "nsga2")
        _search(_problem(AllocationProblem, avoid), "elitist")
        _pair_loop(population)
        _from_dense(fused, population)
    _perfmodel_loops()
    from bayes_sched.sim.run import run_simulation

    for policy in ("pollux", "bo"):
        run_simulation("workload-1", policy, max_jobs=6)


def main() -> None:
    start = time.perf_counter()
    precompile()
    print(f"numba loops compiled or loaded in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()

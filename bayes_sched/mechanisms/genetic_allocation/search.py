"""The allocation search Pollux-like policies share: states, repair, the genetic search, speedups.

An allocation *state* is a ``(J, N)`` array of GPUs per node for ``J`` jobs on ``N`` nodes; a
population is ``(P, J, N)``, which the NSGA-II search carries as its nonzero entries
(:class:`~bayes_sched.mechanisms.genetic_allocation.sparse.SparseStates`: a job holds few of many
nodes, and at 4,096 GPUs copying the dense population cost more than the search itself).
:class:`AllocationProblem` scores states (the power mean of each job's speedup, times the restart
penalty where its allocation changes; and the cluster utility) and makes them feasible
(:meth:`AllocationProblem.repair`); :class:`GeneticSearch` evolves a population, warm-started from
the previous round's, by the artifact's NSGA-II
(:mod:`bayes_sched.mechanisms.genetic_allocation.nsga2`) or an elitist search;
:class:`SpeedupTables` (:mod:`~bayes_sched.mechanisms.genetic_allocation.speedups`, its names kept
here) turns job models into each job's speedup over a fair share for every node and GPU count.
:class:`~bayes_sched.policies.pollux.PolluxPolicy` is this search on the job models alone;
:class:`~bayes_sched.policies.bo.BayesOptPolicy` subclasses the problem to multiply in co-location
slowdowns.

The NSGA-II search (``GAConfig.search = "nsga2"``, the default) has two objectives, the fitness and
the *cluster utility* (the jobs' summed speedups over the GPUs of the nodes in use), non-dominated
survival with crowding distance, tournaments by domination then crowding, one-point crossover over
jobs giving two complementary children, the artifact's mutation, and children that repeat a
candidate dropped. Repair enforces, in job priority order (lower index first): node capacity; each
job's replica cap; at most ``max_nodes`` nodes per job; and, with interference avoidance, at most
one distributed job per node.

By default (``AllocationProblem(compiled=True)``) the NSGA-II search of a problem scored by this
module's objectives runs whole as one compiled kernel
(:mod:`bayes_sched.mechanisms.genetic_allocation.generations`: every generation's mating, mutation,
repair, removal of repeats, scoring and survival, its draws from a compiled generator seeded from
:attr:`GeneticSearch.rng`), so one seed gives one search, but not the numpy path's draws. A
subclass with its own fitness (``bo``'s) runs step by step, with mating, mutation, repair, the
table reads and survival as the compiled loops of
:mod:`bayes_sched.mechanisms.genetic_allocation.kernels`; all but the mutation give the numpy
path's results to the bit from the same draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Annotated

import numpy as np

from bayes_sched.cluster import ClusterState
from bayes_sched.jobs import JobView
from bayes_sched.mechanisms.genetic_allocation import nsga2
from bayes_sched.mechanisms.genetic_allocation.sparse import (  # the helpers' home, names kept here
    Entries,
    SparseStates,
    _crossover,
    _distinct_draws,
    _first_occurrences,
    _group_cumsum,
    _merge,
    _ranges,
    _sorted_unique,
    _sparse,
    _take_merged,
    nonzero_entries,
    power_mean,
)
from bayes_sched.mechanisms.genetic_allocation.speedups import SpeedupTables  # noqa: F401 (its home)
from bayes_sched.registry import PROBABILITY, SEED, Range, check_fields

#: GPU counts in the search: small integers keep large populations cheap to copy and scan.
STATE_DTYPE = np.int16

#: Survival schemes of the genetic search (see :class:`GAConfig`).
SEARCHES = ("nsga2", "elitist")

#: Largest population and most generations of the genetic search (defaults: 48 and 40).
MAX_POPULATION = 10_000
MAX_GENERATIONS = 10_000
#: Most GPU counts (``P x jobs x nodes``) a population may hold (default: 3,000,000).
MAX_ELEMENTS = 50_000_000


@dataclass(frozen=True)
class GAConfig:
    """Genetic search settings: the survival scheme, population size, generations, operator rates
    and the seed.

    ``search`` is ``"nsga2"`` (the artifact's two-objective search; see the module docstring) or
    ``"elitist"`` (fitness alone; parents and children compete, the fittest survive; its mutation
    grows a row onto free GPUs with ``grow_prob``, where the artifact's grows each free node by
    about one job).

    On large problems the population shrinks so that it holds at most ``max_elements`` GPU counts
    (``P x jobs x nodes``), down to ``min_population``, with generations shrinking alike down to
    ``min_generations``: at 1,024 GPUs and 2,000 jobs a full population would not fit a 2 s round.

    Bounds (checked by the option registry, and here for direct use): population and
    generations up to :data:`MAX_POPULATION` and :data:`MAX_GENERATIONS` (time grows with their
    product), ``max_elements`` up to :data:`MAX_ELEMENTS` (a dense population of that many int16
    counts is 100 MB), the rates probabilities.
    """

    population: Annotated[int, Range(2, MAX_POPULATION)] = 48
    generations: Annotated[int, Range(1, MAX_GENERATIONS)] = 40
    max_elements: Annotated[int, Range(1, MAX_ELEMENTS)] = 3_000_000
    min_population: Annotated[int, Range(2, MAX_POPULATION)] = 8
    min_generations: Annotated[int, Range(1, MAX_GENERATIONS)] = 8
    reset_prob: Annotated[float, PROBABILITY] = 0.1
    zero_prob: Annotated[float, PROBABILITY] = 0.1
    grow_prob: Annotated[float, PROBABILITY] = 0.15
    seed: Annotated[int, SEED] = 0
    search: str = "nsga2"
    crossover_prob: Annotated[float, PROBABILITY] = 0.9

    def __post_init__(self) -> None:
        if self.search not in SEARCHES:
            raise ValueError(f"GAConfig.search is {self.search!r}: expected one of {SEARCHES}")
        check_fields(self, "GAConfig")


def _kernels() -> ModuleType:
    """The compiled kernels, imported on first use (importing numba is slow, which the
    commands that never search should not pay)."""
    from bayes_sched.mechanisms.genetic_allocation import kernels

    return kernels


def _int64(entries: Entries) -> Entries:
    """``entries`` as int64 arrays (one compiled signature for every caller)."""
    return tuple(np.asarray(a, dtype=np.int64) for a in entries)  # type: ignore[return-value]


def restart_penalty(age: np.ndarray, restarts: np.ndarray, restart_delay: np.ndarray | float
                    ) -> np.ndarray:
    """Pollux's re-allocation penalty ``(T_j - R_j * delta) / (T_j + delta)`` (at least 0) of jobs of
    age ``T_j`` seconds with ``R_j`` restarts, ``delta`` the restart delay (seconds, one per job or
    one for all), shape of ``age``."""
    return np.maximum(age - restarts * restart_delay, 0.0) / (age + restart_delay)


def restart_delays(cluster: ClusterState, jobs: Sequence[JobView]) -> np.ndarray:
    """The cluster's restart delay for each job's application, seconds, shape ``(J,)``."""
    applications = [job.application for job in jobs]
    delay = {name: cluster.restart_delay_of(name) for name in set(applications)}
    return np.array([delay[name] for name in applications], dtype=float)


def status_quo(jobs: Sequence[JobView]) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray,
                                                                     np.ndarray]]:
    """The allocation in force, ``(J, N)`` GPUs per node (:data:`STATE_DTYPE`), jobs in the order
    given, and its nonzero entries ``(j, n, GPUs)`` in row-major order (``AllocationProblem``'s
    ``base_entries``): each job's allocation scanned once, with no dense stack of them (most
    jobs hold few nodes or none)."""
    allocations = [job.allocation for job in jobs]
    base = np.zeros((len(jobs), len(allocations[0])), dtype=STATE_DTYPE)
    # All bytes zero means no GPUs, and comparing bytes costs less than scanning for nonzeros.
    nothing = bytes(allocations[0].nbytes)
    holding = [j for j, held in enumerate(allocations) if held.tobytes() != nothing]
    nodes = {j: allocations[j].nonzero()[0] for j in holding}
    holding = [j for j in holding if nodes[j].size]
    if not holding:
        empty = np.zeros(0, dtype=np.int64)
        return base, (empty, empty.copy(), base[empty, empty])
    base_n = np.concatenate([nodes[j] for j in holding])
    base_j = np.repeat(np.array(holding, dtype=np.int64), [nodes[j].size for j in holding])
    base[base_j, base_n] = np.concatenate([allocations[j][nodes[j]] for j in holding])
    return base, (base_j, base_n, base[base_j, base_n])


def replica_cap(job: JobView, max_replicas_cap: int) -> int:
    """Most GPUs the search gives ``job``: twice the most it has been measured on (at least 1),
    ``max_replicas_cap``, what its batch limits allow and its own cap (:func:`replica_caps`)."""
    return int(replica_caps([job], max_replicas_cap)[0])


def replica_caps(jobs: Sequence[JobView], max_replicas_cap: int) -> np.ndarray:
    """:func:`replica_cap` of every job, shape ``(J,)`` (int64), computed across jobs at once."""
    # Jobs often share their observations' and limits' objects (views of one template, one
    # application's limits): each object is read once.
    most: dict[int, int] = {}
    for job in jobs:
        observations = job.observations
        if id(observations) not in most:
            most[id(observations)] = max((key[1] for key in observations), default=0)
    profiled = np.array([most[id(job.observations)] for job in jobs], dtype=np.int64)
    ratio = {id(limits): limits.max_batch_size // limits.min_local_bsz
             for limits in {id(job.limits): job.limits for job in jobs}.values()}
    allowed = np.array([ratio[id(job.limits)] for job in jobs], dtype=np.int64)
    limit = np.minimum(np.minimum(np.maximum(2 * profiled, 1), max_replicas_cap), allowed)
    own = [(j, cap) for j, job in enumerate(jobs)
           if (cap := job.settings.max_replicas) is not None]
    if own:
        capped, caps = zip(*own, strict=True)
        limit[list(capped)] = np.minimum(limit[list(capped)], caps)
    return np.maximum(limit, 1)


class GeneticSearch:
    """The genetic search over allocation states, warm-started from its last population.

    Args:
        ga: the search's settings (its seed seeds :attr:`rng`, which problems share).
    """

    def __init__(self, ga: GAConfig) -> None:
        self.ga = ga
        self.rng = np.random.default_rng(ga.seed)
        self._population: SparseStates | None = None  # the last round's
        self._population_jobs: list[str] = []

    def evolve(self, problem: AllocationProblem, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Run the genetic search on ``problem``, warm-started from the last round's population.

        Returns the final population ``(P, jobs, nodes)`` and its fitness ``(P,)``, and keeps the
        population for the next round's warm start.
        """
        population, fitness = self.evolve_sparse(problem, names)
        return population.dense(), fitness

    def evolve_sparse(self, problem: AllocationProblem, names: list[str]
                      ) -> tuple[SparseStates, np.ndarray]:
        """:meth:`evolve`, the population by its nonzero entries (the NSGA-II search never
        builds the dense one: on a large cluster copying it costs more than the search)."""
        ga = self.ga
        base = problem.base
        size = int(np.clip(ga.max_elements // base.size, ga.min_population, ga.population))
        generations = max(ga.min_generations, ga.generations * size // ga.population)
        if ga.search == "nsga2":
            return self._evolve_nsga2(problem, names, size, generations)
        population = self._initial_states(problem, names, size).dense()
        population[1:] = problem.mutate(population[1:], self.ga)
        population, entries = problem._repair(population, in_place=True)
        fitness = problem.fitness_with_entries(population, entries)
        for _ in range(generations):
            children, entries = problem.offspring_entries(population, fitness, ga)
            merged_fitness = np.concatenate([fitness, problem.fitness_with_entries(children,
                                                                                   entries)])
            keep = np.argsort(-merged_fitness, kind="stable")[:size]
            population = _take_merged(population, children, keep)
            fitness = merged_fitness[keep]
        self._population, self._population_jobs = SparseStates.of(population), names
        return self._population, fitness

    def _evolve_nsga2(self, problem: AllocationProblem, names: list[str], size: int,
                      generations: int) -> tuple[SparseStates, np.ndarray]:
        # The artifact's NSGA-II starts from last round's population as it is (no mutation).
        initial = self._initial_states(problem, names, size)
        if problem.fused:
            population, fitness = problem.evolve_compiled(initial, size, generations, self.ga)
            self._population, self._population_jobs = population, names
            return population, fitness
        population = problem.repair_sparse(initial)
        keys = population.row_keys()
        first = _first_occurrences(keys)
        population, keys = population.rows(first), [keys[i] for i in first]
        fitness, utility = problem.objectives_sparse(population)
        # The compiled survival ranks as nsga2.survivors does, to the bit.
        survivors = _kernels().survivors if problem.compiled else nsga2.survivors
        _, crowding = survivors(fitness, utility, size)
        for _ in range(generations):
            # As pymoo's mating, children repeating a candidate are dropped; drawing twice as many
            # as needed in one go fills the brood (about half are repeats on a full cluster).
            children = problem.offspring_sparse(population, fitness, utility, crowding, 2 * size,
                                                self.ga)
            child_keys = children.row_keys()
            new = _first_occurrences(child_keys, seen=keys)[:size]
            children, child_keys = children.rows(new), [child_keys[i] for i in new]
            child_fitness, child_utility = problem.objectives_sparse(children)
            merged_fitness = np.concatenate([fitness, child_fitness])
            merged_utility = np.concatenate([utility, child_utility])
            keep, merged_crowding = survivors(merged_fitness, merged_utility, size)
            population = population.concat(children).rows(keep)
            merged_keys = keys + child_keys
            keys = [merged_keys[i] for i in keep.tolist()]
            fitness = merged_fitness[keep]
            utility, crowding = merged_utility[keep], merged_crowding[keep]
        self._population, self._population_jobs = population, names
        return population, fitness

    def _initial_states(self, problem: AllocationProblem, names: list[str],
                        size: int) -> SparseStates:
        """``size`` states, unrepaired: the status quo first, then the last round's states (their
        jobs found by name; jobs gone dropped, new jobs without GPUs), then copies of the status
        quo."""
        base = problem.base
        num_jobs, num_nodes = base.shape
        bj, bn, bv = problem.base_entries
        previous = self._population
        count = 0
        parts: list[Entries] = []
        if previous is not None and previous.shape[2] == num_nodes:
            if self._population_jobs == names:  # the same jobs in the same order
                index = np.arange(len(names), dtype=np.int64)
            else:
                where = {name: i for i, name in enumerate(names)}
                index = np.array([where.get(name, -1) for name in self._population_jobs],
                                 dtype=np.int64)
            count = min(size, len(previous))
            p, j, n, v = previous.entries
            new_j = index[j] if j.size else j
            kept = (p >= 1) & (p < count) & (new_j >= 0)
            parts.append((p[kept], new_j[kept], n[kept], v[kept].astype(base.dtype)))
        rows = np.concatenate([[0], np.arange(max(count, 1), size)]).astype(np.int64)
        parts.append((np.repeat(rows, bj.size), np.tile(bj, rows.size), np.tile(bn, rows.size),
                      np.tile(bv, rows.size)))
        p, j, n, v = (np.concatenate(arrays) for arrays in zip(*parts, strict=True))
        order = np.argsort((p * num_jobs + j) * num_nodes + n, kind="stable")
        return SparseStates((p[order], j[order], n[order], v[order]), (size, num_jobs, num_nodes))


class AllocationProblem:
    """The allocation search of one round: states are ``(P, J, N)`` arrays of GPUs per node.

    Args:
        base: the allocation in force, ``(J, N)``, jobs in priority order.
        tables: speedup tables ``(J, Nmax + 1, Rmax + 1)`` (:class:`SpeedupTables`).
        max_replicas: each job's replica cap ``(J,)``.
        penalty: each job's restart penalty ``(J,)`` (:func:`restart_penalty`).
        cluster: the cluster (GPUs per node, scale of the speedups).
        p: power-mean exponent of the fitness.
        avoid_interference: at most one distributed job per node.
        max_nodes: most nodes per job.
        rng: the search's generator.
        compiled: run mutation, repair and scoring as the compiled loops of
            :mod:`bayes_sched.mechanisms.genetic_allocation.kernels` (repair and scoring give the
            numpy path's results; the mutation draws its own numbers from a seed drawn from ``rng``)
            rather than as numpy calls.
        base_entries: ``base``'s nonzero entries ``(j, n, GPUs)`` in row-major order, as
            ``np.nonzero`` gives them, where the caller has them (found by scanning ``base``
            otherwise: at thousands of jobs and nodes the scan is costly).
    """

    def __init__(self, base: np.ndarray, tables: np.ndarray, max_replicas: np.ndarray,
                 penalty: np.ndarray, cluster: ClusterState, p: float,
                 avoid_interference: bool, max_nodes: int, rng: np.random.Generator,
                 compiled: bool = True,
                 base_entries: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> None:
        self.base = base
        self.tables = tables
        self.max_replicas = max_replicas
        self.penalty = penalty
        self.capacity = cluster.gpus_per_node
        self.scale = cluster.num_nodes / cluster.total_gpus
        self.p = p
        self.avoid_interference = avoid_interference
        self.max_nodes = max_nodes
        self.rng = rng
        self.compiled = compiled
        self.job_index = np.arange(base.shape[0])
        if base_entries is None:
            base_j, base_n = np.nonzero(base)
            base_entries = (base_j, base_n, base[base_j, base_n])
        base_j = base_entries[0]
        self._base_nodes = np.bincount(base_j, minlength=base.shape[0])
        #: The status quo's nonzero entries ``(j, n, GPUs)``, in order.
        self.base_entries = base_entries
        self._base_bounds = np.searchsorted(base_j, np.arange(base.shape[0] + 1))
        # States whose nonzero entries the caller has, while :meth:`fitness_with_entries` runs.
        self._known: tuple[np.ndarray, Entries] | None = None

    @property
    def fused(self) -> bool:
        """Whether the NSGA-II search runs whole as the compiled loop
        (:meth:`evolve_compiled`): compiled, and scored by this class's own objectives (a
        subclass with its own :meth:`fitness` runs step by step)."""
        return self.compiled and type(self).fitness is AllocationProblem.fitness

    def evolve_compiled(self, initial: SparseStates, size: int, generations: int,
                        ga: GAConfig) -> tuple[SparseStates, np.ndarray]:
        """The artifact's NSGA-II from the unrepaired states ``initial`` as one compiled kernel
        (:func:`bayes_sched.mechanisms.genetic_allocation.generations.evolve`), its draws from a
        compiled generator seeded from :attr:`rng`: the final population and its fitness
        ``(P,)``."""
        from bayes_sched.mechanisms.genetic_allocation import generations as compiled

        int64 = np.int64
        base_j, base_n, base_v = self.base_entries
        arrays = (self.base.astype(int64), base_n.astype(int64), base_v.astype(int64),
                  self._base_bounds.astype(int64), self._base_nodes.astype(int64),
                  np.ascontiguousarray(self.tables, dtype=float), self.penalty.astype(float),
                  self.max_replicas.astype(int64))
        num_jobs, num_nodes = self.base.shape
        numbers = (num_jobs, num_nodes, int(self.capacity), int(self.max_nodes),
                   bool(self.avoid_interference), float(self.scale), float(self.p),
                   float(ga.reset_prob), float(ga.zero_prob), float(ga.crossover_prob))
        p, j, n, v, fitness, _ = compiled.evolve(
            *_int64(initial.entries), size, generations, arrays, numbers,
            _kernels().seeded_state(self.rng))
        return (SparseStates((p, j, n, v.astype(self.base.dtype)),
                             (fitness.size, num_jobs, num_nodes)), fitness)

    def _sparse_of(self, states: np.ndarray) -> SparseStates:
        known = self._known
        if known is not None and known[0] is states:
            return SparseStates(known[1], states.shape)
        return SparseStates.of(states)

    def fitness_with_entries(self, states: np.ndarray, entries: Entries) -> np.ndarray:
        """:meth:`fitness` of ``states`` whose ``nonzero_entries`` are ``entries`` (as repair
        gives them), which the speedups then read instead of scanning the states again (also in
        a subclass's own :meth:`fitness`, which reads them through :meth:`speedups`)."""
        self._known = (states, entries)
        try:
            return self.fitness(states)
        finally:
            self._known = None

    def table_speedups(self, states: np.ndarray,
                       entries: Entries | None = None) -> np.ndarray:
        """Every job's speedup table read at its nodes and GPUs in every state, shape ``(P, J)``.
        ``entries``: ``nonzero_entries(states)``, where the caller has them."""
        return self._table_speedups(_sparse(states, entries))

    def _table_speedups(self, states: SparseStates) -> np.ndarray:
        size, num_jobs, _ = states.shape
        p, j, _, v = states.entries
        # Nodes and GPUs per (state, job) from the nonzero entries: the dense reductions over
        # P x J x N cost several times more on a large, mostly empty cluster state.
        row = p * num_jobs + j
        nodes = np.bincount(row, minlength=size * num_jobs).reshape(size, num_jobs)
        replicas = np.bincount(row, weights=v, minlength=size * num_jobs).astype(np.int64)
        return self.tables[self.job_index, nodes, replicas.reshape(size, num_jobs)]

    def changed(self, states: np.ndarray,
                entries: Entries | None = None) -> np.ndarray:
        """Whether each job's allocation in each state differs from :attr:`base`, shape
        ``(P, J)`` (``np.any(states != base, axis=2)``, from the nonzero entries)."""
        return self._changed(_sparse(states, entries))

    def _changed(self, states: SparseStates) -> np.ndarray:
        size, num_jobs, _ = states.shape
        p, j, n, v = states.entries
        row = p * num_jobs + j
        same = self.base[j, n] == v
        # A row equals the base row when every entry matches one of the base's and it has as
        # many entries as the base row.
        matched = np.bincount(row[same], minlength=size * num_jobs).reshape(size, num_jobs)
        mismatched = np.bincount(row[~same], minlength=size * num_jobs).reshape(size, num_jobs)
        return (mismatched > 0) | (matched != self._base_nodes)

    def speedups(self, states: np.ndarray) -> np.ndarray:
        """Scaled speedup of every job in every state, times the re-allocation penalty where the
        job's allocation changes, shape ``(P, J)``."""
        sparse = self._sparse_of(states)
        return self._penalised(self._table_speedups(sparse), sparse)

    def _penalised(self, table: np.ndarray, states: SparseStates) -> np.ndarray:
        speedup = table * self.scale
        return np.where(self._changed(states), speedup * self.penalty, speedup)

    def fitness(self, states: np.ndarray) -> np.ndarray:
        """Power mean of penalised, scaled speedups, shape ``(P,)``."""
        return power_mean(self.speedups(states) + 1e-3, self.p)

    def utility(self, states: np.ndarray) -> np.ndarray:
        """Cluster utility, as the artifact's second objective: the jobs' summed speedups over the
        GPUs of the nodes in use, shape ``(P,)``."""
        sparse = self._sparse_of(states)
        return self._utility(self._table_speedups(sparse), sparse)

    def _utility(self, table: np.ndarray, states: SparseStates) -> np.ndarray:
        size, _, num_nodes = states.shape
        p, _, n, _ = states.entries
        in_use = np.bincount(p * num_nodes + n, minlength=size * num_nodes) > 0
        active = np.count_nonzero(in_use.reshape(size, num_nodes), axis=1)
        return table.sum(axis=1) / np.maximum(active * self.capacity, 1)

    def objectives(self, states: np.ndarray, entries: Entries | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`fitness` and :meth:`utility` of ``states``, sharing their table reads
        (``entries``: ``nonzero_entries(states)`` where the caller has them)."""
        if type(self).fitness is not AllocationProblem.fitness:  # a subclass's own fitness
            return self.fitness(states), self.utility(states)
        return self.objectives_sparse(_sparse(states, entries))

    def objectives_sparse(self, states: SparseStates) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`objectives` of states given by their nonzero entries."""
        if type(self).fitness is not AllocationProblem.fitness:  # a subclass's own fitness
            dense = states.dense()
            return self.fitness(dense), self.utility(dense)
        if self.compiled:
            table, speedup, active = _kernels().table_reads(
                *_int64(states.entries), *states.shape, self.tables, self.base,
                self._base_nodes, self.penalty, float(self.scale))
            return (power_mean(speedup + 1e-3, self.p),
                    table.sum(axis=1) / np.maximum(active * self.capacity, 1))
        table = self._table_speedups(states)
        fitness = power_mean(self._penalised(table, states) + 1e-3, self.p)
        return fitness, self._utility(table, states)

    def offspring_nsga2(self, population: np.ndarray, fitness: np.ndarray, utility: np.ndarray,
                        crowding: np.ndarray, count: int, ga: GAConfig) -> np.ndarray:
        """``count`` children by the artifact's NSGA-II mating, mutation and repair."""
        return self.offspring_sparse(SparseStates.of(population), fitness, utility, crowding,
                                     count, ga).dense()

    def offspring_sparse(self, population: SparseStates, fitness: np.ndarray,
                         utility: np.ndarray, crowding: np.ndarray, count: int,
                         ga: GAConfig) -> SparseStates:
        """:meth:`offspring_nsga2` on states given by their nonzero entries."""
        size, num_jobs, _ = population.shape
        rng = self.rng
        half = (count + 1) // 2
        if self.compiled:  # the same draws, in the same order, as below
            draws, coins = np.empty((2, 2, half), np.int64), np.empty((2, half))
            for r in range(2):
                draws[r] = rng.integers(size, size=(2, half))
                coins[r] = rng.random(half)
            point = rng.integers(num_jobs, size=(half, 1))
            point = np.where(rng.random((half, 1)) < ga.crossover_prob, point, num_jobs)[:, 0]
            p, j, n, v = _kernels().mate(*_int64(population.entries), size, fitness, utility,
                                         crowding, draws, coins, point, count)
            children = SparseStates((p, j, n, v.astype(population.entries[3].dtype)),
                                    (count, *population.shape[1:]))
            return self.repair_sparse(self._mutate_sparse(children, ga))

        def tournament() -> np.ndarray:
            a, b = rng.integers(size, size=(2, half))
            a_wins = (fitness[a] >= fitness[b]) & (utility[a] >= utility[b])
            b_wins = (fitness[b] >= fitness[a]) & (utility[b] >= utility[a])
            same = a_wins & b_wins
            a_dom, b_dom = a_wins & ~same, b_wins & ~same
            by_crowding = np.where(crowding[a] > crowding[b], a,
                                   np.where(crowding[b] > crowding[a], b,
                                            np.where(rng.random(half) < 0.5, a, b)))
            return np.where(a_dom, a, np.where(b_dom, b, by_crowding))

        first, second = tournament(), tournament()
        point = rng.integers(num_jobs, size=(half, 1))
        point = np.where(rng.random((half, 1)) < ga.crossover_prob, point, num_jobs)[:, 0]
        # Two complementary children per pair: the first half (first, second), then the other.
        children = population.crossover(np.concatenate([first, second]),
                                        np.concatenate([second, first]),
                                        np.concatenate([point, point]))
        if len(children) != count:
            children = children.rows(np.arange(count))
        return self.repair_sparse(self._mutate_sparse(children, ga))

    def mutate_artifact(self, states: np.ndarray, ga: GAConfig) -> np.ndarray:
        """The artifact's mutation, drawn sparsely so that its cost follows the GPUs in use and
        the free nodes rather than ``P x J x N``. Changes ``states`` in place and returns it.

        Per job row: with ``reset_prob``, back to the current allocation; with ``zero_prob``, each
        of its nodes dropped with ``zero_prob``. Then growth on nodes with free GPUs, as two
        independent draws per (job, node) entry: any job with probability one over the number of
        jobs (the artifact normalises over jobs, so a free node gains about one job, not every
        job one node), and a job already on the node with one over the number of jobs there. A
        grown entry takes a uniform count from its current one up to the node's capacity; repair
        trims what no longer fits.
        """
        mutated = self._mutate_sparse(SparseStates.of(states), ga)
        states[...] = 0
        p, j, n, v = mutated.entries
        states[p, j, n] = v
        return states

    def _mutate_sparse(self, states: SparseStates, ga: GAConfig) -> SparseStates:
        """:meth:`mutate_artifact` on states given by their nonzero entries."""
        rng = self.rng
        size, num_jobs, num_nodes = states.shape
        if self.compiled:
            base_j, base_n, base_v = self.base_entries
            p, j, n, v = _kernels().mutate_entries(
                *_int64(states.entries), size, num_jobs, num_nodes, base_n.astype(np.int64),
                base_v.astype(np.int64), self._base_bounds.astype(np.int64),
                int(self.capacity), float(ga.reset_prob), float(ga.zero_prob),
                _kernels().seeded_state(rng))
            return SparseStates((p, j, n, v.astype(states.entries[3].dtype)), states.shape)
        reset = rng.random((size, num_jobs)) < ga.reset_prob
        p, j, n, v = self._reset_rows(states, reset)
        drop = (rng.random((size, num_jobs)) < ga.zero_prob)[p, j] & (rng.random(p.size)
                                                                       < ga.zero_prob)
        p, j, n, v = p[~drop], j[~drop], n[~drop], v[~drop]                      # still in use
        load = np.bincount(p * num_nodes + n, weights=v, minlength=size * num_nodes)
        is_free = load.reshape(size, num_nodes) < self.capacity                  # (P, N)
        # Any job onto a free node: a binomial count of jobs per free node, then that many
        # distinct jobs (the same as a coin per entry, at the cost of the hits only).
        free_p, free_n = np.nonzero(is_free)
        counts = rng.binomial(num_jobs, 1.0 / num_jobs, size=free_p.size)
        grow_p, grow_n = np.repeat(free_p, counts), np.repeat(free_n, counts)
        grow_j = _distinct_draws(np.repeat(np.arange(free_p.size), counts), num_jobs, rng)
        # A job already on a free node: one over the number of jobs on that node.
        own = is_free[p, n]
        own_p, own_j, own_n = p[own], j[own], n[own]
        node = own_p * num_nodes + own_n
        pick = rng.random(own_p.size) * np.bincount(node, minlength=size * num_nodes)[node] < 1.0
        key = _sorted_unique(np.concatenate([
            (grow_p * num_jobs + grow_j) * num_nodes + grow_n,
            (own_p[pick] * num_jobs + own_j[pick]) * num_nodes + own_n[pick]]))
        # Each grown entry draws from its current count (0 where the job is not on the node).
        entry_key = (p * num_jobs + j) * num_nodes + n
        at = np.minimum(np.searchsorted(entry_key, key), max(entry_key.size - 1, 0))
        found = (entry_key[at] == key) if entry_key.size else np.zeros(key.size, dtype=bool)
        current = np.where(found, v[at] if v.size else 0, 0).astype(v.dtype)
        grown = rng.integers(current, self.capacity + 1).astype(v.dtype)
        v = v.copy()
        v[at[found]] = grown[found]
        added = ~found & (grown > 0)
        add_p, rest = np.divmod(key[added], num_jobs * num_nodes)
        add_j, add_n = np.divmod(rest, num_nodes)
        p, j, n, v = _merge((p, j, n, v), entry_key, (add_p, add_j, add_n, grown[added]),
                            key[added])
        keep = v != 0
        return SparseStates((p[keep], j[keep], n[keep], v[keep]), states.shape)

    def _reset_rows(self, states: SparseStates, reset: np.ndarray) -> Entries:
        """The entries of ``states`` with the rows ``reset`` (``(P, J)`` booleans) set to the
        status quo's."""
        size, num_jobs, num_nodes = states.shape
        p, j, n, v = states.entries
        reset_p, reset_j = np.nonzero(reset)
        base_j, base_n, base_v = self.base_entries
        lengths = self._base_bounds[reset_j + 1] - self._base_bounds[reset_j]
        index = _ranges(self._base_bounds[reset_j], lengths)
        added = (np.repeat(reset_p, lengths), base_j[index], base_n[index],
                 base_v[index].astype(v.dtype))
        kept = ~reset[p, j]
        return _merge((p[kept], j[kept], n[kept], v[kept]),
                      ((p[kept] * num_jobs + j[kept]) * num_nodes + n[kept]), added,
                      (added[0] * num_jobs + added[1]) * num_nodes + added[2])

    def offspring(self, population: np.ndarray, fitness: np.ndarray, ga: GAConfig) -> np.ndarray:
        """``size`` children by binary tournaments, one-point crossover over jobs, mutation and
        repair (the elitist search's)."""
        return self.offspring_entries(population, fitness, ga)[0]

    def offspring_entries(self, population: np.ndarray, fitness: np.ndarray, ga: GAConfig
                          ) -> tuple[np.ndarray, Entries]:
        """:meth:`offspring` and the children's ``nonzero_entries``."""
        size, num_jobs, _ = population.shape
        rng = self.rng
        # Binary tournaments pick the parents.
        a, b = rng.integers(size, size=(2, size))
        first = np.where(fitness[a] >= fitness[b], a, b)
        a, b = rng.integers(size, size=(2, size))
        second = np.where(fitness[a] >= fitness[b], a, b)
        # One-point crossover over jobs.
        point = rng.integers(num_jobs + 1, size=(size, 1))
        children = _crossover(population, first, second, point[:, 0])
        return self._repair(self.mutate(children, ga), in_place=True)

    def mutate(self, states: np.ndarray, ga: GAConfig) -> np.ndarray:
        """Random changes per job row; randomness is drawn per row, not per GPU slot, so the cost
        stays near ``P x J`` however many nodes there are. Changes ``states`` in place and
        returns it."""
        rng = self.rng
        size, num_jobs, num_nodes = states.shape
        # Reset some jobs to their current allocation.
        p, j = np.nonzero(rng.random((size, num_jobs)) < ga.reset_prob)
        states[p, j] = self.base[j]
        # Take some jobs off one of their nodes (or an empty one: no change).
        p, j = np.nonzero(rng.random((size, num_jobs)) < ga.zero_prob)
        states[p, j, rng.integers(num_nodes, size=p.size)] = 0
        # Grow some jobs where GPUs are free, as the artifact's mutation does (never onto a full
        # node, so no GPUs are taken from a job by growth alone): on one of their own nodes with
        # free GPUs, and on any node with free GPUs, each picked uniformly. One draw per row
        # picks the node among the row's candidates (listed from the nonzero entries and the
        # free nodes, so neither the draws nor the work scale with rows x nodes).
        p, j, n, v = nonzero_entries(states)
        used = np.bincount(p * num_nodes + n, weights=v, minlength=size * num_nodes)
        free = used.reshape(size, num_nodes) < self.capacity                     # (P, N)
        on_free = free[p, n]
        free_p, free_n = np.nonzero(free)
        candidates = {True: ((p * num_jobs + j)[on_free], n[on_free]),
                      False: (free_p, free_n)}
        for own in (True, False):
            p, j = np.nonzero(rng.random((size, num_jobs)) < ga.grow_prob)
            if not p.size:
                continue
            group, nodes = candidates[own]
            key = p * num_jobs + j if own else p
            start = np.searchsorted(group, key, side="left")
            count = np.searchsorted(group, key, side="right") - start
            pick = (rng.random(p.size) * count).astype(np.int64)
            hit = count > 0
            p, j = p[hit], j[hit]
            node = nodes[start[hit] + pick[hit]]
            current = states[p, j, node]
            states[p, j, node] = rng.integers(current, self.capacity + 1)
        return states

    def repair(self, states: np.ndarray, in_place: bool = False) -> np.ndarray:
        """Make states feasible. Works on the nonzero entries only (a job uses few of many nodes),
        as grouped cumulative sums, so the cost follows the GPUs in use, not ``P x J x N``.
        ``in_place``: repair ``states`` itself (and return it) rather than a copy."""
        return self._repair(states, in_place)[0]

    def _repair(self, states: np.ndarray, in_place: bool) -> tuple[np.ndarray, Entries]:
        """:meth:`repair`, and the repaired states' ``nonzero_entries``."""
        entries = nonzero_entries(states)
        p, j, n, _ = entries
        v = self._repaired_values(SparseStates(entries, states.shape))
        # Only nonzero entries change, so writing them back repairs the states.
        repaired = states if in_place else states.copy()
        repaired[p, j, n] = v
        keep = v > 0
        return repaired, (p[keep], j[keep], n[keep], v[keep].astype(states.dtype))

    def repair_sparse(self, states: SparseStates) -> SparseStates:
        """:meth:`repair` of states given by their nonzero entries."""
        p, j, n, v = states.entries
        repaired = self._repaired_values(states)
        keep = repaired > 0
        return SparseStates((p[keep], j[keep], n[keep], repaired[keep].astype(v.dtype)),
                            states.shape)

    def _repaired_values(self, states: SparseStates) -> np.ndarray:
        """The repaired value of each nonzero entry of ``states`` (0 where it goes), ``(K,)``."""
        size, num_jobs, num_nodes = states.shape
        if self.compiled:
            draws = self.rng.random(states.entries[0].size)   # the numpy path's draws
            return _kernels().repair_values(
                *_int64(states.entries), size, num_jobs, num_nodes, draws,
                self.max_replicas.astype(np.int64), int(self.max_nodes), int(self.capacity),
                bool(self.avoid_interference))
        # Entries come in (state, job, node) order, so a stable sort by (state, node) orders
        # each node's entries by job (as np.lexsort((j, node_key)) would, at less cost).
        p, j, n, v = states.entries
        v = v.astype(np.int64)
        node_key = p * num_nodes + n
        if self.avoid_interference:
            # At most one distributed job per node: later (lower-priority) ones leave it.
            job_key = p * num_jobs + j
            distributed = np.bincount(job_key, minlength=size * num_jobs)[job_key] > 1
            d = np.flatnonzero(distributed)
            order = d[np.argsort(node_key[d], kind="stable")]
            rank = _group_cumsum(np.ones(order.size, np.int64), node_key[order])
            v[order[rank > 1]] = 0
        # Per job: at most max_replicas GPUs and max_nodes nodes, trimmed in a random node order.
        # Only the entries of jobs over a limit change, so only they are sorted (the draws are
        # made for every entry all the same).
        job_key = p * num_jobs + j
        draws = self.rng.random(p.size)
        over = ((np.bincount(job_key, weights=v)[job_key] > self.max_replicas[j])
                | (np.bincount(job_key, weights=v > 0)[job_key] > self.max_nodes))
        trim = np.flatnonzero(over)
        order = trim[np.lexsort((draws[trim], job_key[trim]))]
        values, cap = v[order], self.max_replicas[j[order]]
        total = _group_cumsum(values, job_key[order])
        kept = np.minimum(total, cap) - np.minimum(total - values, cap)
        nodes_used = _group_cumsum((kept > 0).astype(np.int64), job_key[order])
        kept[nodes_used > self.max_nodes] = 0
        v[order] = kept
        # Node capacity, higher-priority jobs (lower index) first, on the nodes over it.
        trim = np.flatnonzero(np.bincount(node_key, weights=v)[node_key] > self.capacity)
        order = trim[np.argsort(node_key[trim], kind="stable")]
        values = v[order]
        total = _group_cumsum(values, node_key[order])
        v[order] = (np.minimum(total, self.capacity)
                    - np.minimum(total - values, self.capacity))
        return v

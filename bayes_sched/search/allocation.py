"""The allocation search Pollux-like policies share: states, repair, the genetic search, speedups.

An allocation *state* is a ``(J, N)`` array of GPUs per node for ``J`` jobs on ``N`` nodes; a
population is ``(P, J, N)``. :class:`AllocationProblem` scores states (the power mean of each job's
speedup, times the restart penalty where its allocation changes; and the cluster utility) and
makes them feasible (:meth:`AllocationProblem.repair`); :class:`GeneticSearch` evolves a population,
warm-started from the previous round's, by the artifact's NSGA-II (:mod:`bayes_sched.search.nsga2`)
or an elitist search; :class:`SpeedupTables` turns job models into each job's speedup over a fair
share for every node and GPU count. :class:`~bayes_sched.policies.pollux.PolluxPolicy` is this
search on the job models alone; :class:`~bayes_sched.policies.bo.BayesOptPolicy` subclasses the
problem to multiply in co-location slowdowns.

The NSGA-II search (``GAConfig.search = "nsga2"``, the default) has two objectives, the fitness and
the *cluster utility* (the jobs' summed speedups over the GPUs of the nodes in use), non-dominated
survival with crowding distance, tournaments by domination then crowding, one-point crossover over
jobs giving two complementary children, the artifact's mutation, and children that repeat a
candidate dropped. Repair enforces, in job priority order (lower index first): node capacity; each
job's replica cap; at most ``max_nodes`` nodes per job; and, with interference avoidance, at most
one distributed job per node.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bayes_sched.cluster import ClusterState
from bayes_sched.jobs import JobView
from bayes_sched.search import nsga2

#: GPU counts in the search: small integers keep large populations cheap to copy and scan.
STATE_DTYPE = np.int16

#: ``(p, j, n, values)`` of the nonzero entries of a ``(P, J, N)`` array (:func:`nonzero_entries`).
Entries = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]

#: Survival schemes of the genetic search (see :class:`GAConfig`).
SEARCHES = ("nsga2", "elitist")

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
    """

    population: int = 48
    generations: int = 40
    max_elements: int = 3_000_000
    min_population: int = 8
    min_generations: int = 8
    reset_prob: float = 0.1
    zero_prob: float = 0.1
    grow_prob: float = 0.15
    seed: int = 0
    search: str = "nsga2"
    crossover_prob: float = 0.9

    def __post_init__(self) -> None:
        if self.search not in SEARCHES:
            raise ValueError(f"GAConfig.search is {self.search!r}: expected one of {SEARCHES}")


def restart_penalty(age: np.ndarray, restarts: np.ndarray, restart_delay: np.ndarray | float
                    ) -> np.ndarray:
    """Pollux's re-allocation penalty ``(T_j - R_j * delta) / (T_j + delta)`` (at least 0) of jobs of
    age ``T_j`` seconds with ``R_j`` restarts, ``delta`` the restart delay (seconds, one per job or
    one for all), shape of ``age``."""
    return np.maximum(age - restarts * restart_delay, 0.0) / (age + restart_delay)


def restart_delays(cluster: ClusterState, jobs: Sequence[JobView]) -> np.ndarray:
    """The cluster's restart delay for each job's application, seconds, shape ``(J,)``."""
    return np.array([cluster.restart_delay_of(job.application) for job in jobs], dtype=float)


def replica_cap(job: JobView, max_replicas_cap: int) -> int:
    """Most GPUs the search gives ``job``: twice the most it has been measured on (at least 1),
    ``max_replicas_cap``, what its batch limits allow and its own cap."""
    limit = min(max(2 * job.max_profiled_replicas, 1), max_replicas_cap,
                job.limits.max_batch_size // job.limits.min_local_bsz)
    if job.settings.max_replicas is not None:
        limit = min(limit, job.settings.max_replicas)
    return max(limit, 1)


class SpeedupTables:
    """Every job's speedup over a fair share, from its job model, cached per job.

    Args:
        max_nodes_per_job: most nodes one job may span (the tables' node axis).
        speedup_tolerance: relative change of a job's gradient noise-to-signal ratio below which its
            cached table is reused (tables cost ~1 ms per job to build).
        risk: ``None`` for the point fit's goodput, ``q`` for its ``q``-quantile under the
            posterior draws.
    """

    def __init__(self, max_nodes_per_job: int, speedup_tolerance: float = 0.02,
                 risk: float | None = None) -> None:
        self.max_nodes_per_job = max_nodes_per_job
        self.speedup_tolerance = speedup_tolerance
        self.risk = risk
        self._tables: dict[str, tuple[int, float, int, np.ndarray]] = {}
        # Tables built this round and the last by their inputs: jobs whose models are equal
        # (the same fit, gradient statistics and limits) share one build.
        self._built: dict[tuple[object, ...], np.ndarray] = {}
        self._built_before: dict[tuple[object, ...], np.ndarray] = {}

    def _goodput_table(self, job: JobView, num_nodes: int, max_r: int) -> np.ndarray | None:
        """Fitted goodput for ``n <= num_nodes`` nodes and ``r <= max_r`` GPUs, shape
        ``(num_nodes + 1, max_r + 1)`` (0 where ``n > r`` or ``n == 0``); ``None`` without a
        model. Cached per job on the model's version while its noise stays within tolerance."""
        model = job.model
        if model is None:
            return None
        phi = model.noise_to_signal
        cached = self._tables.get(job.name)
        if cached is not None:
            version, cached_phi, cached_r, table = cached
            if (version == model.version and cached_r >= max_r and table.shape[0] > num_nodes
                    and abs(phi - cached_phi) <= self.speedup_tolerance * abs(cached_phi)):
                return table[: num_nodes + 1, : max_r + 1]
        draws = model.draws
        key = (model.params, model.gradient, model.limits,
               None if draws is None else draws.tobytes(), num_nodes, max_r)
        built = self._built.get(key)
        if built is None:
            built = self._built_before.get(key)
        if built is None:
            r = np.arange(1, max_r + 1)
            n = np.arange(1, num_nodes + 1)
            rr, nn = np.meshgrid(r, n)
            valid = nn <= rr
            # As in the artifact, speedups use the tuned batch even for a job run at a fixed
            # batch.
            goodput = model.goodput(nn[valid], rr[valid], quantile=self.risk)
            built = np.zeros((num_nodes + 1, max_r + 1))
            built[nn[valid], rr[valid]] = goodput
            built.flags.writeable = False
        self._built[key] = built
        self._tables[job.name] = (model.version, phi, max_r, built)
        return built

    def build(self, jobs: Sequence[JobView], cluster: ClusterState,
              max_replicas: np.ndarray) -> np.ndarray:
        """Speedup over a fair share for every job, node count and GPU count, shape
        ``(J, Nmax + 1, Rmax + 1)``."""
        num_jobs = len(jobs)
        n_max = min(cluster.num_nodes, self.max_nodes_per_job)
        fair_r = max(1, math.ceil(cluster.total_gpus / num_jobs))
        r_max = int(max(max_replicas.max(), 1))
        tables = np.zeros((num_jobs, n_max + 1, r_max + 1))
        r = np.arange(r_max + 1)
        n = np.arange(n_max + 1)[:, None]
        linear = np.where((n >= 1) & (n <= r), r / fair_r, 0.0)
        # Keep what the jobs of this round use: finished jobs' tables go (memory stays flat
        # however long the trace).
        names = {job.name for job in jobs}
        for name in [name for name in self._tables if name not in names]:
            del self._tables[name]
        self._built_before, self._built = self._built, {}
        for j, job in enumerate(jobs):
            goodput = self._goodput_table(job, n_max, max(int(max_replicas[j]), fair_r))
            if goodput is None:
                tables[j] = linear
                continue
            base = goodput[1, fair_r]
            width = min(r_max, goodput.shape[1] - 1) + 1
            tables[j, :, :width] = goodput[:, :width] / base if base > 0 else linear[:, :width]
        return tables

class GeneticSearch:
    """The genetic search over allocation states, warm-started from its last population.

    Args:
        ga: the search's settings (its seed seeds :attr:`rng`, which problems share).
    """

    def __init__(self, ga: GAConfig) -> None:
        self.ga = ga
        self.rng = np.random.default_rng(ga.seed)
        self._population: np.ndarray | None = None  # (P, J, N) from the last round
        self._population_jobs: list[str] = []

    def evolve(self, problem: AllocationProblem, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Run the genetic search on ``problem``, warm-started from the last round's population.

        Returns the final population ``(P, jobs, nodes)`` and its fitness ``(P,)``, and keeps the
        population for the next round's warm start.
        """
        ga = self.ga
        base = problem.base
        size = int(np.clip(ga.max_elements // base.size, ga.min_population, ga.population))
        generations = max(ga.min_generations, ga.generations * size // ga.population)
        population = self._initial_population(problem, names, size)
        if ga.search == "nsga2":
            return self._evolve_nsga2(problem, names, population, size, generations)
        fitness = problem.fitness(population)
        for _ in range(generations):
            children = problem.offspring(population, fitness, ga)
            merged_fitness = np.concatenate([fitness, problem.fitness(children)])
            keep = np.argsort(-merged_fitness, kind="stable")[:size]
            population = _take_merged(population, children, keep)
            fitness = merged_fitness[keep]
        self._population, self._population_jobs = population, names
        return population, fitness

    def _evolve_nsga2(self, problem: AllocationProblem, names: list[str], population: np.ndarray,
                      size: int, generations: int) -> tuple[np.ndarray, np.ndarray]:
        keys = _row_keys(population)
        first = _first_occurrences(keys)
        population, keys = population[first], [keys[i] for i in first]
        fitness, utility = problem.objectives(population)
        _, crowding = nsga2.survivors(fitness, utility, size)
        for _ in range(generations):
            # As pymoo's mating, children repeating a candidate are dropped; drawing twice as many
            # as needed in one go fills the brood (about half are repeats on a full cluster).
            children, entries = problem._offspring_nsga2(population, fitness, utility, crowding,
                                                         2 * size, self.ga)
            child_keys = _row_keys(children, entries)
            new = _first_occurrences(child_keys, seen=keys)[:size]
            entries = _entries_of_rows(entries, new, len(children))
            children, child_keys = children[new], [child_keys[i] for i in new]
            child_fitness, child_utility = problem.objectives(children, entries)
            merged_fitness = np.concatenate([fitness, child_fitness])
            merged_utility = np.concatenate([utility, child_utility])
            keep, merged_crowding = nsga2.survivors(merged_fitness, merged_utility, size)
            population = _take_merged(population, children, keep)
            merged_keys = keys + child_keys
            keys = [merged_keys[i] for i in keep.tolist()]
            fitness = merged_fitness[keep]
            utility, crowding = merged_utility[keep], merged_crowding[keep]
        self._population, self._population_jobs = population, names
        return population, fitness

    def _initial_population(self, problem: AllocationProblem, names: list[str], size: int) -> np.ndarray:
        base = problem.base
        population = np.broadcast_to(base, (size, *base.shape)).copy()
        if self._population is not None and self._population.shape[2] == base.shape[1]:
            previous = {name: i for i, name in enumerate(self._population_jobs)}
            src = [previous[n] for n in names if n in previous]
            dst = [j for j, n in enumerate(names) if n in previous]
            count = min(size, len(self._population))
            population[:count] = 0
            population[:count][:, dst] = self._population[:count][:, src]
        if self.ga.search != "nsga2":  # the artifact's NSGA-II starts from last round's as they are
            population[1:] = problem.mutate(population[1:], self.ga)
        population[0] = base  # keep the status quo as a candidate
        return problem.repair(population, in_place=True)


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
    """

    def __init__(self, base: np.ndarray, tables: np.ndarray, max_replicas: np.ndarray,
                 penalty: np.ndarray, cluster: ClusterState, p: float,
                 avoid_interference: bool, max_nodes: int, rng: np.random.Generator) -> None:
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
        self.job_index = np.arange(base.shape[0])
        self._base_nodes = np.count_nonzero(base, axis=1)

    def table_speedups(self, states: np.ndarray,
                       entries: Entries | None = None) -> np.ndarray:
        """Every job's speedup table read at its nodes and GPUs in every state, shape ``(P, J)``.
        ``entries``: ``nonzero_entries(states)``, where the caller has them."""
        size, num_jobs, _ = states.shape
        p, j, _, v = nonzero_entries(states) if entries is None else entries
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
        size, num_jobs, _ = states.shape
        p, j, n, v = nonzero_entries(states) if entries is None else entries
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
        entries = nonzero_entries(states)
        return self._penalised(self.table_speedups(states, entries), states, entries)

    def _penalised(self, table: np.ndarray, states: np.ndarray,
                   entries: Entries) -> np.ndarray:
        speedup = table * self.scale
        return np.where(self.changed(states, entries), speedup * self.penalty, speedup)

    def fitness(self, states: np.ndarray) -> np.ndarray:
        """Power mean of penalised, scaled speedups, shape ``(P,)``."""
        return power_mean(self.speedups(states) + 1e-3, self.p)

    def utility(self, states: np.ndarray) -> np.ndarray:
        """Cluster utility, as the artifact's second objective: the jobs' summed speedups over the
        GPUs of the nodes in use, shape ``(P,)``."""
        entries = nonzero_entries(states)
        return self._utility(self.table_speedups(states, entries), states, entries)

    def _utility(self, table: np.ndarray, states: np.ndarray,
                 entries: Entries) -> np.ndarray:
        size, _, num_nodes = states.shape
        p, _, n, _ = entries
        in_use = np.bincount(p * num_nodes + n, minlength=size * num_nodes) > 0
        active = np.count_nonzero(in_use.reshape(size, num_nodes), axis=1)
        return table.sum(axis=1) / np.maximum(active * self.capacity, 1)

    def objectives(self, states: np.ndarray, entries: Entries | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`fitness` and :meth:`utility` of ``states``, sharing their table reads
        (``entries``: ``nonzero_entries(states)`` where the caller has them)."""
        if type(self).fitness is not AllocationProblem.fitness:  # a subclass's own fitness
            return self.fitness(states), self.utility(states)
        entries = nonzero_entries(states) if entries is None else entries
        table = self.table_speedups(states, entries)
        fitness = power_mean(self._penalised(table, states, entries) + 1e-3, self.p)
        return fitness, self._utility(table, states, entries)

    def offspring_nsga2(self, population: np.ndarray, fitness: np.ndarray, utility: np.ndarray,
                        crowding: np.ndarray, count: int, ga: GAConfig) -> np.ndarray:
        """``count`` children by the artifact's NSGA-II mating, mutation and repair."""
        return self._offspring_nsga2(population, fitness, utility, crowding, count, ga)[0]

    def _offspring_nsga2(self, population: np.ndarray, fitness: np.ndarray,
                         utility: np.ndarray, crowding: np.ndarray, count: int,
                         ga: GAConfig) -> tuple[np.ndarray, Entries]:
        size, num_jobs, _ = population.shape
        rng = self.rng
        half = (count + 1) // 2

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
        point = np.where(rng.random((half, 1)) < ga.crossover_prob, point, num_jobs)
        children = np.empty((2 * half, *population.shape[1:]), dtype=population.dtype)
        _crossover(population, first, second, point[:, 0], out=children[:half])
        _crossover(population, second, first, point[:, 0], out=children[half:])
        return self._repair(self.mutate_artifact(children[:count], ga), in_place=True)

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
        rng = self.rng
        size, num_jobs, num_nodes = states.shape
        reset = rng.random((size, num_jobs)) < ga.reset_prob
        _reset_rows(states, reset, self.base)
        p, j, n, v = nonzero_entries(states)
        drop = (rng.random((size, num_jobs)) < ga.zero_prob)[p, j] & (rng.random(p.size)
                                                                       < ga.zero_prob)
        states[p[drop], j[drop], n[drop]] = 0
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
        p, j, n = p[own], j[own], n[own]
        node = p * num_nodes + n
        pick = rng.random(p.size) * np.bincount(node, minlength=size * num_nodes)[node] < 1.0
        key = _sorted_unique(np.concatenate([(grow_p * num_jobs + grow_j) * num_nodes + grow_n,
                                             (p[pick] * num_jobs + j[pick]) * num_nodes + n[pick]]))
        p, rest = np.divmod(key, num_jobs * num_nodes)
        j, n = np.divmod(rest, num_nodes)
        states[p, j, n] = rng.integers(states[p, j, n], self.capacity + 1)
        return states

    def offspring(self, population: np.ndarray, fitness: np.ndarray, ga: GAConfig) -> np.ndarray:
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
        return self.repair(self.mutate(children, ga), in_place=True)

    def mutate(self, states: np.ndarray, ga: GAConfig) -> np.ndarray:
        """Random changes per job row; randomness is drawn per row, not per GPU slot, so the cost
        stays near ``P x J`` however many nodes there are. Changes ``states`` in place and
        returns it."""
        rng = self.rng
        size, num_jobs, num_nodes = states.shape
        # Reset some jobs to their current allocation.
        reset = rng.random((size, num_jobs)) < ga.reset_prob
        _reset_rows(states, reset, self.base)
        # Take some jobs off one of their nodes (or an empty one: no change).
        p, j = np.nonzero(rng.random((size, num_jobs)) < ga.zero_prob)
        states[p, j, rng.integers(num_nodes, size=p.size)] = 0
        # Grow some jobs where GPUs are free, as the artifact's mutation does (never onto a full
        # node, so no GPUs are taken from a job by growth alone): on one of their own nodes with
        # free GPUs, and on any node with free GPUs, each picked uniformly.
        p, _, n, v = nonzero_entries(states)
        used = np.bincount(p * num_nodes + n, weights=v, minlength=size * num_nodes)
        free = self.capacity - used.reshape(size, num_nodes).astype(np.int32)    # (P, N)
        for own in (True, False):
            p, j = np.nonzero(rng.random((size, num_jobs)) < ga.grow_prob)
            if not p.size:
                continue
            allowed = free[p] > 0                                                # (rows, N)
            if own:
                allowed &= states[p, j] > 0
            keys = rng.random(allowed.shape) * allowed
            node = np.argmax(keys, axis=1)
            hit = keys[np.arange(p.size), node] > 0
            p, j, node = p[hit], j[hit], node[hit]
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
        size, num_jobs, num_nodes = states.shape
        # Entries come in (state, job, node) order, so a stable sort by (state, node) orders
        # each node's entries by job (as np.lexsort((j, node_key)) would, at less cost).
        p, j, n, v = nonzero_entries(states)
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
        job_key = p * num_jobs + j
        order = np.lexsort((self.rng.random(p.size), job_key))
        values, cap = v[order], self.max_replicas[j[order]]
        total = _group_cumsum(values, job_key[order])
        kept = np.minimum(total, cap) - np.minimum(total - values, cap)
        nodes_used = _group_cumsum((kept > 0).astype(np.int64), job_key[order])
        kept[nodes_used > self.max_nodes] = 0
        v[order] = kept
        # Node capacity, higher-priority jobs (lower index) first.
        order = np.argsort(node_key, kind="stable")
        values = v[order]
        total = _group_cumsum(values, node_key[order])
        v[order] = (np.minimum(total, self.capacity)
                    - np.minimum(total - values, self.capacity))
        # Only nonzero entries change, so writing them back repairs the states.
        repaired = states if in_place else states.copy()
        repaired[p, j, n] = v
        keep = v > 0
        return repaired, (p[keep], j[keep], n[keep], v[keep].astype(states.dtype))


def _unique_rows(states: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of each distinct state, in order."""
    return _first_occurrences(_row_keys(states))


def _row_keys(states: np.ndarray, entries: Entries | None = None) -> list[bytes]:
    """One key per state of a ``(P, J, N)`` array, equal exactly where the states are equal: the
    positions and values of its nonzero entries (a few hundred bytes, where the state's own bytes
    are ``J x N`` elements: comparing those, or ``np.unique`` over them, costs far more).
    ``entries``: ``nonzero_entries(states)`` where the caller has them."""
    size, num_jobs, num_nodes = states.shape
    p, j, n, v = nonzero_entries(states) if entries is None else entries
    position = (j * num_nodes + n).astype(np.int64)
    values = v.astype(np.int64)
    bounds = np.searchsorted(p, np.arange(size + 1)).tolist()
    return [position[a:b].tobytes() + values[a:b].tobytes()
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def _entries_of_rows(entries: Entries, rows: np.ndarray, count: int) -> Entries:
    """``nonzero_entries(states[rows])`` from ``entries = nonzero_entries(states)`` of ``count``
    states, for increasing ``rows`` (the entries keep their order)."""
    p, j, n, v = entries
    position = np.full(count, -1, dtype=p.dtype)
    position[rows] = np.arange(len(rows), dtype=p.dtype)
    new_p = position[p]
    keep = new_p >= 0
    return new_p[keep], j[keep], n[keep], v[keep]


def _first_occurrences(keys: Sequence[bytes], seen: Sequence[bytes] = ()) -> np.ndarray:
    """Indices of the first occurrence of each distinct key that is not in ``seen``, in order."""
    known = set(seen)
    first = []
    for i, key in enumerate(keys):
        if key not in known:
            known.add(key)
            first.append(i)
    return np.array(first, dtype=np.int64)


def _take_merged(population: np.ndarray, children: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``np.concatenate([population, children])[keep]`` without building the concatenation."""
    out = np.empty((len(keep), *population.shape[1:]), dtype=population.dtype)
    old = keep < len(population)
    out[old] = population[keep[old]]
    out[~old] = children[keep[~old] - len(population)]
    return out


def nonzero_entries(states: np.ndarray) -> Entries:
    """``np.nonzero(states)`` of a ``(P, J, N)`` integer array and the values there: ``(p, j, n,
    values)``, each ``(K,)``, in the same (C) order.

    A cluster state is mostly zeros (a job holds few of many nodes); scanning it eight bytes at a
    time and looking inside the nonzero words only is an order of magnitude faster than
    ``np.nonzero`` on a 3-D array.
    """
    flat = np.ascontiguousarray(states).reshape(-1)
    per_word = 8 // flat.dtype.itemsize if 8 % flat.dtype.itemsize == 0 else 0
    if per_word == 0 or flat.size < per_word:
        p, j, n = np.nonzero(states)
        return p, j, n, states[p, j, n]
    whole = flat.size - flat.size % per_word
    words = np.flatnonzero(flat[:whole].view(np.uint64) != 0)
    index = (words[:, None] * per_word + np.arange(per_word)).reshape(-1)
    index = np.concatenate([index, np.arange(whole, flat.size)])
    values = flat[index]
    keep = values != 0
    index = index[keep]
    p, j, n = np.unravel_index(index, states.shape)
    return p, j, n, values[keep]


def _crossover(population: np.ndarray, first: np.ndarray, second: np.ndarray,
               point: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """One-point crossover over jobs: child ``c`` takes jobs ``< point[c]`` from
    ``population[first[c]]`` and the rest from ``population[second[c]]``, shape
    ``(len(first), J, N)`` (row copies, not a dense ``np.where`` over every child), written into
    ``out`` where given."""
    children = (np.empty((len(first), *population.shape[1:]), dtype=population.dtype)
                if out is None else out)
    for c, (a, b, cut) in enumerate(zip(first.tolist(), second.tolist(), point.tolist(),
                                        strict=True)):
        cut = min(max(cut, 0), population.shape[1])
        children[c, :cut] = population[a, :cut]
        children[c, cut:] = population[b, cut:]
    return children


def _reset_rows(states: np.ndarray, reset: np.ndarray, base: np.ndarray) -> None:
    """Set the rows ``reset`` (``(P, J)`` booleans) of ``states`` to ``base``'s, in place."""
    p, j = np.nonzero(reset)
    states[p, j] = base[j]


def _distinct_draws(groups: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """A uniform draw from ``range(count)`` per element, distinct within each run of equal,
    sorted ``groups`` (no run may be longer than ``count``): repeats are redrawn until none is
    left, which takes few rounds when runs are short against ``count``."""
    draws = rng.integers(count, size=groups.size)
    while True:
        key = groups.astype(np.int64) * count + draws
        order = np.argsort(key, kind="stable")
        repeat = order[1:][key[order[1:]] == key[order[:-1]]]
        if repeat.size == 0:
            return draws
        draws[repeat] = rng.integers(count, size=repeat.size)


def power_mean(values: np.ndarray, p: float) -> np.ndarray:
    """Power mean with exponent ``p`` over the last axis (``p = 0``: the geometric mean)."""
    if p == 0:
        return np.exp(np.mean(np.log(values), axis=-1))
    return np.mean(values**p, axis=-1) ** (1.0 / p)


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` of a 1-D array, by a sort (cheaper on the small arrays here)."""
    values = np.sort(values)
    if values.size == 0:  # nothing drawn (e.g. no job may grow): the mask below needs one entry
        return values
    return values[np.concatenate([[True], values[1:] != values[:-1]])]


def _group_cumsum(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Inclusive cumulative sum of ``values`` within runs of equal ``groups`` (sorted), shape kept."""
    if values.size == 0:
        return values.copy()
    total = np.cumsum(values)
    # np.concatenate, not np.r_: this runs thousands of times a round on small arrays.
    start = np.flatnonzero(np.concatenate([[True], groups[1:] != groups[:-1]]))
    lengths = np.diff(np.concatenate([start, [values.size]]))
    return total - np.repeat(total[start] - values[start], lengths)

"""Pollux (Qiao et al., OSDI 2021): goodput-driven, fair, co-adaptive allocation by genetic search.

Each job's *speedup* for ``n`` nodes and ``r`` GPUs is its fitted goodput there (its job model,
batch re-tuned for that allocation) over its goodput on a fair share of ``ceil(total GPUs / J)``
GPUs on one node; a job with no fitted model yet is assumed to scale linearly. With ``risk = q``
the goodputs are the ``q``-quantile of goodput under the throughput posterior's draws (the job
models then carry them), so allocations whose gain rests on unmeasured scaling count for less. A candidate
allocation's fitness is the power mean (``p = -1`` by default: a harmonic mean, which favours
fairness) of the speedups scaled by ``num_nodes / total GPUs``, each multiplied by the re-allocation
penalty ``(T_j - R_j * delta) / (T_j + delta)`` when the job's allocation changes (``T_j`` its age,
``R_j`` its restarts, ``delta`` the cluster's restart delay for its application). A population-based
genetic search maximises it,
compiled (numba) and warm-started from the previous round's population.

The search (:mod:`bayes_sched.mechanisms.genetic_allocation.search`, shared with ``bo``) is by
default the artifact's NSGA-II: two objectives, the fitness and the *cluster utility* (the jobs'
summed speedups over the GPUs of the nodes in use), and the artifact's mutation, which is sparing (a
node with free GPUs gains about one job per child). With interference avoidance off these are what
keep distributed jobs from sharing nodes as often as a search for fitness alone lets them (under
interference the elitist search, ``"elitist"``: the fittest of parents and children survive, runs
more distributed jobs a round and more of them slowed; measured: docs/results/fidelity.md).

Repair enforces, in job priority order (least attained service first): node capacity; each job's
replica cap (twice the most GPUs it has been measured on, at least 1, and what its batch limits
allow); at most ``max_nodes_per_job`` nodes per job; and, with interference avoidance, at most one
distributed job per node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated

import numpy as np

from bayes_sched.cluster import Allocations, ClusterState
from bayes_sched.estimates import Estimates
from bayes_sched.jobs import JobSettings, JobSpec, JobView
from bayes_sched.mechanisms.genetic_allocation.search import (
    SEARCHES,
    AllocationProblem,
    GAConfig,
    GeneticSearch,
    SpeedupTables,
    replica_cap,
    replica_caps,
    restart_delays,
    restart_penalty,
    status_quo,
)
from bayes_sched.registry import GPU_COUNT, Range

#: The artifact ran NCF with a fixed batch of 32768 on one GPU under Pollux.
ARTIFACT_JOB_SETTINGS: Mapping[str, JobSettings] = {"ncf": JobSettings(32768, 1)}

_DEFAULT_GA = GAConfig()


class PolluxPolicy:
    """Pollux's scheduling policy.

    Args:
        p: power-mean exponent of the fitness (more negative is fairer; 1 is the plain mean).
        avoid_interference: allow at most one distributed job per node.
        max_nodes_per_job: most nodes one job may span.
        max_replicas_cap: most GPUs one job may get.
        ga: genetic-search settings.
        job_overrides: per-application fixed settings (default: the artifact's NCF setting).
        speedup_tolerance: relative change of a job's gradient noise-to-signal ratio below which its
            cached speedup table is reused (a table per job is costly to build).
        risk: ``None`` or 0 allocates by the point fit's goodput; ``q`` in (0, 1) by the
            ``q``-quantile of goodput under the throughput posterior (e.g. 0.1: the 10 % quantile).
            The job models come from the ``job_goodput`` estimator: by default ``job_models``
            (point fits), with ``risk`` ``job_posterior`` (posterior draws; its options say how
            many and how).
    """

    name = "pollux"
    needs: tuple[str, ...] = ("job_goodput",)

    def __init__(self, p: float = -1.0, avoid_interference: bool = True,
                 max_nodes_per_job: Annotated[int, GPU_COUNT] = 16,
                 max_replicas_cap: Annotated[int, GPU_COUNT] = 64, ga: GAConfig = _DEFAULT_GA,
                 job_overrides: Mapping[str, JobSettings] = ARTIFACT_JOB_SETTINGS,
                 speedup_tolerance: Annotated[float, Range(0.0)] = 0.02,
                 risk: float | None = None) -> None:
        if p == 0:
            raise ValueError("p is 0: expected a nonzero power-mean exponent")
        if risk is not None and not 0 <= risk < 1:
            raise ValueError(f"risk is {risk}: expected None or a quantile in [0, 1)")
        self.risk = risk or None
        #: Estimators serving the needs when the user names none (plain data).
        self.default_estimators: dict[str, str] = {
            "job_goodput": "job_models" if self.risk is None else "job_posterior"}
        self.p = p
        self.avoid_interference = avoid_interference
        self.max_nodes_per_job = max_nodes_per_job
        self.max_replicas_cap = max_replicas_cap
        self.ga = ga
        self.job_overrides = dict(job_overrides)
        self.search = GeneticSearch(ga)
        self.tables = SpeedupTables(max_nodes_per_job, speedup_tolerance, self.risk)

    @property
    def rng(self) -> np.random.Generator:
        """The search's generator (problems built for this policy share it)."""
        return self.search.rng

    def stats(self) -> Mapping[str, float]:
        return {}

    def job_settings(self, spec: JobSpec) -> JobSettings:
        return self.job_overrides.get(spec.application, JobSettings())

    def max_replicas(self, job: JobView) -> int:
        """The most GPUs the search gives ``job`` (:func:`replica_cap`)."""
        return replica_cap(job, self.max_replicas_cap)

    def speedup_tables(self, jobs: Sequence[JobView], cluster: ClusterState,
                       max_replicas: np.ndarray) -> np.ndarray:
        """Speedup over a fair share for every job, node count and GPU count, shape
        ``(J, Nmax + 1, Rmax + 1)``."""
        return self.tables.build(jobs, cluster, max_replicas)

    def problem(self, cluster: ClusterState, jobs: Sequence[JobView]
                ) -> tuple[AllocationProblem, list[str]]:
        """This round's search problem over ``jobs`` (sorted into priority order: least attained
        service first) and their names in that order."""
        problem, ordered = self.ordered_problem(cluster, jobs)
        return problem, [job.name for job in ordered]

    def ordered_problem(self, cluster: ClusterState, jobs: Sequence[JobView]
                        ) -> tuple[AllocationProblem, list[JobView]]:
        """:meth:`problem` with the jobs themselves in priority order (``bo`` reads them in
        that order; finding them again by name costs a dictionary of every job)."""
        jobs = sorted(jobs, key=lambda j: (j.attained_service, j.submit_time, j.name))
        base, base_entries = status_quo(jobs)
        max_replicas = replica_caps(jobs, self.max_replicas_cap)
        tables = self.speedup_tables(jobs, cluster, max_replicas)
        penalty = restart_penalty(np.array([job.age for job in jobs]),
                                  np.array([job.num_restarts for job in jobs]),
                                  restart_delays(cluster, jobs))
        problem = AllocationProblem(base, tables, max_replicas, penalty, cluster, self.p,
                                    self.avoid_interference,
                                    min(self.max_nodes_per_job, cluster.num_nodes), self.rng,
                                    base_entries=base_entries)
        return problem, jobs

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView],
               estimates: Estimates) -> Allocations:
        if not jobs:
            return {}
        problem, names = self.problem(cluster, jobs)
        population, fitness = self.search.evolve_sparse(problem, names)
        best = population.rows(np.array([np.argmax(fitness)])).dense()[0]
        return {names[j]: best[j].astype(np.int64)
                for j in np.flatnonzero(best.any(axis=1)).tolist()}

    def evolve(self, problem: AllocationProblem, names: list[str]
               ) -> tuple[np.ndarray, np.ndarray]:
        """Run the genetic search on ``problem`` (:meth:`GeneticSearch.evolve`)."""
        return self.search.evolve(problem, names)


__all__ = ["ARTIFACT_JOB_SETTINGS", "SEARCHES", "GAConfig", "PolluxPolicy"]

"""The environments of each world: its own cluster, truth and jobs (:mod:`bayes_sched.worlds`),
episodes small enough to train on.

* :func:`gavel_env`: Gavel's throughput-table world (:data:`~bayes_sched.worlds.GAVEL`): jobs from
  Gavel's continuous Philly-like arrivals (multi-GPU), each placed on one GPU type
  (:func:`~bayes_sched.mechanisms.placement_steps.type_modes`);
* :func:`pollux_env`: the Pollux world (:data:`~bayes_sched.worlds.POLLUX`): jobs drawn as the
  shipped workloads are, run with their users' batch and GPUs, placed by bin packing or load
  balancing, with the artifact's interference between distributed jobs sharing a node and, where
  named, a hidden law (``"contention"``, ``"gavel"``);
* :func:`contention_env`: the Pollux world under the hidden contention law, whose observation also
  carries, per node, either the contention network's posterior over hidden resource use given
  the counters the law emits (``state="posterior"``,
  :func:`~bayes_sched.contention.state.posterior_features`: Banerjee et al.'s state, which the
  ``contention_network`` estimator publishes to the policy) or those
  counters themselves (``state="counters"``,
  :func:`~bayes_sched.policies.learned.counter_features`: the paper's ablation). Both come from
  the counters window a real scheduler collects, never from the law's hidden demands.

Every factory takes the episode sizes (``num_jobs``, ``arrival_hours``: jobs arrive uniformly
within that span; ``duration_scale``: Gavel jobs' steps are scaled by it, so a tiny world's jobs
last minutes to hours rather than weeks) and a cluster spec string (default: a small cluster of
the world's GPU types).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from bayes_sched.cluster import Cluster
from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.contention.state import POSTERIOR_STEPS, posterior_features, posterior_size
from bayes_sched.errors import InputError
from bayes_sched.gym.env import SchedulingEnv
from bayes_sched.jobs import JobSettings, JobSpec
from bayes_sched.mechanisms.placement_steps import PLACEMENT_MODES, type_modes
from bayes_sched.policies.learned import COUNTER_VARIABLES, STATES, counter_features
from bayes_sched.worlds import GAVEL, POLLUX

if TYPE_CHECKING:
    from bayes_sched.cluster_spec import ClusterSpec
    from bayes_sched.sim.gavel_jobs import TableJobSpec
    from bayes_sched.sim.workload import Workload

_MAX_JOBS_PER_EPISODE = 10_000


def _check_sizes(num_jobs: int, arrival_hours: float) -> None:
    if not (1 <= num_jobs <= _MAX_JOBS_PER_EPISODE and 0 <= arrival_hours <= 24 * 365):
        raise InputError(f"num_jobs {num_jobs}, arrival_hours {arrival_hours}: expected 1 to "
                         f"{_MAX_JOBS_PER_EPISODE} jobs arriving within 0 to 8760 hours")


def gavel_jobs(seed: int, num_jobs: int, arrival_hours: float, duration_scale: float,
               spec: ClusterSpec) -> list[TableJobSpec]:
    """An episode's Gavel jobs: Gavel's generator's job types, GPU counts (those the largest GPU
    type of ``spec`` holds) and durations (steps scaled by ``duration_scale``), arriving
    uniformly within ``arrival_hours`` (the first at 0); named ``job0``, ``job1``..."""
    from bayes_sched.sim.gavel_jobs import generate_continuous_jobs

    rng = np.random.default_rng(seed)
    arrivals = generate_continuous_jobs(1.0, seed=seed, multi_gpu=True, table=GAVEL.truth())
    times = np.sort(rng.uniform(0.0, arrival_hours * 3600.0, num_jobs))
    times[0] = 0.0
    jobs: list[TableJobSpec] = []
    while len(jobs) < num_jobs:
        job = next(arrivals)
        if job.scale_factor > max(spec.gpus_of_type(t) for t in spec.types):
            continue
        jobs.append(replace(job, name=f"job{len(jobs)}", submit_time=float(times[len(jobs)]),
                            total_steps=job.total_steps * duration_scale))
    return jobs


def pollux_jobs(seed: int, num_jobs: int, arrival_hours: float, spec: ClusterSpec) -> Workload:
    """An episode's Pollux jobs: drawn as the shipped workloads are
    (:func:`~bayes_sched.sim.workload.generate_workload`), arriving uniformly within
    ``arrival_hours`` (the first at 0), GPUs capped at the cluster's."""
    from bayes_sched.sim.workload import Workload, generate_workload

    rng = np.random.default_rng(seed)
    drawn = generate_workload(num_jobs, 8, seed=seed).jobs
    times = np.sort(rng.uniform(0.0, arrival_hours * 3600.0, num_jobs))
    times[0] = 0.0
    return Workload(f"episode-{seed}", tuple(
        replace(job, submit_time=float(t), num_replicas=min(job.num_replicas, spec.total_gpus))
        for job, t in zip(drawn, times, strict=True)))


def gavel_env(num_jobs: int = 12, arrival_hours: float = 1.0, duration_scale: float = 0.02,
              cluster: str = "v100:4,p100:4,k80:4", round_seconds: float | None = None,
              **options: Any) -> SchedulingEnv:
    """Gavel's table world (see the module); ``options``: :class:`SchedulingEnv`'s."""
    from bayes_sched.sim.table_cluster import TableCluster

    _check_sizes(num_jobs, arrival_hours)
    spec = GAVEL.cluster(load_cluster_spec(cluster), round_seconds)
    table = GAVEL.truth()

    def make(rng: np.random.Generator) -> Cluster:
        seed = int(rng.integers(2**31))
        jobs = gavel_jobs(seed, num_jobs, arrival_hours, duration_scale, spec)
        return TableCluster(jobs, spec, table, measurement_noise=0.0, noise_seed=seed)

    return SchedulingEnv(make, type_modes(spec.types), spec.round_interval,
                         **options)


def _pollux_cluster(num_jobs: int, arrival_hours: float, cluster: str,
                    round_seconds: float | None, interference: float,
                    hidden: str) -> tuple[Any, Any]:
    """The Pollux world's spec and a factory of its episodes' clusters."""
    from bayes_sched.sim.laws import HIDDEN_LAWS, make_hidden
    from bayes_sched.sim.seeds import with_seed
    from bayes_sched.sim.simulator import SimConfig, SimulatedCluster

    _check_sizes(num_jobs, arrival_hours)
    spec = POLLUX.cluster(load_cluster_spec(cluster), round_seconds)

    def fixed(job: JobSpec) -> JobSettings:
        return JobSettings(batch_size=job.batch_size, max_replicas=job.num_replicas)

    def make(rng: np.random.Generator) -> Cluster:
        seed = int(rng.integers(2**31))
        options = with_seed(HIDDEN_LAWS.options(hidden), {}, seed)  # a law without one: none
        law = None if hidden == "none" else make_hidden(hidden, cluster=spec, where="hidden",
                                                        **options)
        config = SimConfig(cluster=spec, interference=interference, hidden=law, seed=seed)
        return SimulatedCluster(pollux_jobs(seed, num_jobs, arrival_hours, spec), config, fixed)

    return spec, make


def pollux_env(num_jobs: int = 8, arrival_hours: float = 1.0, cluster: str = "4x4:t4",
               round_seconds: float | None = 300.0, interference: float = 0.25,
               hidden: str = "none", **options: Any) -> SchedulingEnv:
    """The Pollux world (see the module); ``interference``: the slowdown of distributed jobs
    sharing a node (the artifact's 0.25 by default); ``hidden``: a hidden law's name."""
    spec, make = _pollux_cluster(num_jobs, arrival_hours, cluster, round_seconds, interference,
                                 hidden)
    return SchedulingEnv(make, PLACEMENT_MODES, spec.round_interval, **options)


def contention_env(num_jobs: int = 8, arrival_hours: float = 1.0, cluster: str = "4x4:t4",
                   round_seconds: float | None = 300.0, state: str = "counters",
                   posterior_steps: int = POSTERIOR_STEPS, **options: Any) -> SchedulingEnv:
    """The Pollux world under the hidden contention law, its counters (``state="counters"``) or
    their posterior (``state="posterior"``, an SVI fit of ``posterior_steps`` steps per decision
    round) in the observation (see the module); no artifact interference rule besides the law.

    Raises:
        InputError: another state, or ``posterior_steps`` outside 1-10000 (one line).
    """
    if state not in STATES[1:]:
        raise InputError(f"contention state {state!r}: expected one of {', '.join(STATES[1:])}")
    if not 1 <= posterior_steps <= 10_000:
        raise InputError(f"posterior_steps {posterior_steps}: expected 1 to 10000")
    spec, make = _pollux_cluster(num_jobs, arrival_hours, cluster, round_seconds, 0.0,
                                 "contention")
    nodes, topology = spec.num_nodes, spec.nodes[0].topology

    def features(c: Cluster) -> np.ndarray:
        if state == "posterior":
            return posterior_features(c.state.counters, nodes, topology, posterior_steps)
        return counter_features(c.state.counters, nodes)

    size = nodes * (posterior_size(topology) if state == "posterior"
                    else len(COUNTER_VARIABLES))
    return SchedulingEnv(make, PLACEMENT_MODES, spec.round_interval, extra=(features, size),
                         **options)


#: Environment factories by world name.
ENVIRONMENTS: dict[str, Callable[..., SchedulingEnv]] = {
    "gavel": gavel_env, "pollux": pollux_env, "contention": contention_env}


def make_env(world: str, **options: Any) -> SchedulingEnv:
    """The environment of ``world`` (a name in :data:`ENVIRONMENTS`).

    Raises:
        InputError: an unknown world, one line naming the known ones.
    """
    factory = ENVIRONMENTS.get(world)
    if factory is None:
        raise InputError(f"world {world!r}: no environment; expected one of "
                         f"{', '.join(ENVIRONMENTS)}")
    return factory(**options)


__all__ = ["ENVIRONMENTS", "contention_env", "gavel_env", "gavel_jobs", "make_env", "pollux_env",
           "pollux_jobs"]

"""The scheduling loop: observe -> estimate -> decide -> apply, once per round.

::

    observe   cluster.advance(interval); cluster.state, cluster.job_views()    (job reports)
    estimate  the estimators chosen outside the policy -> an Estimates bundle
              (job models, throughput beliefs, co-location posteriors; timed apart)
    decide    policy.decide(state, read-only job views, estimates)  -> {job: GPUs per node}
    apply     cluster.apply(decision)   (a rejected decision keeps the allocation in force)

The loop knows the cluster only through :class:`~bayes_sched.cluster.Cluster`, so the same loop that
drives the simulator can drive a real cluster.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bayes_sched.cluster import Cluster, PackedAllocations, shared_pairs
from bayes_sched.errors import AllocationError
from bayes_sched.estimation import (
    Estimator,
    RefitRule,
    estimate_round,
    estimator_stats,
    set_refit_rule,
)
from bayes_sched.policies.base import Policy

LOG = logging.getLogger(__name__)


@dataclass
class LoopStats:
    """What happened in the loop: decision wall times (seconds, one per round with active jobs),
    estimation wall times (seconds, one per such round: model fits and posteriors, outside the
    decision), number of active jobs at each decision, and rejected decisions with their reasons;
    at the end of the run, what each need's estimates came from (``{need: estimator}``, the last
    round's) and the estimators' figures (:meth:`~bayes_sched.estimation.Estimator.stats`)."""

    decision_seconds: list[float] = field(default_factory=list)
    estimate_seconds: list[float] = field(default_factory=list)
    decision_jobs: list[int] = field(default_factory=list)
    rejected: list[tuple[float, str]] = field(default_factory=list)
    rounds: int = 0
    estimates_from: dict[str, str] = field(default_factory=dict)
    estimator_stats: dict[str, float] = field(default_factory=dict)


def run_loop(cluster: Cluster, policy: Policy, interval: float,
             on_round: Callable[[Cluster], None] | None = None,
             max_rounds: int | None = None, refit: RefitRule | None = None,
             stats: LoopStats | None = None,
             clock: Callable[[], float] = time.perf_counter,
             estimators: Sequence[Estimator] | None = None) -> LoopStats:
    """Run rounds of ``interval`` seconds until the cluster is done (or ``max_rounds``).

    Each round lets ``interval`` seconds pass, runs ``estimators`` (chosen outside the policy:
    :func:`bayes_sched.estimation.choose.policy_estimators`; ``None``: none, the policy
    decides on the job views alone) on the active jobs' reports, then
    gives the policy the jobs and the round's estimates and applies its decision. A
    decision the cluster rejects (e.g. one oversubscribing a node) is logged and the previous
    allocation stays in force.
    ``refit``: the rule by which the estimation stage refits the throughput models of jobs that
    report no fit of their own (``None``: each job-model estimator keeps its own). ``stats``:
    record into this (e.g. one ``on_round`` reads as the loop runs) rather than a new one.
    ``clock``: what the estimation and decision times are read from, in seconds (default wall
    time; ``time.process_time`` counts only this process's CPU, not other processes' work on a
    shared machine).
    """
    stats = LoopStats() if stats is None else stats
    estimators = () if estimators is None else estimators
    if refit is not None:
        set_refit_rule(estimators, refit)
    while not cluster.done() and (max_rounds is None or stats.rounds < max_rounds):
        cluster.advance(interval)
        stats.rounds += 1
        state = cluster.state
        jobs = cluster.job_views()
        if jobs:
            start = clock()
            jobs, estimates = estimate_round(estimators, state, jobs)
            stats.estimate_seconds.append(clock() - start)
            stats.estimates_from.update(estimates.sources())
            start = clock()
            decision = policy.decide(state, jobs, estimates)
            stats.decision_seconds.append(clock() - start)
            stats.decision_jobs.append(len(jobs))
            try:
                cluster.apply(decision)
            except AllocationError as error:
                now = state.now
                LOG.warning("t=%gs: rejected decision of policy %s: %s; previous allocation kept",
                            now, policy.name, error)
                stats.rejected.append((now, str(error)))
                names = {job.name for job in jobs}
                held = cluster.allocations()
                cluster.apply(PackedAllocations(
                    {k: v for k, v in held.items() if k in names},
                    [p for p in shared_pairs(held) if p[0] in names and p[1] in names]))
        if on_round is not None:
            on_round(cluster)
    stats.estimator_stats.update(estimator_stats(estimators))
    return stats

"""The scheduling loop: observe the cluster, ask the policy, apply its decision, repeat.

The loop knows the cluster only through :class:`~bayes_sched.cluster.Cluster`, so the same loop that
drives the simulator can drive a real cluster.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bayes_sched.cluster import Cluster
from bayes_sched.errors import AllocationError
from bayes_sched.policies.base import Policy

LOG = logging.getLogger(__name__)


@dataclass
class LoopStats:
    """What happened in the loop: decision wall times (seconds, one per round with active jobs),
    job agents' refit time (seconds, all rounds), number of active jobs at each decision, and
    rejected decisions with their reasons."""

    decision_seconds: list[float] = field(default_factory=list)
    agent_seconds: float = 0.0
    decision_jobs: list[int] = field(default_factory=list)
    rejected: list[tuple[float, str]] = field(default_factory=list)
    rounds: int = 0


def run_loop(cluster: Cluster, policy: Policy, interval: float,
             on_round: Callable[[Cluster], None] | None = None,
             max_rounds: int | None = None) -> LoopStats:
    """Run rounds of ``interval`` seconds until the cluster is done (or ``max_rounds``).

    Each round lets ``interval`` seconds pass, then gives the policy the active jobs and applies
    its decision. A decision the cluster rejects (e.g. one oversubscribing a node) is logged and
    the previous allocation stays in force.
    """
    stats = LoopStats()
    while not cluster.done() and (max_rounds is None or stats.rounds < max_rounds):
        cluster.advance(interval)
        stats.rounds += 1
        jobs = cluster.job_views()
        if jobs:
            start = time.perf_counter()
            if getattr(policy, "uses_models", False):
                # Job agents refit their models (inside the jobs, outside the decision).
                for job in jobs:
                    job.agent.refresh(cluster.state.now)
                stats.agent_seconds += time.perf_counter() - start
                start = time.perf_counter()
            decision = policy.decide(cluster.state, jobs)
            stats.decision_seconds.append(time.perf_counter() - start)
            stats.decision_jobs.append(len(jobs))
            try:
                cluster.apply(decision)
            except AllocationError as error:
                now = cluster.state.now
                LOG.warning("t=%gs: rejected decision of policy %s: %s; previous allocation kept",
                            now, policy.name, error)
                stats.rejected.append((now, str(error)))
                names = {job.name for job in jobs}
                cluster.apply({k: v for k, v in cluster.allocations().items() if k in names})
        if on_round is not None:
            on_round(cluster)
    return stats

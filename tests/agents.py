"""Job agents with measurements already taken, and job views built from their reports, for
policy tests."""

from __future__ import annotations

from collections.abc import Sequence
from weakref import WeakKeyDictionary

import numpy as np

from bayes_sched.agent import JobAgent
from bayes_sched.cluster import Allocations, ClusterState
from bayes_sched.estimation import Estimator, estimate_round
from bayes_sched.estimation.choose import policy_estimators
from bayes_sched.jobs import JobSettings, JobView
from bayes_sched.policies.base import Policy
from bayes_sched.sim.oracles import world_oracles
from bayes_sched.sim.physics import get_application
from bayes_sched.throughputs import load_gavel_throughputs


def measured_agent(name: str, app: str = "cifar10") -> JobAgent:
    """An agent that measured the job on 1, 2 and 4 GPUs of one node and on 2 nodes (true step
    times of the shipped profile, micro-batches 32 and 128)."""
    application = get_application(app)
    agent = JobAgent(name, application.limits, JobSettings())
    for placement in ((1,), (2,), (4,), (2, 2)):
        for m in (32, 128):
            step, sync = application.step_time(placement, m)
            agent.record(len(placement), sum(placement), m, step, sync,
                         *application.grad_stats(256, 10))
    return agent


def job_view(agent: JobAgent, app: str, now: float, allocation: Sequence[int], *,
             submit: float = 0.0, attained: float = 0.0, replicas: int = 1, batch: int = 256,
             progress: float = 0.0, num_restarts: int = 0,
             settings: JobSettings | None = None) -> JobView:
    """What the job ``agent`` runs in reports at time ``now`` (its epochs from ``progress``)."""
    application = get_application(app)
    epochs = progress / application.target_progress * application.max_epochs
    return JobView(
        name=agent.name, application=app, submit_time=submit, age=now - submit,
        attained_service=attained, allocation=np.array(allocation, dtype=np.int64),
        num_restarts=num_restarts, requested_replicas=replicas, requested_batch_size=batch,
        settings=settings or agent.settings, limits=application.limits, progress=progress, epochs=epochs,
        target_epochs=application.max_epochs,
        examples_per_epoch=application.examples_per_epoch, **agent.report_fields())


#: The estimators each policy's rounds run (made at its first round, kept as a run keeps them).
_ESTIMATORS: WeakKeyDictionary[Policy, list[Estimator]] = WeakKeyDictionary()


def estimators_of(policy: Policy) -> list[Estimator]:
    """The estimators ``policy``'s rounds run: its defaults, chosen as a run chooses them (the
    world's oracles know Gavel's measured table), made once per policy."""
    if policy not in _ESTIMATORS:
        _ESTIMATORS[policy] = policy_estimators(policy, None,
                                                world_oracles(load_gavel_throughputs()))
    return _ESTIMATORS[policy]


def decide(policy: Policy, cluster: ClusterState, jobs: Sequence[JobView]) -> Allocations:
    """One round as the loop runs it: the policy's estimators, then its decision."""
    return policy.decide(cluster, *estimate_round(estimators_of(policy), cluster, jobs))

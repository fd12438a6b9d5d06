"""Job agents with measurements already taken, for policy tests."""

from __future__ import annotations

from bayes_sched.jobs import JobAgent, JobSettings
from bayes_sched.sim.physics import get_application


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

"""The agents' batch choices made together (one vectorised optimisation per round) are each agent's
own choice."""

from __future__ import annotations

from bayes_sched.agent import JobAgent, choose_batches
from bayes_sched.jobs import JobSettings
from bayes_sched.sim.physics import get_application

APP = get_application("cifar10")


def _measure(agent: JobAgent, placement: tuple[int, ...], m: int, epoch: int) -> None:
    step, sync = APP.step_time(placement, m)
    agent.record(len(placement), sum(placement), m, step, sync, *APP.grad_stats(256, epoch))


def test_batch_choices_across_agents_are_each_agents_own() -> None:
    fitted = []
    for i, epoch in enumerate((1, 5, 20, 60)):
        agent = JobAgent(f"t{i}", APP.limits)
        for placement in ((1,), (2,), (4,))[: 2 + i % 2]:
            _measure(agent, placement, 64 + 32 * i, epoch)
        fitted.append(agent)
    fixed = JobAgent("fixed", APP.limits, JobSettings(batch_size=512))
    new = JobAgent("new", APP.limits)   # no measurement yet: the initial batch, split
    agents = [*fitted, fixed, new, fitted[0]]
    shapes = [(1,), (4,), (2, 2), (4, 4, 4, 4), (4, 4), (2,), (4, 4)]
    together = choose_batches(agents, shapes)
    for agent, shape, chosen in zip(agents, shapes, together, strict=True):
        model = agent.goodput_model() if agent.settings.batch_size is None else None
        if model is None:
            assert chosen == JobAgent(agent.name, APP.limits, agent.settings).choose_batch(shape)
        else:
            assert chosen == agent._tuned_batch(model, sum(1 for c in shape if c), sum(shape))
    assert choose_batches(agents, shapes) == together   # remembered, the same
    assert len({chosen for chosen in together}) > 3      # the agents differ: a real comparison

"""Gymnasium environments over the worlds (the ``[rl]`` extra): round-by-round placement on a
world's own simulated cluster, for training learned schedulers; nothing else in bayes_sched imports
this package.

:func:`~bayes_sched.gym.worlds.make_env` makes one by world name (``gavel``, ``pollux``,
``contention``); :class:`~bayes_sched.gym.env.SchedulingEnv` documents observation, action mask
and rewards. The environments are also registered with Gymnasium as ``bayes_sched/Gavel-v0``,
``bayes_sched/Pollux-v0`` and ``bayes_sched/Contention-v0`` (``gymnasium.make``).
"""

from __future__ import annotations

import gymnasium

from bayes_sched.gym.env import OBJECTIVES, SchedulingEnv, jain_unfairness
from bayes_sched.gym.worlds import ENVIRONMENTS, make_env

for _world, _id in (("gavel", "Gavel"), ("pollux", "Pollux"), ("contention", "Contention")):
    if f"bayes_sched/{_id}-v0" not in gymnasium.registry:
        gymnasium.register(f"bayes_sched/{_id}-v0",
                           entry_point=f"bayes_sched.gym.worlds:{_world}_env")

__all__ = ["ENVIRONMENTS", "OBJECTIVES", "SchedulingEnv", "jain_unfairness", "make_env"]

"""A Gymnasium environment over a world's cluster, driven round by round as the loop drives it.

Each episode builds a fresh :class:`~bayes_sched.cluster.Cluster` of a world (the simulator's own,
:mod:`bayes_sched.gym.worlds`), with jobs drawn from the episode's seed, and lets an agent make each
round's decision one placement at a time (:class:`~bayes_sched.mechanisms.placement_steps.
RoundBuilder`): the observation is what a real scheduler sees (the job views, the cluster's free
GPUs, and a world's extra features), padded to a fixed size; :meth:`SchedulingEnv.action_masks`
(sb3-contrib's masked PPO reads it) and ``info["action_mask"]`` say which actions are possible.
A stop ends the round: the cluster applies the allocation and advances one round (as
:func:`~bayes_sched.loop.run_loop` does: observe, decide, apply, advance); rounds in which no
placement is possible pass without asking the agent.

Reward, per round, in hours (so an episode's return sums over its rounds):

* ``"jct"``: minus the active jobs at the round's start times the round's length: the episode's
  return is minus the job-hours spent in the system, so maximising it minimises the average JCT
  of the episode's jobs (Little's law; DeepRM's and Harmony's objective);
* ``"fairness"``: minus the round's length times ``1 - J``, ``J`` Jain's index of the active jobs'
  attained service per GPU asked and hour of age (1: every job got service in proportion to its
  ask and time in the system).

An episode ends when every job has finished (terminated) or after ``max_rounds`` rounds
(truncated). An action outside the mask ends the round like a stop and sets
``info["invalid_action"]`` (``strict=True``: :class:`ValueError`, one line).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from bayes_sched.cluster import Cluster
from bayes_sched.jobs import JobView
from bayes_sched.mechanisms.placement_steps import Mode, RoundBuilder, observation_size

OBJECTIVES = ("jct", "fairness")
#: Observations are clipped to ``[0, OBSERVATION_HIGH]`` (every feature is a fraction, a flag or
#: a log1p of hours, counts or MB/s).
OBSERVATION_HIGH = 100.0

#: Makes an episode's cluster from the episode's random generator.
ClusterFactory = Callable[[np.random.Generator], Cluster]
#: Extra observation features from the cluster's state (fixed length).
ExtraFeatures = Callable[[Cluster], np.ndarray]


def jain_unfairness(jobs: list[JobView]) -> float:
    """``1 - J``: Jain's index of the jobs' attained service per GPU asked and hour of age."""
    shares = np.array([j.attained_service / (max(j.requested_replicas, 1)
                                             * max(j.age, 1.0)) for j in jobs])
    if shares.size == 0 or not np.any(shares > 0):
        return 0.0 if shares.size <= 1 else 1.0
    return float(1.0 - shares.sum() ** 2 / (shares.size * np.square(shares).sum()))


class SchedulingEnv(gym.Env[np.ndarray, np.int64]):
    """Round-by-round placement in a world (see the module).

    Args:
        make_cluster: the episode's cluster from the episode's generator.
        modes: placement modes (:mod:`~bayes_sched.mechanisms.placement_steps`).
        interval: seconds per round.
        max_jobs: job slots in the observation.
        max_rounds: rounds before an episode is truncated.
        objective: ``"jct"`` or ``"fairness"``.
        extra: extra observation features and their length, or ``None``.
        strict: raise on an action outside the mask instead of stopping the round.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, make_cluster: ClusterFactory, modes: tuple[Mode, ...],
                 interval: float, max_jobs: int = 8, max_rounds: int = 200,
                 objective: str = "jct", extra: tuple[ExtraFeatures, int] | None = None,
                 strict: bool = False) -> None:
        if objective not in OBJECTIVES:
            raise ValueError(f"objective {objective!r}: expected one of {', '.join(OBJECTIVES)}")
        if not (1 <= max_jobs <= 256 and 1 <= max_rounds <= 1_000_000 and interval > 0):
            raise ValueError(f"max_jobs {max_jobs}, max_rounds {max_rounds}, interval "
                             f"{interval}: expected 1-256 slots, 1-1e6 rounds, seconds > 0")
        self._make_cluster = make_cluster
        self.modes = modes
        self.interval = float(interval)
        self.max_jobs = int(max_jobs)
        self.max_rounds = int(max_rounds)
        self.objective = objective
        self.strict = strict
        self._extra = extra
        size = observation_size(max_jobs, modes, 0 if extra is None else extra[1])
        #: Observation length and number of actions (the spaces' sizes).
        self.obs_size = size
        self.num_actions = max_jobs * len(modes) + 1
        self.observation_space = gym.spaces.Box(0.0, OBSERVATION_HIGH, (size,), np.float32)
        self.action_space = gym.spaces.Discrete(self.num_actions)
        self._cluster: Cluster | None = None
        self._builder: RoundBuilder | None = None
        self.rounds = 0

    # --- gymnasium ------------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._cluster = self._make_cluster(self.np_random)
        self.rounds = 0
        reward, done = self._advance_until_choice(first=True)
        return self._observe(done), self._info(done)

    def step(self, action: np.int64 | int) -> tuple[np.ndarray, float, bool, bool,
                                                     dict[str, Any]]:
        if self._builder is None or self._cluster is None:
            raise RuntimeError("step before reset: call reset() first")
        builder = self._builder
        action = int(action)
        invalid = not (0 <= action < builder.num_actions) or not builder.mask()[action]
        if invalid and self.strict:
            raise ValueError(f"action {action} is outside the mask: expected one of "
                             f"{np.flatnonzero(builder.mask()).tolist()}")
        reward = 0.0
        if not invalid and action != builder.stop:
            builder.place(action)
        if invalid or action == builder.stop or not builder.can_place():
            reward, _ = self._advance_until_choice()
        done = self._cluster.done()
        truncated = not done and self.rounds >= self.max_rounds
        info = self._info(done or truncated)
        info["invalid_action"] = invalid
        return self._observe(done or truncated), reward, done, truncated, info

    def action_masks(self) -> np.ndarray:
        """Possible actions (bool, ``(action_space.n,)``), as sb3-contrib's masked PPO reads."""
        if self._builder is None:
            mask = np.zeros(self.num_actions, dtype=np.bool_)
            mask[-1] = True
            return mask
        return self._builder.mask()

    # --- rounds ---------------------------------------------------------------------------------

    def _new_builder(self) -> RoundBuilder:
        """The round's builder; its extra features are computed only where the agent is asked
        (a posterior fit per round that nobody reads would dominate an episode's cost)."""
        assert self._cluster is not None
        builder = RoundBuilder(self._cluster.state, self._cluster.job_views(), self.max_jobs,
                               self.modes)
        if self._extra is not None and builder.can_place():
            builder.extra = np.asarray(self._extra[0](self._cluster), np.float32)
        return builder

    def _round_reward(self, jobs: list[JobView]) -> float:
        hours = self.interval / 3600.0
        if self.objective == "jct":
            return -len(jobs) * hours
        return -jain_unfairness(jobs) * hours

    def _advance_until_choice(self, first: bool = False) -> tuple[float, bool]:
        """Apply the round's decision and let the round pass (unless ``first``), then pass rounds
        until a placement is possible or the episode ends; returns the reward gathered and
        whether the episode ended."""
        cluster = self._cluster
        assert cluster is not None
        reward = 0.0
        if not first and self._builder is not None:
            cluster.apply(self._builder.allocations)
            reward += self._pass_round()
        while not (cluster.done() or self.rounds >= self.max_rounds):
            self._builder = self._new_builder()
            if self._builder.can_place():
                return reward, False
            cluster.apply(self._builder.allocations)
            reward += self._pass_round()
        self._builder = None
        return reward, True

    def _pass_round(self) -> float:
        """One round passes; its reward (from the jobs active at its start)."""
        assert self._cluster is not None
        reward = self._round_reward(self._cluster.job_views())
        self._cluster.advance(self.interval)
        self.rounds += 1
        return reward

    def _observe(self, done: bool) -> np.ndarray:
        if done or self._builder is None:
            return np.zeros(self.obs_size, np.float32)
        return np.clip(self._builder.observation(), 0.0, OBSERVATION_HIGH)

    def _info(self, done: bool) -> dict[str, Any]:
        return {"action_mask": self.action_masks() if not done else
                np.arange(self.num_actions) == self.num_actions - 1,
                "rounds": self.rounds,
                "now": 0.0 if self._cluster is None else self._cluster.state.now}


__all__ = ["OBJECTIVES", "SchedulingEnv", "jain_unfairness"]

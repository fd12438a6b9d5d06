"""Training the learned placement policies on an environment: an actor-critic with Harmony's
additions (Bao et al., INFOCOM 2019), or without them (Banerjee et al.'s RL half, on the
contention world's counters).

One episode at a time is collected by a behaviour policy and its steps' discounted returns go
to an experience-replay buffer; each update samples minibatches from the buffer:

* actor: policy gradient with the advantage ``G - V(s)`` (normalised per minibatch), weighted
  by the truncated importance ratio ``min(1, pi(a|s) / mu(a|s))`` (the sample was drawn by an
  older behaviour policy ``mu``), plus an entropy bonus; critic: squared error of ``V(s)`` against ``G``;
* ``harmony=True`` adds (1) job-aware exploration: with probability ``explore`` (decaying
  linearly to ``explore_final``) the action comes from a heuristic instead of the actor: bin
  packing (the oldest job that fits, by the mode leaving the fewest free GPUs on the nodes it
  uses, packed) or load balancing (the oldest job that fits, by the mode with the most free GPUs,
  spread), half and half; (2) an auxiliary reward model ``A(s, a)`` regressed on the replayed
  samples' (normalised) advantages, which scores the possible actions never taken: the actor
  also climbs ``sum_a pi(a|s) A(s, a)`` over the mask. (A model of returns rather than
  advantages, zero where untrained, scored every untried action above the tried ones, whose
  returns are negative, and drove the actor to the rarely taken stop.)

Without ``harmony``, the same learner runs on-policy-ish (no heuristics, no reward model; the
replay buffer holds only recent episodes). Rewards are the environment's (hours; see
:mod:`bayes_sched.gym.env`).
"""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from bayes_sched.gym.env import OBSERVATION_HIGH, SchedulingEnv
from bayes_sched.mechanisms.placement_steps import RoundBuilder
from bayes_sched.policies.learned import actor_critic


@dataclass(frozen=True)
class TrainConfig:
    """Training settings (see the module); ``episodes``: episodes collected; ``eval_every``:
    episodes between learning-curve points (greedy return on ``eval_seeds``; the curve starts
    with the untrained network's, at 0 episodes)."""

    episodes: int = 200
    harmony: bool = True
    hidden: int = 64
    lr: float = 3e-3
    gamma: float = 0.995
    entropy: float = 0.01
    explore: float = 0.5
    explore_final: float = 0.05
    replay: int = 20_000
    batch: int = 256
    updates_per_episode: int = 4
    reward_model_weight: float = 0.5
    eval_every: int = 20
    eval_seeds: tuple[int, ...] = (10_001, 10_002, 10_003)
    seed: int = 0
    #: Episode seeds to cycle over instead of ``seed * 100003 + episode`` (empty: those): a few
    #: fixed episodes, on which a learner must raise its return (a check that it learns).
    train_seeds: tuple[int, ...] = ()


@dataclass
class TrainResult:
    """The trained network (the state of the best point of the learning curve: model selection
    on the evaluation seeds, which no benchmark uses), the learning curve ``(episodes, mean
    greedy return on the eval seeds)``, the training returns per episode, CPU seconds, and the
    episode whose state was kept."""

    net: torch.nn.Module
    curve: list[tuple[int, float]] = field(default_factory=list)
    returns: list[float] = field(default_factory=list)
    cpu_seconds: float = 0.0
    kept_episode: int = 0


def heuristic_action(builder: RoundBuilder, binpack: bool) -> int:
    """Bin packing or load balancing (see the module) as an action; stop when nothing fits."""
    mask = builder.mask()
    modes = builder.modes
    node_types = np.array(builder.state.gpu_types)
    wanted = "pack" if binpack else "spread"
    free_under = [float(builder.free[node_types == t].sum() if t else builder.free.sum())
                  for _, t in modes]
    # Bin packing: the mode leaving the fewest free GPUs; load balancing: the most.
    order = sorted(range(len(modes)), key=lambda m: (modes[m][0] != wanted,
                                                     free_under[m] if binpack else -free_under[m]))
    for slot in range(len(builder.slots)):
        for m in order:
            if mask[slot * len(modes) + m]:
                return slot * len(modes) + m
    return builder.stop


def _masked_logits(out: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
    return out[:, :-1].masked_fill(~masks, -1e9)


def greedy_return(net: torch.nn.Module, env: SchedulingEnv, seeds: tuple[int, ...]) -> float:
    """Mean return of the network's greedy actions over episodes of ``seeds``."""
    total = 0.0
    with torch.no_grad():
        for seed in seeds:
            obs, _ = env.reset(seed=seed)
            done = False
            while not done:
                mask = torch.as_tensor(env.action_masks())[None]
                logits = _masked_logits(net(torch.as_tensor(obs)[None]), mask)
                obs, reward, term, trunc, _ = env.step(int(logits.argmax()))
                total += reward
                done = term or trunc
    return total / len(seeds)


def random_return(env: SchedulingEnv, seeds: tuple[int, ...], seed: int = 0) -> float:
    """Mean return of uniformly random possible actions over episodes of ``seeds``."""
    rng = np.random.default_rng(seed)
    total = 0.0
    for episode_seed in seeds:
        env.reset(seed=episode_seed)
        done = False
        while not done:
            _, reward, term, trunc, _ = env.step(int(rng.choice(np.flatnonzero(
                env.action_masks()))))
            total += reward
            done = term or trunc
    return total / len(seeds)


def train(make_env: Callable[[], SchedulingEnv], config: TrainConfig = TrainConfig(),
          log: Callable[[str], None] | None = None) -> TrainResult:
    """Train a policy on episodes of ``make_env()`` (see the module)."""
    start = time.process_time()
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    env, eval_env = make_env(), make_env()
    size, actions = env.obs_size, env.num_actions
    net = actor_critic(size, actions, config.hidden)
    reward_model = torch.nn.Sequential(torch.nn.Linear(size, config.hidden), torch.nn.Tanh(),
                                       torch.nn.Linear(config.hidden, actions))
    params = list(net.parameters()) + (list(reward_model.parameters()) if config.harmony else [])
    optimiser = torch.optim.Adam(params, lr=config.lr)
    capacity = config.replay if config.harmony else max(config.batch * 4, 1)
    buffer: list[tuple[np.ndarray, np.ndarray, int, float, float]] = []
    oldest = 0  # the ring buffer's next slot to overwrite once full
    result = TrainResult(net)
    result.curve.append((0, greedy_return(net, eval_env, config.eval_seeds)))
    best: tuple[float, int, dict[str, torch.Tensor]] | None = None
    for episode in range(config.episodes):
        frac = episode / max(config.episodes - 1, 1)
        explore = (config.explore + (config.explore_final - config.explore) * frac
                   if config.harmony else 0.0)
        episode_seed = (config.train_seeds[episode % len(config.train_seeds)]
                        if config.train_seeds else config.seed * 100_003 + episode)
        steps, episode_return = _collect(env, net, explore, rng, episode_seed)
        result.returns.append(episode_return)
        rewards = [s[4] for s in steps]
        future = 0.0
        for i in range(len(steps) - 1, -1, -1):
            future = rewards[i] + config.gamma * future
            obs, mask, action, behaviour, _ = steps[i]
            if len(buffer) < capacity:
                buffer.append((obs, mask, action, behaviour, future))
            else:
                buffer[oldest] = (obs, mask, action, behaviour, future)
                oldest = (oldest + 1) % capacity
        for _ in range(config.updates_per_episode):
            picks = rng.sample(range(len(buffer)), min(config.batch, len(buffer)))
            _update(net, reward_model, optimiser, [buffer[i] for i in picks], config)
        if (episode + 1) % config.eval_every == 0 or episode + 1 == config.episodes:
            point = greedy_return(net, eval_env, config.eval_seeds)
            result.curve.append((episode + 1, point))
            if best is None or point > best[0]:
                best = (point, episode + 1, copy.deepcopy(net.state_dict()))
            if log is not None:
                log(f"episode {episode + 1}: greedy return {point:.3f} on eval seeds, "
                    f"explore {explore:.2f}")
    if best is not None:
        net.load_state_dict(best[2])
        result.kept_episode = best[1]
    result.cpu_seconds = time.process_time() - start
    return result


def _collect(env: SchedulingEnv, net: torch.nn.Module, explore: float, rng: random.Random,
             seed: int) -> tuple[list[tuple[np.ndarray, np.ndarray, int, float, float]], float]:
    """One episode by the behaviour policy: (obs, mask, action, behaviour prob, reward) each
    step, and its return."""
    obs, _ = env.reset(seed=seed)
    steps = []
    total = 0.0
    done = False
    while not done:
        mask = env.action_masks()
        builder = env._builder  # the round being built: the heuristics read its free GPUs
        with torch.no_grad():
            logits = _masked_logits(net(torch.as_tensor(obs)[None]),
                                    torch.as_tensor(mask)[None])
            probs = torch.softmax(logits, -1)[0].numpy()
        heuristics = ([heuristic_action(builder, True), heuristic_action(builder, False)]
                      if builder is not None and explore > 0 else [])
        if heuristics and rng.random() < explore:
            action = heuristics[rng.random() < 0.5]
        else:
            action = int(np.searchsorted(np.cumsum(probs), rng.random() * probs.sum()))
            action = min(action, len(mask) - 1)
            if not mask[action]:
                action = len(mask) - 1
        behaviour = (1 - explore) * float(probs[action]) + explore * 0.5 * sum(
            h == action for h in heuristics)
        next_obs, reward, term, trunc, _ = env.step(action)
        steps.append((np.clip(obs, 0.0, OBSERVATION_HIGH), mask, action, max(behaviour, 1e-6),
                      float(reward)))
        total += float(reward)
        obs = next_obs
        done = term or trunc
    return steps, total


def _update(net: torch.nn.Module, reward_model: torch.nn.Module,
            optimiser: torch.optim.Optimizer,
            batch: list[tuple[np.ndarray, np.ndarray, int, float, float]],
            config: TrainConfig) -> None:
    obs = torch.as_tensor(np.stack([b[0] for b in batch]))
    masks = torch.as_tensor(np.stack([b[1] for b in batch]))
    actions = torch.as_tensor([b[2] for b in batch])
    behaviour = torch.as_tensor([b[3] for b in batch], dtype=torch.float32)
    returns = torch.as_tensor([b[4] for b in batch], dtype=torch.float32)
    out = net(obs)
    logits = _masked_logits(out, masks)
    value = out[:, -1]
    log_probs = torch.log_softmax(logits, -1)
    probs = log_probs.exp()
    taken = log_probs.gather(1, actions[:, None])[:, 0]
    weight = torch.clamp(taken.exp().detach() / behaviour, max=1.0)
    advantage = (returns - value).detach()
    # Normalised per batch: while the critic is still learning, raw advantages are all of one
    # sign and push every taken action down, shifting the mass to the rarely taken stop.
    advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-6) if len(batch) > 1 \
        else advantage
    loss = (-(weight * advantage * taken).mean()
            + 0.5 * torch.square(returns - value).mean()
            + config.entropy * (probs * log_probs.masked_fill(~masks, 0.0)).sum(-1).mean())
    if config.harmony:
        # The reward model predicts the (normalised) advantage of an action: an action it has no
        # sample of scores about 0, neither better nor worse than the critic expects.
        predicted = reward_model(obs)
        loss = loss + torch.square(predicted.gather(1, actions[:, None])[:, 0]
                                   - advantage).mean()
        scores = predicted.detach().masked_fill(~masks, 0.0)
        loss = loss - config.reward_model_weight * (probs * scores).sum(-1).mean()
    optimiser.zero_grad()
    loss.backward()
    optimiser.step()


__all__ = ["TrainConfig", "TrainResult", "greedy_return", "heuristic_action", "random_return",
           "train"]

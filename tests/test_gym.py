"""The Gymnasium environments (bayes_sched.gym): Gymnasium's checker, seeding, vectorisation,
masks and rewards, on the worlds' own clusters."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from bayes_sched.errors import InputError
from bayes_sched.gym import make_env
from bayes_sched.gym.env import jain_unfairness
from bayes_sched.gym.train import heuristic_action, random_return

TINY: dict[str, dict[str, Any]] = {"gavel": {"num_jobs": 6}, "pollux": {"num_jobs": 4},
        "contention": {"num_jobs": 3, "arrival_hours": 0.2}}


@pytest.mark.parametrize("world", sorted(TINY))
def test_env_passes_gymnasium_checker(world: str) -> None:
    env = make_env(world, **TINY[world])
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    assert info["action_mask"].shape == (env.num_actions,)
    assert info["action_mask"][-1]  # stop is always possible


def _rollout(env: gymnasium.Env, seed: int, policy_seed: int = 0) -> tuple[list[np.ndarray],
                                                                          float]:
    rng = np.random.default_rng(policy_seed)
    obs, _ = env.reset(seed=seed)
    seen, total, done = [obs], 0.0, False
    while not done:
        action = int(rng.choice(np.flatnonzero(env.unwrapped.action_masks())))  # type: ignore[attr-defined]
        obs, reward, term, trunc, _ = env.step(action)
        seen.append(obs)
        total += float(reward)
        done = term or trunc
    return seen, total


def test_episodes_are_seeded() -> None:
    env = make_env("gavel", **TINY["gavel"])
    first, r1 = _rollout(env, seed=5)
    again, r2 = _rollout(env, seed=5)
    other, _ = _rollout(env, seed=6)
    assert r1 == r2 and all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert len(first) != len(other) or any(not np.array_equal(a, b)
                                           for a, b in zip(first, other, strict=True))


def test_sync_vector_env_steps_with_masks() -> None:
    envs = gymnasium.vector.SyncVectorEnv([lambda: make_env("gavel", **TINY["gavel"])] * 3)
    obs, info = envs.reset(seed=[1, 2, 3])
    assert obs.shape == (3, make_env("gavel", **TINY["gavel"]).obs_size)
    for _ in range(20):
        actions = np.array([int(np.flatnonzero(mask)[0]) for mask in info["action_mask"]])
        obs, reward, term, trunc, info = envs.step(actions)
        assert reward.shape == (3,) and np.all(reward <= 0)
    envs.close()


def test_jct_return_is_job_hours_and_stopping_costs() -> None:
    """Minus the job-hours in the system: a scheduler that never places loses the most (every
    job waits until truncation); bin packing beats uniformly random actions."""
    env = make_env("gavel", num_jobs=8, arrival_hours=0.0, cluster="v100:4,k80:4",
                   max_rounds=60)
    seeds = (11, 12, 13)
    totals = {}
    for name in ("stop", "binpack"):
        total = 0.0
        for seed in seeds:
            env.reset(seed=seed)
            done = False
            while not done:
                builder = env._builder
                assert builder is not None
                action = builder.stop if name == "stop" else heuristic_action(builder, True)
                _, reward, term, trunc, _ = env.step(action)
                total += reward
                done = term or trunc
        totals[name] = total / len(seeds)
    assert totals["stop"] == pytest.approx(-8 * 60 * env.interval / 3600.0)
    assert totals["binpack"] > random_return(env, seeds) > totals["stop"]


def test_bad_actions_and_worlds_are_one_line() -> None:
    env = make_env("gavel", strict=True, **TINY["gavel"])
    env.reset(seed=0)
    masked = np.flatnonzero(~env.action_masks())
    if masked.size:
        with pytest.raises(ValueError, match="outside the mask"):
            env.step(int(masked[0]))
    with pytest.raises(ValueError, match="outside the mask"):
        env.step(int(env.num_actions) + 3)
    lenient = make_env("gavel", **TINY["gavel"])
    lenient.reset(seed=0)
    *_, info = lenient.step(lenient.num_actions + 3)
    assert info["invalid_action"]
    with pytest.raises(InputError, match="no environment; expected one of gavel"):
        make_env("shockwave")
    with pytest.raises(InputError, match="num_jobs 0"):
        make_env("pollux", num_jobs=0)


def test_fairness_reward_and_registration() -> None:
    env = gymnasium.make("bayes_sched/Pollux-v0", num_jobs=3, objective="fairness")
    _, total = _rollout(env, seed=2)
    assert total <= 0.0
    assert jain_unfairness([]) == 0.0


def test_contention_env_sees_counters() -> None:
    env = make_env("contention", **TINY["contention"])
    obs, _ = env.reset(seed=1)
    counters = slice(env.obs_size - 4 * 3, None)
    assert not obs[counters].any()  # nothing emitted before the first round
    seen, _ = _rollout(env, seed=1)
    assert any(o[counters].any() for o in seen[1:-1])


def test_masked_ppo_trains_on_the_env() -> None:
    """sb3-contrib's masked PPO (the [rl] extra) steps through the environment and never takes
    an action outside the mask (the environment is strict)."""
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.logger import Logger

    env = make_env("gavel", strict=True, **TINY["gavel"])
    model = MaskablePPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0,
                        device="cpu")
    # A logger of no outputs: SB3's default makes an SB3-<date> folder in /tmp per learn().
    model.set_logger(Logger(folder=None, output_formats=[]))
    model.learn(total_timesteps=128)
    obs, _ = env.reset(seed=4)
    action, _ = model.predict(obs, action_masks=env.action_masks(), deterministic=True)
    assert env.action_masks()[int(action)]


def _contention_counters(seed: int = 1) -> Any:
    """A counters window the contention law emitted in a bin-packed episode of eight jobs
    arriving at once (what a real scheduler's collectors give it)."""
    env = make_env("contention", num_jobs=8, arrival_hours=0.0)
    env.reset(seed=seed)
    window = None
    for _ in range(8):
        assert env._builder is not None
        env.step(heuristic_action(env._builder, True))
        assert env._cluster is not None
        window = env._cluster.state.counters if env._cluster.state.counters is not None \
            else window
    assert window is not None
    return window


def test_posterior_state_comes_from_the_counters() -> None:
    """The posterior features are a function of the counters window alone: the same window gives
    the same features (the fit is seeded); a window whose PCIe counters read three times higher
    gives higher posterior PCIe-switch loads; no window gives zeros."""
    from bayes_sched.cluster_spec import DEFAULT_TOPOLOGY
    from bayes_sched.contention.state import posterior_features, posterior_size

    window = _contention_counters()
    per_node = posterior_size(DEFAULT_TOPOLOGY)
    first = posterior_features(window, 4, DEFAULT_TOPOLOGY, steps=5)
    assert first.shape == (4 * per_node,) and np.all(np.isfinite(first))
    assert np.array_equal(first, posterior_features(window, 4, DEFAULT_TOPOLOGY, steps=5))
    louder = window.copy()
    for name in ("gpu_gpm_pcie_tx_rate", "gpu_gpm_pcie_rx_rate"):
        louder[name] = window[name] * 3.0
    switches = first.reshape(4, per_node)[:, 0:4:2]  # the two switches' posterior means
    loud = posterior_features(louder, 4, DEFAULT_TOPOLOGY, steps=5).reshape(4, per_node)
    busy = switches > 0.05
    assert busy.any() and np.all(loud[:, 0:4:2][busy] > 1.5 * switches[busy])
    assert not posterior_features(None, 4, DEFAULT_TOPOLOGY).any()


def test_contention_env_posterior_state() -> None:
    env = make_env("contention", state="posterior", posterior_steps=3, **TINY["contention"])
    counters_env = make_env("contention", **TINY["contention"])
    assert env.obs_size == counters_env.obs_size - 4 * 3 + 4 * 10
    seen, _ = _rollout(env, seed=1)
    features = slice(env.obs_size - 4 * 10, None)
    assert all(env.observation_space.contains(o) for o in seen)
    assert any(o[features].any() for o in seen[1:-1])
    with pytest.raises(InputError, match="contention state 'truth': expected one of counters"):
        make_env("contention", state="truth")

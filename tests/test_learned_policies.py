"""The learned and BO schedulers of issue 37: training learns (a seeded run beats random actions
on held-out episodes; Banerjee's learner raises its greedy return over the untrained network's on
the episodes it trains on, and trains on the posterior state), weights round-trip through the
training script and load in the policy, bad weights (or weights of the other state) are one line,
and Metis's GP-EI resizes jobs in the Pollux world."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.errors import InputError
from bayes_sched.estimation.registry import ESTIMATORS
from bayes_sched.gym import make_env
from bayes_sched.gym.train import TrainConfig, greedy_return, random_return, train
from bayes_sched.policies import POLICIES
from bayes_sched.policies.learned import DATA_DIR
from bayes_sched.sim.gavel_jobs import generate_continuous_jobs
from bayes_sched.sim.workload import generate_workload
from bayes_sched.worlds import GAVEL, POLLUX
from tests.cli_inprocess import run_cli

ROOT = Path(__file__).resolve().parent.parent
TINY_GAVEL = {"num_jobs": 8, "cluster": "v100:4,k80:4"}


def test_harmony_training_beats_random_on_held_out_episodes() -> None:
    """A few seconds of training: the greedy policy's return (minus job-hours) on episodes it
    never trained on beats uniformly random possible actions on the same episodes."""
    held_out = (901, 902, 903, 904)
    config = TrainConfig(episodes=25, eval_every=25, eval_seeds=held_out, hidden=32, batch=128,
                         seed=1)
    result = train(lambda: make_env("gavel", **TINY_GAVEL), config)
    env = make_env("gavel", **TINY_GAVEL)
    assert result.curve and result.curve[-1][0] == 25
    assert greedy_return(result.net, env, held_out) > random_return(env, held_out)


def test_banerjee_training_raises_the_return() -> None:
    """Banerjee's learner (no heuristics, no reward model) raises its greedy return over a seeded
    run above the untrained network's (the curve's first point) on the two episodes it trains
    on: eight jobs arriving at once on two nodes of the contention world, so the order and
    placement it learns matter. The learner is the same whatever the state; it runs on the
    counters state here (seconds), and a short run on the posterior state (every state an SVI
    fit of the counters) checks that state trains end to end."""
    episodes = (911, 912)
    config = TrainConfig(episodes=9, harmony=False, eval_every=3, eval_seeds=episodes,
                         train_seeds=episodes, hidden=32, batch=64, updates_per_episode=16,
                         seed=2)

    def make(state: str) -> Callable[[], Any]:
        return lambda: make_env("contention", state=state, posterior_steps=3, num_jobs=8,
                                arrival_hours=0.0, cluster="2x4:t4")

    result = train(make("counters"), config)
    assert [e for e, _ in result.curve] == [0, 3, 6, 9]
    assert max(r for e, r in result.curve if e > 0) > result.curve[0][1]
    short = train(make("posterior"), TrainConfig(episodes=2, harmony=False, eval_every=2,
                                                 eval_seeds=(911,), hidden=16, batch=32))
    assert len(short.returns) == 2 and all(np.isfinite(r) for _, r in short.curve)


def test_banerjee_refuses_weights_of_the_other_state() -> None:
    counters = str(DATA_DIR / "banerjee-contention.pt")
    assert POLICIES.make("banerjee", state="counters").state == "counters"
    assert POLICIES.make("banerjee").state == "posterior"
    with pytest.raises(InputError, match="trained on the 'counters' state: expected 'posterior'"):
        POLICIES.make("banerjee", state="posterior", weights=counters)
    with pytest.raises(InputError, match="banerjee state 'truth': expected one of posterior"):
        POLICIES.make("banerjee", state="truth")
    done = run_cli("simulate", "--workload", "workload-1", "--max-jobs", "2", "--no-progress",
                   "--policy", "banerjee", "--policy-opt", f"weights={counters}")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "expected 'posterior'" in done.stderr


def test_banerjee_reads_the_posterior_from_the_estimation_stage() -> None:
    """In a run, the posterior state comes from the ``contention_network`` estimator (the
    counters window -> the network's posterior), inferred only in rounds with a decision."""
    from bayes_sched.sim.laws import make_hidden

    spec = POLLUX.cluster(load_cluster_spec("4x4:t4"), 300.0)
    workload = generate_workload(3, 8, seed=2).head(3)
    result = POLLUX.run(workload.jobs, POLICIES.make("banerjee"), spec, seed=0,
                        hidden=make_hidden("contention", cluster=spec))
    assert result.summary["finished"] == 3
    assert result.estimates_from == {"resource_use": "contention_network"}
    inferences = result.estimator_stats["contention_network_inferences"]
    assert 0 < inferences < result.policy_stats["rounds"]
    with pytest.raises(InputError, match="option steps is 0"):
        ESTIMATORS.make("contention_network", steps=0)


def _train_script(tmp_path: Path, policy: str, world: str) -> Path:
    out = tmp_path / f"{policy}.pt"
    done = subprocess.run([sys.executable, str(ROOT / "experiments" / "train_learned.py"),
                           "--policy", policy, "--world", world, "--episodes", "2",
                           "--out", str(out)], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return out


def test_weights_round_trip_and_run_in_the_gavel_world(tmp_path: Path) -> None:
    path = _train_script(tmp_path, "harmony", "gavel")
    sidecar = path.with_suffix(".json").read_text()
    assert '"seed": 0' in sidecar and "train_learned.py" in sidecar
    assert path.stat().st_size < 5 * 2**20
    policy = POLICIES.make("harmony", weights=str(path))
    jobs = [job for job, _ in zip(generate_continuous_jobs(4.0, seed=1, multi_gpu=True),
                                  range(6), strict=False)]
    jobs = [type(job)(**{**job.__dict__, "total_steps": job.total_steps * 0.01}) for job in jobs]
    result = GAVEL.run(jobs, policy, load_cluster_spec("v100:4,p100:4,k80:4"), seed=0)
    assert result.summary["finished"] == len(jobs)
    assert policy.stats()["rounds"] > 0
    # Weights whose header does not match their network's sizes: one line at the first round.
    blob = torch.load(path, weights_only=True)
    blob["max_jobs"] = 4
    torch.save(blob, tmp_path / "mismatched.pt")
    with pytest.raises(InputError, match="weights for 127 observations and 25 actions"):
        GAVEL.run(jobs, POLICIES.make("harmony", weights=str(tmp_path / "mismatched.pt")),
                  load_cluster_spec("v100:4,p100:4,k80:4"), seed=0)


def test_bad_weights_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such weights file"):
        POLICIES.make("harmony", weights=str(tmp_path / "none.pt"))
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"not a torch file")
    with pytest.raises(InputError, match="not a weights file"):
        POLICIES.make("harmony", weights=str(corrupt))
    old = tmp_path / "old.pt"
    torch.save({"format": 0, "kind": "harmony"}, old)
    with pytest.raises(InputError, match="weights format 0: expected 1"):
        POLICIES.make("harmony", weights=str(old))
    other = tmp_path / "other.pt"
    torch.save({"format": 1, "kind": "banerjee"}, other)
    with pytest.raises(InputError, match="weights of 'banerjee': expected 'harmony'"):
        POLICIES.make("harmony", weights=str(other))


def test_metis_resizes_jobs_by_gp_ei() -> None:
    workload = generate_workload(6, 8, seed=3).head(6)
    policy = POLICIES.make("metis")
    result = POLLUX.run(workload.jobs, policy, load_cluster_spec("4x4:t4"), interference=0.25)
    assert result.summary["finished"] == 6
    stats = policy.stats()
    assert stats["gp_fits"] > 0 and stats["resizes"] > 0
    assert np.isfinite(result.summary["avg_jct"])

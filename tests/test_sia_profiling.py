"""Sia's profiling of new jobs on one GPU of every type (issue 15), and the Shockwave world's
allocation-recompute interval."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bayes_sched.cluster_spec import parse_cluster_spec
from bayes_sched.jobs import JobSpec
from bayes_sched.policies.sia_adaptive import SiaAdaptivePolicy
from bayes_sched.sim import SimConfig, Workload, run_simulation
from tests.cli_inprocess import run_cli

ROUND = 60.0


@pytest.fixture(scope="module")
def profiled_run():  # noqa: ANN201
    """Two bert jobs under sia_adaptive on V100 and K80 nodes: the policy and every round's
    allocations."""
    jobs = tuple(JobSpec(f"bert-{i}", 0.0, "bert", 1, 12) for i in range(2))
    config = SimConfig(cluster=parse_cluster_spec("v100:4,k80:4"), max_time=8 * ROUND)
    policy = SiaAdaptivePolicy()
    rounds: list[dict[str, np.ndarray]] = []
    result = run_simulation(Workload("bert2", jobs), policy, config,
                            on_round=lambda cluster: rounds.append(cluster.allocations()))
    return result, policy, rounds


def test_new_jobs_are_profiled_on_one_gpu_of_every_type_first(profiled_run) -> None:  # noqa: ANN001
    result, policy, rounds = profiled_run
    assert result.config.cluster.round_interval == ROUND
    node_types = np.array(result.config.cluster.gpu_types)
    for name in ("bert-0", "bert-1"):
        held = [allocations[name] for allocations in rounds[:2]]
        # One GPU of V100 (Gavel's order first), then one GPU of K80.
        assert [int(counts.sum()) for counts in held] == [1, 1]
        assert [str(node_types[np.flatnonzero(counts)[0]]) for counts in held] == ["v100", "k80"]
        # Profiling left a model of the job on both types, and the job's own 1-GPU ratio.
        assert {("bert-0", "v100"), ("bert-0", "k80")} <= set(policy._models)
        ratio = policy.type_ratio("bert", "v100", "k80", name)
        one_gpu = {t: policy._one_gpu["bert", t][name] for t in ("v100", "k80")}
        assert ratio == pytest.approx(one_gpu["v100"] / one_gpu["k80"])
        assert ratio > 1.5  # the V100 is much faster than the K80 (derived profiles)
    # Its cost is in the run (the GPUs were held) and counted: 2 jobs x 2 types x one round.
    assert policy.profiling_rounds == 4
    assert policy.profiling_gpu_seconds == pytest.approx(4 * ROUND)
    # After profiling the program places the jobs; the faster V100s are in use.
    after = [counts for allocations in rounds[2:] for counts in allocations.values()]
    assert any(counts[node_types == "v100"].sum() > 0 for counts in after)


def test_profiling_restarts_are_not_held_against_the_job(profiled_run) -> None:  # noqa: ANN001
    result, policy, _ = profiled_run
    # Each job had two profiling rounds: its restarts from them are not counted.
    assert policy._profiling_rounds == {"bert-0": 2, "bert-1": 2}
    fresh = SiaAdaptivePolicy()
    fresh._profiling_rounds = {"a": 2}

    class View:
        name, num_restarts = "a", 3

    assert fresh.penalised_restarts([View()]).tolist() == [1]  # type: ignore[list-item]
    # With profiling off a job has no type to be profiled on.
    assert SiaAdaptivePolicy(profile_types=False).pending_profiling(
        View(), ("v100",)) == []  # type: ignore[arg-type]


def _shockwave_row(*options: str) -> dict[str, float]:
    done = run_cli("simulate", "--trace", "tacc_120", "--cluster", "v100:32", "--policy",
                   "gandiva_fair", "--policy-opt", "split=time", *options, "--max-jobs", "30",
                   "--json", "--no-progress")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)[0]


def test_shockwave_traces_recompute_allocations_at_shockwaves_interval() -> None:
    # Shockwave's scheduler recomputes at most every 1000 s (Gavel's: 1920 s); jobs arriving
    # after a recompute wait for the next one, so the interval moves the JCTs.
    default = _shockwave_row()
    assert default["avg_jct"] == _shockwave_row("--policy-opt", "min_reset_interval=1000")["avg_jct"]
    assert default["avg_jct"] < _shockwave_row("--policy-opt", "min_reset_interval=1920")["avg_jct"]

"""Shockwave under uncertainty: the remaining-work predictors inside the planner, the simulator's
true remaining work for a benchmark's oracle, learned throughputs, and a reproducible plan."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bayes_sched.cluster_spec import ClusterSpec, load_cluster_spec
from bayes_sched.errors import InputError
from bayes_sched.estimation.choose import Choices, choose_estimators
from bayes_sched.estimation.registry import ESTIMATORS
from bayes_sched.estimation.remaining_work import (
    DirichletRegimePredictor,
    NoiseScaleRegimePredictor,
    OracleRemainingWork,
    RemainingWorkEstimator,
)
from bayes_sched.estimation.throughput_stage import ThroughputEstimator
from bayes_sched.policies import Policy, make_policy
from bayes_sched.policies.shockwave import ShockwavePolicy, log_segments
from bayes_sched.remaining_work import RegimeProfile, profile_from
from bayes_sched.sim.oracles import world_oracles
from bayes_sched.sim.result import RunResult
from bayes_sched.sim.shockwave_cluster import ShockwaveCluster
from bayes_sched.sim.table_run import run_table_simulation
from bayes_sched.throughputs import load_shockwave_throughputs
from tests.test_shockwave import GOOD, read_shockwave_trace_text, shockwave_estimates

#: Three jobs of Shockwave's trace format: a GNS LM job, a shorter one, a static one later.
THREE = [GOOD.replace("\t77584\t", "\t12000\t"),
         GOOD.replace("\t77584\t", "\t6000\t")[:-1] + "60",
         GOOD.replace("\tgns\t", "\tstatic\t").replace("\t77584\t", "\t9000\t")[:-1] + "130"]


def _spec(cluster: str = "v100:2x1") -> ClusterSpec:
    return replace(load_cluster_spec(cluster), round_interval=120.0)


def _run(policy: Policy, noise_seed: int = 0, estimators: Choices | None = None
         ) -> tuple[RunResult, ShockwavePolicy]:
    jobs = read_shockwave_trace_text(*THREE)
    result = run_table_simulation(jobs, policy, _spec(), table=load_shockwave_throughputs(),
                                  cluster_type=ShockwaveCluster, noise_seed=noise_seed,
                                  estimators=estimators)
    assert isinstance(policy, ShockwavePolicy)
    return result, policy


def test_log_segments_interpolate_the_log_at_the_bases() -> None:
    slopes, intercepts = log_segments()
    bases = np.array([0.2, 0.4, 0.6, 0.8, 1.0])
    # The hypograph's bound at each base is the log there (the segments' minimum).
    bound = np.min(bases[:, None] * slopes[None, :] + intercepts[None, :], axis=1)
    assert bound == pytest.approx(np.log(bases))
    assert np.all(np.diff(slopes) < 0)  # concave: the hypograph is exact under maximisation


def test_the_true_remaining_work_is_what_the_job_then_takes_alone() -> None:
    (job,) = read_shockwave_trace_text(GOOD)
    cluster = ShockwaveCluster([job], _spec("v100:1x1"), load_shockwave_throughputs(),
                               measurement_noise=0.0)
    for _ in range(3):  # some rounds in, with the batch size about to change
        cluster.apply({"0": np.array([1])})
        cluster.advance(120.0)
    truth = cluster.true_remaining_seconds("0")
    start = cluster.batch["0"].run_seconds
    while not cluster.done():
        cluster.apply({"0": np.array([1])})
        cluster.advance(120.0)
    assert cluster.batch["0"].changes > 0  # the batch size did change on the way
    assert cluster.batch["0"].run_seconds - start == pytest.approx(truth)
    assert cluster.true_remaining_seconds("0") == 0.0  # completed


def test_noise_scale_upper_quantile_bounds_its_mean_and_dirichlet_is_a_point() -> None:
    profile = profile_from([8] * 5 + [16] * 5 + [32] * 10, {8: 40.0, 16: 25.0, 32: 15.0})
    ours = NoiseScaleRegimePredictor()
    mean = ours.remaining_seconds(profile, 8)
    assert ours.quantile_seconds(profile, 8, 0.9) >= mean >= ours.quantile_seconds(profile, 8,
                                                                                   0.1)
    assert ours.quantile_seconds(profile, 8, 0.9) > ours.quantile_seconds(profile, 8, 0.1)
    assert ShockwavePolicy.default_estimators["remaining_work"] == "dirichlet"
    dirichlet = DirichletRegimePredictor()
    assert dirichlet.quantile_seconds(profile, 8, 0.9) == dirichlet.remaining_seconds(profile, 8)


def test_remaining_work_and_throughputs_are_estimators_chosen_outside_the_policy() -> None:
    throughput, remaining = choose_estimators(
        ShockwavePolicy.needs, {"throughput": "bayes", "noise_scale": {"num_draws": 32}},
        ShockwavePolicy.default_estimators, world_oracles(load_shockwave_throughputs()))
    assert isinstance(throughput, ThroughputEstimator)
    assert isinstance(remaining, RemainingWorkEstimator)
    assert isinstance(remaining.predictor, NoiseScaleRegimePredictor)
    assert remaining.predictor.num_draws == 32
    with pytest.raises(InputError, match="num_draws is 'many': expected int"):
        ESTIMATORS.make("noise_scale", num_draws="many")
    for gone in ("remaining_work", "source", "throughputs"):
        with pytest.raises(InputError, match=f"has no option '{gone}'"):
            make_policy("shockwave", **{gone: "bayes"})
    # The truth only from a world that knows it, labelled oracle.
    with pytest.raises(InputError, match="unknown estimator 'oracle_remaining_work'"):
        choose_estimators(ShockwavePolicy.needs, {"remaining_work": "oracle_remaining_work"},
                          ShockwavePolicy.default_estimators,
                          world_oracles(load_shockwave_throughputs()))
    (oracle,) = choose_estimators(("remaining_work",), {"remaining_work": "oracle_remaining_work"},
                                  {}, world_oracles(load_shockwave_throughputs(),
                                                    {"a": 123.0}.__getitem__))
    (entry,) = oracle.published()
    assert entry.estimator == "oracle" and isinstance(entry.value, OracleRemainingWork)


def test_the_oracle_predictor_answers_the_truth_it_is_given() -> None:
    oracle = OracleRemainingWork({"a": 123.0}.__getitem__)
    profile = RegimeProfile((8,), (1.0,))
    from tests.test_shockwave import _view

    assert oracle.remaining_seconds(profile, 0, _view("a", 0.0)) == 123.0
    with pytest.raises(ValueError):
        oracle.remaining_seconds(profile, 0)


def test_shockwave_learning_throughputs_with_our_predictor_finishes_every_job() -> None:
    policy = make_policy("shockwave", future_rounds=4)
    result, _ = _run(policy, estimators={"throughput": "bayes", "remaining_work": "noise_scale"})
    assert result.summary["finished"] == 3
    assert result.estimates_from == {"throughput": "bayes", "remaining_work": "noise_scale"}
    assert result.summary["fits"] > 1
    assert policy.solver_failures == 0 and policy.node_limit_hits == 0


def test_the_oracle_of_the_world_is_the_remaining_work_a_run_reads() -> None:
    result, policy = _run(make_policy("shockwave", future_rounds=4),
                          estimators={"remaining_work": "oracle_remaining_work"})
    assert result.estimates_from == {"throughput": "oracle", "remaining_work": "oracle"}
    assert result.summary["finished"] == 3 and policy.whole_epochs is False


def test_a_run_is_the_same_twice_and_needs_no_wall_clock_cap() -> None:
    first, policy = _run(make_policy("shockwave", future_rounds=4))
    second, _ = _run(make_policy("shockwave", future_rounds=4))
    assert policy.time_limit is None and policy.solve_nodes
    assert first.jobs["completion_time"].tolist() == second.jobs["completion_time"].tolist()


def test_ours_counts_the_whole_iterations_of_an_epoch_as_the_job_runs_them() -> None:
    # Recommendation at batch 8192 runs ceil(117907 / 8192) = 15 iterations an epoch, where
    # Shockwave's profile counts 14.39: 300 steps are 20 whole epochs.
    line = (GOOD.replace("LM (batch size 10)", "Recommendation (batch size 8192)")
            .replace("\t77584\t", "\t300\t").replace("\tgns\t", "\tstatic\t"))
    (job,) = read_shockwave_trace_text(line)
    cluster = ShockwaveCluster([job], _spec("v100:1x1"), load_shockwave_throughputs(),
                               measurement_noise=0.0)
    (view,) = cluster.job_views()
    truth = cluster.true_remaining_seconds(view.name)
    ours = ShockwavePolicy()
    predictor = ours.read_estimates(shockwave_estimates("noise_scale"))
    assert ours.whole_epochs is True
    assert predictor.quantile_seconds(ours.profile(view, "v100"), 0, 0.9, view) == \
        pytest.approx(truth, rel=1e-9)
    shockwave = ShockwavePolicy()
    shockwave.read_estimates(shockwave_estimates("dirichlet"))  # as published: 4 % short
    assert sum(shockwave.profile(view, "v100").epoch_seconds) == \
        pytest.approx(truth * 117907 / 8192 / 15, rel=1e-9)


def test_a_calibration_factor_corrects_only_the_profile_it_was_computed_on() -> None:
    # A learner's first belief had the job 4x too fast: Shockwave's rule sets a factor of ~4 on
    # that profile. Its next belief has learned the job's rate: that profile needs no factor,
    # and the old one must not be applied to it (it was: the job was planned 4x too slow).
    (job,) = read_shockwave_trace_text(GOOD.replace("\tgns\t", "\tstatic\t"))
    cluster = ShockwaveCluster([job], _spec("v100:1x1"), load_shockwave_throughputs(),
                               measurement_noise=0.0)
    (view,) = cluster.job_views()
    policy = ShockwavePolicy()
    policy.read_estimates(shockwave_estimates())
    learned = policy.profile(view, "v100")
    rate = view.examples_per_epoch / view.requested_batch_size / learned.epoch_seconds[0]
    policy._measured[view.name] = {5: (rate, view.requested_batch_size)}  # what the job ran at
    first = RegimeProfile(learned.regimes, tuple(s / 4 for s in learned.epoch_seconds))
    assert policy.calibration(view, first) == pytest.approx(4.0, rel=0.05)
    assert policy.calibration(view, learned) == 1.0

"""The job agent: measurements, rate-limited refits, Pollux-style priors and batch tuning."""

from __future__ import annotations

import numpy as np

from bayes_sched.agent import JobAgent
from bayes_sched.estimation.posteriors import JOB_GOODPUT
from bayes_sched.jobs import JobSettings, split_batch
from bayes_sched.sim.physics import get_application

APP = get_application("cifar10")


def _measure(agent: JobAgent, placement: tuple[int, ...], m: int) -> None:
    step, sync = APP.step_time(placement, m)
    agent.record(len(placement), sum(placement), m, step, sync, *APP.grad_stats(256, 5))


def test_single_gpu_measurements_leave_the_network_optimistic() -> None:
    agent = JobAgent("j", APP.limits)
    _measure(agent, (1,), 128)
    params = agent.params
    assert params is not None and agent.num_refits == 1
    assert params.alpha_r <= 1e-6 and params.beta_r <= 1e-6 and params.alpha_n <= 1e-6
    # A single GPU's step time is reproduced.
    step, _ = APP.step_time((1,), 128)
    assert np.isclose(params.alpha_c + params.beta_c * 128, step, rtol=0.05)


def test_multi_node_measurements_are_kept() -> None:
    agent = JobAgent("j", APP.limits, min_refit_interval=0.0)
    for placement in ((1,), (4,), (4, 4), (2, 2, 2)):
        for m in (64, 256):
            _measure(agent, placement, m)
    params = agent.params
    assert params is not None
    assert params.alpha_n > 1e-4  # measured across nodes: a real cost


def test_refits_need_a_new_shape_and_respect_the_interval() -> None:
    agent = JobAgent("j", APP.limits, min_refit_interval=300.0)
    _measure(agent, (1,), 128)
    assert agent.params is not None and agent.num_refits == 1
    _measure(agent, (1,), 128)          # same configuration: nothing new
    _measure(agent, (1,), 256)          # second micro-batch: the compute slope is new
    agent.clock = 100.0
    assert agent.params is not None and agent.num_refits == 1  # too soon
    agent.clock = 400.0
    _ = agent.params
    assert agent.num_refits == 2
    _measure(agent, (1,), 512)          # a third micro-batch alone does not trigger a refit
    agent.clock = 1000.0
    _ = agent.params
    assert agent.num_refits == 2
    _measure(agent, (2,), 256)          # a new shape does
    _ = agent.params
    assert agent.num_refits == 3


def test_fixed_batch_is_split_and_tuned_batch_stays_within_limits() -> None:
    fixed = JobAgent("f", APP.limits, JobSettings(batch_size=2048))
    assert fixed.choose_batch((4, 4)) == split_batch(2048, 8, APP.limits) == (256, 0)
    assert split_batch(4096, 1, APP.limits) == (1024, 3)  # accumulates beyond the memory limit
    tuned = JobAgent("t", APP.limits)
    assert tuned.choose_batch((2,)) == (64, 0)  # no model yet: max(B0, m_min * K)
    for placement in ((1,), (2,), (4,)):
        _measure(tuned, placement, 128)
    for placement in ((1,), (4,), (4, 4, 4, 4)):
        m, s = tuned.choose_batch(placement)
        batch = sum(placement) * m * (s + 1)
        assert APP.limits.min_local_bsz <= m <= APP.limits.max_local_bsz
        assert APP.limits.init_batch_size <= batch <= APP.limits.max_batch_size


def test_simulated_jobs_report_their_models_under_the_clusters_gpu_type() -> None:
    from bayes_sched.jobs import JobView
    from bayes_sched.policies import make_policy
    from bayes_sched.sim import SimConfig, run_simulation
    from bayes_sched.sim.physics import GPU_TYPE

    policy = make_policy("pollux")
    seen: set[str] = set()
    decide = policy.decide

    def spying(cluster, jobs: list[JobView], estimates):  # type: ignore[no-untyped-def]
        published = estimates.require(JOB_GOODPUT)  # the bundle holds the views' models
        assert estimates.estimator_of(JOB_GOODPUT) == "job_models"
        for job in jobs:
            seen.update(job.models)
            assert dict(published.get(job.name, {})) == dict(job.models)
            assert all(o.gpu_type == GPU_TYPE for o in job.observations.values())
        return decide(cluster, jobs, estimates)

    policy.decide = spying  # type: ignore[method-assign]
    run_simulation("workload-1", policy, SimConfig(num_nodes=2), max_jobs=3)
    assert seen == {GPU_TYPE}


def test_measurements_within_the_fits_noise_leave_it_and_others_refit() -> None:
    from bayes_sched.estimation.job_models import ThroughputFitter, fit_measurements
    from bayes_sched.jobs import Observation
    from perfmodel.throughput import ThroughputParams, predict_step_time

    # A model the step-time formulas reproduce exactly (no noise): a fit of its measurements
    # on three shapes, then a fourth shape measured exactly as the fit predicts it.
    truth = ThroughputParams(0.02, 5e-4, 0.05, 2e-3, 0.01, 1e-3, 1.5)

    def observation(nodes: int, replicas: int, m: int, scale: float = 1.0) -> Observation:
        step = float(predict_step_time(truth, nodes, replicas, m)) * scale
        compute = (truth.alpha_c + truth.beta_c * m) * scale
        return Observation(nodes, replicas, m, step, step - compute)

    rows = {o.key: o for o in (observation(1, 1, 64), observation(1, 1, 128),
                               observation(1, 4, 64), observation(2, 8, 64),
                               observation(1, 3, 128))}
    fitter = ThroughputFitter("j")
    assert fitter.refresh(rows, 0.0) and fitter.num_refits == 1
    fitted = fitter.params
    assert fitted is not None
    noise_c, noise_o = fitter._noise
    # Measured as the fit itself predicts: within any noise, so no refit, and the fit stays.
    t_step = float(predict_step_time(fitted, 2, 6, 64))
    t_c = fitted.alpha_c + fitted.beta_c * 64
    within = dict(rows)
    within[(2, 6, 64)] = Observation(2, 6, 64, t_step, t_step - t_c)
    assert not fitter.refresh(within, 1.0)
    assert fitter.num_skipped == 1 and fitter.params is fitted
    # Twice as slow as predicted: far outside the noise, so a refit on every row.
    outside = dict(within)
    outside[(2, 12, 64)] = observation(2, 12, 64, scale=2.0)
    assert max(noise_c, noise_o) < np.log(2.0) / 2
    assert fitter.refresh(outside, 2.0) and fitter.num_refits == 2
    assert fitter.params == fit_measurements("j", list(outside.values()))
    # Without the rule, the in-noise row refits too.
    plain = ThroughputFitter("j", skip_within_noise=False)
    plain.refresh(rows, 0.0)
    assert plain.refresh(within, 1.0) and plain.num_refits == 2


def test_a_measurement_that_unpins_a_parameter_refits_whatever_its_error() -> None:
    from bayes_sched.estimation.job_models import ThroughputFitter
    from bayes_sched.jobs import Observation

    agent = JobAgent("j", APP.limits, min_refit_interval=0.0)
    for m in (64, 128):
        _measure(agent, (1,), m)
    fitter = ThroughputFitter("j")
    assert fitter.refresh(agent.observations, 0.0)
    # The first multi-GPU run informs the network terms: a refit even if it matched exactly.
    fitted = fitter.params
    assert fitted is not None
    step = fitted.alpha_c + fitted.beta_c * 64
    rows = dict(agent.observations)
    rows[(1, 2, 64)] = Observation(1, 2, 64, step, 0.0)
    assert fitter.refresh(rows, 1.0) and fitter.num_refits == 2

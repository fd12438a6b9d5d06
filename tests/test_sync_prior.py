"""The physics prior of sync time: ring all-reduce cost at line rate, slowdowns learned from a
fleet, and a cold start that predicts multi-GPU step times from one-GPU rows with it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfmodel.allreduce import (
    NETWORK_TERMS,
    POLLUX_LINKS,
    Links,
    gradient_bytes,
    line_rate_terms,
    ring_seconds,
)
from perfmodel.datasets import POLLUX_MODELS, POLLUX_PARAMETERS
from perfmodel.errors import InputError
from perfmodel.throughput import ThroughputParams, rmsle
from perfmodel.throughput_bayes.fit import fit_throughput_posterior
from perfmodel.throughput_bayes.prior import StepTimePrior
from tests.conftest import synthetic_profile


def _ring_allreduce(values: list[np.ndarray]) -> tuple[list[np.ndarray], int]:
    """Run a ring all-reduce (reduce-scatter then all-gather) over ``len(values)`` ranks; the
    reduced arrays and the most elements any one link (rank i to rank i+1) carried."""
    k = len(values)
    chunks = [np.array_split(v.astype(np.float64), k) for v in values]
    sent = [0] * k
    for step in range(k - 1):  # reduce-scatter: rank r sends chunk (r - step) to r + 1
        outgoing = [(r, (r - step) % k, chunks[r][(r - step) % k].copy()) for r in range(k)]
        for r, c, data in outgoing:
            chunks[(r + 1) % k][c] += data
            sent[r] += data.size
    for step in range(k - 1):  # all-gather: rank r passes its finished chunk (r + 1 - step) on
        outgoing = [(r, (r + 1 - step) % k, chunks[r][(r + 1 - step) % k].copy())
                    for r in range(k)]
        for r, c, data in outgoing:
            chunks[(r + 1) % k][c] = data
            sent[r] += data.size
    return [np.concatenate(c) for c in chunks], max(sent)


@pytest.mark.parametrize("ranks", [2, 3, 4, 7])
def test_ring_time_is_the_bytes_a_real_ring_puts_on_its_busiest_link(ranks: int) -> None:
    rng = np.random.default_rng(ranks)
    elements = 840
    values = [rng.normal(size=elements) for _ in range(ranks)]
    reduced, busiest = _ring_allreduce(values)
    for result in reduced:
        np.testing.assert_allclose(result, np.sum(values, axis=0))
    # At 1 element per second on each link, the ring takes as long as its busiest link sends.
    assert float(ring_seconds(elements, ranks, 1.0)) == pytest.approx(busiest)
    assert float(ring_seconds(elements, 1, 1.0)) == 0.0


def test_line_rate_terms_of_the_pollux_testbed() -> None:
    grad = gradient_bytes(POLLUX_PARAMETERS["bert"])
    assert grad == 4 * 110e6
    terms = line_rate_terms(grad, POLLUX_LINKS)
    assert terms["alpha_n"] == pytest.approx(grad / 6.25e9)
    assert terms["alpha_r"] == pytest.approx(grad / 15.75e9, rel=1e-3)
    # Slopes: the ring factor's rise per GPU, 1 -> 1.5 over 2 -> 4 GPUs within a node.
    assert terms["beta_r"] == pytest.approx(0.25 * terms["alpha_r"])
    assert 0 < terms["beta_n"] < terms["beta_r"] * POLLUX_LINKS.within / POLLUX_LINKS.across
    assert set(POLLUX_PARAMETERS) == set(POLLUX_MODELS)


def test_bad_sizes_and_links_are_refused_in_one_line() -> None:
    for bad in (0, -5, 1.5, True, 10**14):
        with pytest.raises(InputError, match="parameters"):
            gradient_bytes(bad)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="element bytes"):
        gradient_bytes(10, 3)
    with pytest.raises(InputError, match="links.across"):
        Links(within=1e9, across=float("nan"), gpus_per_node=4)
    with pytest.raises(InputError, match="gpus_per_node"):
        Links(within=1e9, across=1e9, gpus_per_node=0)


def _network(grad: float, slowdown: float) -> dict[str, float]:
    return {n: v * slowdown for n, v in line_rate_terms(grad, POLLUX_LINKS).items()}


def test_fleet_slowdown_is_the_predictive_of_a_new_member() -> None:
    from perfmodel.sync_prior import LinkSlowdown

    slowdowns = np.array([8.0, 12.0, 10.0, 15.0, 9.0])
    reference = []
    for i, s in enumerate(slowdowns):
        grad = 1e7 * (i + 1)
        reference.append((ThroughputParams(0.01, 0.001, gamma=1.5, **_network(grad, s)), grad))
    fleet = LinkSlowdown.from_fleet(reference, POLLUX_LINKS, min_scale=0.0)
    logs = np.log(slowdowns)
    assert fleet.df == 4
    for name in NETWORK_TERMS:
        assert fleet.loc[name] == pytest.approx(logs.mean())
        assert fleet.scale[name] == pytest.approx(logs.std(ddof=1) * math.sqrt(1.2))
    assert LinkSlowdown.from_fleet(reference, POLLUX_LINKS).scale["alpha_n"] == 0.5
    default = LinkSlowdown.default()
    # 90% of the default's mass between 5% and 100% of line rate.
    assert default.loc["alpha_r"] - 1.6449 * default.scale["alpha_r"] == pytest.approx(0, abs=1e-4)
    assert default.loc["alpha_r"] + 1.6449 * default.scale["alpha_r"] == pytest.approx(
        math.log(20), abs=1e-4)


def test_physics_prior_predicts_multi_gpu_steps_from_one_gpu_rows() -> None:
    # A job of 250M parameters whose network runs 10x slower than line rate, as its fleet does:
    # its all-reduce takes several times its compute. Fitted on one GPU, the physics prior's
    # median is close on every multi-GPU placement and its 90% intervals cover them; the default
    # prior (network on the scale of compute) is far off.
    from perfmodel.sync_prior import LinkSlowdown, physics_prior

    grad = 4 * 250e6
    truth = ThroughputParams(alpha_c=0.05, beta_c=0.002, gamma=2.0, **_network(grad, 10.0))
    placements = ["1", "2", "4", "22", "44", "444"]
    profile = synthetic_profile(truth, placements, noise=0.03, seed=3)
    single = profile.subset(profile.num_replicas == 1)
    multi = profile.subset(profile.num_replicas > 1)
    reference = [(ThroughputParams(0.05, 0.002, gamma=2.0, **_network(g, s)), g)
                 for g, s in ((1e7, 8.0), (3e8, 12.0), (5e7, 9.0), (2e8, 11.0))]
    prior = physics_prior(single, grad, POLLUX_LINKS,
                          LinkSlowdown.from_fleet(reference, POLLUX_LINKS))
    assert prior.df == 3 and math.exp(prior.loc["alpha_n"]) == pytest.approx(
        grad / 6.25e9 * 10, rel=0.05)
    fits = {name: fit_throughput_posterior(single, num_steps=150, num_samples=400, seed=0,
                                           prior=p, check=False)
            for name, p in (("physics", prior), ("default", StepTimePrior.for_profile(single)))}
    predictions = {name: fit.predict_step_time(multi.num_nodes, multi.num_replicas,
                                               multi.local_bsz)
                   for name, fit in fits.items()}
    physics, default = predictions["physics"], predictions["default"]
    assert rmsle(physics["median"], multi.step_time) < 0.15
    assert rmsle(physics["median"], multi.step_time) < 0.5 * rmsle(default["median"],
                                                                   multi.step_time)
    inside = (multi.step_time >= physics["q0.05"]) & (multi.step_time <= physics["q0.95"])
    assert inside.mean() >= 0.8


def test_fleet_physics_prior_learns_every_uninformed_site_from_the_references() -> None:
    # The shipped models' point fits and profiles as the fleet, bert left out; every site of
    # the cold start's prior comes from them or from the links.
    from perfmodel.profiles import load_pollux_profile
    from perfmodel.sync_prior import LinkSlowdown, fleet_physics_prior
    from perfmodel.throughput import fit_throughput
    from perfmodel.throughput_bayes.prior import gamma_logit, step_noise

    others = [m for m in POLLUX_MODELS if m != "bert"]
    profiles = {m: load_pollux_profile(m) for m in others}
    fits = {m: fit_throughput(profiles[m]) for m in others}
    reference = [(profiles[m], fits[m], gradient_bytes(POLLUX_PARAMETERS[m])) for m in others]
    bert = load_pollux_profile("bert")
    single = bert.subset(bert.num_replicas == 1)
    grad = gradient_bytes(POLLUX_PARAMETERS["bert"])
    prior = fleet_physics_prior(single, grad, POLLUX_LINKS, reference)
    unfloored = LinkSlowdown.from_fleet([(params, b) for _, params, b in reference],
                                        POLLUX_LINKS, min_scale=0.0)
    rate = line_rate_terms(grad, POLLUX_LINKS)
    for name in ("alpha_n", "beta_n", "alpha_r", "beta_r"):
        assert prior.loc[name] == pytest.approx(math.log(rate[name]) + unfloored.loc[name])
        assert prior.scale[name] == pytest.approx(unfloored.scale[name])
    assert prior.scale["alpha_n"] < 0.5  # measured on the five, no floor
    logits = [gamma_logit(fits[m].gamma) for m in others]
    assert prior.gamma_loc == pytest.approx(float(np.median(logits)))
    assert prior.noise_loc is not None
    across = [step_noise(profiles[m], fits[m])["across"] for m in others]
    assert prior.noise_loc["across"] == pytest.approx(float(np.mean(np.log(across))))
    assert prior.df == len(others) - 1


def test_prior_quantiles_are_the_share_of_prior_draws_below_the_parameters() -> None:
    # Where a fit lies in a prior, checked against Pyro's own draws from each site: the
    # population prior (Student-t, logit-normal gamma) and the default one (normal, uniform
    # gamma).
    import torch

    from perfmodel.profiles import load_pollux_profile
    from perfmodel.sync_prior import fleet_physics_prior
    from perfmodel.throughput import PARAM_NAMES, fit_throughput

    others = [m for m in POLLUX_MODELS if m != "ncf"]
    reference = [(load_pollux_profile(m), fit_throughput(load_pollux_profile(m)),
                  gradient_bytes(POLLUX_PARAMETERS[m])) for m in others]
    ncf = load_pollux_profile("ncf")
    single = ncf.subset(ncf.num_replicas == 1)
    own = fit_throughput(ncf)
    population = fleet_physics_prior(single, gradient_bytes(POLLUX_PARAMETERS["ncf"]),
                                     POLLUX_LINKS, reference)
    default = StepTimePrior.for_profile(single)
    torch.manual_seed(0)
    for prior in (population, default):
        quantiles = prior.quantiles(own)
        assert list(quantiles) == list(PARAM_NAMES)
        for name, value in own.as_dict().items():
            draws = prior.site(name).sample((40_000,))
            assert quantiles[name] == pytest.approx(float((draws < value).double().mean()),
                                                    abs=0.01), (name, prior.df)
    # ncf overlaps its all-reduce with compute less than the five others: its gamma lies in
    # the bottom tenth of the prior they teach.
    assert population.quantiles(own)["gamma"] < 0.1
    # A term switched off lies at the very bottom.
    off = ThroughputParams(**{**own.as_dict(), "beta_n": 0.0})
    assert population.quantiles(off)["beta_n"] == 0.0

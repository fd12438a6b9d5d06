from __future__ import annotations

import dataclasses
import math

import numpy as np
import pyro
import pytest
import scipy.stats
import torch

from perfmodel.datasets import POLLUX_MODELS
from perfmodel.profiles import StepTimeProfile, load_pollux_profile
from perfmodel.throughput import ThroughputParams, step_time_terms
from perfmodel.throughput_bayes.diagnostics import PARETO_K_USABLE
from perfmodel.throughput_bayes.fit import fit_throughput_posterior
from perfmodel.throughput_bayes.guide import NetworkCoordinates, guide_base, identity_spline, spline_guide
from perfmodel.throughput_bayes.importance import PSIS_DRAWS, adapt_proposal, psis
from perfmodel.throughput_bayes.laplace import bound_marginals
from perfmodel.throughput_bayes.model import (
    RowStudentT,
    StepTimeData,
    grouped_normal_log_prob,
    step_time_model,
)
from perfmodel.throughput_bayes.prior import StepTimePrior, compute_shifts, gamma_logit, step_noise
from tests.conftest import ALL_PLACEMENTS, TRUE_PARAMS, synthetic_profile


def test_row_student_t_is_the_sum_of_per_row_student_t_densities() -> None:
    rng = np.random.default_rng(0)
    row_class = torch.tensor([0, 2, 2, 1, 0, 2])
    df = torch.tensor([2.5, 30.0], dtype=torch.float64)
    scale = torch.tensor([[0.1, 0.2, 0.4], [1.0, 0.05, 3.0]], dtype=torch.float64)
    value = torch.tensor(rng.standard_t(4, size=(2, 6)), dtype=torch.float64)
    ours = RowStudentT(df, scale, row_class).log_prob(value)
    per_row = [[scipy.stats.t(float(df[d]), 0, float(scale[d, c])).logpdf(float(value[d, n]))
                for n, c in enumerate(row_class)] for d in range(2)]
    assert np.allclose(ours.numpy(), np.sum(per_row, axis=1), rtol=1e-12)
    with pytest.raises(ValueError):  # outside the support, as torch's StudentT refuses
        RowStudentT(df, scale * 0, row_class)


def test_the_model_draws_its_latent_sites_alike_without_its_rows(synthetic: StepTimeProfile
                                                                 ) -> None:
    # What prior_spread relies on: the rows are scored, never drawn from.
    data = StepTimeData.from_profile(synthetic, placement_effects=False)
    prior = StepTimePrior.for_profile(synthetic)
    draws = []
    for rows in (data, data.without_rows()):
        torch.manual_seed(0)
        draws.append(pyro.infer.Predictive(step_time_model, num_samples=32, parallel=True)(
            rows, prior))
    latent = [name for name in draws[0] if not name.endswith("_time")]
    assert "sigma_step" in latent and "nu" in latent
    assert all(torch.equal(draws[0][name], draws[1][name]) for name in latent)


def test_grouped_likelihood_matches_dense_multivariate_normal() -> None:
    rng = np.random.default_rng(0)
    group = np.array([0, 0, 0, 1, 1, 2])
    residual = rng.normal(size=6)
    sigma, tau = 0.3, 0.5
    cov = sigma**2 * np.eye(6) + tau**2 * (group[:, None] == group[None, :])
    dense = scipy.stats.multivariate_normal(np.zeros(6), cov).logpdf(residual)
    ours = grouped_normal_log_prob(torch.tensor(residual), torch.tensor(group), 3,
                                   torch.tensor(sigma, dtype=torch.float64),
                                   torch.tensor(tau, dtype=torch.float64))
    assert np.isclose(float(ours), dense)


@pytest.fixture(scope="module")
def posterior_all(synthetic: StepTimeProfile):
    return fit_throughput_posterior(synthetic, num_steps=300, num_samples=400, seed=0,
                                    fallback=False)


def test_posterior_covers_true_parameters(posterior_all) -> None:
    rows = {r["parameter"]: r for r in posterior_all.parameter_summary(0.99)}
    for name in ("alpha_c", "beta_c", "alpha_n"):
        assert rows[name]["lower_99"] <= getattr(TRUE_PARAMS, name) <= rows[name]["upper_99"], name


def test_predictive_interval_covers_fresh_measurements(posterior_all) -> None:
    fresh = synthetic_profile(TRUE_PARAMS, ["3", "33", "12"], noise=0.03, seed=7)
    pred = posterior_all.predict_step_time(fresh.num_nodes, fresh.num_replicas,
                                           fresh.local_bsz, quantiles=(0.05, 0.95))
    inside = np.mean((fresh.step_time >= pred["q0.05"]) & (fresh.step_time <= pred["q0.95"]))
    assert inside >= 0.75


def test_intervals_widen_for_configurations_never_measured(synthetic: StepTimeProfile) -> None:
    single = synthetic.subset(synthetic.num_replicas == 1)
    posterior = fit_throughput_posterior(single, num_steps=300, num_samples=400, seed=0,
                                         fallback=False)
    m = np.array([32, 32])
    pred = posterior.predict_step_time(np.array([1, 4]), np.array([1, 16]), m,
                                       quantiles=(0.05, 0.95), placement=["1", "4444"])
    width = np.log(pred["q0.95"] / pred["q0.05"])
    # The 1-GPU placement was measured; 16 GPUs on 4 nodes never was, and nothing in the data
    # speaks of the network: its interval must be several times wider, not collapse.
    assert width[1] > 3 * width[0]
    assert pred["q0.95"][1] > 10 * pred["q0.95"][0]


def test_a_profile_of_one_row_fits_to_a_posterior_near_its_prior(synthetic: StepTimeProfile
                                                                  ) -> None:
    # A job's first report is one row on one GPU. The model predicts equal compute and step times
    # there, so the measured gap between them can be laid on either noise series: the Hessian at
    # the mode was near singular along "one noise scale up, the other down", the Laplace start
    # drew noise scales of exp(hundreds), and SVI's loss was infinite at its first step.
    one = synthetic.subset((synthetic.num_replicas == 1) & (synthetic.local_bsz == 128))
    assert len(one) == 1
    settings = {"num_steps": 150, "num_samples": 64, "seed": 0, "check": False}  # job_posterior's
    lone = fit_throughput_posterior(one, **settings)
    informed = fit_throughput_posterior(synthetic, **settings)
    assert all(np.isfinite(draws).all() for draws in lone.samples.values())
    # Nothing but the prior speaks of the noise (half-normal, scale 0.3: median 0.2).
    assert 0.1 < float(np.median(lone.samples["sigma_step"])) < 0.4
    nodes, replicas, m = np.array([1, 1, 4]), np.array([2, 4, 16]), np.array([128, 128, 128])
    widths = [np.log(pred["q0.95"] / pred["q0.05"]) for pred in (
        posterior.predict_step_time(nodes, replicas, m, quantiles=(0.05, 0.95))
        for posterior in (lone, informed))]
    assert (widths[0] > 10 * widths[1]).all()


def test_the_laplace_start_is_no_wider_than_the_bound() -> None:
    scale_tril = torch.linalg.cholesky(torch.tensor([[4.0, 1.2, 0.0], [1.2, 1.0, 0.3],
                                                     [0.0, 0.3, 9.0]], dtype=torch.float64))
    bounded = bound_marginals(scale_tril, torch.tensor([1.0, 2.0, 1.5], dtype=torch.float64))
    spread = bounded.norm(dim=-1)
    assert torch.allclose(spread, torch.tensor([1.0, 1.0, 1.5], dtype=torch.float64))
    assert torch.equal(bounded[1], scale_tril[1])  # within its bound: unchanged

    def correlation(tril: torch.Tensor) -> torch.Tensor:
        cov = tril @ tril.T
        return cov / torch.outer(cov.diagonal().sqrt(), cov.diagonal().sqrt())

    assert torch.allclose(correlation(bounded), correlation(scale_tril))


def test_fits_reproduce_with_a_seed(synthetic: StepTimeProfile) -> None:
    a = fit_throughput_posterior(synthetic, num_steps=50, num_samples=50, seed=3, check=False)
    b = fit_throughput_posterior(synthetic, num_steps=50, num_samples=50, seed=3, check=False)
    assert np.array_equal(a.theta, b.theta)


def test_svi_agrees_with_nuts_on_a_small_problem() -> None:
    small = synthetic_profile(TRUE_PARAMS, ALL_PLACEMENTS[:6], noise=0.05, seed=2)
    svi = fit_throughput_posterior(small, num_steps=400, num_samples=400, seed=0,
                                   fallback=False)
    # A short chain (NUTS's warm-up trees dominate the cost): its medians sit well within the
    # bound below (0.26 and 0.10 of it), and twice the chain costs twice the CPU.
    nuts = fit_throughput_posterior(small, method="nuts", num_steps=30, num_samples=30, seed=0)
    for name in ("alpha_c", "beta_c"):
        s, n = svi.samples[name], nuts.samples[name]
        assert abs(np.median(s) - np.median(n)) < 2 * n.std() + 1e-9, name


def test_noise_is_learned_per_configuration_class_with_heavy_tails() -> None:
    # One GPU and one node measured precisely, several nodes scattering five times as much.
    quiet = synthetic_profile(TRUE_PARAMS, ["1", "2", "4"], noise=0.02, seed=4)
    loud = synthetic_profile(TRUE_PARAMS, ["11", "22", "44", "444"], noise=0.1, seed=5)
    profile = StepTimeProfile(
        "mixed", *(np.concatenate([getattr(quiet, f), getattr(loud, f)]) for f in (
            "num_nodes", "num_replicas", "local_bsz", "accum_steps", "step_time", "sync_time",
            "placement")))
    posterior = fit_throughput_posterior(profile, num_steps=300, num_samples=400, seed=0,
                                         fallback=False)
    assert "nu" in posterior.samples  # log-Student-t likelihood
    pred = posterior.predict_step_time(np.array([1, 1, 2]), np.array([1, 4, 8]),
                                       np.array([32, 32, 32]), quantiles=(0.05, 0.95))
    width = np.log(pred["q0.95"] / pred["q0.05"])
    # Measured within a node: about 0.09 wide; across nodes about 0.28. (One GPU's step rows are
    # clipped at its compute time, so they scatter with it and are not as quiet.)
    assert width[2] > 2.5 * width[1] and width[2] > 1.5 * width[0]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("model", POLLUX_MODELS)
def test_svi_guide_is_a_usable_importance_proposal_on_a_shipped_profile(model: str, seed: int
                                                                        ) -> None:
    # Issue 18 item 5. The guide used to start at the Laplace approximation around the point
    # fit, with the noise sites at arbitrary values (scales 0.1, nu 10): 9-17 posterior standard
    # deviations off, and 500 steps did not recover (bert: k-hat 1.22). Started at the posterior
    # mode, with a Student-t base and a spline on each whitened coordinate, seed 0 passed on
    # 1,000 draws, but seeds 1 and 2 did not (cifar10 0.95, deepspeech2 0.99), and on 16,000
    # fresh draws seed 0's cifar10 guide had 0.78: the ELBO's optimum is too narrow where the
    # posterior is curved. In network coordinates, its affine part adapted to the PSIS-weighted
    # moments, on 4,000 fresh draws: 0.29-0.69 over the six models and seeds 0-2 (imagenet
    # seed 1 the highest).
    posterior = fit_throughput_posterior(load_pollux_profile(model), seed=seed, fallback=False)
    assert posterior.diagnostics.pareto_k <= PARETO_K_USABLE


def test_adapted_proposal_covers_a_posterior_wider_and_offset_from_the_guide() -> None:
    # A guide fitted by the mode-seeking ELBO is too narrow; as an importance proposal for a
    # correlated Gaussian 1.4-1.7x as wide and shifted, its k-hat is above 0.7.
    torch.manual_seed(0)
    target = torch.distributions.MultivariateNormal(
        torch.tensor([0.5, -0.3], dtype=torch.float64),
        torch.tensor([[4.0, 1.2], [1.2, 1.0]], dtype=torch.float64))
    base, spline = guide_base(2), identity_spline(2)
    loc = torch.zeros(2, dtype=torch.float64)
    tril = torch.diag(torch.tensor([1.2, 0.7], dtype=torch.float64))
    guide = spline_guide(base, spline, loc, tril)
    with torch.no_grad():
        z = guide.sample((PSIS_DRAWS,))
        assert psis(target.log_prob(z) - guide.log_prob(z))[1] > PARETO_K_USABLE
        adapted = adapt_proposal(base, spline, loc, tril, target.log_prob)
        z = adapted.sample((PSIS_DRAWS,))
        smoothed, k = psis(target.log_prob(z) - adapted.log_prob(z))
    assert k < 0.5
    weights = smoothed.exp()
    assert torch.allclose(weights @ z, target.mean, atol=0.1)


def _shifted_profile(shift_within: float, seed: int) -> StepTimeProfile:
    """Rows drawn from the model whose within-node compute steps are ``exp(shift_within)`` times
    one GPU's (3% log-normal noise)."""
    base = synthetic_profile(TRUE_PARAMS, ["1", "2", "4", "22", "44"], noise=0.0, seed=seed)
    t_c, t_o = step_time_terms(np.append(TRUE_PARAMS.as_array(), [shift_within, 0.0]),
                               *(np.asarray(a, dtype=np.float64) for a in (
                                   base.num_nodes, base.num_replicas, base.local_bsz)))
    rng = np.random.default_rng(seed)
    t_c = t_c * np.exp(0.03 * rng.standard_normal(len(t_c)))
    t_o = np.maximum(t_o * np.exp(0.03 * rng.standard_normal(len(t_o))), 1.001 * t_c)
    return dataclasses.replace(base, step_time=t_o, sync_time=t_o - t_c)


def test_multi_gpu_compute_time_may_differ_from_one_gpu() -> None:
    # Issue 18 item 4: GPUs sharing a host compute slower (or faster) than a lone one; the model
    # used to force one compute time on every configuration.
    profile = _shifted_profile(0.2, seed=3)
    posterior = fit_throughput_posterior(profile, num_steps=100, num_samples=400, seed=0,
                                         fallback=False)
    rows = {r["parameter"]: r for r in posterior.parameter_summary(0.9)}
    assert rows["shift_within"]["lower_90"] < 0.2 < rows["shift_within"]["upper_90"]
    assert rows["shift_within"]["lower_90"] > 0.1
    # One GPU and four within a node at the same micro-batch: both measured medians covered.
    one, four = (profile.subset((profile.placement == p) & (profile.local_bsz == 64))
                 for p in ("1", "4"))
    for measured in (one, four):
        pred = posterior.predict_step_time(measured.num_nodes, measured.num_replicas,
                                           measured.local_bsz, quantiles=(0.05, 0.95))
        assert pred["q0.05"][0] <= measured.step_time[0] <= pred["q0.95"][0]


def test_fleet_prior_learns_the_compute_shift_of_its_references() -> None:
    references = [(_shifted_profile(shift, seed), TRUE_PARAMS)
                  for seed, shift in enumerate((0.1, 0.2, 0.15))]
    assert compute_shifts(references[0][0])["shift_within"] == pytest.approx(0.1, abs=0.05)
    prior = StepTimePrior.from_population(references[0][0].subset(
        references[0][0].num_replicas == 1), references)
    assert prior.shift_loc["shift_within"] == pytest.approx(0.15, abs=0.03)
    assert 0.01 < prior.shift_scale["shift_within"] < 0.15
    assert prior.shift_loc["shift_across"] == pytest.approx(0.0, abs=0.03)  # none across nodes


def test_network_coordinates_are_a_volume_preserving_bijection(synthetic: StepTimeProfile
                                                               ) -> None:
    names = ["alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r", "gamma"]
    coordinates = NetworkCoordinates.for_data(StepTimeData.from_profile(synthetic), names)
    y = torch.randn(7, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    z = coordinates.to_unconstrained(y)
    assert torch.allclose(coordinates.from_unconstrained(z), y)
    jacobian = torch.autograd.functional.jacobian(coordinates.to_unconstrained, y)
    assert torch.isclose(torch.linalg.det(jacobian), torch.tensor(1.0, dtype=torch.float64))
    # The first coordinate of a pair is the log all-reduce time at the median retrogression.
    for a, b, log_c in coordinates.pairs:
        assert torch.isclose(y[a], torch.log(z[a].exp() + z[b].exp() * math.exp(log_c)))
    assert [names[a] for a, _, _ in coordinates.pairs] == ["alpha_n", "alpha_r"]


def _references(gammas: tuple[float, ...]) -> list[tuple[StepTimeProfile, ThroughputParams]]:
    """Synthetic reference models, one per ``gamma``, each with its true parameters as its fit."""
    references = []
    for seed, gamma in enumerate(gammas):
        params = dataclasses.replace(TRUE_PARAMS, gamma=gamma, alpha_r=0.04 * (1 + 0.3 * seed))
        references.append((synthetic_profile(params, ["1", "2", "4", "22"], noise=0.02,
                                             seed=seed), params))
    return references


def test_population_prior_is_the_predictive_of_a_new_member_with_gamma_learned() -> None:
    # Issue 18 item 4: the fleet prior took the references' spread as known (normal) and left
    # gamma uniform on [1, 10].
    references = _references((1.5, 2.0, 2.5, 1.8, 2.2))
    target = references[0][0].subset(references[0][0].num_replicas == 1)
    prior = StepTimePrior.from_population(target, references)
    assert prior.df == len(references) - 1
    logits = np.array([gamma_logit(params.gamma) for _, params in references])
    assert prior.gamma_loc == pytest.approx(logits.mean())
    assert prior.gamma_scale == pytest.approx(max(logits.std(ddof=1) * math.sqrt(1.2), 0.5))
    # Student-t with n - 1 degrees of freedom on the log scale (a log-t density in seconds).
    x = 0.03
    expected = scipy.stats.t(len(references) - 1, prior.loc["alpha_r"],
                             prior.scale["alpha_r"]).logpdf(math.log(x)) - math.log(x)
    assert float(prior.site("alpha_r").log_prob(torch.tensor(x, dtype=torch.float64))) \
        == pytest.approx(expected)
    # The default prior keeps gamma uniform.
    assert isinstance(StepTimePrior.for_profile(target).site("gamma"),
                      torch.distributions.Uniform)


def test_cold_start_borrows_the_fleet_overlap_exponent() -> None:
    # Fitted on one GPU only, nothing in the data speaks of gamma; references agreeing on it
    # (1.8-2.2) must narrow it, and with it the step time of a configuration whose all-reduce
    # takes about as long as its compute.
    references = _references((1.8, 2.0, 2.2, 1.9, 2.1))
    single = synthetic_profile(TRUE_PARAMS, ["1"], noise=0.02, seed=9)
    prior = StepTimePrior.from_population(single, references)
    fleet = fit_throughput_posterior(single, num_steps=100, num_samples=400, seed=0,
                                     prior=prior, check=False)
    low, high = np.quantile(fleet.samples["gamma"], [0.05, 0.95])
    assert 1.2 < low and high < 3.5


def test_robust_gamma_population_is_not_set_by_the_clip_of_a_reference_at_its_bound() -> None:
    # A reference fitted at gamma = 1 (no overlap) has an infinite log-odds, clipped by
    # gamma_logit: its mean and standard deviation follow the clip, median and MAD do not.
    references = _references((1.0, 1.8, 2.0, 2.2, 1.9))
    target = references[1][0].subset(references[1][0].num_replicas == 1)
    logits = np.array([gamma_logit(params.gamma) for _, params in references])
    plain = StepTimePrior.from_population(target, references)
    robust = StepTimePrior.from_population(target, references, robust_gamma=True)
    assert plain.gamma_scale > 3.0  # the clipped reference sets the spread
    assert robust.gamma_loc == pytest.approx(float(np.median(logits)))
    mad = float(np.median(np.abs(logits - np.median(logits)))) / 0.6745
    assert robust.gamma_scale == pytest.approx(max(mad * math.sqrt(1.2), 0.5))
    assert robust.gamma_scale < 1.0
    # Every other parameter is learned as before.
    assert robust.loc == plain.loc and robust.scale == plain.scale


def test_fleet_noise_prior_gives_a_cold_start_the_multi_node_scatter_of_its_references() -> None:
    # References scatter 0.08 (log units) on every row; the target's one-GPU rows scatter 0.01.
    # Fitted on one GPU, the default prior scales the 1-GPU scatter by a ratio near 1; the fleet
    # noise prior learns the multi-node scatter of the references instead.
    placements = ["1", "2", "4", "22", "44", "4444", "2222"]
    references = [(synthetic_profile(TRUE_PARAMS, placements, noise=0.08, seed=seed),
                   TRUE_PARAMS) for seed in range(4)]
    assert step_noise(*references[0])["across"] == pytest.approx(0.08, rel=0.5)
    single = synthetic_profile(TRUE_PARAMS, ["1"], noise=0.01, seed=9)
    base = StepTimePrior.for_profile(single)
    fleet = base.with_fleet_noise(references)
    assert fleet.noise_loc is not None and fleet.noise_scale is not None
    assert fleet.df == len(references) - 1 and base.noise_loc is None
    assert math.exp(fleet.noise_loc["across"]) == pytest.approx(0.08, rel=0.5)
    across = {}
    for name, prior in (("default", base), ("fleet", fleet)):
        posterior = fit_throughput_posterior(single, num_steps=100, num_samples=400, seed=0,
                                             prior=prior, check=False, fallback=False)
        across[name] = float(np.median(posterior.noise_scale("step", np.array([2]))))
    assert across["default"] < 0.03
    assert 0.04 < across["fleet"] < 0.16

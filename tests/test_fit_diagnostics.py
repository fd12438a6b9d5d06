"""Diagnostics acted on: an SVI fit whose PSIS k-hat is above 0.7 is flagged as unreliable, in the
command line's warning and JSON and on the report page."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from perfmodel.report import ModelFit, write_model_report
from perfmodel.throughput_bayes.diagnostics import ESS_USABLE, PARETO_K_USABLE, FitDiagnostics
from perfmodel.throughput_bayes.fit import fit_throughput_posterior
from perfmodel.throughput_bayes.laplace import posterior_mode
from perfmodel.throughput_bayes.nuts import mcmc_diagnostics
from tests.conftest import ALL_PLACEMENTS, TRUE_PARAMS, synthetic_profile


@pytest.mark.parametrize(("method", "k", "reliable"), [
    ("svi", 0.3, True), ("svi", PARETO_K_USABLE, True), ("svi", 0.71, False),
    ("svi", 2.5, False), ("svi", math.nan, False), ("nuts", math.nan, True)])
def test_reliability_follows_k_hat(method: str, k: float, reliable: bool) -> None:
    diagnostics = FitDiagnostics(method, 100, 1.0, k, 0.1)
    assert diagnostics.reliable is reliable
    warning = diagnostics.warning("m")
    assert (warning is None) is reliable
    if warning is not None and math.isnan(k):  # never "k-hat nan is above 0.7"
        assert warning == ("m: PSIS k-hat was not computed (the fit's check was off): how well "
                           "the SVI guide fits the posterior is unknown")
    elif warning is not None:
        assert warning.startswith("m: PSIS k-hat") and "--method nuts" in warning


def test_report_page_marks_unreliable_intervals(tmp_path: Path) -> None:
    profile = synthetic_profile(TRUE_PARAMS, ALL_PLACEMENTS[:6], noise=0.05, seed=2)
    posterior = fit_throughput_posterior(profile, num_steps=100, num_samples=200, seed=0,
                                         fallback=False)
    fit = ModelFit("synthetic", profile, posterior, None)
    measured = posterior.diagnostics
    as_fitted = write_model_report(fit, tmp_path / "as-fitted").read_text()
    assert ("Intervals: unreliable" in as_fitted) is not measured.reliable
    posterior.diagnostics = replace(measured, pareto_k=1.27)
    flagged = write_model_report(fit, tmp_path / "flagged").read_text()
    assert "- **Intervals: unreliable.** synthetic: PSIS k-hat 1.27 is above 0.7" in flagged
    assert "(90% credible intervals; unreliable, see the summary)" in flagged


def test_svi_above_the_k_hat_limit_falls_back_to_nuts_and_the_page_says_so(tmp_path: Path
                                                                          ) -> None:
    # Two single-node placements leave the across-node terms and much of the overlap exponent to
    # their priors (no Gaussian shape), and ten SVI steps leave the guide a poor proposal there
    # (k-hat 0.99).
    profile = synthetic_profile(TRUE_PARAMS, ["1", "2"], noise=0.05, seed=2)
    settings = {"num_steps": 10, "num_samples": 100, "seed": 0}
    svi = fit_throughput_posterior(profile, fallback=False, **settings)
    assert svi.diagnostics.method == "svi" and svi.diagnostics.pareto_k > PARETO_K_USABLE
    # A deliberately short chain: too few draws for ESS_USABLE, so it stays marked unreliable.
    nuts = fit_throughput_posterior(profile, fallback_warmup=20, fallback_samples=30, **settings)
    diagnostics = nuts.diagnostics
    assert (diagnostics.method, diagnostics.fallback_from) == ("nuts", "svi")
    assert diagnostics.pareto_k == svi.diagnostics.pareto_k  # the k-hat that caused it
    assert nuts.num_samples == 30 and not np.array_equal(nuts.theta, svi.theta[:30])
    # R-hat is computed; a site the short chain never moved counts as infinite, never NaN.
    assert 0 < diagnostics.ess_bulk_min < ESS_USABLE and diagnostics.r_hat_max > 1
    assert not diagnostics.reliable
    assert diagnostics.source == f"nuts (fallback: SVI PSIS k-hat {svi.diagnostics.pareto_k:.2f} > 0.7)"
    page = write_model_report(ModelFit("synthetic", profile, nuts, None), tmp_path).read_text()
    assert f"posterior by {diagnostics.source}" in page
    assert f"- **Intervals: unreliable.** synthetic: {diagnostics.source} did not mix (" in page
    assert f"bulk ESS {diagnostics.ess_bulk_min:.0f} < {ESS_USABLE}" in page
    assert "(90% credible intervals; unreliable, see the summary)" in page
    # Draws long enough for ArviZ's thresholds: the same fallback is trusted.
    assert replace(diagnostics, ess_bulk_min=2 * ESS_USABLE, r_hat_max=1.0, divergences=0).reliable
    assert not replace(diagnostics, ess_bulk_min=2 * ESS_USABLE, r_hat_max=1.0,
                       divergences=1).reliable


@pytest.mark.parametrize("stuck_first", [True, False])
def test_a_site_that_never_moves_has_infinite_r_hat_whatever_its_place(stuck_first: bool
                                                                         ) -> None:
    rng = np.random.default_rng(4)
    moving, stuck = rng.normal(size=200), np.full(200, 0.3)
    samples = {"stuck": stuck, "moving": moving} if stuck_first else {"moving": moving,
                                                                       "stuck": stuck}
    fields = mcmc_diagnostics(samples, divergences=0)
    assert fields["r_hat_max"] == math.inf
    diagnostics = FitDiagnostics("nuts", 0, 0.0, math.nan, 0.0, **fields)
    assert not diagnostics.reliable and "R-hat inf > " in (diagnostics.warning("m") or "")


def test_mode_search_stops_at_the_best_point_where_a_trial_leaves_the_support() -> None:
    import torch

    def log_density(z: torch.Tensor) -> torch.Tensor:
        # A scale exp(-40 z) underflows to 0 for large z, and the Normal refuses it; the
        # density rises towards z = 30, far outside, so L-BFGS's line search steps out.
        scale = torch.exp(-40.0 * z.sum())
        prior = torch.distributions.Normal(torch.tensor(0.0, dtype=torch.float64), scale,
                                           validate_args=True)
        return prior.log_prob(torch.zeros((), dtype=torch.float64)) - 0.01 * ((z - 30) ** 2).sum()

    start = torch.zeros(1, dtype=torch.float64)
    found = posterior_mode(log_density, start)
    assert torch.isfinite(found).all() and float(found) > 0
    assert float(log_density(found)) > float(log_density(start))

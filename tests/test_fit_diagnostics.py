"""Diagnostics acted on: an SVI fit whose PSIS k-hat is above 0.7 is flagged as unreliable, in the
command line's warning and JSON and on the report page."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from perfmodel.report import ModelFit, write_model_report
from perfmodel.throughput_bayes import (
    ESS_USABLE,
    PARETO_K_USABLE,
    FitDiagnostics,
    fit_throughput_posterior,
)
from tests.conftest import ALL_PLACEMENTS, TRUE_PARAMS, synthetic_profile


@pytest.mark.parametrize(("method", "k", "reliable"), [
    ("svi", 0.3, True), ("svi", PARETO_K_USABLE, True), ("svi", 0.71, False),
    ("svi", 2.5, False), ("svi", math.nan, False), ("nuts", math.nan, True)])
def test_reliability_follows_k_hat(method: str, k: float, reliable: bool) -> None:
    diagnostics = FitDiagnostics(method, 100, 1.0, k, 0.1)
    assert diagnostics.reliable is reliable
    warning = diagnostics.warning("m")
    assert (warning is None) is reliable
    if warning is not None:
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
    assert 0 < diagnostics.ess_bulk_min < ESS_USABLE and np.isfinite(diagnostics.r_hat_max)
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

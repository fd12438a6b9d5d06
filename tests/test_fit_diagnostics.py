"""Diagnostics acted on: an SVI fit whose PSIS k-hat is above 0.7 is flagged as unreliable, in the
command line's warning and JSON and on the report page."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from perfmodel.report import ModelFit, write_model_report
from perfmodel.throughput_bayes import PARETO_K_USABLE, FitDiagnostics, fit_throughput_posterior
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
    posterior = fit_throughput_posterior(profile, num_steps=100, num_samples=200, seed=0)
    fit = ModelFit("synthetic", profile, posterior, None)
    measured = posterior.diagnostics
    as_fitted = write_model_report(fit, tmp_path / "as-fitted").read_text()
    assert ("Warning:" in as_fitted) is not measured.reliable
    posterior.diagnostics = replace(measured, pareto_k=1.27)
    flagged = write_model_report(fit, tmp_path / "flagged").read_text()
    assert "**Warning: synthetic: PSIS k-hat 1.27 is above 0.7" in flagged
    assert "(90% credible intervals; unreliable, see the warning above)" in flagged

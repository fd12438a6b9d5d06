"""Reports a reader trusts (issue 17 item 9): a summary opens each model page, parameters carry
units, throughput plots show the measured points and mark extrapolation, efficiency plots show
the per-epoch estimates, a misfit is called out, and the calibration figure plots interval
coverage computed from the fit."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from perfmodel.efficiency import EfficiencyModel
from perfmodel.profiles import GradientTrace, StepTimeProfile
from perfmodel.report import (
    CALIBRATION_LEVELS,
    MAX_BANDS,
    MAX_POINTS,
    ModelFit,
    banded,
    extrapolated,
    interval_coverage,
    measured_throughput,
    misfit_check,
    per_epoch_noise,
    summary_lines,
    thinned,
    throughput_curves,
    write_model_report,
)
from perfmodel.throughput_bayes.fit import fit_throughput_posterior
from perfmodel.throughput_bayes.posterior import ThroughputPosterior
from tests.conftest import TRUE_PARAMS, synthetic_profile

#: Measured up to 2 nodes and 8 GPUs, micro-batches 16-128.
PLACEMENTS = ["1", "2", "4", "11", "22", "44"]


@pytest.fixture(scope="module")
def profile() -> StepTimeProfile:
    return synthetic_profile(TRUE_PARAMS, PLACEMENTS, noise=0.05, seed=4)


@pytest.fixture(scope="module")
def posterior(profile: StepTimeProfile) -> ThroughputPosterior:
    return fit_throughput_posterior(profile, num_steps=150, num_samples=300, seed=0, check=False)


def test_misfit_check_flags_a_mismatched_fit_and_not_a_good_one(
        profile: StepTimeProfile, posterior: ThroughputPosterior) -> None:
    good = ModelFit("good", profile, posterior, None)
    assert not misfit_check(good).misfit
    assert not any("**Misfit" in line for line in summary_lines(good))
    # The same fit against measurements that span 2x more than it predicts (like ncf's): the
    # small micro-batches ran at half the time, the large ones at 1.6 times.
    factor = np.where(profile.local_bsz <= 32, 0.5, 1.6)
    skewed = replace(profile, step_time=profile.step_time * factor,
                     sync_time=profile.sync_time * factor)
    bad = ModelFit("bad", skewed, posterior, None)
    check = misfit_check(bad)
    assert check.misfit and check.outside_90 > 0.2 and check.off > 0.2
    [line] = [line for line in summary_lines(bad) if line.startswith("- **Misfit")]
    assert "lie outside the 90% predictive interval" in line


def test_calibration_figure_plots_coverage_computed_from_the_fit(
        tmp_path: Path, profile: StepTimeProfile, posterior: ThroughputPosterior) -> None:
    fit = ModelFit("synthetic", profile, posterior, None)
    coverage = interval_coverage(fit, CALIBRATION_LEVELS)
    # The same quantity computed here from the posterior's predictive draws.
    draws = posterior.log_step_time_draws(profile.num_nodes, profile.num_replicas,
                                          profile.local_bsz, profile.accum_steps,
                                          placement=list(profile.placement))
    measured = np.log(profile.step_time)
    for level, value in zip(CALIBRATION_LEVELS, coverage, strict=True):
        lower, upper = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2], axis=0)
        assert value == np.mean((measured >= lower) & (measured <= upper))
    assert np.all(np.diff(coverage) >= 0)
    assert 0.75 <= coverage[-2] <= 1.0  # the model generated these data: near-calibrated at 90%
    page = write_model_report(fit, tmp_path).read_text()
    assert "![calibration: interval coverage against nominal level](synthetic-calibration.png)" \
        in page
    assert (tmp_path / "synthetic-calibration.png").read_bytes()[:4] == b"\x89PNG"
    summary = page.split("## Summary", 1)[1].split("##", 1)[0]
    assert (f"the 50% interval holds {interval_coverage(fit, (0.5,))[0]:.0%} and the 90% "
            f"interval {interval_coverage(fit, (0.9,))[0]:.0%}") in summary


def test_throughput_plot_data_mark_extrapolation_and_carry_the_measurements(
        profile: StepTimeProfile, posterior: ThroughputPosterior) -> None:
    assert not extrapolated(profile, 1, 4, 32) and not extrapolated(profile, 2, 8, 128)
    assert extrapolated(profile, 4, 16, 32)      # more nodes and GPUs than measured
    assert extrapolated(profile, 1, 4, 256)      # a micro-batch beyond the measured 128
    assert extrapolated(profile, 1, 3, 8)        # never measured with 3 GPUs: overall range
    assert not extrapolated(profile, 1, 3, 64)
    curves = {(c["nodes"], c["gpus"]): c for c in throughput_curves(
        ModelFit("synthetic", profile, posterior, None))}
    assert not np.any(curves[(1, 1)]["extrapolated"])
    assert np.all(curves[(4, 16)]["extrapolated"]) and np.all(curves[(16, 64)]["extrapolated"])
    batch, throughput = measured_throughput(profile, 1, 4)
    rows = (profile.num_nodes == 1) & (profile.num_replicas == 4)
    assert sorted(batch) == sorted(4.0 * profile.local_bsz[rows])
    np.testing.assert_allclose(sorted(throughput * profile.step_time[rows] / batch), 1.0)
    assert len(measured_throughput(profile, 4, 16)[0]) == 0


def _trace(batch_size: int, seed: int) -> GradientTrace:
    rng = np.random.default_rng(seed)
    epochs = 12
    progress = np.linspace(1, epochs, epochs) * 1000.0
    grad_sqr = np.exp(rng.normal(0, 0.2, epochs))
    grad_var = grad_sqr * np.exp(np.linspace(1, 3, epochs) + rng.normal(0, 0.3, epochs))
    grad_var[3] = 0.0  # an epoch without an estimate is not plotted
    return GradientTrace(batch_size, progress, np.arange(epochs), np.zeros(epochs), grad_sqr,
                         grad_var, source=f"validation-{batch_size}.csv")


def test_efficiency_plot_shows_the_per_epoch_estimates(
        tmp_path: Path, profile: StepTimeProfile, posterior: ThroughputPosterior) -> None:
    traces = {64: _trace(64, 0), 256: _trace(256, 1)}
    points = per_epoch_noise(traces)
    assert sorted(points) == [64, 256]
    x, phi = points[64]
    keep = traces[64].grad_var > 0
    np.testing.assert_allclose(phi, traces[64].grad_var[keep] / traces[64].grad_sqr[keep])
    np.testing.assert_allclose(x, traces[64].progress[keep] / traces[64].progress.max())
    fit = ModelFit("synthetic", profile, posterior, EfficiencyModel.fit(traces), traces)
    page = write_model_report(fit, tmp_path).read_text()
    assert "![efficiency](synthetic-efficiency.png)" in page
    assert "- **Efficiency**: from gradient statistics traced at batch sizes 64, 256" in page


def test_page_opens_with_a_summary_and_parameters_carry_units(
        tmp_path: Path, profile: StepTimeProfile, posterior: ThroughputPosterior) -> None:
    page = write_model_report(ModelFit("synthetic", profile, posterior, None),
                              tmp_path).read_text()
    title, summary, rest = page.split("\n\n", 2)
    assert title == "# synthetic: throughput and efficiency fit" and summary == "## Summary"
    bullets = rest.split("\n\n", 1)[0].splitlines()
    assert [b.split("**")[1] for b in bullets] == [
        "Fit", "Intervals: unreliable.", "Fit quality", "Calibration", "Measured"]
    assert "1-2 nodes, 1-8 GPUs, micro-batch 16-128 examples" in bullets[-1]
    units = {line.split("|")[1].strip(): line.split("|")[2].strip()
             for line in page.splitlines() if line.startswith("| ") and "|" in line[2:]}
    assert units["beta_c"] == "s/example" and units["alpha_n"] == "s"
    assert units["gamma"] == "1" and units["sigma_step"] == "log s"


def test_one_configuration_the_fit_misses_is_flagged_though_the_aggregate_looks_fine(
        profile: StepTimeProfile, posterior: ThroughputPosterior) -> None:
    """Three of the four measurements at 2 nodes / 8 GPUs (its three largest micro-batches) ran
    at 60% of the time the fit allows (a network faster than the model's), the others as
    before: the aggregate share outside the 90% interval stays under the overall threshold, the
    configuration is flagged on the page and in the summary's JSON."""
    at = (profile.num_nodes == 2) & (profile.num_replicas == 8)
    config = at & (profile.local_bsz > profile.local_bsz[at].min())
    assert config.sum() == 3 and at.sum() == 4
    factor = np.where(config, 0.6, 1.0)
    faster = replace(profile, step_time=profile.step_time * factor,
                     sync_time=profile.sync_time * factor)
    fit = ModelFit("faster", faster, posterior, None)
    check = misfit_check(fit)
    assert check.outside_90 <= 0.2 and check.misfit
    [missed] = check.missed
    assert (missed.nodes, missed.gpus, missed.below, missed.above) == (2, 8, 3, 0)
    assert fit.error_summary()["misfit_configurations"] == ["2x8"]
    [line] = [line for line in summary_lines(fit) if line.startswith("- **Misfit")]
    assert "at 2 nodes, 8 GPUs: 3 of 4 measurements outside the 90% interval (3 faster" in line
    good = ModelFit("good", profile, posterior, None)
    assert misfit_check(good).missed == [] and good.error_summary()["misfit_configurations"] == []


def test_plots_thin_points_and_shade_at_most_three_bands() -> None:
    assert thinned(5).tolist() == [0, 1, 2, 3, 4]
    many = thinned(648)
    assert len(many) == MAX_POINTS and many[0] == 0 and many[-1] == 647
    assert banded(5) == {0, 2, 4} and banded(2) == {0, 1} and len(banded(7)) == MAX_BANDS

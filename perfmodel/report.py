"""Fit and uncertainty reports: a Markdown page per model with tables and PNG plots.

:func:`fit_model` gathers everything a report shows for one model (point fit, posterior,
efficiency curves, error and calibration figures); :func:`write_model_report` renders it.

A page opens with a summary a reader can act on: how the posterior was obtained and whether its
intervals can be trusted, whether the fit visibly misses the measurements (:func:`misfit_check`),
how well its intervals are calibrated (:func:`interval_coverage`) and which configurations the
measurements span (beyond them the plots extrapolate, drawn dashed, :func:`extrapolated`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from perfmodel.efficiency import EfficiencyModel  # noqa: E402
from perfmodel.goodput import GoodputModel  # noqa: E402
from perfmodel.markdown import markdown_table  # noqa: E402
from perfmodel.profiles import GradientTrace, StepTimeProfile  # noqa: E402
from perfmodel.saved_fits import FitCache  # noqa: E402
from perfmodel.throughput import predict_step_time, rmsle  # noqa: E402
from perfmodel.throughput_bayes.diagnostics import PARETO_K_USABLE  # noqa: E402
from perfmodel.throughput_bayes.fit import fit_throughput_posterior  # noqa: E402
from perfmodel.throughput_bayes.posterior import ThroughputPosterior  # noqa: E402

#: Allocations drawn in the throughput and goodput plots: (nodes, GPUs in all).
PLOT_ALLOCATIONS: tuple[tuple[int, int], ...] = ((1, 1), (1, 4), (2, 8), (4, 16), (16, 64))
PROGRESS_FRACTIONS: tuple[float, ...] = (0.1, 0.5, 0.9)
#: At most this many bands (shaded intervals) per panel; the other curves are drawn as lines.
MAX_BANDS = 3
#: At most this many measured points per scatter panel (the others are thinned out evenly).
MAX_POINTS = 200
#: Nominal levels of the central predictive intervals in the calibration figure.
CALIBRATION_LEVELS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
#: The misfit check (:func:`misfit_check`): a fit misses its measurements when more than
#: MISFIT_SHARE of them lie outside the 90% predictive interval (calibration: 10% expected), or
#: more than MISFIT_SHARE are predicted more than MISFIT_RELATIVE_ERROR off by the predictive
#: median, or the median explains less than MISFIT_MIN_EXPLAINED of the variance of log step time
#: (a flat fit through measurements that vary).
MISFIT_SHARE = 0.2
MISFIT_RELATIVE_ERROR = 0.25
MISFIT_MIN_EXPLAINED = 0.5
#: The check per configuration (:func:`configuration_misfits`): a configuration (nodes, GPUs)
#: misses when as many of its measurements lie outside the 90% interval as a calibrated fit
#: (10% outside, independently) would give with probability below this (binomial tail).
MISFIT_CONFIGURATION_P = 0.01


@dataclass(frozen=True)
class ModelFit:
    """Everything the report of one model shows; ``traces`` are the gradient statistics the
    efficiency curves were fitted to (their per-epoch estimates are plotted)."""

    model: str
    profile: StepTimeProfile
    posterior: ThroughputPosterior
    efficiency: EfficiencyModel | None
    traces: dict[int, GradientTrace] | None = field(default=None, compare=False)

    @cached_property
    def log_step_draws(self) -> np.ndarray:
        """Posterior predictive draws of log step time at every measured row (its placement's
        learned offset kept), shape ``(S, N)``."""
        p = self.profile
        return self.posterior.log_step_time_draws(p.num_nodes, p.num_replicas, p.local_bsz,
                                                  p.accum_steps, placement=list(p.placement))

    def error_summary(self) -> dict[str, float | str | bool | list[str]]:
        """In-sample RMSLE of step time (point fit, posterior median), 50%/90% coverage, how the
        posterior was obtained and whether to trust it, and the misfit check's verdict with the
        configurations it misses (``misfit_configurations``: ``"NODESxGPUS"``, empty when
        none)."""
        p = self.profile
        point = predict_step_time(self.posterior.point, p.num_nodes, p.num_replicas,
                                  p.local_bsz, p.accum_steps)
        median = np.exp(np.median(self.log_step_draws, axis=0))
        coverage_50, coverage_90 = interval_coverage(self, (0.5, 0.9))
        diagnostics = self.posterior.diagnostics
        check = misfit_check(self)
        return {
            "model": self.model,
            "rows": len(p),
            "rmsle_point": rmsle(point, p.step_time),
            "rmsle_posterior": rmsle(median, p.step_time),
            "coverage_50": float(coverage_50),
            "coverage_90": float(coverage_90),
            "method": diagnostics.method,
            "fallback_from": diagnostics.fallback_from or "",
            "pareto_k": diagnostics.pareto_k,
            "reliable": diagnostics.reliable,
            "misfit": check.misfit,
            "misfit_configurations": [f"{c.nodes}x{c.gpus}" for c in check.missed],
            "fit_seconds": diagnostics.seconds,
        }


def interval_coverage(fit: ModelFit, levels: Sequence[float] | np.ndarray) -> np.ndarray:
    """Share of the measured step times inside the central predictive interval of each nominal
    level (0..1), shape ``(len(levels),)``: a calibrated fit has coverage near the level."""
    draws = fit.log_step_draws
    measured = np.log(fit.profile.step_time)
    coverage = []
    for level in levels:
        tail = (1 - level) / 2
        lower, upper = np.quantile(draws, [tail, 1 - tail], axis=0)
        coverage.append(np.mean((measured >= lower) & (measured <= upper)))
    return np.asarray(coverage, dtype=np.float64)


@dataclass(frozen=True)
class ConfigurationMisfit:
    """The measurements of one configuration against the 90% predictive interval.

    ``nodes``, ``gpus``: the configuration; ``measurements``: its rows; ``below``/``above``:
    how many lie below/above the interval (measured faster/slower than the fit allows);
    ``p_value``: the chance of at least ``below + above`` outside for a calibrated fit
    (binomial, 10% each); ``log_bias``: mean log(predictive median / measured) (> 0: the fit
    predicts slower than measured).
    """

    nodes: int
    gpus: int
    measurements: int
    below: int
    above: int
    p_value: float
    log_bias: float

    @property
    def misfit(self) -> bool:
        return self.p_value < MISFIT_CONFIGURATION_P

    def describe(self) -> str:
        """``"2 nodes, 8 GPUs: 5 of 5 measurements outside the 90% interval (5 faster)"``."""
        sides = ", ".join(f"{n} {word}" for n, word in ((self.below, "faster"),
                                                        (self.above, "slower")) if n)
        return (f"{self.nodes} node{'s' * (self.nodes != 1)}, {self.gpus} GPU"
                f"{'s' * (self.gpus != 1)}: {self.below + self.above} of {self.measurements} "
                f"measurements outside the 90% interval ({sides} than it)")


def configuration_misfits(fit: ModelFit) -> tuple[ConfigurationMisfit, ...]:
    """Each measured configuration (nodes, GPUs) against the 90% predictive interval, in
    order of nodes then GPUs (see :data:`MISFIT_CONFIGURATION_P`)."""
    from scipy.stats import binom

    p = fit.profile
    draws = fit.log_step_draws
    lower, upper = np.quantile(draws, [0.05, 0.95], axis=0)
    measured = np.log(p.step_time)
    median = np.median(draws, axis=0)
    rows = []
    for nodes, gpus in sorted({(int(n), int(g)) for n, g in zip(p.num_nodes, p.num_replicas,
                                                                 strict=True)}):
        same = (p.num_nodes == nodes) & (p.num_replicas == gpus)
        below = int(np.sum(measured[same] < lower[same]))
        above = int(np.sum(measured[same] > upper[same]))
        count = int(same.sum())
        rows.append(ConfigurationMisfit(
            nodes, gpus, count, below, above,
            float(binom.sf(below + above - 1, count, 0.1)),
            float(np.mean(median[same] - measured[same]))))
    return tuple(rows)


@dataclass(frozen=True)
class MisfitCheck:
    """The misfit check's measures (see :data:`MISFIT_SHARE`) and its verdict.

    ``outside_90``: share of measurements outside the 90% predictive interval; ``off``: share
    whose predictive median is more than :data:`MISFIT_RELATIVE_ERROR` off; ``explained``: share
    of the variance of log step time the median explains (1 - residual variance / variance);
    ``configurations``: the check per configuration (:func:`configuration_misfits`): an
    aggregate that looks fine can hide one configuration the fit misses entirely.
    """

    outside_90: float
    off: float
    explained: float
    configurations: tuple[ConfigurationMisfit, ...] = ()

    @property
    def missed(self) -> list[ConfigurationMisfit]:
        """The configurations the fit misses."""
        return [c for c in self.configurations if c.misfit]

    @property
    def reasons(self) -> list[str]:
        """One phrase per failed criterion."""
        reasons = []
        if self.outside_90 > MISFIT_SHARE:
            reasons.append(f"{self.outside_90:.0%} of the measurements lie outside the 90% "
                           "predictive interval (10% expected)")
        if self.off > MISFIT_SHARE:
            reasons.append(f"{self.off:.0%} are predicted more than "
                           f"{MISFIT_RELATIVE_ERROR:.0%} off")
        if self.explained < MISFIT_MIN_EXPLAINED:
            reasons.append(f"the fit explains only {max(self.explained, 0):.0%} of the variation "
                           "of the measured step times (a flat fit)")
        reasons += [f"at {c.describe()}" for c in self.missed]
        return reasons

    @property
    def misfit(self) -> bool:
        return bool(self.reasons)


def misfit_check(fit: ModelFit) -> MisfitCheck:
    """Whether the step-time fit visibly misses the measurements, overall or at one
    configuration (see :data:`MISFIT_SHARE`, :data:`MISFIT_CONFIGURATION_P`)."""
    measured = np.log(fit.profile.step_time)
    median = np.median(fit.log_step_draws, axis=0)
    variance = float(np.var(measured))
    explained = 1 - float(np.var(measured - median)) / variance if variance > 0 else 1.0
    off = float(np.mean(np.abs(np.exp(median - measured) - 1) > MISFIT_RELATIVE_ERROR))
    outside = 1 - float(interval_coverage(fit, (0.9,))[0])
    return MisfitCheck(outside, off, explained, configuration_misfits(fit))


def extrapolated(profile: StepTimeProfile, num_nodes: np.ndarray | int,
                 num_replicas: np.ndarray | int, local_bsz: np.ndarray | int) -> np.ndarray:
    """Where a configuration lies beyond the measurements, shape of the broadcast inputs: more
    nodes or GPUs than any measured run, or a micro-batch outside the range measured with that
    many GPUs (the whole profile's range where that GPU count was never measured)."""
    nodes, replicas, m = np.broadcast_arrays(np.asarray(num_nodes), np.asarray(num_replicas),
                                             np.asarray(local_bsz))
    beyond = (nodes > profile.num_nodes.max()) | (replicas > profile.num_replicas.max())
    low = np.full(m.shape, float(profile.local_bsz.min()))
    high = np.full(m.shape, float(profile.local_bsz.max()))
    for k in np.unique(replicas):
        same = profile.num_replicas == k
        if same.any():
            low[replicas == k] = profile.local_bsz[same].min()
            high[replicas == k] = profile.local_bsz[same].max()
    return beyond | (m < low) | (m > high)


def measured_range(profile: StepTimeProfile) -> str:
    """The configurations a profile spans, in words."""
    return (f"{int(profile.num_nodes.min())}-{int(profile.num_nodes.max())} nodes, "
            f"{int(profile.num_replicas.min())}-{int(profile.num_replicas.max())} GPUs, "
            f"micro-batch {int(profile.local_bsz.min())}-{int(profile.local_bsz.max())} examples")


def fit_model(profile: StepTimeProfile, traces: dict[int, GradientTrace] | None = None,
              method: str = "svi", seed: int = 0, cache: FitCache | None = None,
              fallback: bool = True) -> ModelFit:
    """Fit the throughput posterior (NUTS replacing an SVI guide that fails PSIS unless
    ``fallback`` is False), or reuse its saved fit from ``cache`` (and efficiency curves when
    ``traces`` are given: closed form, never saved)."""
    posterior = fit_throughput_posterior(profile, method=method, seed=seed, cache=cache,
                                         fallback=fallback)
    efficiency = EfficiencyModel.fit(traces) if traces else None
    return ModelFit(profile.model, profile, posterior, efficiency, traces or None)


def thinned(count: int, limit: int = MAX_POINTS) -> np.ndarray:
    """Indices of at most ``limit`` of ``count`` points, spread evenly (all when fewer)."""
    if count <= limit:
        return np.arange(count)
    return np.unique(np.linspace(0, count - 1, limit).round().astype(int))


def banded(count: int, limit: int = MAX_BANDS) -> set[int]:
    """Which of ``count`` curves get a band: all when at most ``limit``, else ``limit`` spread
    over them (first, last, evenly between)."""
    return set(thinned(count, limit).tolist())


def _log_axis(axis: Any) -> None:
    """Readable log ticks: labels at 1, 2, 5 per decade (at most eight), no minor labels."""
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0), numticks=8))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def _plot_step_times(fit: ModelFit, path: Path) -> None:
    p = fit.profile
    pred = fit.posterior.predict_step_time(p.num_nodes, p.num_replicas, p.local_bsz,
                                           p.accum_steps, placement=list(p.placement))
    fig, ax = plt.subplots(figsize=(5.5, 5))
    # Thinned in order of measured time, so the spread of the shown points is the data's.
    shown = np.argsort(p.step_time, kind="stable")[thinned(len(p))]
    err = np.stack([pred["median"] - pred["q0.05"], pred["q0.95"] - pred["median"]])[:, shown]
    label = ("posterior median, 90% interval" if len(shown) == len(p) else
             f"posterior median, 90% interval ({len(shown)} of {len(p)} measurements)")
    ax.errorbar(p.step_time[shown], pred["median"][shown], yerr=err, fmt="o", ms=2, alpha=0.35,
                lw=0.6, label=label)
    lo, hi = p.step_time.min() * 0.8, p.step_time.max() * 1.25
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="ideal")
    ax.set(xscale="log", yscale="log", xlabel="measured step time (s)",
           ylabel="predicted step time (s)", title=f"{fit.model}: step time")
    _log_axis(ax.xaxis)
    _log_axis(ax.yaxis)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def throughput_curves(fit: ModelFit, points: int = 24) -> list[dict[str, np.ndarray | int]]:
    """Per plotted allocation (:data:`PLOT_ALLOCATIONS`): ``nodes``, ``gpus``, micro-batch
    ``local_bsz`` over the measured range, total ``batch``, predictive throughput ``median``,
    ``q0.05``, ``q0.95`` (examples/s) and ``extrapolated`` (:func:`extrapolated`), arrays of
    shape ``(points,)``."""
    p = fit.profile
    m = np.unique(np.geomspace(int(p.local_bsz.min()), int(p.local_bsz.max()), points).round())
    curves: list[dict[str, np.ndarray | int]] = []
    for nodes, gpus in PLOT_ALLOCATIONS:
        tp = fit.posterior.predict_throughput(np.full_like(m, nodes), np.full_like(m, gpus), m)
        curves.append({"nodes": nodes, "gpus": gpus, "local_bsz": m, "batch": gpus * m,
                       "median": tp["median"], "q0.05": tp["q0.05"], "q0.95": tp["q0.95"],
                       "extrapolated": extrapolated(p, nodes, gpus, m)})
    return curves


def measured_throughput(profile: StepTimeProfile, nodes: int, gpus: int
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Total batch (examples) and measured throughput (examples/s) of every measured row on
    ``nodes`` nodes with ``gpus`` GPUs, each ``(n,)``."""
    rows = (profile.num_nodes == nodes) & (profile.num_replicas == gpus)
    batch = (gpus * profile.local_bsz[rows] * (profile.accum_steps[rows] + 1)).astype(float)
    return batch, batch / profile.step_time[rows]


def _draw_segments(ax: plt.Axes, x: np.ndarray, y: np.ndarray, beyond: np.ndarray,
                   color: str, label: str) -> None:
    # Solid over the measured range, dashed where the curve extrapolates (segments touching an
    # extrapolated point are dashed).
    ax.plot(np.where(beyond, np.nan, x), y, color=color, label=label)
    edge = beyond | np.r_[beyond[1:], False] | np.r_[False, beyond[:-1]]
    ax.plot(np.where(edge, x, np.nan), y, color=color, ls="--")


def _plot_throughput_goodput(fit: ModelFit, path: Path) -> None:
    fig, axes = plt.subplots(1, 2 if fit.efficiency else 1, figsize=(11 if fit.efficiency
                                                                       else 5.5, 4.5))
    axes = np.atleast_1d(axes)
    any_beyond = False
    curves = throughput_curves(fit)
    with_band = banded(len(curves))
    for i, (curve, color) in enumerate(zip(curves, plt.rcParams["axes.prop_cycle"].by_key()[
            "color"], strict=False)):
        nodes, gpus = int(np.asarray(curve["nodes"])), int(np.asarray(curve["gpus"]))
        batch = np.asarray(curve["batch"], dtype=float)
        beyond = np.asarray(curve["extrapolated"], dtype=bool)
        any_beyond |= bool(beyond.any())
        _draw_segments(axes[0], batch, np.asarray(curve["median"]), beyond, color,
                       f"{nodes} node(s), {gpus} GPU(s)")
        if i in with_band:
            axes[0].fill_between(batch, curve["q0.05"], curve["q0.95"], color=color,
                                 alpha=0.2)
        measured_batch, measured = measured_throughput(fit.profile, nodes, gpus)
        shown = thinned(len(measured), MAX_POINTS // len(curves))
        axes[0].scatter(measured_batch[shown], measured[shown], s=10, color=color,
                        edgecolor="k", lw=0.3, zorder=3)
        if fit.efficiency:
            eff = fit.efficiency.efficiency(batch, 0.5)
            eff_lo = fit.efficiency.efficiency(batch, 0.5, quantile=0.05)
            eff_hi = fit.efficiency.efficiency(batch, 0.5, quantile=0.95)
            _draw_segments(axes[1], batch, np.asarray(curve["median"]) * eff, beyond, color,
                           f"{nodes} node(s), {gpus} GPU(s)")
            if i in with_band:
                axes[1].fill_between(batch, np.asarray(curve["q0.05"]) * eff_lo,
                                     np.asarray(curve["q0.95"]) * eff_hi, color=color,
                                     alpha=0.2)
    axes[0].set(xscale="log", yscale="log", xlabel="total batch size (examples)",
                ylabel="throughput (examples/s)",
                title=f"{fit.model}: throughput, 90% band"
                      + ("" if len(with_band) == len(curves) else f" ({len(with_band)} shaded)"))
    handles, _ = axes[0].get_legend_handles_labels()
    handles.append(Line2D([], [], ls="none", marker="o", ms=4, color="grey", label="measured"))
    if any_beyond:
        handles.append(Line2D([], [], ls="--", color="grey", label="extrapolated"))
    axes[0].legend(handles=handles, fontsize=7)
    if fit.efficiency:
        axes[1].set(xscale="log", yscale="log", xlabel="total batch size (examples)",
                    ylabel="goodput (examples/s at initial batch)",
                    title="goodput at 50% of training, 90% band")
    for ax in axes:
        _log_axis(ax.xaxis)
        _log_axis(ax.yaxis)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def per_epoch_noise(traces: dict[int, GradientTrace]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per traced batch size: training fraction (0..1 of the trace's last epoch) and the epoch's
    estimate of the noise-to-signal ratio ``grad_var / grad_sqr``, epochs with both positive."""
    points = {}
    for batch, trace in sorted(traces.items()):
        keep = np.isfinite(trace.log_noise_to_signal)
        points[batch] = (trace.progress[keep] / trace.progress.max(),
                         np.exp(trace.log_noise_to_signal[keep]))
    return points


def _plot_efficiency(fit: ModelFit, path: Path) -> None:
    assert fit.efficiency is not None
    eff = fit.efficiency
    max_batch = max(eff.curves)
    batch = np.geomspace(eff.init_bsz, max_batch * 2, 40)
    fig, axes = plt.subplots(1, 2 if fit.traces else 1, figsize=(11 if fit.traces else 5.5, 4.5))
    axes = np.atleast_1d(axes)
    ax = axes[0]
    for fraction in PROGRESS_FRACTIONS:
        mid = eff.efficiency(batch, fraction)
        line, = ax.plot(batch, mid, label=f"{fraction:.0%} of training")
        ax.fill_between(batch, eff.efficiency(batch, fraction, 0.05),
                        eff.efficiency(batch, fraction, 0.95), color=line.get_color(), alpha=0.2)
    ax.axvline(max_batch, color="grey", lw=0.8, ls=":", label="largest traced batch")
    ax.set(xscale="log", xlabel="total batch size (examples)", ylabel="statistical efficiency",
           ylim=(0, 1.05), title=f"{fit.model}: efficiency, 90% band (M0={eff.init_bsz})")
    ax.legend(fontsize=8)
    if fit.traces:
        ax = axes[1]
        progress = np.linspace(0, 1, 50)
        noise = per_epoch_noise(fit.traces)
        with_band = banded(len(noise))
        for i, (batch_size, (x, phi)) in enumerate(noise.items()):
            curve = eff.curves[batch_size]
            line, = ax.plot(progress, curve.noise_to_signal(progress),
                            label=f"batch {batch_size}: fit"
                                  + (", 90% band" if i in with_band else ""))
            if i in with_band:
                ax.fill_between(progress, curve.noise_to_signal(progress, 0.05),
                                curve.noise_to_signal(progress, 0.95), color=line.get_color(),
                                alpha=0.2)
            ax.scatter(x, phi, s=8, color=line.get_color(), edgecolor="k", lw=0.3, zorder=3)
        ax.set(yscale="log", xlabel="fraction of training", ylabel="noise-to-signal grad_var/grad_sqr",
               title="per-epoch estimates (dots) and the fitted curve")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_calibration(fit: ModelFit, path: Path) -> None:
    levels = np.asarray(CALIBRATION_LEVELS)
    coverage = interval_coverage(fit, levels)
    fig, ax = plt.subplots(figsize=(4.8, 4.5))
    ax.plot([0, 1], [0, 1], "k--", lw=1, label="calibrated")
    ax.plot(levels, coverage, "o-", label="step time, in-sample")
    ax.set(xlim=(0, 1), ylim=(0, 1.02), xlabel="nominal level of the central interval",
           ylabel="share of measurements inside",
           title=f"{fit.model}: predictive interval coverage")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def efficiency_table(efficiency: EfficiencyModel, batch_sizes: Sequence[int] | None = None
                     ) -> list[dict[str, float]]:
    """Efficiency (median and 90% interval) per batch size and training fraction (0..1)."""
    batch_sizes = batch_sizes or sorted(efficiency.curves)
    rows: list[dict[str, float]] = []
    for fraction in PROGRESS_FRACTIONS:
        for batch in batch_sizes:
            rows.append({
                "progress": float(fraction),  # fraction of training, 0..1
                "batch_size": int(batch),
                "efficiency": float(efficiency.efficiency(batch, fraction)),
                "lower_90": float(efficiency.efficiency(batch, fraction, 0.05)),
                "upper_90": float(efficiency.efficiency(batch, fraction, 0.95)),
            })
    return rows


def best_batch_table(fit: ModelFit, max_batch_size: int | None = None
                     ) -> list[dict[str, float | str]]:
    """Goodput-maximising batch per plotted allocation, at half of training."""
    assert fit.efficiency is not None
    p = fit.profile
    curve = fit.efficiency.curve()
    model = GoodputModel.from_noise_to_signal(fit.posterior.point, curve.noise_to_signal(0.5),
                                              fit.efficiency.init_bsz)
    nodes = np.array([a[0] for a in PLOT_ALLOCATIONS])
    gpus = np.array([a[1] for a in PLOT_ALLOCATIONS])
    limit = max_batch_size or max(fit.efficiency.curves)
    choice = model.optimize(nodes, gpus, limit, (int(p.local_bsz.min()), int(p.local_bsz.max())))
    return [{"nodes": str(n), "gpus": str(g), "local_bsz": str(m), "accum_steps": str(s),
             "batch_size": str(b), "goodput": float(v)}
            for n, g, m, s, b, v in zip(nodes, gpus, choice.local_bsz, choice.accum_steps,
                                        choice.batch_size, choice.goodput, strict=True)]


def summary_lines(fit: ModelFit) -> list[str]:
    """The page's opening summary, one Markdown bullet per point: fit and trust, misfit,
    calibration, measured range, efficiency."""
    diag = fit.posterior.diagnostics
    p = fit.profile
    sources = ", ".join(Path(s).name for s in p.sources)
    lines = [f"- **Fit**: {len(p)} step-time measurements ({sources}); posterior by "
             f"{diag.source}, {diag.seconds:.1f} s."]
    if diag.reliable:
        lines.append("- **Intervals**: trusted (" + (
            f"PSIS k-hat {diag.pareto_k:.2f} <= {PARETO_K_USABLE}" if diag.method == "svi" else
            f"NUTS: {diag.divergences} divergences, bulk ESS {diag.ess_bulk_min:.0f}, R-hat "
            f"{diag.r_hat_max:.3f}") + ").")
    else:
        lines.append(f"- **Intervals: unreliable.** {diag.warning(fit.model)}.")
    check = misfit_check(fit)
    if check.misfit:
        lines.append(f"- **Misfit: the step-time fit misses the measurements**: "
                     f"{'; '.join(check.reasons)}. Predictions from it are doubtful; see the "
                     "step-time figure.")
    else:
        lines.append(f"- **Fit quality**: no misfit ({check.outside_90:.0%} of measurements "
                     f"outside the 90% interval, {check.off:.0%} predicted more than "
                     f"{MISFIT_RELATIVE_ERROR:.0%} off, {check.explained:.0%} of the variation "
                     "explained).")
    coverage_50, coverage_90 = interval_coverage(fit, (0.5, 0.9))
    lines.append(f"- **Calibration** (in-sample): the 50% interval holds {coverage_50:.0%} and "
                 f"the 90% interval {coverage_90:.0%} of the measurements.")
    lines.append(f"- **Measured**: {measured_range(p)}; beyond these the plots extrapolate "
                 "(dashed lines).")
    if fit.efficiency is not None:
        traced = ", ".join(str(b) for b in fit.efficiency.curves)
        lines.append(f"- **Efficiency**: from gradient statistics traced at batch sizes {traced} "
                     f"(initial batch {fit.efficiency.init_bsz}).")
    return lines


def configuration_table(fit: ModelFit) -> list[dict[str, object]]:
    """One row per measured configuration (:func:`configuration_misfits`): nodes, GPUs,
    measurements, outside below/above, the binomial tail, the median's bias and the flag."""
    return [{"nodes": c.nodes, "gpus": c.gpus, "measurements": c.measurements,
             "faster_than_interval": c.below, "slower_than_interval": c.above,
             "p_value": c.p_value, "median_bias_pct": 100.0 * (np.exp(c.log_bias) - 1),
             "misfit": "yes" if c.misfit else "no"} for c in misfit_check(fit).configurations]


def write_model_report(fit: ModelFit, out_dir: str | Path) -> Path:
    """Write ``<model>.md`` and its PNG plots into ``out_dir``; returns the Markdown path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = fit.model
    _plot_step_times(fit, out / f"{name}-step-time.png")
    _plot_throughput_goodput(fit, out / f"{name}-throughput-goodput.png")
    _plot_calibration(fit, out / f"{name}-calibration.png")
    diag = fit.posterior.diagnostics
    parts = [
        f"# {name}: throughput and efficiency fit",
        "## Summary",
        "\n".join(summary_lines(fit)),
        "## Step-time parameters (90% credible intervals"
        f"{'' if diag.reliable else '; unreliable, see the summary'})",
        markdown_table(fit.posterior.parameter_summary()),
        "## Error and calibration (in-sample)",
        markdown_table([fit.error_summary()]),
        "## Per configuration (measurements outside the 90% interval; a configuration is "
        f"flagged when a calibrated fit would leave that many outside with probability below "
        f"{MISFIT_CONFIGURATION_P:g})",
        markdown_table(configuration_table(fit)),
        f"![step time]({name}-step-time.png)",
        f"![calibration: interval coverage against nominal level]({name}-calibration.png)",
        f"![throughput and goodput]({name}-throughput-goodput.png)",
    ]
    if fit.efficiency is not None:
        _plot_efficiency(fit, out / f"{name}-efficiency.png")
        parts += [
            "## Statistical efficiency (median and 90% interval)",
            markdown_table(efficiency_table(fit.efficiency)),
            f"![efficiency]({name}-efficiency.png)",
            "## Goodput-maximising batch at 50% of training",
            markdown_table(best_batch_table(fit)),
        ]
    path = out / f"{name}.md"
    path.write_text("\n\n".join(parts) + "\n")
    return path


def write_index(fits: Sequence[ModelFit], reports: Sequence[Path], out_dir: str | Path) -> Path:
    """Write ``index.md`` summarising every model's errors, linking the per-model pages."""
    out = Path(out_dir)
    rows = [fit.error_summary() for fit in fits]
    links = "\n".join(f"- [{fit.model}]({path.name})" for fit, path in
                      zip(fits, reports, strict=True))
    text = ("# bayes-sched performance-model report\n\n" + markdown_table(rows) + "\n\n" + links
            + "\n")
    path = out / "index.md"
    path.write_text(text)
    return path

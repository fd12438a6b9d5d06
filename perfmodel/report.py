"""Fit and uncertainty reports: a Markdown page per model with tables and PNG plots.

:func:`fit_model` gathers everything a report shows for one model (point fit, posterior,
efficiency curves, error and calibration figures); :func:`write_model_report` renders it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from perfmodel.efficiency import EfficiencyModel  # noqa: E402
from perfmodel.goodput import GoodputModel  # noqa: E402
from perfmodel.profiles import GradientTrace, StepTimeProfile  # noqa: E402
from perfmodel.saved_fits import FitCache  # noqa: E402
from perfmodel.throughput import predict_step_time, rmsle  # noqa: E402
from perfmodel.throughput_bayes import (  # noqa: E402
    PARETO_K_USABLE,
    ThroughputPosterior,
    fit_throughput_posterior,
)

#: Allocations drawn in the throughput and goodput plots: (nodes, GPUs in all).
PLOT_ALLOCATIONS: tuple[tuple[int, int], ...] = ((1, 1), (1, 4), (2, 8), (4, 16), (16, 64))
PROGRESS_FRACTIONS: tuple[float, ...] = (0.1, 0.5, 0.9)


@dataclass(frozen=True)
class ModelFit:
    """Everything the report of one model shows."""

    model: str
    profile: StepTimeProfile
    posterior: ThroughputPosterior
    efficiency: EfficiencyModel | None

    def error_summary(self) -> dict[str, float | str]:
        """In-sample RMSLE of step time (point fit, posterior median) and 50%/90% coverage."""
        p = self.profile
        point = predict_step_time(self.posterior.point, p.num_nodes, p.num_replicas,
                                  p.local_bsz, p.accum_steps)
        pred = self.posterior.predict_step_time(p.num_nodes, p.num_replicas, p.local_bsz,
                                                p.accum_steps, (0.05, 0.25, 0.75, 0.95),
                                                placement=list(p.placement))
        return {
            "model": self.model,
            "rows": len(p),
            "rmsle_point": rmsle(point, p.step_time),
            "rmsle_posterior": rmsle(pred["median"], p.step_time),
            "coverage_50": _inside(p.step_time, pred["q0.25"], pred["q0.75"]),
            "coverage_90": _inside(p.step_time, pred["q0.05"], pred["q0.95"]),
            "pareto_k": self.posterior.diagnostics.pareto_k,
            "fit_seconds": self.posterior.diagnostics.seconds,
        }


def _inside(values: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> float:
    return float(np.mean((values >= lower) & (values <= upper)))


def fit_model(profile: StepTimeProfile, traces: dict[int, GradientTrace] | None = None,
              method: str = "svi", seed: int = 0, cache: FitCache | None = None) -> ModelFit:
    """Fit the throughput posterior, or reuse its saved fit from ``cache`` (and efficiency curves
    when ``traces`` are given: closed form, never saved)."""
    posterior = fit_throughput_posterior(profile, method=method, seed=seed, cache=cache)
    efficiency = EfficiencyModel.fit(traces) if traces else None
    return ModelFit(profile.model, profile, posterior, efficiency)


def _plot_step_times(fit: ModelFit, path: Path) -> None:
    p = fit.profile
    pred = fit.posterior.predict_step_time(p.num_nodes, p.num_replicas, p.local_bsz,
                                           p.accum_steps, placement=list(p.placement))
    fig, ax = plt.subplots(figsize=(5.5, 5))
    err = np.stack([pred["median"] - pred["q0.05"], pred["q0.95"] - pred["median"]])
    ax.errorbar(p.step_time, pred["median"], yerr=err, fmt="o", ms=2, alpha=0.35, lw=0.6,
                label="posterior median, 90% interval")
    lo, hi = p.step_time.min() * 0.8, p.step_time.max() * 1.25
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="ideal")
    ax.set(xscale="log", yscale="log", xlabel="measured step time (s)",
           ylabel="predicted step time (s)", title=f"{fit.model}: step time")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_throughput_goodput(fit: ModelFit, path: Path) -> None:
    p = fit.profile
    lo_m, hi_m = int(p.local_bsz.min()), int(p.local_bsz.max())
    fig, axes = plt.subplots(1, 2 if fit.efficiency else 1, figsize=(11 if fit.efficiency
                                                                       else 5.5, 4.5))
    axes = np.atleast_1d(axes)
    for nodes, gpus in PLOT_ALLOCATIONS:
        m = np.unique(np.geomspace(lo_m, hi_m, 24).round())
        tp = fit.posterior.predict_throughput(np.full_like(m, nodes), np.full_like(m, gpus), m)
        batch = gpus * m
        line, = axes[0].plot(batch, tp["median"], label=f"{nodes} node(s), {gpus} GPU(s)")
        axes[0].fill_between(batch, tp["q0.05"], tp["q0.95"], color=line.get_color(), alpha=0.2)
        if fit.efficiency:
            eff = fit.efficiency.efficiency(batch, 0.5)
            eff_lo = fit.efficiency.efficiency(batch, 0.5, quantile=0.05)
            eff_hi = fit.efficiency.efficiency(batch, 0.5, quantile=0.95)
            axes[1].plot(batch, tp["median"] * eff, color=line.get_color())
            axes[1].fill_between(batch, tp["q0.05"] * eff_lo, tp["q0.95"] * eff_hi,
                                 color=line.get_color(), alpha=0.2)
    axes[0].set(xscale="log", yscale="log", xlabel="total batch size (examples)",
                ylabel="throughput (examples/s)", title=f"{fit.model}: throughput, 90% band")
    axes[0].legend(fontsize=7)
    if fit.efficiency:
        axes[1].set(xscale="log", yscale="log", xlabel="total batch size (examples)",
                    ylabel="goodput (examples/s at initial batch)",
                    title="goodput at 50% of training, 90% band")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_efficiency(fit: ModelFit, path: Path) -> None:
    assert fit.efficiency is not None
    eff = fit.efficiency
    max_batch = max(eff.curves)
    batch = np.geomspace(eff.init_bsz, max_batch * 2, 40)
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    for fraction in PROGRESS_FRACTIONS:
        mid = eff.efficiency(batch, fraction)
        line, = ax.plot(batch, mid, label=f"{fraction:.0%} of training")
        ax.fill_between(batch, eff.efficiency(batch, fraction, 0.05),
                        eff.efficiency(batch, fraction, 0.95), color=line.get_color(), alpha=0.2)
    ax.set(xscale="log", xlabel="total batch size (examples)", ylabel="statistical efficiency",
           ylim=(0, 1.05), title=f"{fit.model}: efficiency, 90% band (M0={eff.init_bsz})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _markdown_table(rows: Sequence[dict], float_format: str = "{:.4g}") -> str:
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [float_format.format(v) if isinstance(v, float) else str(v)
                 for v in row.values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


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


def write_model_report(fit: ModelFit, out_dir: str | Path) -> Path:
    """Write ``<model>.md`` and its PNG plots into ``out_dir``; returns the Markdown path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = fit.model
    _plot_step_times(fit, out / f"{name}-step-time.png")
    _plot_throughput_goodput(fit, out / f"{name}-throughput-goodput.png")
    diag = fit.posterior.diagnostics
    parts = [
        f"# {name}: throughput and efficiency fit",
        f"Profile: {len(fit.profile)} measurements from "
        f"{', '.join(Path(s).name for s in fit.profile.sources)}. Posterior by {diag.method} in "
        f"{diag.seconds:.2f} s (PSIS k-hat {diag.pareto_k:.2f}: at most {PARETO_K_USABLE} means "
        "the SVI guide is usable as a posterior).",
        *([] if diag.reliable else [f"**Warning: {diag.warning(name)}.**"]),
        "## Step-time parameters (90% credible intervals"
        f"{'' if diag.reliable else '; unreliable, see the warning above'})",
        _markdown_table(fit.posterior.parameter_summary()),
        "## Error and calibration (in-sample)",
        _markdown_table([fit.error_summary()]),
        f"![step time]({name}-step-time.png)",
        f"![throughput and goodput]({name}-throughput-goodput.png)",
    ]
    if fit.efficiency is not None:
        _plot_efficiency(fit, out / f"{name}-efficiency.png")
        parts += [
            "## Statistical efficiency (median and 90% interval)",
            _markdown_table(efficiency_table(fit.efficiency)),
            f"![efficiency]({name}-efficiency.png)",
            "## Goodput-maximising batch at 50% of training",
            _markdown_table(best_batch_table(fit)),
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
    text = ("# bayes-sched performance-model report\n\n" + _markdown_table(rows) + "\n\n" + links
            + "\n")
    path = out / "index.md"
    path.write_text(text)
    return path

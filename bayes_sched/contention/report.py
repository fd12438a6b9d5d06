"""The contention report: Markdown with PNG plots, written from a posterior summary.

Plots: posterior load over capacity per resource over time (median and 90% band) for the nodes
with the likeliest bottlenecks; raw vs denoised counters (DRAM, multiplexed, and one GPU's PCIe)
with intervals. A table lists the most likely bottlenecks.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never open a window

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import xarray as xr  # noqa: E402

from bayes_sched.contention.inference import bottlenecks  # noqa: E402
from bayes_sched.topology import RESOURCE_KINDS  # noqa: E402
from counters import schema  # noqa: E402

REPORT_NAME = "contention.md"


def _seconds(posterior: xr.Dataset) -> np.ndarray:
    seconds = schema.time_to_seconds(posterior[schema.TIME].values)
    return seconds - seconds[0]


def plot_resources(posterior: xr.Dataset, node: str, path: Path) -> Path:
    """Posterior load over capacity of every resource of ``node`` over time."""
    seconds = _seconds(posterior)
    util = posterior["utilization"].sel(node=node)
    fig, ax = plt.subplots(figsize=(9, 4))
    for resource in posterior["resource"].values:
        series = util.sel(resource=resource)
        line = ax.plot(seconds, series.sel(quantile=0.5), label=str(resource), lw=1.2)
        ax.fill_between(
            seconds,
            series.sel(quantile=0.05),
            series.sel(quantile=0.95),
            color=line[0].get_color(),
            alpha=0.2,
            lw=0,
        )
    ax.axhline(posterior.attrs.get("saturation", 0.9), color="k", ls=":", lw=1)
    ax.set(
        xlabel="time in window (s)",
        ylabel="load / capacity",
        title=f"{node}: posterior load per resource (median, 90% band)",
    )
    ax.legend(ncol=4, fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_denoised(posterior: xr.Dataset, node: str, path: Path) -> Path:
    """Raw vs denoised DRAM traffic (multiplexed counters) and PCIe traffic of GPU 0 on ``node``."""
    seconds = _seconds(posterior)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    pairs = [
        ("dram_rate", "raw_dram_rate", {}, "host DRAM traffic (perf, multiplexed)"),
        (
            "pcie_rate",
            "raw_pcie_rate",
            {"device": int(posterior[schema.DEVICE].values[0])},
            "PCIe traffic of GPU 0 (NVML)",
        ),
    ]
    for ax, (name, raw, where, title) in zip(axes, pairs, strict=True):
        denoised = posterior[name].sel({"node": node, **where}) / 1e9
        ax.plot(
            seconds,
            posterior[raw].sel({"node": node, **where}) / 1e9,
            ".",
            ms=4,
            color="0.5",
            label="raw",
        )
        ax.plot(seconds, denoised.sel(quantile=0.5), color="C3", label="denoised (median)")
        ax.fill_between(
            seconds,
            denoised.sel(quantile=0.05),
            denoised.sel(quantile=0.95),
            color="C3",
            alpha=0.25,
            lw=0,
            label="90% interval",
        )
        ax.set(xlabel="time in window (s)", ylabel="GB/s", title=f"{node}: {title}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write_report(
    posterior: xr.Dataset,
    out_dir: str | Path,
    source: str = "",
    max_nodes: int = 4,
    jobs: pd.DataFrame | None = None,
) -> Path:
    """Write ``contention.md`` and its PNGs into ``out_dir`` (created); returns the report path.

    Files are written under temporary names and renamed, so an interrupted run leaves no
    half-written report over a previous one.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = bottlenecks(posterior, limit=10)
    nodes: list[str] = []
    for row in rows:
        if str(row["node"]) not in nodes:
            nodes.append(str(row["node"]))
    nodes = nodes[:max_nodes]
    lines = [
        "# Contention report",
        "",
        f"Source: `{source}`" if source else "",
        f"Window: {posterior.sizes[schema.TIME]} samples x {posterior.sizes[schema.NODE]} node(s), "
        f"from {np.datetime_as_string(posterior[schema.TIME].values[0], unit='s')} UTC.",
        "",
        "A resource is *contended* when it runs at "
        f"{posterior.attrs.get('saturation', 0.9):.0%} of its capacity or more for at least half "
        "the window; P is the posterior probability of that. Loads are posterior medians with 90% "
        "intervals, averaged over the window. Where counters were missing, intervals are wide: "
        "the model says how little it knows rather than guessing.",
        "",
        "## Most likely bottlenecks",
        "",
        "| node | resource | P(contended) | load / capacity | 90% interval |",
        "|---|---|---:|---:|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['node']} | {row['resource']} | {row['p_contended']:.2f} | "
            f"{row['utilization']:.2f} | {row['utilization_lower_90']:.2f} - "
            f"{row['utilization_upper_90']:.2f} |"
        )
    lines += ["", "## Posterior load per resource", ""]
    written: list[tuple[Path, Path]] = []
    for node in nodes:
        for kind, plot in (("resources", plot_resources), ("denoised", plot_denoised)):
            final = out / f"{node}_{kind}.png"
            temporary = out / f".{node}_{kind}.png.tmp.png"
            plot(posterior, node, temporary)
            written.append((temporary, final))
        lines.append(f"![{node} resources]({node}_resources.png)")
        lines.append("")
    if jobs is not None and len(jobs):
        lines += _job_lines(jobs)
    lines += ["## Counters: raw vs denoised", ""]
    for node in nodes:
        lines.append(f"![{node} denoised]({node}_denoised.png)")
        lines.append("")
    report = out / REPORT_NAME
    temporary_report = out / f".{REPORT_NAME}.tmp"
    temporary_report.write_text("\n".join(line for line in lines) + "\n")
    for temporary, final in written:
        temporary.replace(final)
    temporary_report.replace(report)
    return report


def _job_lines(jobs: pd.DataFrame, limit: int = 15) -> list[str]:
    """A table of the jobs most slowed by contention: sensitivity per resource kind (log slowdown
    when that resource is saturated), median and 90% interval."""
    kinds = [k for k in RESOURCE_KINDS if f"sensitivity_{k}" in jobs.columns]
    worst = jobs[[f"sensitivity_{k}" for k in kinds]].max(axis=1)
    lines = [
        "## Jobs: sensitivity to each resource",
        "",
        "Log slowdown of the job when the resource is saturated (median, 90% interval). "
        "Jobs whose resources never came near saturation keep the prior (wide intervals).",
        "",
        "| job | node | GPU | " + " | ".join(kinds) + " |",
        "|---|---|---:|" + "---|" * len(kinds),
    ]
    for index in worst.sort_values(ascending=False).index[:limit]:
        row = jobs.loc[index]
        cells = [
            f"{row[f'sensitivity_{k}']:.2f} ({row[f'sensitivity_{k}_lower_90']:.2f}-"
            f"{row[f'sensitivity_{k}_upper_90']:.2f})"
            for k in kinds
        ]
        lines.append(f"| {row['job']} | {row['node']} | {row['gpu']} | " + " | ".join(cells) + " |")
    return lines + [""]

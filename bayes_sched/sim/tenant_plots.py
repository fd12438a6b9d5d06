"""Per-tenant plots and report sections of runs on a cluster with ``[[tenants]]``
(:class:`~bayes_sched.sim.tenant_metrics.TenantReport`, the metrics' definitions).

:func:`write_tenant_plots` writes, for one run, ``<stem>.png`` with three panels: each tenant's
share of the GPU-time received so far against its quota's fraction of the cluster (dashed, the
same colour) over time; each tenant's long-term GPU-time fairness (LTGF, 1 fair) over time; and
each tenant's mean bounded slowdown, its bar labelled with its jobs starved longer than the
report's threshold. Beside it, ``<stem>.csv`` holds the plotted timeline (``time`` in seconds,
``tenant``, ``share``, ``quota_fraction``, ``ltgf``, ``quota_satisfaction``) and
``<stem>_tenants.csv`` the per-tenant table. :func:`tenant_sections` gives the run report's
section (``bayes-sched compare``; ``simulate --out``) with every run's per-tenant table and plot.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bayes_sched.sim.report_parts import (
    Section,
    atomic_write,
    html_document,
    markdown_document,
    pyplot,
    series_styles,
)
from bayes_sched.sim.result import RunResult
from bayes_sched.sim.tenant_metrics import TenantReport

#: The per-tenant columns a report shows (of :attr:`TenantReport.tenants`).
TENANT_COLUMNS = ("tenant", "jobs", "finished", "gpu_hours", "share", "quota_fraction",
                  "share_over_quota", "quota_satisfaction", "contended_share", "ltgf", "avg_jct_h", "ftf",
                  "slowdown", "starved")


def write_tenant_plots(report: TenantReport, out_dir: str | Path, stem: str, title: str = ""
                       ) -> tuple[Path, Path, Path]:
    """Write ``<stem>.png``, ``<stem>.csv`` and ``<stem>_tenants.csv`` (the module docstring)
    into ``out_dir`` (created), each atomically; returns the three paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png, timeline, table = out / f"{stem}.png", out / f"{stem}.csv", out / f"{stem}_tenants.csv"
    atomic_write(timeline, lambda p: report.timeline.to_csv(p, index=False))
    atomic_write(table, lambda p: report.tenants.to_csv(p, index=False))
    atomic_write(png, lambda p: _plot(report, p, title))
    return png, timeline, table


def _plot(report: TenantReport, path: Path, title: str) -> None:
    plt = pyplot()

    names = list(report.tenants["tenant"])
    styles = series_styles(len(names))
    fig, (share, ltgf, slow) = plt.subplots(1, 3, figsize=(11.0, 3.2))
    for name, style in zip(names, styles, strict=True):
        mine = report.timeline[report.timeline["tenant"] == name]
        hours = mine["time"].to_numpy(dtype=float) / 3600.0
        for ax, column in ((share, "share"), (ltgf, "ltgf")):
            values = mine[column].to_numpy(dtype=float)
            seen = np.isfinite(values)  # NaN until the tenant received (or was owed) GPU-time
            if seen.any():
                ax.step(hours[seen], values[seen], where="post", label=name, **style)
        quota = float(report.tenants.loc[report.tenants["tenant"] == name,
                                         "quota_fraction"].iloc[0])
        share.axhline(quota, color=style["color"], linestyle=(0, (2, 2)), linewidth=0.8)
    share.set(xlabel="time (h)", ylabel="share of GPU-time so far (dashed: quota)",
              ylim=(0, 1.02))
    ltgf.axhline(1.0, color="grey", linewidth=0.6)
    ltgf.set(xlabel="time (h)", ylabel="LTGF (received / fair share)")
    bars = slow.bar(np.arange(len(names)), report.tenants["slowdown"].to_numpy(dtype=float),
                    color=[s["color"] for s in styles])
    slow.bar_label(bars, labels=[f"{int(n)} starved" for n in report.tenants["starved"]],
                   fontsize=7)
    slow.set_xticks(np.arange(len(names)), names, rotation=30, ha="right", fontsize=8)
    slow.set_ylabel("mean bounded slowdown")
    share.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)


def tenant_stem(result: RunResult, several_seeds: bool) -> str:
    """The file stem of a run's tenant files: ``<policy>__<workload>[__seed<S>]``."""
    seed = f"__seed{result.seed}" if several_seeds else ""
    return f"{result.policy}__{result.workload}{seed}".replace("/", "_")


def tenant_sections(results: Sequence[RunResult], out_dir: str | Path, folder: str = "tenants"
                    ) -> list[Section]:
    """The report's tenant section for the runs with a per-tenant report (none: no section):
    their plots written to ``out_dir/folder`` (:func:`write_tenant_plots`; linked from a report
    in ``out_dir``) and one table row per run and tenant; sections as
    :mod:`bayes_sched.sim.report` lists them."""
    runs = [r for r in results if r.tenants is not None]
    if not runs:
        return []
    several_seeds = len({r.seed for r in results}) > 1
    rows: list[dict[str, object]] = []
    images: list[Section] = []
    for r in runs:
        assert r.tenants is not None
        stem = tenant_stem(r, several_seeds)
        write_tenant_plots(r.tenants, Path(out_dir) / folder, stem,
                           f"{r.policy} on {r.workload} (seed {r.seed})")
        link = f"{folder}/{stem}.png" if folder else f"{stem}.png"
        images.append(("image", (link, f"Tenants: {r.policy} on {r.workload}")))
        table = r.tenants.tenants.assign(avg_jct_h=r.tenants.tenants["avg_jct"] / 3600.0)
        rows += [{"policy": r.policy, "workload": r.workload, "seed": r.seed,
                  **{c: row[c] for c in TENANT_COLUMNS}} for row in table.to_dict("records")]
    text = ("Per tenant (runs on a cluster with [[tenants]]): share is the tenant's part of all "
            "GPU-time received and quota_fraction its entitlement's part of the cluster; "
            "quota_satisfaction its GPU-time over what its quota alone would have given it "
            "(above 1: it borrowed); contended_share its part of the GPU-time received while "
            "every tenant with jobs had jobs waiting or running; ltgf its long-term GPU-time "
            "fairness (GPU-time over its fair share of the rounds it had jobs in; 1 is fair); "
            "slowdown the mean bounded "
            "(pending + running) / running of its finished jobs; starved its jobs that waited "
            f"over a day. Plotted over time in `{folder + '/' if folder else ''}*.png`, the "
            "numbers beside each in `*.csv`.")
    return [("h2", "Tenants"), ("p", text),
            ("table", (rows, ["policy", "workload", "seed", *TENANT_COLUMNS])), *images]


def write_tenant_report(results: Sequence[RunResult], out_dir: str | Path) -> Path | None:
    """The tenant section alone as ``report.md`` and ``report.html`` in ``out_dir`` (created),
    its plots beside them (``compare``'s table world, which writes no run report); ``None``
    (nothing written) where no run has tenants."""
    out = Path(out_dir)
    sections = tenant_sections(results, out, folder="")
    if not sections:
        return None
    sections = [("h1", "Tenants"), *sections[1:]]
    atomic_write(out / "report.html",
                 lambda p: p.write_text(html_document(sections, "Tenants")))
    atomic_write(out / "report.md", lambda p: p.write_text(markdown_document(sections)))
    return out / "report.md"


__all__ = ["TENANT_COLUMNS", "tenant_sections", "tenant_stem", "write_tenant_plots",
           "write_tenant_report"]

"""One report for a set of runs (policies x workloads): tables, timelines on disk and PNG plots.

``write_report(results, out_dir)`` writes

* ``summary.csv`` / ``summary.json``: one row per run (avg/median/p99 JCT, makespan, utilisation,
  fairness, decision times);
* ``policies.csv``: per policy, the mean over workloads of each run's figures;
* ``jobs.csv``: one row per job and run;
* ``timelines/<policy>__<workload>.nc``: the allocation timeline (netCDF4 via h5netcdf);
* ``jct_cdf.png`` (JCT CDF per policy) and ``utilization.png`` (utilisation over time);
* ``report.md`` tying them together.

Files are written to a temporary name and renamed, so an interrupted run leaves no half files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from bayes_sched.sim.run import SimulationResult  # noqa: E402


def summary_rows(results: Sequence[SimulationResult]) -> list[dict[str, object]]:
    """One dict per run: policy, workload, the run's summary and decision-time statistics."""
    rows = []
    for r in results:
        d = r.decision_seconds
        rows.append({
            "policy": r.policy, "workload": r.workload, **r.summary,
            "decision_median_ms": float(np.median(d) * 1e3) if d.size else 0.0,
            "decision_p95_ms": float(np.percentile(d, 95) * 1e3) if d.size else 0.0,
            "rejected": len(r.rejected), "refits": r.refits, "wall_s": r.wall_seconds,
        })
    return rows


def policy_rows(rows: Sequence[dict[str, object]]) -> list[dict[str, object]]:
    """Per policy, the mean over workloads of the numeric columns of :func:`summary_rows`."""
    frame = pd.DataFrame(rows)
    numeric = frame.drop(columns=["workload"]).groupby("policy", sort=False).mean()
    numeric.insert(0, "workloads", frame.groupby("policy", sort=False).size())
    return [{"policy": p, **{k: float(v) for k, v in row.items()}}
            for p, row in numeric.iterrows()]


def _atomic_write(path: Path, write: object) -> None:
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)  # type: ignore[operator]
    os.replace(tmp, path)


def write_report(results: Sequence[SimulationResult], out_dir: str | Path) -> Path:
    """Write the report of ``results`` into ``out_dir`` (created); returns ``report.md``'s path."""
    out = Path(out_dir)
    (out / "timelines").mkdir(parents=True, exist_ok=True)
    rows = summary_rows(results)
    per_policy = policy_rows(rows)
    _atomic_write(out / "summary.csv", lambda p: pd.DataFrame(rows).to_csv(p, index=False))
    _atomic_write(out / "summary.json",
                  lambda p: p.write_text(json.dumps(rows, indent=2, default=float)))
    _atomic_write(out / "policies.csv", lambda p: pd.DataFrame(per_policy).to_csv(p, index=False))
    jobs = pd.concat([r.jobs.assign(policy=r.policy, workload=r.workload) for r in results],
                     ignore_index=True)
    _atomic_write(out / "jobs.csv", lambda p: jobs.to_csv(p, index=False))
    for r in results:
        name = f"{r.policy}__{r.workload}.nc".replace("/", "_")
        _atomic_write(out / "timelines" / name,
                      lambda p, r=r: r.timeline.to_netcdf(p, engine="h5netcdf"))
    _atomic_write(out / "jct_cdf.png", lambda p: _plot_jct_cdf(jobs, p))
    _atomic_write(out / "utilization.png", lambda p: _plot_utilization(results, p))
    report = out / "report.md"
    _atomic_write(report, lambda p: p.write_text(_markdown(rows, per_policy)))
    return report


def _plot_jct_cdf(jobs: pd.DataFrame, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for policy, group in jobs.groupby("policy", sort=False):
        jct = np.sort(group["jct"].dropna().to_numpy() / 3600.0)
        ax.step(jct, np.arange(1, jct.size + 1) / max(jct.size, 1), where="post", label=policy)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (h)")
    ax.set_ylabel("fraction of jobs")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=120)
    plt.close(fig)


def _plot_utilization(results: Sequence[SimulationResult], path: Path) -> None:
    workloads = list(dict.fromkeys(r.workload for r in results))
    cols = min(len(workloads), 4)
    rows = -(-len(workloads) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False,
                             sharey=True)
    for ax, workload in zip(axes.flat, workloads, strict=False):
        for r in results:
            if r.workload == workload:
                t = r.timeline["time"].values / 3600.0
                ax.plot(t, r.timeline["utilization"].values, label=r.policy, lw=0.8)
        ax.set_title(workload, fontsize=9)
        ax.set_xlabel("time (h)")
        ax.set_ylim(0, 1.05)
    for ax in axes.flat[len(workloads):]:
        ax.set_visible(False)
    axes[0, 0].set_ylabel("GPUs held (fraction)")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)


def _table(rows: Sequence[dict[str, object]], columns: Sequence[str]) -> str:
    def fmt(v: object) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(row[c]) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def _markdown(rows: Sequence[dict[str, object]], per_policy: Sequence[dict[str, object]]) -> str:
    columns = ["policy", "workload", "finished", "avg_jct", "median_jct", "p99_jct", "makespan",
               "utilization", "ftf_mean", "ftf_max", "restarts_per_job", "decision_median_ms"]
    policy_columns = ["policy", "workloads", "avg_jct", "median_jct", "p99_jct", "makespan",
                      "utilization", "ftf_mean", "ftf_max"]
    return "\n\n".join([
        "# Simulation report",
        "Times in seconds; utilisation is the fraction of GPUs held while jobs were active; "
        "ftf (finish-time fairness) is a job's JCT over its run time alone on the GPUs and batch "
        "its user asked for.",
        "## Per policy (mean over workloads)", _table(per_policy, policy_columns),
        "## Per run", _table(rows, columns),
        "## Plots", "![JCT CDF](jct_cdf.png)\n\n![Utilisation](utilization.png)",
        "Timelines (GPUs per job per round) are in `timelines/*.nc` (open with "
        "`xarray.open_dataset(path, engine='h5netcdf')`); per-job outcomes in `jobs.csv`.",
    ]) + "\n"

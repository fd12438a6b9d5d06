"""One report for a set of runs (policies x workloads x seeds): tables, timelines and PNG plots.

``write_report(results, out_dir, baseline)`` writes

* ``summary.csv`` / ``summary.json``: one row per run (policy, workload, seed, cluster; avg/median/
  p99 JCT, makespan, utilisation, fairness, decision times);
* ``seeds.csv`` / ``seeds.json``: per policy and workload, the mean over seeds of each figure with
  its 90 % Student-t interval (:mod:`bayes_sched.sim.seeds`); the JSON also holds each seed's value;
* ``policies.csv``: per policy, the mean over workloads (and seeds) of each run's figures;
* ``jobs.csv``: one row per job and run;
* ``timelines/<policy>__<workload>[__seed<S>].nc``: the allocation timeline (netCDF4 via h5netcdf;
  the seed in the name when the runs have several);
* ``avg_jct.png`` (mean avg JCT per policy and workload, error bars: the interval over seeds),
  ``jct_cdf.png`` (JCT CDF per policy) and ``utilization.png`` (utilisation over time, first seed);
* on a cluster with ``[[tenants]]`` (every world), ``tenants/<policy>__<workload>[__seed<S>]``
  ``.png`` / ``.csv`` / ``_tenants.csv``: per tenant, GPU-time share vs quota and LTGF over
  time, slowdown and starved jobs (:mod:`bayes_sched.sim.tenant_plots`), and a "Tenants"
  section with every run's per-tenant table;
* ``report.md`` and ``report.html`` (the same content; the HTML embeds the PNGs by relative path),
  opening with one headline per policy against the baseline (:func:`headlines`).

Files are written to a temporary name and renamed, so an interrupted run leaves no half files.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bayes_sched.estimates import describe_sources
from bayes_sched.sim.report_parts import (
    Section,
    atomic_write,
    html_document,
    markdown_document,
    pyplot,
    series_styles,
)
from bayes_sched.sim.result import RunResult
from bayes_sched.sim.seeds import (
    LEVEL,
    interval_suffixes,
    interval_text,
    mean_interval,
    seed_rows,
)
from bayes_sched.strict_json import json_safe


def summary_rows(results: Sequence[RunResult]) -> list[dict[str, object]]:
    """One dict per run: policy, workload, world, cluster and the run's setting, the estimator of
    each need its decisions read, its summary and decision-time statistics."""
    rows = []
    for r in results:
        d = r.decision_seconds
        rows.append({
            "policy": r.policy, "workload": r.workload, "seed": r.seed, "world": r.world,
            "cluster": r.spec.describe(), **r.setting,
            "estimates": describe_sources(r.estimates_from), **r.summary,
            "decision_median_ms": float(np.median(d) * 1e3) if d.size else 0.0,
            "decision_p95_ms": float(np.percentile(d, 95) * 1e3) if d.size else 0.0,
            "rejected": len(r.rejected), "refits": r.refits, "wall_s": r.wall_seconds,
        })
    return rows


def policy_rows(rows: Sequence[dict[str, object]]) -> list[dict[str, object]]:
    """Per policy, the mean over workloads of the numeric columns of :func:`summary_rows`."""
    frame = pd.DataFrame(rows)
    numeric = (frame.drop(columns=["workload", "seed"], errors="ignore")
               .select_dtypes(include="number").assign(policy=frame["policy"])
               .groupby("policy", sort=False).mean())
    numeric.insert(0, "workloads", frame.groupby("policy", sort=False)["workload"].nunique())
    return [{"policy": p, **{k: float(v) for k, v in row.items()}}
            for p, row in numeric.iterrows()]


def headlines(rows: Sequence[dict[str, Any]], baseline: str, metric: str = "avg_jct",
              level: float = LEVEL) -> list[dict[str, Any]]:
    """Per policy other than ``baseline``, the change of ``metric`` against it in percent.

    For each seed, ``metric`` is averaged over the workloads (those both policies ran), and the
    change is ``100 * (policy / baseline - 1)`` at that seed (paired: the same seed drives both
    runs' hidden law and counters). The headline is the mean change over seeds and its Student-t
    interval at ``level`` (no interval with one seed).

    Args:
        rows: per-run rows of :func:`summary_rows`.
        baseline: the policy compared against (one of the rows' policies).
    """
    frame = pd.DataFrame(rows)
    if "seed" not in frame:
        frame["seed"] = 0
    table = frame.pivot_table(index=["seed", "workload"], columns="policy", values=metric,
                              aggfunc="mean", sort=False)
    lower, upper = interval_suffixes(level)
    out = []
    for policy in dict.fromkeys(str(p) for p in frame["policy"]):
        if policy == baseline:
            continue
        pair = table[[policy, baseline]].dropna()
        per_seed = pair.groupby(level="seed", sort=True).mean()
        changes = (100.0 * (per_seed[policy] / per_seed[baseline] - 1.0)).to_numpy()
        mean, low, high = mean_interval(changes, level)
        out.append({"policy": policy, "baseline": baseline, "metric": metric,
                    "change_pct": mean, "change_pct" + lower: low, "change_pct" + upper: high,
                    "seeds": int(changes.size),
                    "workloads": int(pair.index.get_level_values("workload").nunique())})
    return out


def seeds_document(over_seeds: Sequence[dict[str, Any]], lines: Sequence[dict[str, Any]],
                   level: float = LEVEL) -> dict[str, Any]:
    """The summary over seeds as one object (``seeds.json``, ``--seeds --json``): what the
    interval is, the :func:`headlines` and the :func:`~bayes_sched.sim.seeds.seed_rows`."""
    return {"interval": f"{100 * level:g}% Student-t interval on the mean over seeds",
            "headlines": list(lines), "rows": list(over_seeds)}


def headline_text(headline: dict[str, Any], level: float = LEVEL) -> str:
    """``"pollux: -27.0% avg JCT vs tiresias [90% t-interval over 3 seeds: -31.2% to -22.8%]"``."""
    lower, upper = interval_suffixes(level)
    metric = str(headline["metric"]).replace("avg_jct", "avg JCT").replace("_", " ")
    change = headline["change_pct"]
    text = (f"{headline['policy']}: {change:+.1f}% {metric} vs {headline['baseline']}"
            if math.isfinite(change) else
            f"{headline['policy']}: no {metric} to compare with {headline['baseline']}")
    low, high = headline["change_pct" + lower], headline["change_pct" + upper]
    if math.isfinite(low) and math.isfinite(high):
        return (f"{text} [{100 * level:g}% t-interval over {headline['seeds']} seeds: "
                f"{low:+.1f}% to {high:+.1f}%]")
    return f"{text} [one seed: no interval; --seeds N gives one]"


def _write_timeline(result: RunResult, path: Path) -> None:
    result.timeline.to_netcdf(path, engine="h5netcdf")


def _timeline_name(result: RunResult, several_seeds: bool) -> str:
    seed = f"__seed{result.seed}" if several_seeds else ""
    return f"{result.policy}__{result.workload}{seed}.nc".replace("/", "_")


def write_report(results: Sequence[RunResult], out_dir: str | Path,
                 baseline: str | None = None) -> Path:
    """Write the report of ``results`` into ``out_dir`` (created); returns ``report.md``'s path.

    ``baseline``: the policy the headlines compare against (default: the first policy).
    """
    out = Path(out_dir)
    (out / "timelines").mkdir(parents=True, exist_ok=True)
    rows = summary_rows(results)
    per_policy = policy_rows(rows)
    over_seeds = seed_rows(rows)
    policies = list(dict.fromkeys(r.policy for r in results))
    lines = headlines(rows, baseline or policies[0]) if len(policies) > 1 else []
    atomic_write(out / "summary.csv", lambda p: pd.DataFrame(rows).to_csv(p, index=False))
    atomic_write(out / "summary.json",
                  lambda p: p.write_text(json.dumps(json_safe(rows), indent=2, allow_nan=False)))
    atomic_write(out / "seeds.csv", lambda p: pd.DataFrame(
        [{k: v for k, v in row.items() if k != "per_seed"} for row in over_seeds]
    ).to_csv(p, index=False))
    atomic_write(out / "seeds.json", lambda p: p.write_text(json.dumps(
        json_safe(seeds_document(over_seeds, lines)), indent=2, allow_nan=False)))
    atomic_write(out / "policies.csv", lambda p: pd.DataFrame(per_policy).to_csv(p, index=False))
    jobs = pd.concat([r.jobs.assign(policy=r.policy, workload=r.workload, seed=r.seed)
                      for r in results], ignore_index=True)
    atomic_write(out / "jobs.csv", lambda p: jobs.to_csv(p, index=False))
    several_seeds = len({r.seed for r in results}) > 1
    for r in results:
        atomic_write(out / "timelines" / _timeline_name(r, several_seeds),
                      functools.partial(_write_timeline, r))
    atomic_write(out / "avg_jct.png", lambda p: _plot_avg_jct(over_seeds, p))
    atomic_write(out / "jct_cdf.png", lambda p: _plot_jct_cdf(jobs, p))
    atomic_write(out / "utilization.png", lambda p: _plot_utilization(results, p))
    from bayes_sched.sim.type_utilization import utilization_series, write_type_utilization

    for r in results:
        name = _timeline_name(r, several_seeds).removesuffix(".nc")
        write_type_utilization(utilization_series(r), out / "type_utilization", name,
                               f"{r.policy} on {r.workload}")
    sections = _sections(lines, rows, per_policy, over_seeds, setting_text(results))
    sections += _typed_sections(results)
    from bayes_sched.sim.tenant_plots import tenant_sections

    sections += tenant_sections(results, out)
    atomic_write(out / "report.html", lambda p: p.write_text(html_document(sections)))
    report = out / "report.md"
    atomic_write(report, lambda p: p.write_text(markdown_document(sections)))
    return report


def _plot_avg_jct(over_seeds: Sequence[dict[str, Any]], path: Path) -> None:
    """Grouped bars: mean avg JCT (h) per workload and policy, error bars the interval."""
    lower, upper = interval_suffixes()
    frame = pd.DataFrame(over_seeds)
    policies = list(dict.fromkeys(frame["policy"]))
    workloads = list(dict.fromkeys(frame["workload"]))
    width = 0.8 / len(policies)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 0.9 * len(workloads) * max(len(policies), 2) / 2),
                                    3.5))
    colors = [style["color"] for style in series_styles(len(policies))]
    hatches = ("", "//", "..", "xx", "\\\\", "++", "oo")
    for i, policy in enumerate(policies):
        rows = frame[frame["policy"] == policy].set_index("workload").reindex(workloads)
        mean = rows["avg_jct"].to_numpy(dtype=float) / 3600.0
        errors = np.nan_to_num(np.vstack([
            mean - rows["avg_jct" + lower].to_numpy(dtype=float) / 3600.0,
            rows["avg_jct" + upper].to_numpy(dtype=float) / 3600.0 - mean]))
        ax.bar(np.arange(len(workloads)) + (i - (len(policies) - 1) / 2) * width, mean, width,
               yerr=errors, capsize=2, label=policy, color=colors[i],
               hatch=hatches[(i // 10) % len(hatches)], edgecolor="black", linewidth=0.3)
    ax.set_xticks(np.arange(len(workloads)), workloads, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("avg JCT (h), mean over seeds")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7, ncol=1 + len(policies) // 6)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=120)
    plt.close(fig)


def _plot_jct_cdf(jobs: pd.DataFrame, path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    groups = list(jobs.groupby("policy", sort=False))
    for (policy, group), style in zip(groups, series_styles(len(groups)), strict=True):
        jct = np.sort(group["jct"].dropna().to_numpy() / 3600.0)
        ax.step(jct, np.arange(1, jct.size + 1) / max(jct.size, 1), where="post", label=policy,
                **style)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (h)")
    ax.set_ylabel("fraction of jobs")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=1 + len(groups) // 8)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=120)
    plt.close(fig)


def _plot_utilization(results: Sequence[RunResult], path: Path) -> None:
    first_seed = min(r.seed for r in results)
    shown = [r for r in results if r.seed == first_seed]
    workloads = list(dict.fromkeys(r.workload for r in shown))
    policies = list(dict.fromkeys(r.policy for r in shown))
    styles = dict(zip(policies, series_styles(len(policies)), strict=True))
    cols = min(len(workloads), 4)
    rows = -(-len(workloads) // cols)
    plt = pyplot()
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False,
                             sharey=True)
    for ax, workload in zip(axes.flat, workloads, strict=False):
        for r in shown:
            if r.workload == workload:
                t = r.timeline["time"].values / 3600.0
                ax.plot(t, r.timeline["utilization"].values, label=r.policy,
                        **styles[r.policy])
        ax.set_title(workload, fontsize=9)
        ax.set_xlabel("time (h)")
        ax.set_ylim(0, 1.05)
    for ax in axes.flat[len(workloads):]:
        ax.set_visible(False)
    axes[0, 0].set_ylabel("GPUs held (fraction)")
    axes[0, 0].legend(fontsize=7, ncol=1 + len(policies) // 8)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)


# --- the document: one list of sections, written as Markdown and as HTML -------------------------

#: The finish-time-fairness distribution every summary gives: worst, CDF points, unfair fraction.
FTF_COLUMNS = ["ftf_worst", "ftf_p25", "ftf_p50", "ftf_p75", "ftf_p90", "ftf_p99",
               "unfair_fraction"]
_RUN_COLUMNS = ["policy", "workload", "seed", "finished", "avg_jct", "median_jct", "p99_jct",
                "makespan", "utilization", "ftf_mean", *FTF_COLUMNS, "restarts_per_job",
                "decision_median_ms"]
_POLICY_COLUMNS = ["policy", "workloads", "avg_jct", "median_jct", "p99_jct", "makespan",
                   "utilization", "ftf_mean", "ftf_worst", "ftf_p50", "ftf_p90",
                   "unfair_fraction"]
_SEED_COLUMNS = ["avg_jct", "p99_jct", "makespan", "utilization", "ftf_mean"]


#: Columns of seconds the page shows in hours (``<name>_h``); the CSV and JSON files keep seconds.
_TIME_COLUMNS = ("avg_jct", "median_jct", "p99_jct", "makespan")


def _hours(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]
           ) -> tuple[list[dict[str, Any]], list[str]]:
    """``rows`` for the page: each time column (:data:`_TIME_COLUMNS`) in hours, renamed
    ``<name>_h``; the columns renamed alike."""
    def value(name: str, v: Any) -> Any:
        return v / 3600.0 if name in _TIME_COLUMNS and isinstance(v, (int, float)) else v

    shown = [{(f"{k}_h" if k in _TIME_COLUMNS else k): value(k, v) for k, v in row.items()}
             for row in rows]
    return shown, [f"{c}_h" if c in _TIME_COLUMNS else c for c in columns]


def setting_text(results: Sequence[RunResult]) -> str:
    """What the runs were: worlds, clusters and rounds, the jobs of each workload (and a
    ``--max-jobs`` cut), where each GPU type's step times came from (measured or derived), seeds
    and the version that ran them."""
    from bayes_sched import __version__

    clusters = sorted({f"{r.world} world on {r.spec.describe()} ({r.spec.round_interval:g} s "
                       "rounds)" for r in results})
    workloads = {r.workload: len(r.jobs) for r in results}
    cuts = [name for name in workloads if "-first" in name]
    seeds = sorted({r.seed for r in results})
    text = (f"Runs: {'; '.join(clusters)}. Workloads: "
            + ", ".join(f"{name} ({jobs} jobs)" for name, jobs in workloads.items()) + ". ")
    if cuts:
        text += ("Cut to the first jobs (--max-jobs): "
                 + ", ".join(name.split("-first")[0] + f" to {name.split('-first')[1]}"
                             for name in cuts) + ". ")
    sources = sorted({str(r.setting["profiles"]) for r in results if "profiles" in r.setting})
    if sources:
        text += f"Step-time profiles per GPU type: {' / '.join(sources)}. "
    return text + f"Seeds: {', '.join(map(str, seeds))}. bayes-sched {__version__}."


def _sections(lines: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]],
              per_policy: Sequence[dict[str, Any]], over_seeds: Sequence[dict[str, Any]],
              setting: str = "") -> list[Section]:
    lower, upper = interval_suffixes()
    seeds = sorted({int(row["seed"]) for row in rows})

    def hours(column: str, v: float) -> float:
        return v / 3600.0 if column in _TIME_COLUMNS else v

    seed_table = [{"policy": row["policy"], "workload": row["workload"], "seeds": row["seeds"],
                   **{(f"{c}_h" if c in _TIME_COLUMNS else c):
                      interval_text(hours(c, row[c]), hours(c, row[c + lower]),
                                    hours(c, row[c + upper]))
                      for c in _SEED_COLUMNS}} for row in over_seeds]
    seed_columns = ["policy", "workload", "seeds",
                    *(f"{c}_h" if c in _TIME_COLUMNS else c for c in _SEED_COLUMNS)]
    sections: list[Section] = [("h1", "Simulation report")]
    if lines:
        sections += [("list", [headline_text(line) for line in lines])]
    if setting:
        sections += [("p", setting)]
    sections += [
        ("p", f"Seeds {', '.join(map(str, seeds))}; a seed seeds every random stream of a run "
              "(the policy's search and posterior draws, the hidden law, the counters' noise). "
              "Times in hours (`_h`; seconds in the CSV and JSON files); utilisation is the "
              "fraction of GPUs held over the rounds with jobs; "
              "ftf (finish-time fairness) is a job's JCT over its run time alone on the GPUs and "
              "batch its user asked for. Headlines compare the mean over workloads per seed; "
              f"intervals are {100 * LEVEL:g}% Student-t intervals on the mean over seeds."),
        ("image", ("avg_jct.png", "Mean avg JCT per policy and workload")),
        ("h2", "Per policy and workload (mean over seeds [interval])"),
        ("table", (seed_table, seed_columns)),
        ("h2", "Per policy (mean over workloads and seeds)"),
        ("table", _hours(per_policy, _POLICY_COLUMNS)),
        ("h2", "Per run"), ("table", _hours(rows, _RUN_COLUMNS)),
        ("h2", "Plots"), ("image", ("jct_cdf.png", "JCT CDF")),
        ("image", ("utilization.png", f"Utilisation (seed {seeds[0]})")),
        ("p", "Timelines (GPUs per job per round) are in `timelines/*.nc` (open with "
              "`xarray.open_dataset(path, engine='h5netcdf')`); per-job outcomes in `jobs.csv`; "
              "per-seed values in `seeds.json`."),
    ]
    return sections


def _typed_sections(results: Sequence[RunResult]) -> list[Section]:
    """Per-type utilisation files, and on a typed cluster (or with measured per-type profiles)
    the table of which profiles are measured and which derived
    (:func:`~bayes_sched.sim.typed_profiles.derivation_table`)."""
    from bayes_sched.sim.physics import GPU_TYPE, known_applications
    from bayes_sched.sim.typed_profiles import derivation_table

    sections: list[Section] = [
        ("p", "Per-GPU-type utilisation over time: `type_utilization/*.png`, the plotted numbers "
              "beside each in `*.csv` (their mean over the counted rounds is the summary's "
              "`utilization_<type>`).")]
    types = tuple(dict.fromkeys(t for r in results for t in r.spec.types))
    configs = [r.config for r in results]
    if any(c is None for c in configs):
        return sections  # a table world's measured rates
    profiles = next((c.profiles for c in configs if c is not None and c.profiles),
                    None)
    if types == (GPU_TYPE,) and profiles is None:
        return sections  # no derived profiles: the artifact's one type
    applications = sorted({str(a) for r in results for a in r.jobs["application"]})
    known = [a for a in applications if a in known_applications()]
    table = (derivation_table(types, known, profiles) if profiles is not None
             else derivation_table(types, [a for a in known if a in _shipped()]))
    columns = ["application", "gpu_type", "profile", "gavel_model", "reason", "factor_min_bsz",
               "factor_init_bsz", "factor_max_bsz"]
    measured = ("" if profiles is None else
                f" Measured per-type profiles were read from {profiles.source_path}; they are "
                "used where present.")
    return sections + [
        ("h2", "Profiles per GPU type"),
        ("p", f"The Pollux profiles were measured on {GPU_TYPE}.{measured} The others are "
              "derived (bayes_sched.sim.typed_profiles): the compute part of each step is the "
              "T4 one times the factor below (Gavel's measured V100/type throughput ratio of the "
              "closest Gavel model at the micro-batch, times T4/V100 peak FP32), the sync part "
              "is kept. On a measured type the factor is its measured one-GPU compute over the "
              "T4's."),
        ("table", (table, columns))]


def _shipped() -> tuple[str, ...]:
    from bayes_sched.sim.physics import APPLICATION_NAMES

    return APPLICATION_NAMES

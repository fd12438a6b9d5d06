"""Runs over several seeds: one seed for every random stream of a run, and summaries over seeds.

A run's random streams are the policy's (the genetic search's ``ga.seed``, the posterior draws'
``posterior.seed``, the BO policy's ``seed``), the hidden law's (``seed`` of ``contention``) and the
simulator's own (:attr:`~bayes_sched.sim.simulator.SimConfig.seed`, the counters' noise).
:func:`with_seed` gives every seed option of a component one seed, unless the user set it.

Over seeds, a figure is summarised by its mean and a two-sided Student-t interval on that mean at
:data:`LEVEL` (90 %): ``mean +- t_{0.95, n-1} * sd / sqrt(n)``, with ``sd`` the sample standard
deviation over the ``n`` seeds. One seed gives no interval (its bounds are NaN; ``null`` in JSON).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bayes_sched.registry import Option

#: Confidence level of the intervals over seeds.
LEVEL = 0.9
#: Figures of a run summarised over seeds.
SEED_METRICS = ("finished", "avg_jct", "median_jct", "p99_jct", "makespan", "utilization",
                "ftf_mean", "restarts_per_job")


def interval_suffixes(level: float = LEVEL) -> tuple[str, str]:
    """Column suffixes of an interval's bounds: ``("_lower_90", "_upper_90")`` at 90 %."""
    percent = f"{100 * level:g}"
    return f"_lower_{percent}", f"_upper_{percent}"


def with_seed(options: Mapping[str, Option], raw: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """``raw`` (a component's options as parsed, before checking) with every seed option that
    ``raw`` does not set given ``seed``: an option named ``seed``, and the ``seed`` field of an
    option whose default is a dataclass (``ga.seed``, ``posterior.seed``).

    Args:
        options: the component's typed options (``Registry.options(name)``).
        raw: the options set by the user (``{"ga": {"population": 24}}``); not modified.
        seed: the run's seed.
    """
    out = {key: dict(value) if isinstance(value, Mapping) else value for key, value in raw.items()}
    for name, option in options.items():
        if name == "seed":
            out.setdefault("seed", seed)
        elif (dataclasses.is_dataclass(option.default)
              and "seed" in {f.name for f in dataclasses.fields(option.default)}):
            table = out.setdefault(name, {})
            if isinstance(table, dict):  # a value set whole keeps its own seed
                table.setdefault("seed", seed)
    return out


def mean_interval(values: Sequence[float] | np.ndarray, level: float = LEVEL
                  ) -> tuple[float, float, float]:
    """``(mean, lower, upper)`` of the finite ``values``: the mean and the Student-t interval on
    it at ``level``; NaN bounds with fewer than two values, all NaN with none."""
    finite = np.asarray(values, dtype=float)
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(finite.mean())
    if finite.size < 2:
        return mean, math.nan, math.nan
    from scipy import stats  # here, not at module level: a second of start-up for every command

    half = float(stats.t.ppf(0.5 + level / 2, finite.size - 1)
                 * finite.std(ddof=1) / math.sqrt(finite.size))
    return mean, mean - half, mean + half


def seed_rows(rows: Sequence[Mapping[str, Any]], metrics: Sequence[str] = SEED_METRICS,
              level: float = LEVEL) -> list[dict[str, Any]]:
    """Per (policy, workload), in first-seen order, the mean over seeds of each of ``metrics`` of
    the per-run ``rows`` (:func:`~bayes_sched.sim.report.summary_rows`, with a ``seed``), its
    interval (``avg_jct_lower_90``, ``avg_jct_upper_90``) and, under ``per_seed``, the seeds and
    each metric's value per seed."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault((str(row["policy"]), str(row["workload"])), []).append(row)
    lower, upper = interval_suffixes(level)
    out = []
    for (policy, workload), runs in groups.items():
        runs = sorted(runs, key=lambda r: int(r.get("seed", 0)))
        summary: dict[str, Any] = {"policy": policy, "workload": workload, "seeds": len(runs)}
        per_seed: dict[str, list[Any]] = {"seed": [int(r.get("seed", 0)) for r in runs]}
        for metric in metrics:
            values = [float(r[metric]) for r in runs]
            mean, low, high = mean_interval(values, level)
            summary.update({metric: mean, metric + lower: low, metric + upper: high})
            per_seed[metric] = values
        summary["per_seed"] = per_seed
        out.append(summary)
    return out


def interval_text(mean: float, low: float, high: float, fmt: str = "{:.4g}") -> str:
    """``"123 [110, 136]"``; the mean alone where there is no interval."""
    if not math.isfinite(mean):
        return "nan"
    if not (math.isfinite(low) and math.isfinite(high)):
        return fmt.format(mean)
    return f"{fmt.format(mean)} [{fmt.format(low)}, {fmt.format(high)}]"

"""Held-out prediction for job types never seen (leave one type out) on a shipped table.

For each held-out job type ``j`` and each scale factor it has in the table: every learner is fit
to the table without ``j`` (nothing about ``j``, alone or as a partner), asked for its profiling
cells of a new job of type ``j`` at that scale, refit with the table's rates in those cells (cells
the table has no positive rate for cannot be measured and are skipped) and then asked for the
cells a scheduler needs for that job (:func:`~bayes_sched.estimation.throughput.observations.
job_cells`). With a common ``plan`` every learner is profiled in the same cells instead of its own
(a learner whose plan measures every cell of a kind otherwise leaves nothing of that kind to
score it on). A learner is scored on the needed cells it did not profile itself, and all learners
together on the cells none of them profiled.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

import numpy as np

from bayes_sched.cells import Cell, CellObservation
from bayes_sched.estimation.throughput.observations import (
    TABLE_SECONDS,
    job_cells,
    table_observations,
    table_rate,
)
from bayes_sched.estimation.throughput_cells import ThroughputLearner
from bayes_sched.throughputs import ThroughputTable

#: ``(job type, scale factor, GPU types) -> cells`` a new job is profiled in.
ProfilingPlan: TypeAlias = Callable[[str, int, Sequence[str]], Sequence[Cell]]


@dataclass(frozen=True)
class HeldOutRecord:
    """One needed cell of a held-out job: the truth, a learner's mean and 90% interval."""

    learner: str
    job_type: str
    scale_factor: int
    cell: Cell
    truth: float
    mean: float
    lower: float
    upper: float
    profiled: bool


@dataclass
class HeldOutResult:
    """Every record, and per learner the wall seconds of its fits and profiled cell counts."""

    records: list[HeldOutRecord] = field(default_factory=list)
    fit_seconds: dict[str, list[float]] = field(default_factory=dict)
    refit_seconds: dict[str, list[float]] = field(default_factory=dict)
    profiled_cells: dict[str, list[int]] = field(default_factory=dict)


def leave_one_type_out(table: ThroughputTable, learners: Mapping[str, Callable[[],
                                                                            ThroughputLearner]],
                       job_types: Sequence[str] | None = None, num_draws: int = 200,
                       seed: int = 0, plan: ProfilingPlan | None = None) -> HeldOutResult:
    """Run the held-out protocol (module docstring) for ``job_types`` (default: all).

    Args:
        learners: name -> factory of a fresh learner; one learner per name lives through all
            folds (so a learner that warm-starts from its last fit does so across folds).
        num_draws: posterior draws for the intervals (point beliefs give one).
        plan: the cells every learner has a new job profiled in, ``(job type, scale factor,
            GPU types) -> cells`` (default: each learner's own plan); one plan for all scores
            the learners on the same cells from the same measurements (e.g.
            :func:`one_gpu_plan`, Sia's).
    """
    result = HeldOutResult()
    gpus = table.gpu_types()
    live = {name: make() for name, make in learners.items()}
    for held_out in job_types if job_types is not None else table.job_types:
        others = table_observations(table, keep=_not_about(held_out))
        scales = sorted(sf for j, sf in table.solo if j == held_out)
        for name, learner in live.items():
            start = time.perf_counter()
            belief = learner.fit(others)
            result.fit_seconds.setdefault(name, []).append(time.perf_counter() - start)
            # A learner with a cheap refit (ours: condition, keep the hyperparameters) uses it.
            cheap = getattr(learner, "conditioning_only", None)
            refitter: ThroughputLearner = learner if cheap is None else cheap()
            for sf in scales:
                needed = job_cells(table, held_out, sf)
                profiled = set(learner.profiling_cells(held_out, sf, gpus, belief)
                               if plan is None else plan(held_out, sf, gpus))
                measured = [CellObservation(c, rate, TABLE_SECONDS) for c in sorted(
                    profiled, key=repr) if (rate := table_rate(table, c)) is not None and rate > 0]
                result.profiled_cells.setdefault(name, []).append(len(measured))
                start = time.perf_counter()
                after = refitter.fit([*others, *measured])
                result.refit_seconds.setdefault(name, []).append(time.perf_counter() - start)
                prediction = after.predict(needed, num_draws=num_draws, seed=seed)
                lower, upper = prediction.interval(0.9)
                for i, cell in enumerate(needed):
                    truth = table_rate(table, cell)
                    assert truth is not None
                    result.records.append(HeldOutRecord(
                        name, held_out, sf, cell, truth, float(prediction.mean[i]),
                        float(lower[i]), float(upper[i]), cell in profiled))
    return result


def one_gpu_plan(job_type: str, scale_factor: int, gpu_types: Sequence[str]) -> list[Cell]:
    """Sia's profile: the job alone on one GPU of every type, whatever its scale factor."""
    return [Cell(job_type, 1, gpu) for gpu in gpu_types]


def _not_about(job_type: str) -> Callable[[Cell], bool]:
    def keep(cell: Cell) -> bool:
        return job_type not in (cell.job_type, cell.partner)
    return keep


def summarise(records: Sequence[HeldOutRecord]) -> list[dict[str, object]]:
    """Per learner and kind (alone / paired): on the cells it did not profile (``own``) and on
    those that no learner with unprofiled cells of that kind profiled (``common``; a learner that
    profiles every cell of a kind, as Gavel's does alone cells, leaves that comparison): count,
    mean absolute error (steps/s), mean and median relative error, and the share of true values
    inside the 90% interval (0 for a point belief unless it is exact)."""
    rows: list[dict[str, object]] = []
    learners = list(dict.fromkeys(r.learner for r in records))
    for kind in ("alone", "paired"):
        of_kind = [r for r in records if (r.cell.partner is None) == (kind == "alone")]
        predicting = {r.learner for r in of_kind if not r.profiled}
        profiled_by_any = {(r.job_type, r.scale_factor, r.cell) for r in of_kind
                           if r.profiled and r.learner in predicting}
        for name in learners:
            for scope in ("own", "common"):
                chosen = [r for r in of_kind if r.learner == name and not r.profiled
                          and (scope == "own"
                               or (r.job_type, r.scale_factor, r.cell) not in profiled_by_any)]
                if chosen:
                    rows.append({"learner": name, "cells": kind, "scope": scope,
                                 **error_summary(chosen)})
    return rows


def error_summary(records: Sequence[HeldOutRecord]) -> dict[str, float]:
    """Count, mean absolute error (steps/s), mean and median relative error and 90% interval
    coverage of ``records``."""
    truth = np.array([r.truth for r in records])
    mean = np.array([r.mean for r in records])
    relative = np.abs(mean - truth) / truth
    inside = np.array([r.lower <= r.truth <= r.upper for r in records])
    return {"n": float(len(records)), "mae_steps_per_s": float(np.mean(np.abs(mean - truth))),
            "mean_rel_err": float(np.mean(relative)),
            "median_rel_err": float(np.median(relative)), "coverage90": float(np.mean(inside))}

"""Sia's bootstrap (Jayaram Subramanya et al., SOSP 2023): profile a new job on one GPU of every
type, scale a known type's multi-GPU throughputs by the one-GPU ratio.

Sia measures each new job alone on one GPU of each type (:meth:`SiaBootstrapLearner.
profiling_cells`). A multi-GPU throughput on GPU type ``g`` is then a known multi-GPU
throughput scaled by the ratio of one-GPU throughputs:

- the job's own, on another GPU type ``h`` where it has run at that scale:
  ``rate(j, s, h) * rate(j, 1, g) / rate(j, 1, h)`` (geometric mean over such ``h``; Sia's
  bootstrap of one GPU type's model from another's);
- before it has run at that scale anywhere, the nearest known job type's (nearest: smallest mean
  squared difference of log one-GPU throughputs on the GPU types both were measured on):
  ``rate(k, s, g) * rate(j, 1, g) / rate(k, 1, g)``.

Sia's policy never packs two jobs on a GPU, so it has no paired estimate. To run it where pairs
exist we apply the same rule to them: the job's paired rate is its (estimated) alone rate times
the nearest known type's paired / alone ratio beside the same partner (and a known job's rate
beside a new one uses the new job's nearest type). Unknown beyond that: the mean ratio. Where a
one-GPU rate itself is missing, it is the nearest type's scaled by the mean one-GPU ratio on the
shared GPU types. The belief is a point estimate (one draw equal to the mean).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from bayes_sched.cells import Cell, CellObservation
from bayes_sched.estimation.throughput.observations import (
    IncrementalPool,
    PointBelief,
    PointTable,
)
from bayes_sched.estimation.throughput_cells import ThroughputBelief


@dataclass
class SiaBootstrapBelief(PointBelief):
    """Point belief (see the module docstring).

    Attributes:
        nearest: ``{job type: known types by one-GPU distance, nearest first}``.
        fallback_reason: always ``None`` (kept for a uniform report).
    """

    table: PointTable
    nearest: Mapping[str, tuple[str, ...]]
    fallback_reason: str | None = None

    def _one_gpu(self, job_type: str, gpu: str) -> float | None:
        rate = self.table.rate(Cell(job_type, 1, gpu))
        if rate is not None:
            return rate
        for k in self.nearest.get(job_type, ()):
            ratio = _one_gpu_ratio(self.table, job_type, k)
            base = self.table.rate(Cell(k, 1, gpu))
            if ratio is not None and base is not None:
                return base * ratio
        return None

    def __post_init__(self) -> None:
        self._substitutes = {j: ks[0] for j, ks in self.nearest.items() if ks}

    def alone(self, cell: Cell) -> float:
        j, s, g = cell.job_type, cell.scale_factor, cell.gpu_type
        one = self._one_gpu(j, g)
        if s == 1 or one is None:
            return one if one is not None else self.table.mean_alone(s, g)
        # The job's own multi-GPU rate on other GPU types, scaled by the one-GPU ratio.
        own_one = self.table.alone.get((j, 1), {})
        own = [rate * one / own_one[h] for h, rate in self.table.alone.get((j, s), {}).items()
               if h in own_one]
        if own:
            return float(np.exp(np.mean(np.log(own))))
        for k in self.nearest.get(j, ()):
            multi = self.table.rate(Cell(k, s, g))
            base = self.table.rate(Cell(k, 1, g))
            if multi is not None and base is not None:
                return multi * one / base
        return self.table.mean_alone(s, g)

    def ratio(self, cell: Cell) -> float:
        return self.table.substituted_ratio(cell, self._substitutes)


def _one_gpu_ratio(table: PointTable, job_type: str, other: str) -> float | None:
    """Geometric mean of ``job_type``'s / ``other``'s one-GPU rates on the GPU types both were
    measured on (``None`` where there is none)."""
    mine, theirs = table.alone.get((job_type, 1), {}), table.alone.get((other, 1), {})
    logs = [np.log(rate / theirs[g]) for g, rate in mine.items() if g in theirs]
    return float(np.exp(np.mean(logs))) if logs else None


def _nearest_types(table: PointTable) -> dict[str, tuple[str, ...]]:
    """For every type measured on one GPU, the other such types with more than a one-GPU profile
    (multi-GPU or paired rates), nearest first by mean squared log one-GPU difference."""
    types = sorted(j for (j, s) in table.alone if s == 1)
    gpus = sorted({g for (_, s), rates in table.alone.items() if s == 1 for g in rates})
    # Log one-GPU profiles, NaN where a type was not measured on a GPU type: (types, gpus).
    profiles = np.full((len(types), len(gpus)), np.nan)
    for i, j in enumerate(types):
        for g, rate in table.alone[(j, 1)].items():
            profiles[i, gpus.index(g)] = np.log(rate)
    richer = {c.job_type for c in table.rates if c.scale_factor > 1 or c.partner is not None}
    candidates = [i for i, k in enumerate(types) if k in richer]
    out: dict[str, tuple[str, ...]] = {}
    if not candidates:
        return {j: () for j in types}
    squared = (profiles[:, None, :] - profiles[None, candidates, :]) ** 2  # (types, cands, gpus)
    common = np.isfinite(squared)
    counts = common.sum(axis=2)
    distance = np.where(common, squared, 0.0).sum(axis=2) / np.maximum(counts, 1)
    for i, j in enumerate(types):
        scored = sorted((float(distance[i, c]), types[k]) for c, k in enumerate(candidates)
                        if k != i and counts[i, c])
        out[j] = tuple(k for _, k in scored)
    return out


class SiaBootstrapLearner:
    """Sia's one-GPU bootstrap (see the module docstring)."""

    name = "sia"

    def __init__(self) -> None:
        self._pool = IncrementalPool()  # the reports so far, pooled per cell

    def fit(self, observations: Sequence[CellObservation]) -> SiaBootstrapBelief:
        table = PointTable(self._pool.update(observations))
        return SiaBootstrapBelief(table, _nearest_types(table))

    def profiling_cells(self, job_type: str, scale_factor: int, gpu_types: Sequence[str],
                        belief: ThroughputBelief) -> list[Cell]:
        """One GPU of every type, alone."""
        return [Cell(job_type, 1, g) for g in gpu_types]

"""Gavel's throughput estimator (Narayanan et al., OSDI 2020, section 6; ``scheduler/
throughput_estimator.py`` and ``scheduler/matrix_completion.py`` of its artifact), our code.

Gavel keeps a *reference* matrix: for each of ``R`` reference job types (its setting: 16 drawn at
random), the normalised throughput (paired steps/s / alone steps/s) beside every reference type
on every GPU type, one row of ``G x R`` columns. A new job is measured alone on every GPU type
(Gavel treats alone throughputs as known) and beside a random fraction of the (GPU type,
reference type) columns (its setting: 20%, each column drawn independently). Its partial row is
appended to the reference matrix, the matrix completed by probabilistic matrix factorisation
(alternating least squares, rank 10, L2 weight ``mu = 0.01`` on the factors), and the job mapped
to the reference type whose completed row is nearest in cosine distance. From then on the job's
paired throughput beside a job ``k`` on a GPU type is its own alone throughput times the mapped
type's normalised throughput beside ``k`` (Gavel: beside ``k``'s mapped type); a measured cell is
used as measured.

Out of memory: Gavel's throughput table holds a pair that does not fit as throughput 0
(``_get_normalized_throughputs`` divides it by the alone rate: a normalised 0), and its
estimator treats that 0 as any measurement: in the reference rows, in a new job's profiled
cells, through the completion, and a job mapped to a reference type inherits that type's zeros,
so a pair predicted at 0 is never packed (its policies see no gain in it). Here a failed launch
of a pair (:attr:`CellObservation.out_of_memory`, both directions of the pair) is that measured
0 (:func:`~bayes_sched.estimation.throughput.pair_fit.with_failed_pairs`); Gavel has no other
mechanism for memory (its profiling plan draws pairs without regard to fit, as this one does).

Differences from Gavel's code, all where its world has no answer: reference types are drawn per
scale factor among the types fully known at that scale (Gavel's estimator works at scale 1);
a reference pair never launched is a hole the completion fills; an alone cell that was never
measured takes the mapped type's alone rate. The belief is a point estimate (one draw equal to
the mean).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from bayes_sched.cells import Cell, CellObservation
from bayes_sched.estimation.throughput.observations import (
    IncrementalPool,
    PointBelief,
    PointTable,
)
from bayes_sched.estimation.throughput.pair_fit import PairLaunches, with_failed_pairs
from bayes_sched.estimation.throughput_cells import ThroughputBelief

#: Completed matrices a learner keeps for reuse (cleared when full).
MAX_CACHED_COMPLETIONS = 4096


def complete_matrix(values: np.ndarray, mask: np.ndarray, rank: int, mu: float,
                    rng: np.random.Generator, tolerance: float = 1e-3,
                    max_iterations: int = 100) -> np.ndarray:
    """Probabilistic matrix factorisation by alternating least squares (Salakhutdinov and Mnih
    2008; the solver Gavel calls): ``values ~ U @ V.T`` on the entries where ``mask`` is true,
    ``mu`` times the squared norms of ``U`` and ``V`` as penalty, from a random start; stops when
    the completed matrix changes by less than ``tolerance`` (Frobenius, relative).

    Args:
        values, mask: shape ``(m, n)``; entries where ``mask`` is false are ignored.
    Returns:
        The completed matrix ``U @ V.T``, shape ``(m, n)``.
    """
    m, n = values.shape
    u = rng.standard_normal((m, rank))
    v = rng.standard_normal((n, rank))
    ridge = mu * np.eye(rank)
    weights = mask.astype(float)
    target = np.where(mask, values, 0.0)
    previous = u @ v.T
    for _ in range(max_iterations):
        # Each row's factor is a ridge regression on the columns it observes, and vice versa.
        gram_rows = np.einsum("ij,jk,jl->ikl", weights, v, v) + ridge
        u = np.linalg.solve(gram_rows, (target @ v)[..., None])[..., 0]
        gram_cols = np.einsum("ij,ik,il->jkl", weights, u, u) + ridge
        v = np.linalg.solve(gram_cols, (target.T @ u)[..., None])[..., 0]
        completed = u @ v.T
        change = float(np.linalg.norm(completed - previous)) / max(
            float(np.linalg.norm(previous)), 1e-12)
        previous = completed
        if change < tolerance:
            break
    return previous


def cosine_distance(a: np.ndarray, b: np.ndarray) -> float:
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return 1.0 - float(a @ b) / norm if norm > 0 else 1.0


def _stable_seed(*parts: object) -> int:
    return zlib.crc32("\x1f".join(map(str, parts)).encode())


@dataclass
class GavelMatrixCompletionBelief(PointBelief):
    """Point belief: measured cells as measured, the rest from each type's mapped reference.

    Attributes:
        reference_types: ``{scale factor: reference job types}``.
        mapped: ``{(job type, scale factor): reference type}`` for every type seen.
        fallback_reason: always ``None`` (kept for a uniform report).
    """

    table: PointTable
    reference_types: Mapping[int, tuple[str, ...]]
    mapped: Mapping[tuple[str, int], str]
    completed: Mapping[tuple[int, str], Mapping[tuple[str, str], float]]
    fallback_reason: str | None = None

    def _substitutes(self, scale_factor: int) -> dict[str, str]:
        return {j: r for (j, s), r in self.mapped.items() if s == scale_factor}

    def alone(self, cell: Cell) -> float:
        stand_in = self.mapped.get((cell.job_type, cell.scale_factor))
        if stand_in is not None and (rate := self.table.rate(
                Cell(stand_in, cell.scale_factor, cell.gpu_type))) is not None:
            return rate
        return self.table.mean_alone(cell.scale_factor, cell.gpu_type)

    def ratio(self, cell: Cell) -> float:
        completed = self.completed.get((cell.scale_factor, cell.gpu_type), {})
        return self.table.substituted_ratio(cell, self._substitutes(cell.scale_factor),
                                            fallback=lambda a, b: completed.get((a, b)))


class GavelMatrixCompletionLearner:
    """Gavel's estimator (see the module docstring).

    Args:
        num_reference_types: reference job types per scale factor (Gavel: 16).
        profiling_fraction: chance that each (GPU type, reference type) pair is measured for a
            new job (Gavel: 0.2).
        rank, mu: the factorisation's rank and L2 weight (Gavel: 10 and 0.01).
        seed: draws the reference types, the profiled pairs and the factorisation's start.
    """

    name = "gavel"

    def __init__(self, num_reference_types: int = 16, profiling_fraction: float = 0.2,
                 rank: int = 10, mu: float = 1e-2, seed: int = 0) -> None:
        self.num_reference_types = num_reference_types
        self.profiling_fraction = profiling_fraction
        self.rank = rank
        self.mu = mu
        self.seed = seed
        #: ``{scale factor: reference types}``, drawn at the first fit that sees the scale and
        #: kept (Gavel's reference set is fixed offline; a profiled new job never joins it);
        #: drawn again only if a fit lacks one of them (a held-out benchmark's next fold).
        self.reference_types: dict[int, tuple[str, ...]] = {}
        self._pool = IncrementalPool()  # the reports so far, pooled per cell
        self._launches = PairLaunches()  # pairs seen to fit and to fail
        self._completions: dict[tuple[object, ...], np.ndarray] = {}

    def _references(self, table: PointTable) -> dict[int, tuple[str, ...]]:
        """Per scale factor, reference types drawn among those measured alone on every GPU
        type seen at that scale and beside at least one other type (kept across fits while they
        stay known)."""
        gpus: dict[int, set[str]] = {}
        alone: dict[tuple[str, int], set[str]] = {}
        paired: set[tuple[str, int]] = set()
        for cell in table.rates:
            gpus.setdefault(cell.scale_factor, set()).add(cell.gpu_type)
            if cell.partner is None:
                alone.setdefault((cell.job_type, cell.scale_factor), set()).add(cell.gpu_type)
            else:
                paired.add((cell.job_type, cell.scale_factor))
        out = self.reference_types
        for sf, seen in sorted(gpus.items()):
            known = sorted(j for (j, s), g in alone.items() if s == sf and g == seen
                           and (j, s) in paired)
            if out.get(sf) and set(out[sf]) <= set(known):
                continue  # kept while every reference type is still known
            rng = np.random.default_rng(_stable_seed(self.seed, "references", sf))
            count = min(self.num_reference_types, len(known))
            out[sf] = tuple(sorted(rng.choice(known, size=count, replace=False).tolist())) \
                if count else ()
        return dict(out)

    def fit(self, observations: Sequence[CellObservation]) -> GavelMatrixCompletionBelief:
        pooled = self._pool.update(observations)
        if not self._pool.extended:
            self._launches.restart()
        self._launches.update(observations)
        table = PointTable(with_failed_pairs(pooled, self._launches))
        references = self._references(table)
        mapped: dict[tuple[str, int], str] = {}
        completed: dict[tuple[int, str], dict[tuple[str, str], float]] = {}
        types = sorted({(c.job_type, c.scale_factor) for c in table.rates})
        for sf, refs in references.items():
            if not refs:
                continue
            gpus = sorted({c.gpu_type for c in table.rates if c.scale_factor == sf})
            columns = [(g, r) for g in gpus for r in refs]

            def row(job_type: str, gpus: list[str] = gpus, sf: int = sf,
                    columns: list[tuple[str, str]] = columns) -> tuple[np.ndarray, np.ndarray]:
                ratios = [table.ratio(job_type, r, sf, g) for g, r in columns]
                return (np.array([0.0 if x is None else x for x in ratios]),
                        np.array([x is not None for x in ratios]))

            ref_rows = [row(r) for r in refs]
            ref_values = np.array([v for v, _ in ref_rows])
            ref_mask = np.array([m for _, m in ref_rows])
            # The reference matrix completed once (its own holes: infeasible pairs).
            base = self._complete(ref_values, ref_mask, sf, "references")
            for g_index, g in enumerate(gpus):
                block = base[:, g_index * len(refs):(g_index + 1) * len(refs)]
                completed[(sf, g)] = {(a, b): float(np.clip(block[i, k], 0.0, 1.0))
                                      for i, a in enumerate(refs) for k, b in enumerate(refs)}
            for job_type, s in types:
                if s != sf:
                    continue
                if job_type in refs:
                    mapped[(job_type, sf)] = job_type
                    continue
                values, mask = row(job_type)
                matrix = np.vstack([ref_values, values])
                full_mask = np.vstack([ref_mask, mask])
                filled = np.where(full_mask, matrix, np.clip(
                    self._complete(matrix, full_mask, sf, job_type), 0.0, 1.0))
                distances = [cosine_distance(filled[i], filled[-1]) for i in range(len(refs))]
                mapped[(job_type, sf)] = refs[int(np.argmin(distances))]
        return GavelMatrixCompletionBelief(table, references, mapped, completed)

    def _complete(self, values: np.ndarray, mask: np.ndarray, sf: int, what: str) -> np.ndarray:
        if mask.all():
            return values
        # The completion is a function of its inputs (its start is seeded by ``sf`` and
        # ``what``): an online refit whose matrix did not change reuses it.
        key = (sf, what, values.shape, values.tobytes(), mask.tobytes())
        if (done := self._completions.get(key)) is not None:
            return done
        rng = np.random.default_rng(_stable_seed(self.seed, "pmf", sf, what))
        if len(self._completions) >= MAX_CACHED_COMPLETIONS:
            self._completions.clear()
        done = self._completions[key] = complete_matrix(values, mask, self.rank, self.mu, rng)
        return done

    def profiling_cells(self, job_type: str, scale_factor: int, gpu_types: Sequence[str],
                        belief: ThroughputBelief) -> list[Cell]:
        """Alone on every GPU type, and beside each reference type on each GPU type with chance
        ``profiling_fraction`` (seeded by the learner's seed and the job type)."""
        cells = [Cell(job_type, scale_factor, g) for g in gpu_types]
        references = getattr(belief, "reference_types", {}).get(scale_factor, ())
        rng = np.random.default_rng(_stable_seed(self.seed, "profile", job_type, scale_factor))
        for g in sorted(gpu_types):
            for reference in references:
                if rng.uniform() <= self.profiling_fraction:
                    cells.append(Cell(job_type, scale_factor, g, reference))
        return cells

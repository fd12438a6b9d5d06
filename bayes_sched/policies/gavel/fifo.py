"""Gavel's FIFO variants on the round mechanism: ``fifo`` (here ``gavel_fifo``), ``fifo_perf``
and ``fifo_packed``.

Gavel's ``scheduler/policies/fifo.py``: jobs in arrival order each get all their time (fraction 1)
on one GPU type while it has room for their scale factor; the first job that fits nowhere stops
the queue (no job jumps ahead). The mechanism runs only jobs with a positive allocation (Gavel's
FIFO skips priority-0 entries).

* ``gavel_fifo`` (Gavel's base mode): assignments persist until a job finishes; a newly admitted
  job takes a type drawn at random (seeded) among those with room. Gavel's code (``fifo.py`` as of
  commit 3e3acf6) draws the index but then assigns the job to the stale loop variable
  ``worker_type`` (the last key of the cluster spec); this module assigns the drawn type, as
  the code intends; ``experiments/gavel_fidelity.py`` compares it with Gavel's published base-FIFO
  result (99.19 h at 4.8 jobs/h; measured: docs/results/gavel_fidelity.md).
* ``fifo_perf``: the assignment is recomputed each time: each job in order takes the type where
  it runs fastest among those with room (ties: the first type by name, as Gavel scans them).
* ``fifo_packed``: as ``fifo_perf``, then the jobs still queued, in order, each join the assigned
  job (alone so far, same scale factor) whose pair gives the largest summed normalised throughput
  (each member's pair rate over its rate alone on that type), provided it exceeds the
  ``packing_threshold`` (Gavel: 1.5); the first queued job that packs with none stops.
"""

from __future__ import annotations

import random
from typing import Literal

import numpy as np

from bayes_sched.policies.gavel.time_sharing import AllocationInputs, TimeSharingPolicy


class GavelFifoPolicy(TimeSharingPolicy):
    """Gavel's base FIFO: persistent assignments, a random type with room per new job.

    Args: as :class:`~bayes_sched.policies.gavel.time_sharing.TimeSharingPolicy`; ``seed`` also seeds
    the draw of types (Gavel: ``Random(seed)``).
    """

    name = "gavel_fifo"
    heterogeneity_aware = False
    #: Whether assignments persist across recomputations (Gavel's base mode).
    persistent = True

    __init__ = TimeSharingPolicy.__init__

    def _reset_state(self, types: tuple[str, ...]) -> None:
        super()._reset_state(types)
        self._draw = random.Random(self.seed)
        self._assigned: dict[str, int] = {}  # job -> the type it holds all its time on

    def _choose(self, fits: list[int], rates: np.ndarray) -> int:
        """The type a job takes among those with room (indices into ``rates``)."""
        return fits[self._draw.randrange(len(fits))]

    def _skip(self, priority: float) -> bool:
        return priority <= 0.0

    def _assign(self, inputs: AllocationInputs) -> tuple[dict[int, int], list[int]]:
        """Job index -> type index, and the jobs still queued (in order)."""
        index = {name: j for j, name in enumerate(inputs.names)}
        kept = ({index[n]: t for n, t in self._assigned.items() if n in index}
                if self.persistent else {})
        room = inputs.capacities.copy()
        for j, t in kept.items():
            room[t] -= inputs.scale_factors[j]
        queue = [j for j in range(inputs.num_jobs) if j not in kept]
        # Gavel scans the types with room by name.
        by_name = sorted(range(len(self._types)), key=lambda t: self._types[t])
        while queue:
            j = queue[0]
            fits = [t for t in by_name if room[t] >= inputs.scale_factors[j]
                    and inputs.throughputs[j, t] > 0]
            if not fits:
                break
            t = self._choose(fits, inputs.throughputs[j])
            kept[j] = t
            room[t] -= inputs.scale_factors[j]
            queue.pop(0)
        self._assigned = {inputs.names[j]: t for j, t in kept.items()}
        return kept, queue

    def allocate_combinations(self, inputs: AllocationInputs) -> np.ndarray | None:
        assigned, _ = self._assign(inputs)
        x = np.zeros((inputs.num_jobs + len(inputs.pairs), len(inputs.capacities)))
        for j, t in assigned.items():
            x[j, t] = 1.0
        return x


class FifoPerfPolicy(GavelFifoPolicy):
    """Gavel's FIFO, heterogeneity-aware: each job in order on its fastest type with room.

    Args: as :class:`GavelFifoPolicy`.
    """

    name = "fifo_perf"
    heterogeneity_aware = True
    persistent = False
    __init__ = TimeSharingPolicy.__init__

    def _choose(self, fits: list[int], rates: np.ndarray) -> int:
        best = fits[0]
        for t in fits[1:]:
            if rates[t] > rates[best]:
                best = t
        return best


class FifoPackedPolicy(FifoPerfPolicy):
    """Gavel's FIFO with space sharing: queued jobs join an assigned job when the pair pays.

    Args: as :class:`GavelFifoPolicy`, and ``packing_threshold``: the summed normalised
    throughput a pair must exceed (Gavel: 1.5).
    """

    name = "fifo_packed"
    packing = True

    def __init__(self, solver: Literal["CLARABEL", "HIGHS"] = "CLARABEL",
                 min_reset_interval: float = 1920.0, seed: int = 0,
                 acquisition: Literal["thompson", "mean"] = "thompson",
                 packing_threshold: float = 1.5) -> None:
        super().__init__(solver, min_reset_interval, seed, acquisition)
        if not packing_threshold >= 0:
            raise ValueError(f"packing_threshold is {packing_threshold}: expected >= 0")
        self.packing_threshold = float(packing_threshold)

    def allocate_combinations(self, inputs: AllocationInputs) -> np.ndarray | None:
        assigned, queue = self._assign(inputs)
        rows = {(int(a), int(b)): p for p, (a, b) in enumerate(inputs.pairs)}
        x = np.zeros((inputs.num_jobs + len(inputs.pairs), len(inputs.capacities)))
        partner: dict[int, int] = {}
        for j in queue:
            best, best_gain = None, self.packing_threshold
            for k, t in assigned.items():
                if k in partner or inputs.scale_factors[k] != inputs.scale_factors[j]:
                    continue
                row = rows.get((min(j, k), max(j, k)))
                if row is None:
                    continue
                rates = inputs.pair_throughputs[row, :, t]
                alone = inputs.throughputs[[min(j, k), max(j, k)], t]
                gain = float(np.sum(np.divide(rates, alone, out=np.zeros(2),
                                              where=(rates > 0) & (alone > 0))))
                if gain > best_gain:
                    best, best_gain = k, gain
            if best is None:
                break  # no job jumps ahead in the queue
            partner[best], partner[j] = j, best
        for j, t in assigned.items():
            if j in partner:
                a, b = min(j, partner[j]), max(j, partner[j])
                x[inputs.num_jobs + rows[(a, b)], t] = 1.0
            else:
                x[j, t] = 1.0
        return x

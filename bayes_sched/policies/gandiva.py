"""Gandiva's introspective packing (Xiao et al., OSDI 2018) as Gavel runs it
(``scheduler/policies/gandiva.py``, ``gandiva``).

When the jobs ask for no more GPUs than the cluster has, time is split equally among the jobs
(each job ``x[j, t] = (GPUs of t / n) / scale factor``, each row scaled down to sum at most 1).
Otherwise jobs are packed: the jobs not yet in a combination are grouped at random (seeded) into
pairs of one scale factor (as many draws as there are such jobs; a draw of two scale factors is
wasted), the rest run alone, and time is split equally among the combinations. A pair is kept
across recomputations while both jobs are active and its summed normalised throughput (each
member's pair rate over its rate alone, summed over the types) is at least 1; a pair that does
not fit on some type (a zero pair rate there) scores 0 and is broken up at the next
recomputation, as are the jobs running alone. A random pair the table holds no rate for runs
nowhere until then (in Gavel it has rate 0 everywhere).
"""

from __future__ import annotations

import random

import numpy as np

from bayes_sched.policies.gavel.time_sharing import AllocationInputs, TimeSharingPolicy, equal_split


class GandivaPolicy(TimeSharingPolicy):
    """Gandiva: equal time shares, random packing of jobs into pairs when GPUs run short.

    Args: as :class:`~bayes_sched.policies.gavel.time_sharing.TimeSharingPolicy`; ``seed`` also seeds
    the random grouping (Gavel: ``Random(seed)``).
    """

    name = "gandiva"
    heterogeneity_aware = True  # Gavel's "Gandiva_Packing": the type order is not shuffled
    packing = True

    __init__ = TimeSharingPolicy.__init__

    def _reset_state(self, types: tuple[str, ...]) -> None:
        super()._reset_state(types)
        self._grouping = random.Random(self.seed)
        self._partner: dict[str, str] = {}  # jobs in a kept pair -> the other job

    def _normalised(self, a: int, b: int, inputs: AllocationInputs,
                    rows: dict[tuple[int, int], int]) -> float:
        row = rows.get((min(a, b), max(a, b)))
        if row is None:
            return 0.0
        pair = inputs.pair_throughputs[row]  # (2, T)
        alone = inputs.throughputs[[min(a, b), max(a, b)]]
        if np.any(pair <= 0) or np.any(alone <= 0):
            return 0.0
        return float(np.sum(pair / alone))

    def allocate_combinations(self, inputs: AllocationInputs) -> np.ndarray | None:
        index = {name: j for j, name in enumerate(inputs.names)}
        rows = {(int(a), int(b)): p for p, (a, b) in enumerate(inputs.pairs)}
        kept: dict[int, int] = {}
        for name, other in self._partner.items():
            a, b = index.get(name), index.get(other)
            if a is not None and b is not None and self._normalised(a, b, inputs, rows) >= 1.0:
                kept[a] = b
        x = np.zeros((inputs.num_jobs + len(inputs.pairs), len(inputs.capacities)))
        if inputs.scale_factors.sum() <= inputs.capacities.sum():
            x[:inputs.num_jobs] = equal_split(inputs.scale_factors, inputs.capacities)
            self._partner = {inputs.names[a]: inputs.names[b] for a, b in kept.items()}
            return x
        pool = [j for j in range(inputs.num_jobs) if j not in kept]
        for _ in range(len(pool)):
            if len(pool) < 2:
                break
            a, b = self._grouping.sample(pool, 2)
            if inputs.scale_factors[a] != inputs.scale_factors[b]:
                continue
            pool.remove(a)
            pool.remove(b)
            kept[a], kept[b] = b, a
        combos = sorted({(min(a, b), max(a, b)) for a, b in kept.items()}) + [(j, j) for j in pool]
        split = equal_split(inputs.scale_factors[[a for a, _ in combos]], inputs.capacities)
        for (a, b), share in zip(combos, split, strict=True):
            if a == b:
                x[a] = share
            elif (a, b) in rows:
                x[inputs.num_jobs + rows[(a, b)]] = share
        self._partner = {inputs.names[a]: inputs.names[b] for a, b in kept.items()}
        return x

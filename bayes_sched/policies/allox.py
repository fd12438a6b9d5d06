"""AlloX (Le et al., EuroSys 2020) as Gavel runs it (``scheduler/policies/allox.py``, ``allox``):
min-cost matching of waiting jobs to free GPUs, without preemption.

A job that holds all its time on one type (fraction 1) keeps it until it finishes. The waiting
jobs, longest-waiting first, are matched to the free GPUs (one column per GPU and *position*: a
job placed ``k``-th from the end of a GPU's queue delays ``k`` jobs, so its cost there is ``k``
times its processing time, ``remaining steps / steps/s on the GPU's type``; Gavel adds the job's
waiting time to every column of its row, which shifts the row and leaves the matching as it
is, so it is left out here). The matching is solved exactly (Hungarian method,
``scipy.optimize.linear_sum_assignment``); each GPU's first job (the largest ``k``) gets fraction
``1 / scale factor`` on the GPU's type; the others wait for the next recomputation.

**Multi-GPU jobs.** Gavel asserts single-GPU jobs. Shockwave's copy of the policy (artifact
``uw-mad-dash/shockwave``, ``scheduler/policies/allox.py``, the one its published ``allox`` row
ran) comments the assertion out and gives a job of ``s`` GPUs the fraction ``1 / s`` (one GPU's
worth of time, spread over its ``s`` GPUs). A job counts as placed only while its fractions sum
to exactly 1, so a multi-GPU job never does: it keeps the fraction it was given (every
recomputation copies the previous allocation over) and still enters every later matching as a
waiting job, where it may take the first place of a GPU again; its GPUs are not taken out of
the free ones. This is followed here. For single-GPU jobs the two are the same rule. Remaining
steps: the ``remaining_steps`` estimate (by default ``declared``); jobs whose remaining steps are
unknown (none declared, or the ``ignored`` estimate): the time is split equally instead (logged
and counted).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

import numpy as np
from scipy.optimize import linear_sum_assignment

from bayes_sched.policies.gavel.time_sharing import AllocationInputs, TimeSharingPolicy

#: Gavel's stand-in steps/s where a job cannot run on a type (a prohibitive cost).
UNRUNNABLE_STEPS_PER_SECOND = 1e-10


class AlloXPolicy(TimeSharingPolicy):
    """AlloX: non-preemptive min-cost matching of waiting jobs to free GPUs.

    Args: as :class:`~bayes_sched.policies.gavel.time_sharing.TimeSharingPolicy`, and ``alpha``: the
    fraction of the waiting jobs (longest-waiting first, at least as many as free GPUs) that
    enter the matching (Gavel: 1).
    """

    name = "allox"
    needs: tuple[str, ...] = ("throughput", "remaining_steps")
    default_estimators: ClassVar[Mapping[str, str]] = {"throughput": "oracle",
                                                       "remaining_steps": "declared"}
    heterogeneity_aware = True  # Gavel's "AlloX_Perf": the type order is not shuffled

    def __init__(self, solver: Literal["CLARABEL", "HIGHS"] = "CLARABEL",
                 min_reset_interval: float = 1920.0, seed: int = 0,
                 acquisition: Literal["thompson", "mean"] = "thompson",
                 alpha: float = 1.0) -> None:
        super().__init__(solver, min_reset_interval, seed, acquisition)
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha is {alpha}: expected a fraction in (0, 1]")
        self.alpha = float(alpha)
        # job -> its fractions per type at the last recomputation (Shockwave's _prev_allocation)
        self._previous: dict[str, np.ndarray] = {}

    def allocate_combinations(self, inputs: AllocationInputs) -> np.ndarray | None:
        fallback = self.undeclared_fallback(inputs)
        if fallback is not None:
            return fallback
        num_types = len(inputs.capacities)
        x = np.zeros((inputs.num_jobs, num_types))
        for j, name in enumerate(inputs.names):  # the allocation so far is kept
            previous = self._previous.get(name)
            if previous is not None and len(previous) == num_types:
                x[j] = previous
        placed = np.isclose(x.sum(axis=1), 1.0, rtol=0.0, atol=1e-12)  # Shockwave: sum == 1
        free = inputs.capacities.astype(np.int64) - (x[placed] == 1.0).sum(axis=0)
        gpu_type = np.repeat(np.arange(num_types), np.maximum(free, 0))  # one entry per GPU
        waiting = sorted((j for j in range(inputs.num_jobs) if not placed[j]),
                         key=lambda j: -inputs.elapsed[j])
        waiting = waiting[:max(int(self.alpha * len(waiting)), len(gpu_type))]
        if waiting and len(gpu_type):
            rates = inputs.throughputs[np.ix_(np.array(waiting), gpu_type)]
            rates = np.where(rates == 0.0, UNRUNNABLE_STEPS_PER_SECOND, rates)
            processing = inputs.remaining_steps[waiting][:, None] / rates  # (m, GPUs)
            positions = np.arange(1, len(waiting) + 1)
            cost = (positions[:, None, None] * processing[None]).transpose(1, 0, 2).reshape(
                len(waiting), -1)  # column (k - 1) * GPUs + g
            rows, cols = linear_sum_assignment(cost)
            first: dict[int, tuple[int, int]] = {}  # GPU -> (position, job) of its first job
            for row, col in zip(rows, cols, strict=True):
                position, gpu = divmod(int(col), len(gpu_type))
                if gpu not in first or position > first[gpu][0]:
                    first[gpu] = (position, waiting[row])
            for gpu, (_, j) in first.items():
                x[j, int(gpu_type[gpu])] = 1.0 / inputs.scale_factors[j]
        self._previous = {name: x[j].copy() for j, name in enumerate(inputs.names)}
        return x

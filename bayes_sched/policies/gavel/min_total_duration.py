"""Minimum total duration (makespan): Gavel's ``min_total_duration`` and ``_packed``.

Gavel (``scheduler/policies/min_total_duration.py``) looks for the smallest horizon ``T`` in which
every active job can finish: ``T`` is feasible when some allocation gives every job
``throughput_j . x_j >= R_j / T`` (``R_j`` the steps the job's user declared minus the steps
done) within the base constraints. Gavel bisects ``T`` between 100 s and 10^6 s (widening by
10x while nothing is feasible) until ``1.05 * low >= high``, solving a feasibility LP (constant
objective) at each midpoint, and keeps the allocation of the last feasible midpoint.

The smallest feasible ``T`` is one LP here (maximise ``s = 1 / T`` subject to ``throughput_j .
x_j >= R_j s``, stated with ``R`` in units of the longest job's standalone seconds so that ``s``
is at most about 1: in seconds ``s`` is ~1e-6, inside HiGHS's tolerances, which ended one such
program 6.6 % long); Gavel's bisection is then replayed on that exact threshold, arithmetic only, and
one feasibility LP is solved at the horizon Gavel's bisection ends on, so the allocation has the
slack Gavel's has (about 5 % above the optimum) rather than sitting at the optimum's vertex.
Only the first LP's optimal *value* is read, and it is unique, so that LP goes to HiGHS's dual
simplex (``horizon_solver``, without presolve, which removes almost nothing from these
programs): a simplex on this LP needs a fraction of an interior-point solve's work, and the
allocation, the second LP's answer, still comes from ``solver`` (by default CLARABEL, an
interior point of the feasible set as Gavel's ECOS gives).
``R_j`` is the ``remaining_steps`` estimate (by default ``declared``). Jobs whose remaining steps
are unknown (none declared, or the ``ignored`` estimate): the time is split equally, logged and
counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

import numpy as np

from bayes_sched.mechanisms.pop import GroupSetting, PartitionSetting, WorkerSetting
from bayes_sched.mechanisms.time_fraction_lp import (
    dense_terms,
    fastest_finish_program,
    finish_by_program,
    highs_optimum,
    solve_program,
)
from bayes_sched.policies.gavel.packing import PackedLayout, packed_layout
from bayes_sched.policies.gavel.time_sharing import AllocationInputs, TimeSharingPolicy

#: Gavel's bisection: initial bounds (seconds) and stopping ratio.
LOWEST_HORIZON_S = 100.0
HIGHEST_HORIZON_S = 1e6
BISECTION_RATIO = 1.05


def standalone_seconds(inputs: AllocationInputs) -> float:
    """The longest time any job needs alone on its fastest GPU type (seconds): a lower bound of
    every horizon, the unit the horizon program is stated in (1 where no job runs anywhere)."""
    best = inputs.throughputs.max(axis=1, initial=0.0)
    seconds = np.divide(inputs.remaining_steps, best, out=np.zeros_like(best), where=best > 0)
    longest = float(seconds.max(initial=0.0))
    return longest if longest > 0 else 1.0


def gavel_horizon(shortest: float) -> float:
    """The horizon Gavel's bisection settles on when every horizon >= ``shortest`` (seconds) is
    feasible: its last feasible midpoint."""
    low, high, ceiling = LOWEST_HORIZON_S, HIGHEST_HORIZON_S, HIGHEST_HORIZON_S
    found: float | None = None
    while found is None:
        while BISECTION_RATIO * low < high:
            middle = (low + high) / 2.0
            if middle >= shortest:
                found, high = middle, middle
            else:
                low = middle
        high, low, ceiling = ceiling * 10.0, ceiling, ceiling * 10.0
    return found


class MinTotalDurationPolicy(TimeSharingPolicy):
    """Minimum makespan of the active jobs over the measured rates.

    Args: as :class:`~bayes_sched.policies.gavel.time_sharing.TimeSharingPolicy`, and
    ``horizon_solver``: the solver of the shortest-horizon LP (its optimal value only is read):
    ``"HIGHS"`` (dual simplex, default) or ``"CLARABEL"``.
    """

    name = "min_total_duration"
    needs: tuple[str, ...] = ("throughput", "remaining_steps")
    default_estimators: ClassVar[Mapping[str, str]] = {"throughput": "oracle",
                                                       "remaining_steps": "declared"}
    heterogeneity_aware = True
    partitionable = True
    jobs_per_partition = 2048

    def __init__(self, solver: Literal["CLARABEL", "HIGHS"] = "CLARABEL",
                 min_reset_interval: float = 1920.0, seed: int = 0,
                 acquisition: Literal["thompson", "mean"] = "thompson",
                 partitions: PartitionSetting = "auto",
                 partition_workers: WorkerSetting = 1,
                 partition_groups: GroupSetting = "redrawn",
                 horizon_solver: Literal["HIGHS", "CLARABEL"] = "HIGHS") -> None:
        super().__init__(solver, min_reset_interval, seed, acquisition, partitions=partitions,
                         partition_workers=partition_workers, partition_groups=partition_groups)
        if horizon_solver not in ("HIGHS", "CLARABEL"):
            raise ValueError(f"horizon_solver is {horizon_solver!r}: expected HIGHS or "
                             "CLARABEL")
        self.horizon_solver = horizon_solver

    def _layout(self, inputs: AllocationInputs) -> PackedLayout:
        return PackedLayout.of(dense_terms(inputs.throughputs, inputs.scale_factors))

    def allocate_combinations(self, inputs: AllocationInputs) -> np.ndarray | None:
        fallback = self.undeclared_fallback(inputs)
        if fallback is not None:
            return fallback
        layout = self._layout(inputs)
        shortest = self.shortest_horizon(inputs, layout)
        if shortest is None:
            return None
        values = solve_program(finish_by_program(layout.terms, inputs.capacities,
                                                 inputs.remaining_steps, gavel_horizon(shortest)),
                               self.solver)
        return None if values is None else layout.expand(values, inputs)

    def shortest_horizon(self, inputs: AllocationInputs, layout: PackedLayout | None = None
                         ) -> float | None:
        """The shortest horizon (seconds) in which every job of ``inputs`` can finish, or
        ``None`` where the solver finds none."""
        layout = self._layout(inputs) if layout is None else layout
        unit = standalone_seconds(inputs)
        program = fastest_finish_program(layout.terms, inputs.capacities,
                                         inputs.remaining_steps / unit)
        fastest = (highs_optimum(program, presolve=False) if self.horizon_solver == "HIGHS"
                   else solve_program(program, "CLARABEL"))
        if fastest is None or not fastest[-1] > 0:
            return None
        return unit / float(fastest[-1])


class MinTotalDurationPackedPolicy(MinTotalDurationPolicy):
    """Minimum makespan where pairs of jobs of one scale factor may share GPUs.

    Args: as :class:`MinTotalDurationPolicy`.
    """

    name = "min_total_duration_packed"
    packing = True
    #: Smaller sub-problems than packed max-min's: this program's solve time grows steeply with
    #: the jobs per sub-problem (``experiments/bench_pop.py --partitions K``; figures in
    #: the results page).
    jobs_per_partition = 96
    __init__ = MinTotalDurationPolicy.__init__

    #: Solve over (job, partner class, type) entries (exact; ``False``: one entry per job pair).
    per_partner_class = True

    def _layout(self, inputs: AllocationInputs) -> PackedLayout:
        return packed_layout(inputs, self.per_partner_class)

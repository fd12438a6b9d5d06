"""Minimum total duration (makespan): Gavel's ``min_total_duration`` and ``_packed``.

Gavel (``scheduler/policies/min_total_duration.py``) looks for the smallest horizon ``T`` in which
every active job can finish: ``T`` is feasible when some allocation gives every job
``throughput_j . x_j >= R_j / T`` (``R_j`` the steps the job's user declared minus the steps
done) within the base constraints. Gavel bisects ``T`` between 100 s and 10^6 s (widening by
10x while nothing is feasible) until ``1.05 * low >= high``, solving a feasibility LP (constant
objective) at each midpoint, and keeps the allocation of the last feasible midpoint.

The smallest feasible ``T`` is one LP here (maximise ``s = 1 / T`` subject to ``throughput_j .
x_j >= R_j s``); Gavel's bisection is then replayed on that exact threshold, arithmetic only, and
one feasibility LP is solved at the horizon Gavel's bisection ends on, so the allocation has the
slack Gavel's has (about 5 % above the optimum) rather than sitting at the optimum's vertex.
Jobs that declare no steps: the time is split equally, logged and counted.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bayes_sched.policies.gavel_packing import combination_terms, packing_constraints
from bayes_sched.policies.time_sharing import (
    AllocationInputs,
    TimeSharingPolicy,
    base_constraints,
    solve_lp,
)

#: Gavel's bisection: initial bounds (seconds) and stopping ratio.
LOWEST_HORIZON_S = 100.0
HIGHEST_HORIZON_S = 1e6
BISECTION_RATIO = 1.05


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

    Args: as :class:`~bayes_sched.policies.time_sharing.TimeSharingPolicy`.
    """

    name = "min_total_duration"
    heterogeneity_aware = True

    __init__ = TimeSharingPolicy.__init__

    def _problem(self, inputs: AllocationInputs) -> tuple[Any, Any, list]:
        """``(variable, effective steps/s per job (J,), constraints)`` (cvxpy objects)."""
        import cvxpy as cp

        x = cp.Variable(inputs.throughputs.shape)
        return (x, cp.sum(cp.multiply(inputs.throughputs, x), axis=1),
                base_constraints(x, inputs.scale_factors, inputs.capacities))

    def _shape(self, values: np.ndarray, inputs: AllocationInputs) -> np.ndarray:
        return values

    def allocate_combinations(self, inputs: AllocationInputs) -> np.ndarray | None:
        import cvxpy as cp

        fallback = self.undeclared_fallback(inputs)
        if fallback is not None:
            return fallback
        remaining = inputs.remaining_steps
        x, effective, constraints = self._problem(inputs)
        speed = cp.Variable(nonneg=True)  # 1 / horizon
        fastest = cp.Problem(cp.Maximize(speed), [effective >= remaining * speed, *constraints])
        if solve_lp(fastest, x, self.solver) is None or not speed.value:
            return None
        horizon = gavel_horizon(1.0 / float(speed.value))
        feasible = cp.Problem(cp.Minimize(0), [effective >= remaining / horizon, *constraints])
        values = solve_lp(feasible, x, self.solver)
        return None if values is None else self._shape(values, inputs)


class MinTotalDurationPackedPolicy(MinTotalDurationPolicy):
    """Minimum makespan where pairs of jobs of one scale factor may share GPUs.

    Args: as :class:`MinTotalDurationPolicy`.
    """

    name = "min_total_duration_packed"
    packing = True
    __init__ = TimeSharingPolicy.__init__

    def _problem(self, inputs: AllocationInputs) -> tuple[Any, Any, list]:
        import cvxpy as cp

        self._terms = combination_terms(inputs)
        v = cp.Variable(self._terms.num_entries)
        return v, self._terms.rates @ v, packing_constraints(v, self._terms, inputs.capacities)

    def _shape(self, values: np.ndarray, inputs: AllocationInputs) -> np.ndarray:
        return self._terms.unflatten(values, inputs.num_jobs + len(inputs.pairs),
                                     len(inputs.capacities))

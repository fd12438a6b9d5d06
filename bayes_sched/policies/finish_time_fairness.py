"""Finish-time fairness (Themis, Mahajan et al., NSDI 2020) as Gavel formulates it: heterogeneity-
agnostic, -aware and with space sharing.

Gavel's ``scheduler/policies/finish_time_fairness.py``: each job's finish-time ratio ``rho`` is its
expected completion time under the allocation over its expected completion time had it run on an
isolated 1/n share of the cluster, and the LP minimises the largest ratio::

    rho_j = (t_j + R_j / (throughput_j . x_j)) / (I_j + R_j / isolated_j)

with ``t_j`` seconds since submission, ``R_j`` steps remaining (the user's declared steps minus the
steps done), ``isolated_j`` the job's steps/s on its isolated share (Gavel's ``IsolatedPolicy``
as its FTF calls it: ``x[j, t] = (GPUs of t / n) / scale factor``, each row capped at 1, a true
1/n share of the cluster; :func:`isolated_throughputs`),
and ``I_j`` the time the job would have spent in isolation so far (each recomputation adds
the steps done since the last one over the isolated rate then). It is convex: ``minimise r`` subject
to ``(throughput_j . x_j) * (r * (I_j + R_j / isolated_j) - t_j) >= R_j``, a rotated second-order
cone per job (an SOCP; CLARABEL solves it, HiGHS cannot). Jobs that declare no steps: the time is
split equally (Gavel's fallback when its FTF LP has no answer), logged and counted. The
heterogeneity-agnostic form (Gavel's ``finish_time_fairness``) gives each job its V100 rate on every
type (Gavel hard-codes the V100); the aware form (``finish_time_fairness_perf``) uses the measured
rates; the packed form (``finish_time_fairness_packed``) sums a job's rates over the combinations it
is in (:mod:`bayes_sched.policies.gavel_packing`; solved over (job, partner class) entries,
:func:`~bayes_sched.policies.gavel_packing.partner_class_terms`, the same optimum as over every job
pair). Gavel's packed form divides the packed rates by
each job's summed rates while ``isolated_j`` stays in steps/s; here both are in steps/s.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from bayes_sched.policies.gavel_packing import PackedLayout, packed_layout
from bayes_sched.policies.time_fraction_lp import (
    dense_terms,
    min_max_ratio_program,
    solve_program,
)
from bayes_sched.policies.time_sharing import AllocationInputs, TimeSharingPolicy, equal_split

#: The GPU type whose rate Gavel's heterogeneity-agnostic FTF gives every type.
AGNOSTIC_REFERENCE_GPU = "v100"


#: Which ``IsolatedPolicy`` gives the isolated share. ``"gavel"``: the one Gavel's FTF calls
#: (``stanford-futuredata/gavel`` ``scheduler/policies/isolated.py``, the version without a solver
#: argument that ``finish_time_fairness.py`` constructs as ``IsolatedPolicy()`` beside its
#: cumulative isolated time): each row of the 1/n split capped at 1. ``"shockwave"``: Shockwave's
#: copy of it (``uw-mad-dash/shockwave``), the same rule. ``"gavel_largest_row"``: an earlier
#: Gavel ``IsolatedPolicy`` (``IsolatedPolicy(solver)``, used then by max-min fairness, which now
#: uses ``ProportionalPolicy``) that divides every row by the largest row sum (one scalar).
IsolatedRule = Literal["gavel", "shockwave", "gavel_largest_row"]
ISOLATED_RULES: tuple[IsolatedRule, ...] = ("gavel", "shockwave", "gavel_largest_row")


def isolated_throughputs(throughputs: np.ndarray, scale_factors: np.ndarray,
                         capacities: np.ndarray, rule: IsolatedRule = "gavel") -> np.ndarray:
    """Steps/s of each job on its isolated share, ``(J,)``: Gavel's ``IsolatedPolicy``,
    ``x[j, t] = (GPUs of t / n) / scale factor`` with each row capped at 1 (:func:`equal_split`;
    ``rule`` ``"gavel"`` or ``"shockwave"``). ``rule="gavel_largest_row"``: Gavel's earlier
    ``IsolatedPolicy``, *every* row divided by the largest row sum (one scalar, so the jobs of
    the smallest scale factor get all their time whatever the number of jobs ``n``, and a job
    of scale factor ``s`` gets ``s_min / s`` of it)."""
    if not len(scale_factors):
        return np.zeros(0)
    if rule != "gavel_largest_row":
        return (throughputs * equal_split(scale_factors, capacities)).sum(axis=1)
    share = capacities[None, :] / scale_factors[:, None]  # the 1 / n cancels in the scaling
    return (throughputs * (share / share.sum(axis=1).max())).sum(axis=1)


class FinishTimeFairnessPolicy(TimeSharingPolicy):
    """Finish-time fairness, heterogeneity-agnostic: every type counts at the job's V100 rate.

    Args: as :class:`~bayes_sched.policies.time_sharing.TimeSharingPolicy`, and
    ``isolated_share``: whose isolated share is the ratio's reference (:func:`isolated_throughputs`:
    ``"gavel"``, ``"shockwave"`` as Shockwave's baselines ran (the same rule), or Gavel's
    earlier ``"gavel_largest_row"``).
    """

    name = "finish_time_fairness"
    heterogeneity_aware = False

    def __init__(self, solver: Literal["CLARABEL", "HIGHS"] = "CLARABEL",
                 min_reset_interval: float = 1920.0, seed: int = 0,
                 throughputs: Literal["simulation", "physical", "tacc"] = "simulation",
                 source: str = "table", thompson: bool = True, refit_interval: float = 0.0,
                 isolated_share: IsolatedRule = "gavel") -> None:
        super().__init__(solver, min_reset_interval, seed, throughputs, source, thompson,
                         refit_interval)
        if isolated_share not in ISOLATED_RULES:
            raise ValueError(f"isolated_share is {isolated_share!r}: expected one of "
                             + ", ".join(repr(rule) for rule in ISOLATED_RULES))
        self.isolated_share: IsolatedRule = isolated_share

    def _reset_state(self, types: tuple[str, ...]) -> None:
        super()._reset_state(types)
        # Per job: remaining steps and isolated steps/s at the last recomputation; the time it
        # would have spent in isolation so far.
        self._previous: dict[str, tuple[float, float]] = {}
        self._isolated_time: dict[str, float] = {}

    def _rates(self, inputs: AllocationInputs) -> np.ndarray:
        if self.heterogeneity_aware or AGNOSTIC_REFERENCE_GPU not in self._types:
            return inputs.throughputs
        reference = inputs.throughputs[:, self._types.index(AGNOSTIC_REFERENCE_GPU)]
        return np.repeat(reference[:, None], len(self._types), axis=1)

    def _ratio_terms(self, inputs: AllocationInputs, rates: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(t, R, denominator)`` per job, updating the isolated time."""
        remaining = inputs.remaining_steps
        isolated = isolated_throughputs(rates, inputs.scale_factors, inputs.capacities,
                                        self.isolated_share)
        previous, self._previous = self._previous, {}
        for j, name in enumerate(inputs.names):
            before = previous.get(name)
            if before is not None and before[1] > 0:
                self._isolated_time[name] = (self._isolated_time.get(name, 0.0)
                                             + (before[0] - remaining[j]) / before[1])
            self._previous[name] = (float(remaining[j]), float(isolated[j]))
        spent = np.array([self._isolated_time.get(name, 0.0) for name in inputs.names])
        denominator = spent + remaining / np.maximum(isolated, 1e-12)
        return inputs.elapsed, remaining, np.maximum(denominator, 1e-9)

    def _layout(self, inputs: AllocationInputs, rates: np.ndarray) -> PackedLayout:
        return PackedLayout.of(dense_terms(rates, inputs.scale_factors))

    def allocate_combinations(self, inputs: AllocationInputs) -> np.ndarray | None:
        fallback = self.undeclared_fallback(inputs)
        if fallback is not None:
            return fallback
        rates = self._rates(inputs)
        elapsed, remaining, denominator = self._ratio_terms(inputs, rates)
        layout = self._layout(inputs, rates)
        values = solve_program(min_max_ratio_program(layout.terms, inputs.capacities, elapsed,
                                                     remaining, denominator), self.solver)
        return None if values is None else layout.expand(values, inputs)


class FinishTimeFairnessPerfPolicy(FinishTimeFairnessPolicy):
    """Finish-time fairness over the measured per-type rates (Gavel's FTF).

    Args: as :class:`FinishTimeFairnessPolicy`.
    """

    name = "finish_time_fairness_perf"
    heterogeneity_aware = True
    __init__ = FinishTimeFairnessPolicy.__init__


class FinishTimeFairnessPackedPolicy(FinishTimeFairnessPolicy):
    """Finish-time fairness with space sharing: a job's rate sums over its combinations.

    Args: as :class:`FinishTimeFairnessPolicy`.
    """

    name = "finish_time_fairness_packed"
    heterogeneity_aware = True
    packing = True
    __init__ = FinishTimeFairnessPolicy.__init__

    #: Solve over (job, partner class, type) entries (exact; ``False``: one entry per job pair).
    per_partner_class = True

    def _layout(self, inputs: AllocationInputs, rates: np.ndarray) -> PackedLayout:
        return packed_layout(inputs, self.per_partner_class)

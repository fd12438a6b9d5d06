"""When Sia's last answer is still optimal: a certificate that saves a round's solve.

Between a round and the next, Sia's program (:func:`~bayes_sched.policies.sia_program.solve_assignment`)
often keeps its configurations and capacities and changes only in its utilities: nobody arrived
or finished, and the running jobs aged, which moves their re-allocation factors. The solver then
mostly returns the same answer. Whether it must can be decided without solving, by a bound.

With the feasible set ``F`` unchanged, the last solved utilities ``u`` and this round's ``u'``,

    max_{x in F} u' x  <=  max_{x in F} u x + max_{x in F} (u' - u) x
                       <=  B + sum_j max(0, max_{c of j} (u'_c - u_c)),

where ``B`` is the last solve's upper bound on its optimum (HiGHS's dual bound; the value itself
where every best configuration fitted) and the sum runs over jobs because each takes at most one
configuration. The last answer ``x`` is kept when ``u' x`` lies within the solver's relative gap
of that bound: it is then as good an answer as a fresh solve promises. Configurations of
non-positive utility in ``u'`` are left out of the sum, since no optimum chooses them.

The bound stays with the last *solved* program: chaining certified rounds would add up each
round's increases, which is never tighter. The certificate is sufficient, not necessary: it
declines many rounds where a solve would return the same answer, since it lets every job take
its largest rise at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


class ConfigurationArrays(Protocol):
    """What the certificate reads of :class:`bayes_sched.policies.sia_program.Configurations` (which
    imports this module): each configuration's job, GPU type and GPU count, ``(C,)`` each."""

    @property
    def job(self) -> np.ndarray: ...

    @property
    def gpu_type(self) -> np.ndarray: ...

    @property
    def num_gpus(self) -> np.ndarray: ...

    def __len__(self) -> int: ...


@dataclass(frozen=True)
class SolvedAssignment:
    """One round's Sia program as solved: what a later round needs to reuse its answer.

    Attributes:
        configs: the program's configurations (``C`` of them).
        capacities: its GPUs per type ``(T,)``.
        utility: each configuration's utility ``(C,)``.
        bound: an upper bound on the program's optimum (summed utility).
        chosen: the answer, a configuration per job ``(J,)`` (-1: none).
    """

    configs: ConfigurationArrays
    capacities: np.ndarray
    utility: np.ndarray
    bound: float
    chosen: np.ndarray

    def same_program(self, configs: ConfigurationArrays, capacities: np.ndarray,
                     num_jobs: int) -> bool:
        """Whether ``num_jobs`` jobs' ``configs`` and ``capacities`` give this program's
        feasible set."""
        old = self.configs
        return (len(configs) == len(old) and len(self.chosen) == num_jobs
                and np.array_equal(capacities, self.capacities)
                and np.array_equal(configs.job, old.job)
                and np.array_equal(configs.gpu_type, old.gpu_type)
                and np.array_equal(configs.num_gpus, old.num_gpus))

    def reuse(self, utility: np.ndarray, configs: ConfigurationArrays, capacities: np.ndarray,
              num_jobs: int, rel_gap: float) -> np.ndarray | None:
        """The kept answer ``(J,)`` where it is certified within ``rel_gap`` of the optimum
        under this round's ``utility`` ``(C,)`` (see the module); ``None`` where the program's
        feasible set changed or the bound cannot certify it."""
        if not np.isfinite(self.bound) or not self.same_program(configs, capacities, num_jobs):
            return None
        gain = np.where(utility > 0, np.maximum(utility - self.utility, 0.0), 0.0)
        most = np.zeros(num_jobs)
        np.maximum.at(most, configs.job, gain)
        bound = self.bound + float(most.sum())
        value = assignment_value(utility, self.chosen)
        return self.chosen if bound - value <= rel_gap * abs(value) else None


def assignment_value(utility: np.ndarray, chosen: np.ndarray) -> float:
    """The summed ``utility`` ``(C,)`` of the configurations ``chosen`` ``(J,)`` (-1: none)."""
    return float(utility[chosen[chosen >= 0]].sum())


__all__ = ["SolvedAssignment", "assignment_value"]

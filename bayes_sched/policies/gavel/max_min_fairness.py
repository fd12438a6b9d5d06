"""Gavel's max-min fairness (least attained service): heterogeneity-agnostic and -aware.

Both solve Gavel's LP (``scheduler/policies/max_min_fairness.py``) over time fractions ``x``
``(J, T)`` of each job on each GPU type::

    maximise  min_j  sum_t  w_j * s_j * throughput[j, t] * x[j, t]
    subject to  x >= 0,  sum_t x[j, t] <= 1,  sum_j s_j * x[j, t] <= GPUs of type t

with ``s_j`` the job's scale factor and ``w_j = 1 / (throughput under an equal share of the
cluster)``, the steps/s job ``j`` would get from time on every type in proportion to the type's
GPUs (Gavel's ``ProportionalPolicy``). The heterogeneity-agnostic form (``max_min_fairness``,
Gavel's LAS baseline) sets every throughput to 1: jobs get equal GPU time wherever it is; the
heterogeneity-aware form (``max_min_fairness_perf``, "Gavel") maximises the least normalised
effective throughput with the measured steps/s (a scheduler-side input in Gavel's model). Neither
reads a job's remaining work. The round mechanism is :mod:`bayes_sched.policies.time_sharing`.
"""

from __future__ import annotations

import numpy as np

from bayes_sched.policies.time_fraction_lp import (
    dense_terms,
    max_min_program,
    solve_allocation,
)
from bayes_sched.policies.time_sharing import TimeSharingPolicy


class MaxMinFairnessPolicy(TimeSharingPolicy):
    """Max-min fairness over GPU time, heterogeneity-agnostic (Gavel's LAS baseline).

    Args: as :class:`~bayes_sched.policies.time_sharing.TimeSharingPolicy`.
    """

    name = "max_min_fairness"
    heterogeneity_aware = False
    partitionable = True
    jobs_per_partition = 2048

    __init__ = TimeSharingPolicy.__init__

    def allocate(self, throughputs: np.ndarray, scale_factors: np.ndarray,
                 capacities: np.ndarray) -> np.ndarray | None:
        if not self.heterogeneity_aware:
            throughputs = np.ones_like(throughputs)
        equal_share = throughputs @ (capacities / capacities.sum())  # (J,) steps/s
        weights = 1.0 / np.maximum(equal_share, 1e-12)
        coefficients = throughputs * (weights * scale_factors)[:, None]
        terms = dense_terms(throughputs, scale_factors)
        scores = dense_terms(coefficients, scale_factors).rates
        return solve_allocation(max_min_program(scores, terms, capacities), terms,
                                len(throughputs), self.solver)


class MaxMinFairnessPerfPolicy(MaxMinFairnessPolicy):
    """Gavel: max-min fairness over normalised effective throughput on heterogeneous GPUs.

    Args: as :class:`MaxMinFairnessPolicy`.
    """

    name = "max_min_fairness_perf"
    heterogeneity_aware = True
    __init__ = TimeSharingPolicy.__init__

"""Gavel's maximum total throughput (``max_sum_throughput_perf``), heterogeneity-aware.

Gavel's LP (``scheduler/policies/max_sum_throughput.py``, ``ThroughputSumWithPerf``) over time
fractions ``x`` ``(J, T)``::

    maximise  sum_j sum_t throughput[j, t] * x[j, t]      (measured steps/s)
    subject to  x >= 0,  sum_t x[j, t] <= 1,  sum_j s_j * x[j, t] <= GPUs of type t

It favours jobs with many steps/s and ignores fairness; the round mechanism is
:mod:`bayes_sched.policies.gavel.time_sharing`.
"""

from __future__ import annotations

import numpy as np

from bayes_sched.mechanisms.time_fraction_lp import dense_terms, max_sum_program, solve_allocation
from bayes_sched.policies.gavel.time_sharing import TimeSharingPolicy


class MaxSumThroughputPerfPolicy(TimeSharingPolicy):
    """Maximum total steps/s over the measured throughputs.

    Args: as :class:`~bayes_sched.policies.gavel.time_sharing.TimeSharingPolicy`.
    """

    name = "max_sum_throughput_perf"
    heterogeneity_aware = True
    partitionable = True
    jobs_per_partition = 2048

    __init__ = TimeSharingPolicy.__init__

    def allocate(self, throughputs: np.ndarray, scale_factors: np.ndarray,
                 capacities: np.ndarray) -> np.ndarray | None:
        terms = dense_terms(throughputs, scale_factors)
        return solve_allocation(max_sum_program(terms, capacities), terms, len(throughputs),
                                self.solver)

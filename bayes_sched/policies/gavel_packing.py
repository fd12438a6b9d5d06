"""Space sharing (Gavel's ``_packed`` policies): LPs over jobs alone and pairs sharing GPUs.

Gavel's packing policies (``scheduler/policies/policy.py`` ``PolicyWithPacking``, Narayanan et al.,
OSDI 2020, section 3.1) allocate time to *combinations*: each job alone, and each pair of jobs of
one scale factor that may share their GPUs, on each GPU type. A job's effective throughput is the
sum over the combinations it is in of its rate there (alone: its measured rate; in a pair: its
measured rate while sharing) times the combination's time fraction. Constraints::

    x >= 0
    sum over combinations c containing job j, over types t, of x[c, t]  <= 1      (each job)
    sum over combinations c of scale_factor[c] * x[c, t]               <= GPUs of type t

(a pair occupies its scale factor of GPUs once). Here a combination enters only on the types
where every member runs (a positive measured rate, alone or in the pair), so the LPs are built
sparse over those entries: with ``J`` jobs the pairs number up to ``J (J - 1) / 2`` and a dense
formulation would not fit the 50 ms budget.

:class:`MaxMinFairnessPackedPolicy` is Gavel's ``max_min_fairness_packed``
(``MaxMinFairnessPolicyWithPacking.get_allocation``): maximise the least effective throughput of
a job, each job's rates normalised by the sum of its measured rates alone over the types and
multiplied by its scale factor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from bayes_sched.policies.time_sharing import AllocationInputs, TimeSharingPolicy, solve_lp


@dataclass(frozen=True)
class CombinationTerms:
    """The sparse structure of a packing LP over ``V`` (combination, type) entries.

    Attributes:
        rates: ``(J, V)``: job ``j``'s steps/s in the entry's combination on its type (0 where
            ``j`` is not in it).
        membership: ``(J, V)``: 1 where job ``j`` is in the entry's combination.
        gpus: ``(T, V)``: GPUs the entry occupies on its type (its scale factor).
        combination: ``(V,)`` row of the entry in the ``(J + P, T)`` allocation.
        gpu_type: ``(V,)`` column of the entry.
    """

    rates: sp.csr_matrix
    membership: sp.csr_matrix
    gpus: sp.csr_matrix
    combination: np.ndarray
    gpu_type: np.ndarray

    @property
    def num_entries(self) -> int:
        return len(self.combination)

    def unflatten(self, values: np.ndarray, num_combinations: int, num_types: int) -> np.ndarray:
        """Entry values ``(V,)`` as an allocation ``(J + P, T)``."""
        out = np.zeros((num_combinations, num_types))
        out[self.combination, self.gpu_type] = values
        return out


def combination_terms(inputs: AllocationInputs) -> CombinationTerms:
    """The entries of ``inputs``' jobs alone and pairs, on the types where all members run."""
    num_jobs, num_types = inputs.throughputs.shape
    single_job, single_type = np.nonzero(inputs.throughputs > 0)
    pair, pair_type = np.nonzero(inputs.pair_throughputs.min(axis=1) > 0)
    num_singles = len(single_job)
    combination = np.concatenate([single_job, num_jobs + pair])
    gpu_type = np.concatenate([single_type, pair_type])
    entries = np.arange(len(combination))
    first, second = inputs.pairs[pair, 0], inputs.pairs[pair, 1]
    rows = np.concatenate([single_job, first, second])
    cols = np.concatenate([entries[:num_singles], entries[num_singles:], entries[num_singles:]])
    rate_values = np.concatenate([inputs.throughputs[single_job, single_type],
                                  inputs.pair_throughputs[pair, 0, pair_type],
                                  inputs.pair_throughputs[pair, 1, pair_type]])
    shape = (num_jobs, len(combination))
    sizes = inputs.scale_factors[np.concatenate([single_job, first])]
    return CombinationTerms(
        rates=sp.csr_matrix((rate_values, (rows, cols)), shape=shape),
        membership=sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=shape),
        gpus=sp.csr_matrix((sizes, (gpu_type, entries)), shape=(num_types, len(combination))),
        combination=combination, gpu_type=gpu_type)


def packing_constraints(v: object, terms: CombinationTerms, capacities: np.ndarray) -> list:
    """Non-negative entries, each job's time at most 1, each type's GPUs at most its count."""
    import cvxpy as cp

    assert isinstance(v, cp.Variable)
    return [v >= 0, terms.membership @ v <= 1, terms.gpus @ v <= capacities]


class MaxMinFairnessPackedPolicy(TimeSharingPolicy):
    """Gavel with space sharing: max-min fairness over normalised effective throughput, where
    pairs of jobs of one scale factor may share GPUs at their measured pair rates.

    Args: as :class:`~bayes_sched.policies.time_sharing.TimeSharingPolicy`.
    """

    name = "max_min_fairness_packed"
    heterogeneity_aware = True
    packing = True

    __init__ = TimeSharingPolicy.__init__

    def allocate_combinations(self, inputs: AllocationInputs) -> np.ndarray | None:
        import cvxpy as cp

        terms = combination_terms(inputs)
        # Gavel normalises a job's rates by the sum of its rates alone over the types.
        normaliser = inputs.throughputs.sum(axis=1)
        weights = inputs.scale_factors / np.maximum(normaliser, 1e-12)
        coefficients = sp.diags(weights) @ terms.rates
        v = cp.Variable(terms.num_entries)
        least = cp.Variable()
        problem = cp.Problem(cp.Maximize(least),
                             [coefficients @ v >= least,
                              *packing_constraints(v, terms, inputs.capacities)])
        values = solve_lp(problem, v, self.solver)
        if values is None:
            return None
        return terms.unflatten(values, inputs.num_jobs + len(inputs.pairs),
                               len(inputs.capacities))

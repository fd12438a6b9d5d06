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
sparse over those entries (:func:`combination_terms`).

**Solving per job class.** With ``J`` jobs the pairs number up to ``J (J - 1) / 2``, and a
solve over job pairs takes seconds at 100 jobs. Gavel's answer
(``get_allocation_using_job_type_throughputs``) is to give each job variables per *job type* it
pairs with (its job-type key: model and scale factor), tie the types' pair totals together and
expand the answer to job pairs (``convert_job_type_allocation``). In the max-min LP every job of
one class (job type and scale factor) has the same coefficients, so averaging an optimum over the
permutations of each class's jobs gives an optimum in which all jobs of a class are allocated
alike (the objective, a minimum of linear functions, can only rise). The LP is therefore solved
over classes (:func:`class_terms`): per class and type, the time each of its jobs runs alone,
and per pair of classes and type, the total time of all their job pairs; each class's row is
one of its jobs' normalised effective throughput. The answer is expanded evenly: each job of a
class gets its class's alone fractions, each job pair an equal share of its class pair's total
(Gavel's expansion formula on such an answer). The optimum value is the full LP's
(``tests/test_gavel_packing.py`` checks it against :func:`combination_terms`); the entries
number ``C T + C (C + 1) T / 2`` for ``C`` classes (~1,100 at 100 single-GPU jobs) whatever the
number of jobs. The even expansion puts a class pair's time on every one of its job pairs
(O(jobs^2) pairs in force, which the round mechanism then carries). ``pair_split="intervals"``
(:meth:`ClassTerms.expand_intervals`) gives every job the same time alone and with each partner
class on each type on at most ``n + m - 1`` job pairs per class pair (another optimum of the same
LP; O(jobs) pairs in force; decision times of both: docs/results/bench_sim_speed.md); Gavel's
even split stays the default. Finish-time fairness and min
total duration read each job's remaining steps, so jobs of one class differ there and those LPs
are solved per (job, partner class, type) instead (:func:`partner_class_terms`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from bayes_sched.mechanisms.time_fraction_lp import CombinationTerms
from bayes_sched.policies.gavel.time_sharing import AllocationInputs

__all__ = ["ClassTerms", "CombinationTerms", "PackedLayout", "PartnerTerms", "class_terms",
           "combination_terms", "gavel_statement_terms", "interval_pairs", "packed_layout",
           "pair_within_class", "partner_class_terms"]


def combination_terms(inputs: AllocationInputs) -> CombinationTerms:
    """The entries of ``inputs``' jobs alone and pairs, on the types where all members run;
    an entry's combination is its row in the ``(J + P, T)`` allocation."""
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


def gavel_statement_terms(inputs: AllocationInputs) -> tuple[CombinationTerms, np.ndarray]:
    """The packing LP's entries as Gavel's ``get_allocation`` states them: every job on every
    type and every pair of jobs of one scale factor on every type, *zero rates included* (a
    multi-GPU pair's table entry is ``[0, 0]``, a pair that does not fit in memory is 0: such
    entries add nothing to a job's throughput but are variables, and an interior-point solver
    puts time on them, which moves its answer within the optimal face); and the pairs ``(Q, 2)``
    in entry order. An entry's combination is its row in the ``(J + Q, T)`` allocation."""
    num_jobs, num_types = inputs.throughputs.shape
    first, second = np.triu_indices(num_jobs, k=1)
    same = inputs.scale_factors[first] == inputs.scale_factors[second]
    pairs = np.stack([first[same], second[same]], axis=1)
    pair_rates = np.zeros((len(pairs), 2, num_types))
    if len(inputs.pairs):  # the measured ones; the rest stay 0
        index = {(int(a), int(b)): q for q, (a, b) in enumerate(pairs)}
        at = np.array([index[(int(a), int(b))] for a, b in inputs.pairs])
        pair_rates[at] = inputs.pair_throughputs
    rows = num_jobs + len(pairs)
    combination = np.repeat(np.arange(rows), num_types)
    gpu_type = np.tile(np.arange(num_types), rows)
    entries = np.arange(len(combination))
    singles = num_jobs * num_types
    pair_of = combination[singles:] - num_jobs
    members = np.concatenate([combination[:singles], pairs[pair_of, 0], pairs[pair_of, 1]])
    cols = np.concatenate([entries, entries[singles:]])
    values = np.concatenate([inputs.throughputs.ravel(),
                             pair_rates[pair_of, 0, gpu_type[singles:]],
                             pair_rates[pair_of, 1, gpu_type[singles:]]])
    shape = (num_jobs, len(combination))
    sizes = inputs.scale_factors[np.concatenate([combination[:singles], pairs[pair_of, 0]])]
    return CombinationTerms(
        rates=sp.csr_matrix((values, (members, cols)), shape=shape),
        membership=sp.csr_matrix((np.ones(len(members)), (members, cols)), shape=shape),
        gpus=sp.csr_matrix((sizes, (gpu_type, entries)), shape=(num_types, len(combination))),
        combination=combination, gpu_type=gpu_type), pairs


@dataclass(frozen=True)
class ClassTerms:
    """The packing LP over job classes, and how to expand its answer to jobs and job pairs.

    Attributes:
        terms: entries over ``C`` classes: first each class alone on each type where it runs
            (value: the time each of its jobs runs there alone), then each pair of classes on
            each type where their pairs run (value: the total time of all their job pairs);
            ``terms.rates[c]`` and ``terms.membership[c]`` are one job of class ``c``'s steps/s
            and time per unit of an entry, ``terms.gpus`` the GPUs per unit.
        representative: one job of each class, ``(C,)``.
        share: per entry, the fraction of its value each allocation row it expands to gets
            (1 for a class alone; one over the number of its job pairs for a class pair).
        class_pair: per pair entry, the index of its class pair; per job pair, likewise
            (``pair_class_pair``, ``(P,)``).
    """

    terms: CombinationTerms
    representative: np.ndarray
    share: np.ndarray
    class_pair: np.ndarray
    pair_class_pair: np.ndarray

    def expand(self, values: np.ndarray, job_classes: np.ndarray, num_types: int
               ) -> np.ndarray:
        """Entry values ``(V,)`` as the ``(J + P, T)`` allocation: each job its class's alone
        fractions, each job pair an equal share of its class pair's total."""
        num_classes = len(self.representative)
        scaled = values * self.share
        alone = self.terms.combination < num_classes
        by_class = np.zeros((num_classes, num_types))
        by_class[self.terms.combination[alone], self.terms.gpu_type[alone]] = scaled[alone]
        by_class_pair = np.zeros((int(self.class_pair.max(initial=-1)) + 1, num_types))
        by_class_pair[self.class_pair[~alone], self.terms.gpu_type[~alone]] = scaled[~alone]
        return np.concatenate([by_class[job_classes], by_class_pair[self.pair_class_pair]])

    def expand_intervals(self, values: np.ndarray, inputs: AllocationInputs) -> np.ndarray:
        """Entry values ``(V,)`` as the ``(J + P, T)`` allocation with each job's time and
        effective steps/s as in :meth:`expand`, but on few job pairs: a class pair's total goes
        to at most ``n + m - 1`` of its ``n m`` job pairs (:func:`interval_pairs`), a class's
        own total to about ``n`` of its ``n (n - 1) / 2`` (:func:`pair_within_class` on equal
        times); every job of a class spends the same time with each partner class, as in the
        even split, so the two allocations are optima of the same LP."""
        num_jobs, num_types = inputs.throughputs.shape
        classes = inputs.job_classes
        num_classes = len(self.representative)
        alone = self.terms.combination < num_classes
        out = np.zeros((num_jobs + len(inputs.pairs), num_types))
        by_class = np.zeros((num_classes, num_types))
        by_class[self.terms.combination[alone], self.terms.gpu_type[alone]] = values[alone]
        out[:num_jobs] = by_class[classes]
        totals = np.zeros((int(self.class_pair.max(initial=-1)) + 1, num_types))
        totals[self.class_pair[~alone], self.terms.gpu_type[~alone]] = values[~alone]
        if not len(inputs.pairs):
            return out
        # Row of job pair (a, b), a < b, in inputs.pairs (sorted by (a, b)).
        keys = inputs.pairs[:, 0] * num_jobs + inputs.pairs[:, 1]
        first_pair = np.unique(self.pair_class_pair, return_index=True)[1]
        members = [np.flatnonzero(classes == c) for c in range(num_classes)]
        for cp in np.flatnonzero(totals.max(axis=1) > 0):
            a, b = inputs.pairs[first_pair[cp]]
            ca, cb = members[classes[a]], members[classes[b]]
            if classes[a] == classes[b]:
                within = pair_within_class(np.full(len(ca), 2.0 / len(ca)))
                i, k = np.nonzero(np.triu(within, 1))
                first, second, weight = ca[i], ca[k], within[i, k]
            else:
                i, k, weight = interval_pairs(len(ca), len(cb))
                first, second = ca[i], cb[k]
            low, high = np.minimum(first, second), np.maximum(first, second)
            rows = np.searchsorted(keys, low * num_jobs + high)
            out[num_jobs + rows] += weight[:, None] * totals[cp][None, :]
        return out


def interval_pairs(n: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A transport plan between ``n`` equal supplies and ``m`` equal demands, each side
    summing to 1, on at most ``n + m - 1`` pairs: lay both sides end to end on ``[0, 1)`` and
    pair what overlaps (the north-west corner rule). Returns ``(i, k, weight)``."""
    points = np.union1d(np.arange(n + 1) / n, np.arange(m + 1) / m)
    middles = (points[:-1] + points[1:]) / 2.0
    weight = np.diff(points)
    keep = weight > 0
    return ((middles[keep] * n).astype(np.int64), (middles[keep] * m).astype(np.int64),
            weight[keep])


def class_terms(inputs: AllocationInputs) -> ClassTerms:
    """The packing LP's structure over ``inputs``' job classes (:attr:`AllocationInputs.
    job_classes`); rows of ``terms`` are classes."""
    classes = inputs.job_classes
    num_classes = int(classes.max()) + 1
    num_types = inputs.throughputs.shape[1]
    members = np.bincount(classes, minlength=num_classes).astype(float)
    representative = np.zeros(num_classes, dtype=np.int64)
    representative[classes[::-1]] = np.arange(len(classes))[::-1]  # each class's first job
    alone_rates = inputs.throughputs[representative]
    sizes = inputs.scale_factors[representative]
    # Class pairs (low, high), in order of first appearance among the job pairs.
    low = classes[inputs.pairs[:, 0]]
    high = classes[inputs.pairs[:, 1]]
    swap = low > high
    low, high = np.where(swap, high, low), np.where(swap, low, high)
    keys, first_row, pair_class_pair, counts = np.unique(
        low * num_classes + high, return_index=True, return_inverse=True, return_counts=True)
    pair_low, pair_high = keys // num_classes, keys % num_classes
    # Each class's rate in the pair: the member of its class in a representative job pair.
    rates = inputs.pair_throughputs[first_row]  # (K, 2, T), in the job pair's order
    rates = np.where(swap[first_row][:, None, None], rates[:, ::-1], rates)
    single_class, single_type = np.nonzero(alone_rates > 0)
    pair, pair_type = np.nonzero(rates.min(axis=1) > 0)
    num_singles = len(single_class)
    entries = np.arange(num_singles + len(pair))
    low_of, high_of = pair_low[pair], pair_high[pair]
    same = low_of == high_of
    # Per job of a class: the time it spends per unit of a pair entry's total.
    low_time = np.where(same, 2.0, 1.0) / members[low_of]
    high_time = 1.0 / members[high_of]
    rows = np.concatenate([single_class, low_of, high_of[~same]])
    cols = np.concatenate([entries[:num_singles], entries[num_singles:],
                           entries[num_singles:][~same]])
    time_values = np.concatenate([np.ones(num_singles), low_time, high_time[~same]])
    # Two jobs of one class share at one rate in Gavel's table; the mean covers a table that
    # gives the two members different rates (then the reduction is exact only on average).
    low_rate = np.where(same, rates[pair, :, pair_type].mean(axis=1), rates[pair, 0, pair_type])
    rate_values = time_values * np.concatenate([
        alone_rates[single_class, single_type], low_rate, rates[pair, 1, pair_type][~same]])
    shape = (num_classes, len(entries))
    gpus = np.concatenate([members[single_class] * sizes[single_class], sizes[low_of]])
    terms = CombinationTerms(
        rates=sp.csr_matrix((rate_values, (rows, cols)), shape=shape),
        membership=sp.csr_matrix((time_values, (rows, cols)), shape=shape),
        gpus=sp.csr_matrix((gpus, (np.concatenate([single_type, pair_type]), entries)),
                           shape=(num_types, len(entries))),
        combination=np.concatenate([single_class, num_classes + pair]),
        gpu_type=np.concatenate([single_type, pair_type]))
    return ClassTerms(terms=terms, representative=representative,
                      share=np.concatenate([np.ones(num_singles), 1.0 / counts[pair]]),
                      class_pair=np.concatenate([np.full(num_singles, -1), pair]),
                      pair_class_pair=pair_class_pair)


@dataclass(frozen=True)
class PartnerTerms:
    """The packing LP with one entry per job, *partner class* and type instead of per job pair,
    and how to expand its answer to job pairs (an exact reduction, :func:`partner_class_terms`).

    Attributes:
        terms: entries: each job alone on each type where it runs, then ``y[j, c, t]``, the time
            job ``j`` spends paired with jobs of class ``c`` on type ``t`` (where the two classes'
            pair runs there and ``c`` has a job other than ``j``); rows are jobs; its coupling
            rows make ``y`` decompose into job pairs.
        job: ``(V,)`` the entry's job; ``partner``: ``(V,)`` its partner class (-1 alone).
        num_classes: ``C``.
    """

    terms: CombinationTerms
    job: np.ndarray
    partner: np.ndarray
    num_classes: int

    def expand(self, values: np.ndarray, inputs: AllocationInputs) -> np.ndarray:
        """Entry values ``(V,)`` as the ``(J + P, T)`` allocation over ``inputs``' jobs and job
        pairs: each job's time paired with a class split over that class's jobs so that every
        job's total per partner class is kept (between two classes in proportion to both
        sides' totals, Gavel's ``convert_job_type_allocation`` formula; within one class by
        :func:`pair_within_class`)."""
        num_jobs, num_types = inputs.throughputs.shape
        values = np.maximum(values, 0.0)
        gpu_type = self.terms.gpu_type
        alone = self.partner < 0
        out = np.zeros((num_jobs + len(inputs.pairs), num_types))
        out[self.job[alone], gpu_type[alone]] = values[alone]
        if not len(inputs.pairs):
            return out
        classes = inputs.job_classes
        paired = np.zeros((num_jobs, self.num_classes, num_types))
        paired[self.job[~alone], self.partner[~alone], gpu_type[~alone]] = values[~alone]
        totals = np.zeros((self.num_classes, self.num_classes, num_types))
        np.add.at(totals, classes, paired)  # totals[c, c', t]: class c's time with class c'
        a, b = inputs.pairs[:, 0], inputs.pairs[:, 1]
        ca, cb = classes[a], classes[b]
        # Between classes: x_ab = y[a, cb] y[b, ca] / (time of class ca with cb), averaged with
        # the other side's total (the two are equal up to the solver's tolerance).
        between = (totals[ca, cb] + totals[cb, ca]) / 2.0
        pairs = np.divide(paired[a, cb] * paired[b, ca], between,
                          out=np.zeros_like(between), where=between > 0)
        same = ca == cb
        for c in np.unique(ca[same]):
            members = np.flatnonzero(classes == c)
            position = np.zeros(num_jobs, dtype=np.int64)
            position[members] = np.arange(len(members))
            rows = np.flatnonzero(same & (ca == c))
            for t in range(num_types):
                within = pair_within_class(paired[members, c, t])
                pairs[rows, t] = within[position[a[rows]], position[b[rows]]]
        out[num_jobs:] = pairs
        return out


def pair_within_class(times: np.ndarray) -> np.ndarray:
    """A symmetric ``(n, n)`` matrix, zero on the diagonal, non-negative, whose rows sum to
    ``times`` ``(n,)``: how long each two jobs of one class share GPUs so that each job spends
    its ``times`` paired. It exists exactly when no job's time exceeds the others' together.

    Construction: lay the times end to end on a circle of circumference ``S`` and pair every
    point with the point half way round; a job's arc (at most ``S / 2``) never meets itself.
    """
    n = len(times)
    out = np.zeros((n, n))
    total = float(times.sum())
    if n < 2 or total <= 0:
        return out
    half = total / 2.0
    ends = np.cumsum(times)
    starts = ends - times
    points = np.unique(np.clip(np.concatenate([starts, ends, starts - half, ends - half]),
                               0.0, half))
    middles = (points[:-1] + points[1:]) / 2.0
    first = np.minimum(np.searchsorted(ends, middles, side="right"), n - 1)
    second = np.minimum(np.searchsorted(ends, middles + half, side="right"), n - 1)
    np.add.at(out, (first, second), np.diff(points))
    out += out.T
    np.fill_diagonal(out, 0.0)  # only where a time exceeds half the total by the tolerance
    return out


def partner_class_terms(inputs: AllocationInputs) -> PartnerTerms:
    """The packing LP over (job, partner class, type) entries: exact for any objective over the
    jobs' effective steps/s (finish-time fairness, min total duration), unlike
    :func:`class_terms`, which needs every job of a class to be alike.

    A job's rate paired depends only on its partner's class, so the LP over job pairs depends on
    ``x`` only through ``y[j, c, t]`` = the summed time of ``j``'s pairs with jobs of class
    ``c`` on ``t``, and any ``y`` is the image of a pair allocation exactly when: between two
    classes, both sides' totals agree (a transportation problem with equal totals always has
    a solution), and within a class, no job's time exceeds its classmates' together
    (:func:`pair_within_class`). Those are the coupling rows; a pair occupies its GPUs once, so
    ``y`` counts half its scale factor per job. Entries: ``J T`` alone plus at most ``J C T``
    paired (``C`` classes of the job's scale factor), instead of ``J (J - 1) T / 2``.
    """
    num_jobs, num_types = inputs.throughputs.shape
    classes = inputs.job_classes
    num_classes = int(classes.max()) + 1 if num_jobs else 0
    members = np.bincount(classes, minlength=num_classes)
    # Class-level pair rates: rate[c, c', t] of a class-c job beside a class-c' job.
    rate = np.zeros((num_classes, num_classes, num_types))
    if len(inputs.pairs):
        ca, cb = classes[inputs.pairs[:, 0]], classes[inputs.pairs[:, 1]]
        pair_rates = inputs.pair_throughputs
        same = (ca == cb)[:, None]
        # Two jobs of one class share at one rate in Gavel's table; the mean covers a table
        # that gives the two members different rates.
        rate[ca, cb] = np.where(same, pair_rates.mean(axis=1), pair_rates[:, 0])
        rate[cb, ca] = np.where(same, pair_rates.mean(axis=1), pair_rates[:, 1])
    runs_paired = (rate > 0) & (np.transpose(rate, (1, 0, 2)) > 0)
    runs_paired[np.arange(num_classes), np.arange(num_classes)] &= (members >= 2)[:, None]
    single_job, single_type = np.nonzero(inputs.throughputs > 0)
    pair_job, pair_class, pair_type = np.nonzero(runs_paired[classes])
    num_singles = len(single_job)
    job = np.concatenate([single_job, pair_job])
    partner = np.concatenate([np.full(num_singles, -1), pair_class])
    gpu_type = np.concatenate([single_type, pair_type])
    entries = np.arange(len(job))
    shape = (num_jobs, len(job))
    sizes = inputs.scale_factors[job] * np.where(partner < 0, 1.0, 0.5)
    rates = np.concatenate([inputs.throughputs[single_job, single_type],
                            rate[classes[pair_job], pair_class, pair_type]])
    own = classes[pair_job]
    paired_entries = entries[num_singles:]
    # Between classes: sum of y[j in c, c', t] - sum of y[k in c', c, t] == 0 per c < c'.
    cross = own != pair_class
    low, high = np.minimum(own, pair_class)[cross], np.maximum(own, pair_class)[cross]
    keys, row = np.unique((low * num_classes + high) * num_types + pair_type[cross],
                          return_inverse=True)
    equal = sp.csr_matrix((np.where(own[cross] < pair_class[cross], 1.0, -1.0),
                           (row, paired_entries[cross])), shape=(len(keys), len(job)))
    # Within a class: y[j] - sum of y[k != j] <= 0, one row per such entry.
    within = paired_entries[~cross]
    group = (own[~cross] * num_types + pair_type[~cross])
    order = np.argsort(group, kind="stable")
    within, group = within[order], group[order]
    starts = np.searchsorted(group, group, side="left")
    stops = np.searchsorted(group, group, side="right")
    counts = stops - starts
    upper_rows = np.repeat(np.arange(len(within)), counts)
    # Row i's columns: the entries of its group, within[starts[i]:stops[i]].
    first_of_row = np.repeat(np.cumsum(counts) - counts, counts)
    upper_cols = within[np.arange(len(upper_rows)) - first_of_row + np.repeat(starts, counts)]
    upper_values = np.where(upper_cols == within[upper_rows], 1.0, -1.0)
    upper = sp.csr_matrix((upper_values, (upper_rows, upper_cols)),
                          shape=(len(within), len(job)))
    terms = CombinationTerms(
        rates=sp.csr_matrix((rates, (job, entries)), shape=shape),
        membership=sp.csr_matrix((np.ones(len(job)), (job, entries)), shape=shape),
        gpus=sp.csr_matrix((sizes, (gpu_type, entries)), shape=(num_types, len(job))),
        combination=job, gpu_type=gpu_type, coupling_upper=upper, coupling_equal=equal)
    return PartnerTerms(terms=terms, job=job, partner=partner, num_classes=num_classes)


@dataclass(frozen=True)
class PackedLayout:
    """A program's entries and how its answer becomes the ``(J + P, T)`` allocation: by the
    entries' rows (:meth:`CombinationTerms.unflatten`) or by :meth:`PartnerTerms.expand`."""

    terms: CombinationTerms
    partners: PartnerTerms | None = None

    @classmethod
    def of(cls, terms: CombinationTerms) -> PackedLayout:
        return cls(terms)

    def expand(self, values: np.ndarray, inputs: AllocationInputs) -> np.ndarray:
        """The program's variables ``values`` (entries first) as the allocation."""
        entries = values[:self.terms.num_entries]
        if self.partners is not None:
            return self.partners.expand(entries, inputs)
        return self.terms.unflatten(entries, inputs.num_jobs + len(inputs.pairs),
                                    len(inputs.capacities))


def packed_layout(inputs: AllocationInputs, per_partner_class: bool = True) -> PackedLayout:
    """The packing LP's entries for ``inputs``: per (job, partner class, type)
    (:func:`partner_class_terms`, default) or one per job and job pair
    (:func:`combination_terms`, the LP as Gavel states it)."""
    if not per_partner_class:
        return PackedLayout(combination_terms(inputs))
    partners = partner_class_terms(inputs)
    return PackedLayout(partners.terms, partners)

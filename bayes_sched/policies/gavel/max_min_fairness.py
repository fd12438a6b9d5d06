"""Gavel's max-min fairness (least attained service): heterogeneity-agnostic, -aware and packed.

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
reads a job's remaining work. The round mechanism is :mod:`bayes_sched.policies.gavel.time_sharing`.

The packed form (``max_min_fairness_packed``, :class:`MaxMinFairnessPackedPolicy`) is Gavel's
``MaxMinFairnessPolicyWithPacking.get_allocation``: maximise the least effective throughput of
a job, each job's rates normalised by the sum of its measured rates alone over the types and
multiplied by its scale factor, where pairs of jobs of one scale factor may share GPUs
(:mod:`bayes_sched.policies.gavel.packing`, solved per job class).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import scipy.sparse as sp

from bayes_sched.cells import Cell
from bayes_sched.cluster import Allocations, ClusterState
from bayes_sched.estimates import Estimates
from bayes_sched.jobs import JobView
from bayes_sched.mechanisms.pop import GroupSetting, PartitionSetting, WorkerSetting
from bayes_sched.mechanisms.time_fraction_lp import (
    ConicProgram,
    HighsModel,
    dense_terms,
    max_min_program,
    solve_allocation,
    solve_program,
)
from bayes_sched.mechanisms.value_of_information import (
    LpPrices,
    column_values,
    expected_gain,
    lp_prices,
    positive_part_bound,
    worth_trying,
)
from bayes_sched.policies.gavel.packing import (
    ClassTerms,
    class_terms,
    combination_terms,
    gavel_statement_terms,
)
from bayes_sched.policies.gavel.time_sharing import (
    MIN_PAIR_FRACTION,
    AllocationInputs,
    TimeSharingPolicy,
)


class MaxMinFairnessPolicy(TimeSharingPolicy):
    """Max-min fairness over GPU time, heterogeneity-agnostic (Gavel's LAS baseline).

    Args: as :class:`~bayes_sched.policies.gavel.time_sharing.TimeSharingPolicy`.
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


def class_max_min_program(inputs: AllocationInputs
                          ) -> tuple[ClassTerms, sp.csr_matrix, ConicProgram]:
    """The packed max-min LP over ``inputs``' job classes: its terms, the classes' normalised
    scores ``(C, V)`` (Gavel's weights: scale factor over the sum of the rates alone) and the
    program."""
    weights = inputs.scale_factors / np.maximum(inputs.throughputs.sum(axis=1), 1e-12)
    reduced = class_terms(inputs)
    scores = sp.diags(weights[reduced.representative]) @ reduced.terms.rates
    return reduced, scores, max_min_program(scores, reduced.terms, inputs.capacities)


def packed_max_min_allocation(inputs: AllocationInputs, solver: str, per_class: bool = True,
                              gavel_statement: bool = False, pair_split: str = "even",
                              class_program: tuple[ClassTerms, sp.csr_matrix, ConicProgram]
                              | None = None) -> np.ndarray | None:
    """Gavel's packed max-min allocation ``(J + P, T)``: over job classes (default), with one
    entry per job and measured job pair (``per_class=False``), or over Gavel's own entries
    (``gavel_statement``: :func:`~bayes_sched.policies.gavel.packing.gavel_statement_terms`; the
    zero-rate pairs' time is dropped from the answer, as Gavel never runs them). The same optimum
    value; a different point of the optimal face each. ``pair_split`` (per class only): how a
    class pair's time is spread over its job pairs: ``"even"`` (Gavel's
    ``convert_job_type_allocation`` on a class-symmetric answer: every job pair), ``"intervals"``
    (:meth:`~bayes_sched.policies.gavel.packing.ClassTerms.expand_intervals`: the same time per
    job and partner class on O(jobs) pairs instead of O(jobs^2)).
    ``class_program``: :func:`class_max_min_program` of ``inputs`` where already built."""
    # Gavel normalises a job's rates by the sum of its rates alone over the types.
    weights = inputs.scale_factors / np.maximum(inputs.throughputs.sum(axis=1), 1e-12)
    num_rows = inputs.num_jobs + len(inputs.pairs)
    num_types = len(inputs.capacities)
    if gavel_statement:
        terms, pairs = gavel_statement_terms(inputs)
        values = solve_program(
            max_min_program(sp.diags(weights) @ terms.rates, terms, inputs.capacities), solver)
        if values is None:
            return None
        full = terms.unflatten(values[:-1], inputs.num_jobs + len(pairs), num_types)
        index = {(int(a), int(b)): q for q, (a, b) in enumerate(pairs)}
        kept = [inputs.num_jobs + index[(int(a), int(b))] for a, b in inputs.pairs]
        return np.concatenate([full[:inputs.num_jobs], full[kept]]).reshape(num_rows, num_types)
    if not per_class:
        terms = combination_terms(inputs)
        values = solve_program(
            max_min_program(sp.diags(weights) @ terms.rates, terms, inputs.capacities), solver)
        return None if values is None else terms.unflatten(values[:-1], num_rows, num_types)
    reduced, _, program = (class_max_min_program(inputs) if class_program is None
                           else class_program)
    values = solve_program(program, solver)
    if values is None:
        return None
    if pair_split == "intervals":
        return reduced.expand_intervals(values[:-1], inputs)
    return reduced.expand(values[:-1], inputs.job_classes, num_types)


def _cell_positions(candidates: Sequence[tuple[int, list[int], list[Cell]]]
                    ) -> tuple[np.ndarray, np.ndarray]:
    """For the cells of ``candidates`` (columns: entry, rows, the rows' cells) in order: each
    cell's row (class) and its column's index, two ``(K,)`` arrays."""
    row_of = np.array([row for _, rows, _ in candidates for row in rows], dtype=np.int64)
    column_of = np.repeat(np.arange(len(candidates)), [len(rows) for _, rows, _ in candidates])
    return row_of, column_of


class MaxMinFairnessPackedPolicy(TimeSharingPolicy):
    """Gavel with space sharing: max-min fairness over normalised effective throughput, where
    pairs of jobs of one scale factor may share GPUs at their measured pair rates (solved per
    job class).

    Args: as :class:`~bayes_sched.policies.gavel.time_sharing.TimeSharingPolicy`, and
        pair_split: ``"even"`` (Gavel's: a class pair's time on every one of its job pairs) or
            ``"intervals"`` (on O(jobs) job pairs, the same time per job and partner class; at
            2,048 GPUs and 1,900 jobs the even split puts ~780,000 pairs in force; measured
            JCTs of the two: docs/results/gavel_fidelity.md).
        exploration: with a learned belief, how the policy learns cells it has not seen:
            ``"value_of_information"`` (default; ``acquisition`` is then ignored: decide on the
            posterior mean, and try a job alone or a pair in a cell nobody has reported from,
            for one profiling round, only where the expected value of knowing its rate beats
            the trial's expected cost: :mod:`~bayes_sched.mechanisms.value_of_information`),
            ``"thompson"`` (decide as ``acquisition`` says: one joint posterior draw per
            recompute, or the mean) or ``"none"`` (decide on the posterior mean and try
            nothing: what the mean allocation runs and the learner's profiling plan are all it
            learns from; ``acquisition`` is ignored). Their measured JCTs are in
            ``experiments/bench_uncertainty.py``'s results.
    """

    name = "max_min_fairness_packed"
    heterogeneity_aware = True
    packing = True
    partitionable = True
    jobs_per_partition = 128

    #: Posterior draws per candidate cell for the expected gain (Monte Carlo precision only).
    VALUE_DRAWS = 256

    def __init__(self, solver: Literal["CLARABEL", "HIGHS"] = "CLARABEL",
                 min_reset_interval: float = 1920.0, seed: int = 0,
                 acquisition: Literal["thompson", "mean"] = "thompson",
                 gavel_statement: bool = False,
                 pair_split: Literal["even", "intervals"] = "even",
                 exploration: Literal["thompson", "value_of_information", "none"] = (
                     "value_of_information"),
                 partitions: PartitionSetting = "auto",
                 partition_workers: WorkerSetting = 1,
                 partition_groups: GroupSetting = "redrawn") -> None:
        super().__init__(solver, min_reset_interval, seed, acquisition, partitions=partitions,
                         partition_workers=partition_workers, partition_groups=partition_groups)
        if pair_split not in ("even", "intervals"):
            raise ValueError(f"pair_split is {pair_split!r}: expected 'even' or 'intervals'")
        if exploration not in ("thompson", "value_of_information", "none"):
            raise ValueError(f"exploration is {exploration!r}: expected 'thompson', "
                             "'value_of_information' or 'none'")
        #: Solve the LP over Gavel's own entries (every pair of one scale factor, zero rates
        #: included; :func:`~bayes_sched.policies.gavel.packing.gavel_statement_terms`) instead
        #: of per job class.
        self.gavel_statement = bool(gavel_statement)
        self.pair_split = pair_split
        self.exploration = exploration
        if exploration != "thompson":
            self.thompson = False  # the allocation is the posterior mean's
        #: Exploration trials requested: (cell, expected gain, expected cost), objective-seconds.
        self.trials: list[tuple[Cell, float, float]] = []
        self._round_seconds = 0.0
        self._reported: set[Cell] = set()
        self._reports_read = 0

    def stats(self) -> Mapping[str, float]:
        """The time-sharing figures and ``trials`` (exploration trials requested)."""
        return {**super().stats(), "trials": int(len(self.trials))}

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView],
               estimates: Estimates) -> Allocations:
        self._round_seconds = float(cluster.round_interval)
        return super().decide(cluster, jobs, estimates)

    def sub_problems_commute(self) -> bool:
        """False while exploring by value of information: each call's trials draw from the
        policy's posterior stream in turn."""
        return not self._exploring()

    def _exploring(self) -> bool:
        return self.estimator is not None and self.exploration == "value_of_information"

    def allocate_combinations(self, inputs: AllocationInputs) -> np.ndarray | None:
        explore = self._exploring()
        # The class program is built once for the allocation and the trials' prices.
        program = (class_max_min_program(inputs) if explore and not self.gavel_statement
                   else None)
        x = packed_max_min_allocation(inputs, self.solver,
                                      gavel_statement=self.gavel_statement,
                                      pair_split=self.pair_split, class_program=program)
        if x is not None and explore:
            self._request_trials(inputs, x, program)
        return x

    def _request_trials(self, inputs: AllocationInputs, allocation: np.ndarray,
                        class_program: tuple[ClassTerms, sp.csr_matrix, ConicProgram]
                        | None = None) -> None:
        """Queue, as profiling rounds, the cells worth trying given the mean ``allocation``
        ``(J + P, T)`` (module :mod:`~bayes_sched.mechanisms.value_of_information`;
        ``class_program``: :func:`class_max_min_program` of ``inputs`` where already built)."""
        estimator = self.estimator
        assert estimator is not None
        if not np.isfinite(inputs.remaining_steps).any():
            return  # no declared work: no horizon to value information over
        for report in estimator.observations[self._reports_read:]:
            self._reported.add(report.cell)
        self._reports_read = len(estimator.observations)
        reduced, scores, program = (class_max_min_program(inputs) if class_program is None
                                    else class_program)
        terms = reduced.terms
        num_classes = len(reduced.representative)
        keys = inputs.class_keys
        # Every column tried or in use: no trial, and no LP for its prices.
        candidates = self._untried_columns(inputs, allocation, reduced, keys)
        if not candidates:
            return
        model = HighsModel(program)  # the prices, then each column's re-solve from its basis
        prices = lp_prices(program, num_classes, len(inputs.capacities), model)
        if prices is None:
            return
        classes = inputs.job_classes
        # Each class's horizon: its longest job's declared steps left at its mean-LP steps/s.
        rate = np.asarray(terms.rates @ prices.entries).ravel()[classes]
        left = np.divide(inputs.remaining_steps, rate, out=np.full(len(rate), np.inf),
                         where=rate > 0)
        horizon = np.zeros(num_classes)
        np.maximum.at(horizon, classes, np.nan_to_num(left, nan=0.0))
        gpus = np.asarray(terms.gpus.sum(axis=0)).ravel()
        time = terms.membership.tocsc()
        belief = estimator.belief
        entries = np.array([e for e, _, _ in candidates])
        scores_c = scores.tocsc()[:, entries]
        time_c = time[:, entries]
        gpu_type = terms.gpu_type[entries]
        mean_value = column_values(scores_c, time_c, gpus[entries], gpu_type, prices)
        # The rise is at most E[max(v, 0)] times the most of the column the LP can use
        # (concavity): where even that does not pay for the trial, no LP solve.
        time_dense = time_c.toarray()
        most = np.minimum(1.0 / np.max(time_dense, axis=0, initial=0.0, where=time_dense > 0),
                          inputs.capacities[gpu_type] / gpus[entries])
        # Per column: the trial's job-level column's value (one job or pair on its GPUs, a
        # share of the class's), and how long the answer is used (its classes' shortest).
        trial_value = mean_value * np.array([float(keys[rows[0]][1]) for _, rows, _ in candidates]
                                            ) / gpus[entries]
        column_horizon = np.array([float(min(horizon[rows])) for _, rows, _ in candidates])
        screen = self._draw_free_bound(belief, candidates, scores_c, prices, mean_value)
        if screen is not None:
            keep = np.array([worth_trying(float(b), float(h), float(v), self._round_seconds)[0]
                             for b, h, v in zip(screen * most, column_horizon, trial_value,
                                                strict=True)], dtype=bool)
            if not keep.any():
                return
            candidates = [c for c, k in zip(candidates, keep.tolist(), strict=True) if k]
            entries, gpu_type, mean_value, most = (entries[keep], gpu_type[keep],
                                                   mean_value[keep], most[keep])
            trial_value, column_horizon = trial_value[keep], column_horizon[keep]
            scores_c, time_c = scores_c[:, keep], time_c[:, keep]
        row_of, column_of = _cell_positions(candidates)
        cells = [c for _, _, cs in candidates for c in cs]
        prediction = belief.predict(cells, num_draws=self.VALUE_DRAWS,
                                    seed=self.seed * 1_000_003 + self.draws_made)
        self.draws_made += 1
        ratios = np.ones((self.VALUE_DRAWS, num_classes, len(entries)))
        known = prediction.mean > 0
        ratios[:, row_of, column_of] = np.where(
            known, prediction.draws / np.where(known, prediction.mean, 1.0), 0.0)
        drawn = column_values(scores_c, time_c, gpus[entries], gpu_type, prices, ratios)
        bound = np.mean(np.maximum(drawn, 0.0), axis=0) * most
        for i, (e, rows, cs) in enumerate(candidates):
            if not worth_trying(float(bound[i]), float(column_horizon[i]),
                                float(trial_value[i]), self._round_seconds)[0]:
                continue
            row_index = np.array(rows)
            gain = expected_gain(program, prices, int(e), row_index, drawn[:, i],
                                 ratios[:, row_index, i], model)
            go, gain, cost = worth_trying(gain, float(column_horizon[i]),
                                          float(trial_value[i]), self._round_seconds)
            if not go:
                continue
            # A job of the column's first class; one with no plan left first.
            of_class = [n for n, c in zip(inputs.names, classes, strict=True) if c == rows[0]]
            job = min(of_class, key=lambda n: len(estimator.pending_profiling(n)) > 0)
            estimator.request_profiling(job, cs[0])
            self.trials.append((cs[0], gain, cost))

    @staticmethod
    def _draw_free_bound(belief: object, candidates: list[tuple[int, list[int], list[Cell]]],
                         scores: sp.csc_matrix, prices: LpPrices, mean_value: np.ndarray
                         ) -> np.ndarray | None:
        """Each candidate column's bound on ``E[max(v, 0)]`` before any draw
        (:func:`~bayes_sched.mechanisms.value_of_information.positive_part_bound`, from the
        belief's ``log_variance_and_fit``), ``(V,)``; ``None`` for a belief that does not
        state its spread (every column is then drawn). ``scores``: the columns' ``(C, V)``."""
        spread = getattr(belief, "log_variance_and_fit", None)
        if spread is None:
            return None
        row_of, column_of = _cell_positions(candidates)
        weights = np.asarray(scores.multiply(prices.floor[:, None]).tocsc()[row_of, column_of]
                             ).ravel()
        log_var, fit = spread([c for _, _, cs in candidates for c in cs])
        fixed = np.bincount(column_of, weights, minlength=len(candidates)) - mean_value
        return positive_part_bound(weights, column_of, fixed, log_var, fit)

    def _untried_columns(self, inputs: AllocationInputs, allocation: np.ndarray,
                         reduced: ClassTerms, keys: Sequence[tuple[str, int]]
                         ) -> list[tuple[int, list[int], list[Cell]]]:
        """The class LP's columns that the mean ``allocation`` does not run (exploitation
        learns those for free) with a cell nobody has reported from and no job is to be
        profiled in: ``(entry, its rows (classes), the rows' cells)`` each."""
        assert self.estimator is not None
        terms = reduced.terms
        num_classes = len(reduced.representative)
        classes = inputs.job_classes
        used = allocation >= MIN_PAIR_FRACTION
        used_alone = {(int(classes[j]), t) for j, t in zip(*np.nonzero(used[:inputs.num_jobs]),
                                                            strict=True)}
        pair_rows, pair_types = np.nonzero(used[inputs.num_jobs:])
        # Per job pair in use: its two classes (smaller first) and type, each triple once
        # (thousands of job pairs share a few hundred class pairs).
        member_classes = np.sort(classes[inputs.pairs[pair_rows]], axis=1)
        triples = np.unique(np.column_stack([member_classes, pair_types]), axis=0)
        used_pairs = set(map(tuple, triples.tolist()))  # (class, class, type), smaller first
        time = terms.membership.tocsc()
        pending = {cell for name in inputs.names
                   for cell in self.estimator.pending_profiling(name)}
        reported = self._reported
        indices, indptr = time.indices.tolist(), time.indptr.tolist()
        gpu_types, combination = terms.gpu_type.tolist(), terms.combination.tolist()
        candidates: list[tuple[int, list[int], list[Cell]]] = []
        for e in range(terms.num_entries):
            rows = indices[indptr[e]:indptr[e + 1]]
            t = gpu_types[e]
            gpu = self._types[t]
            if len(rows) == 1 and combination[e] < num_classes:  # a job alone
                if (rows[0], t) in used_alone:
                    continue
                kind, size = keys[rows[0]]
                cells = [Cell(kind, size, gpu)]
            elif len(rows) == 1:  # two jobs of one class
                if (rows[0], rows[0], t) in used_pairs:
                    continue
                kind, size = keys[rows[0]]
                cells = [Cell(kind, size, gpu, kind)]
            else:
                if (min(rows), max(rows), t) in used_pairs:
                    continue
                (a, size), (b, _) = keys[rows[0]], keys[rows[1]]
                cells = [Cell(a, size, gpu, b), Cell(b, size, gpu, a)]
            if any(c in reported or c in pending for c in cells):
                continue
            candidates.append((e, rows, cells))
        return candidates


__all__ = ["MaxMinFairnessPackedPolicy", "MaxMinFairnessPerfPolicy", "MaxMinFairnessPolicy",
           "class_max_min_program", "packed_max_min_allocation"]

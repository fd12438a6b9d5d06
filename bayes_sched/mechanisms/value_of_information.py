"""Which unknown cells a time-sharing LP policy should try: value of information from LP prices.

The decision problem. At an allocation recompute a policy holds a belief over every cell's steps/s
(alone, and paired: a rate times whether the pair fits at all) and picks time fractions ``x``.
A job's effective steps/s is *linear* in the rates, so for a fixed ``x`` its expected value is
the LP's row at the posterior mean rates: the risk-neutral allocation is the LP on the means
(:func:`~bayes_sched.estimation.throughput.pair_fit.with_pair_fits`: mean rate times the
probability of fitting). Deciding on the mean never *learns* a cell the mean allocation leaves
out, though; deciding on a posterior draw (Thompson sampling) learns, but every recompute's
allocation is then off the mean optimum by the draw's noise, on known cells too.

Here exploitation and exploration are separated. The allocation is the LP on the means; an
unknown cell is tried (one round, as a profiling round) only where its expected value of
information beats its expected cost:

* **Prices.** Let ``pi``, ``mu``, ``nu`` be an optimal dual of the mean LP: the prices of the
  jobs' floor rows (max-min), of each job's time, and of each GPU type's GPUs. A column ``e``
  (a job alone on a type, or a job pair on a type) with rates ``r`` has the value per unit of
  time ``v_e(r) = sum_k pi_k score_k,e(r) - sum_k mu_k time_k,e - nu_t gpus_e``, linear in ``r``.
  At the optimum ``v_e(mean r) <= 0`` for every column (complementary slackness), ``= 0`` for a
  column it uses.
* **Gain.** Knowing ``r`` changes the optimum only where ``v_e(r) > 0`` (elsewhere the mean's
  primal and dual stay optimal and the column stays unused). The expected rise of the optimum is
  ``E[F(r) - F(mean)]`` over the joint posterior draws (rates and fits; a pair that does not fit
  has ``r = 0``), taken as the probability of ``v_e(r) > 0`` times the rise at those draws' mean
  rates (one LP solve per column; exact when the rates that beat the prices are one value, an
  approximation otherwise). The answer is used while the column's jobs remain: ``horizon``
  seconds, the expected remaining time of the longest job of each class (its declared steps
  left over its steps/s under the mean allocation; a pair's: the shorter of its two classes';
  a class whose jobs declare no steps has none, and is never tried). Expected gain: rise times
  horizon.
* **Cost.** A trial runs one job (pair) of the column for one round of ``R`` seconds instead of
  the mean allocation: expected loss ``max(-v(mean r), 0) R`` for the job-level column (the time
  of its jobs and its GPUs at their prices, less the rate it is expected to give; a failed
  launch gives nothing, which the mean's fit probability carries).
* **Screen.** Before any draw, each column's ``E[max(v_e(r), 0)]`` is bounded from its rates'
  log variances and fit probabilities (:func:`positive_part_bound`, exact for a one-cell
  column); a column whose bound cannot pay for its trial is not drawn. A belief that states
  no spread (no ``log_variance_and_fit``) has every column drawn. On a packed run the screen
  leaves few columns to draw (measured: docs/results/bench_uncertainty.md).
* **Rule.** Try ``e`` iff gain > cost (:func:`bayes_sched.acquisition.worth_trying`), and only a
  column the mean allocation does not already run (exploitation learns those for free) with a cell
  nobody has reported from. Nothing is tuned: ``R`` is the round, the horizon the jobs' own
  declared work, the prices the LP's. The rule ignores what a trial teaches about *other* cells
  (the shared effects, a group's fit probability) and about future jobs of the two classes (it
  errs towards not exploring), and it prices the trial and the gain at today's duals for the whole
  horizon.

What the max-min objective implies: only the jobs at the floor have a price, so a column of
jobs off the floor is worth nothing to it (a trial of theirs costs nothing at the prices but
gains nothing either) and is never tried; their cells are learned when the mean allocation runs
them. The log-normal posterior mean of a barely known cell is above its median by
``exp(var / 2)`` (bounded by the learner's fixed priors), which leans the mean allocation towards
such cells; the trials are for the cells it leaves out.

Units: ``v`` is the LP objective (a normalised steps/s floor) per unit of time fraction, so gain
and cost are both objective-seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp
from scipy.special import ndtr

from bayes_sched.acquisition import worth_trying
from bayes_sched.mechanisms.time_fraction_lp import ConicProgram, HighsModel

__all__ = ["DUAL_TOLERANCE", "LpPrices", "column_values", "expected_gain", "lp_prices",
           "max_min_value", "positive_part_bound", "worth_trying"]

#: HiGHS's dual feasibility tolerance (its default): a column value ``v_e`` at most this is 0.
DUAL_TOLERANCE = 1e-7


@dataclass(frozen=True)
class LpPrices:
    """An optimal dual of a max-min program over ``C`` rows and ``T`` types (all >= 0).

    Attributes:
        floor: price of each row's floor constraint ``(C,)`` (they sum to 1).
        time: price of each row's time (``<= 1``) ``(C,)``.
        gpus: price of one GPU of each type ``(T,)``.
        value: the optimum (the floor).
        entries: the optimal primal's entry values ``(V,)``.
    """

    floor: np.ndarray
    time: np.ndarray
    gpus: np.ndarray
    value: float
    entries: np.ndarray


def lp_prices(program: ConicProgram, num_rows: int, num_types: int,
              model: HighsModel | None = None) -> LpPrices | None:
    """The prices of a max-min program built by
    :func:`~bayes_sched.mechanisms.time_fraction_lp.max_min_program` (rows: ``num_rows`` floors,
    ``num_rows`` times, ``num_types`` GPU counts, then coupling rows), solved with HiGHS for a
    basic dual; ``None`` if it has no optimum. ``model``: the program held in HiGHS, not yet
    solved (kept by the caller for :func:`expected_gain`'s re-solves)."""
    model = HighsModel(program) if model is None else model
    if not model.solve():
        return None
    # HiGHS: d(objective)/d(bound) <= 0 for a minimisation's <= rows; the objective is -floor.
    price = -model.upper_duals
    return LpPrices(floor=price[:num_rows], time=price[num_rows:2 * num_rows],
                    gpus=price[2 * num_rows:2 * num_rows + num_types], value=-model.objective,
                    entries=model.primal[:program.num_entries])


def column_values(scores: sp.csr_matrix, time: sp.csr_matrix, gpus: np.ndarray,
                  gpu_type: np.ndarray, prices: LpPrices, rate_ratios: np.ndarray | None = None
                  ) -> np.ndarray:
    """``v_e`` of each column (see the module): ``scores`` ``(C, V)`` at the mean rates,
    ``time`` ``(C, V)``, ``gpus`` ``(V,)`` GPUs per unit on ``gpu_type`` ``(V,)``;
    ``rate_ratios`` ``(S, C, V)``: each row's rate in each column in draw ``s`` over its mean
    (``None``: the mean itself). Returns ``(V,)``, or ``(S, V)`` with ratios."""
    fixed = (np.asarray(time.T @ prices.time).ravel() + prices.gpus[gpu_type] * gpus)
    if rate_ratios is None:
        return np.asarray(scores.T @ prices.floor).ravel() - fixed
    weighted = scores.multiply(prices.floor[:, None]).toarray()  # (C, V)
    return np.einsum("cv,scv->sv", weighted, rate_ratios) - fixed[None, :]


def positive_part_bound(weights: np.ndarray, column_of: np.ndarray, fixed: np.ndarray,
                        log_var: np.ndarray, fit: np.ndarray) -> np.ndarray:
    """An upper bound on ``E[max(v, 0)]`` of each column's value ``v`` ``(V,)``, before any
    draw. Column ``i``'s ``v = sum_k w_k F_k R_k / E[F_k R_k] - fixed_i`` over its cells ``k``
    (``column_of[k] = i``; ``weights`` ``w_k >= 0`` ``(K,)``), ``R_k`` log-normal with
    ``log_var`` ``(K,)``, ``F_k`` Bernoulli with ``P(F_k = 1) = fit`` ``(K,)``. Split ``fixed_i``
    over the cells in proportion to ``w_k`` (``f_k``); ``max(a + b, 0) <= max(a, 0) + max(b,
    0)`` whatever the cells' correlation, and each term is the log-normal call price:
    ``E[max(w F R / E[F R] - f, 0)] = w Phi(d + s) - P(F = 1) f Phi(d)``, ``s^2`` = ``log_var``,
    ``d = (log(w / (P(F = 1) f)) - s^2 / 2) / s``. Exact for a one-cell column. A column with
    ``fixed <= 0`` has ``v >= 0``: its bound is its mean."""
    total = np.zeros(len(fixed))
    np.add.at(total, column_of, weights)
    share = np.divide(weights, total[column_of], out=np.zeros(len(weights)),
                      where=total[column_of] > 0)
    f = fixed[column_of] * share
    live = (weights > 0) & (fit > 0) & (f > 0)
    sd = np.sqrt(np.maximum(log_var, 1e-24))
    d = np.zeros(len(weights))
    d[live] = (np.log(weights[live] / (fit[live] * f[live])) - sd[live]**2 / 2) / sd[live]
    terms = np.where(live, weights * ndtr(d + sd) - fit * f * ndtr(d), 0.0)
    bound = np.zeros(len(fixed))
    np.add.at(bound, column_of, terms)
    free = fixed <= 0
    bound[free] = (total - fixed)[free]
    return bound


def max_min_value(program: ConicProgram) -> float | None:
    """The optimum of a max-min program (HiGHS); ``None`` if it has none."""
    model = HighsModel(program)
    return -model.objective if model.solve() else None


def expected_gain(program: ConicProgram, prices: LpPrices, entry: int, rows: np.ndarray,
                  values: np.ndarray, ratios: np.ndarray, model: HighsModel | None = None
                  ) -> float:
    """Expected rise of the max-min optimum from knowing column ``entry``'s rates:
    ``E[F(r) - F(mean)]``, where ``F(r)`` is the optimum with the column at rates ``r`` and every
    other at its mean. A draw with ``v_e(r) <= 0`` leaves the optimum where it is (the mean's
    primal and dual stay optimal), so only the draws with ``v_e(r) > 0`` count: their
    probability times the rise at their mean rates, one LP solve.

    Args:
        program: the max-min program at the mean rates (:func:`max_min_program`: its first
            ``C`` rows are the floors, ``-scores``).
        rows: the rows (classes) in the column ``(R,)``.
        values: ``v_e`` at each draw ``(S,)`` (:func:`column_values`).
        ratios: each row's rate in the column at each draw over its mean ``(S, R)``.
        model: the program held in HiGHS (:func:`lp_prices`' ``model``, solved): the re-solve
            changes the column there and starts from the last basis, then restores it (the
            optimum is the cold solve's up to rounding: an LP's optimal value is unique);
            ``None``: a cold solve of a copy.
    """
    better = values > DUAL_TOLERANCE
    if not better.any():
        return 0.0
    factor = ratios[better].mean(axis=0)
    value = None
    if model is not None:
        on, original, scale = _column_scales(model.matrix, entry, rows, factor)
        changed = scale != 1.0
        model.change(on[changed], entry, original[changed] * scale[changed])
        if model.solve():
            value = -model.objective
        model.change(on[changed], entry, original[changed])
    if value is None:  # no model, or no optimum from the last basis: solve a copy afresh
        upper = program.upper.tocsc(copy=True)
        _, original, scale = _column_scales(upper, entry, rows, factor)
        original *= scale  # a view of the copy's column
        value = max_min_value(replace(program, upper=upper.tocsr()))
    if value is None:
        return 0.0
    return float(better.mean()) * max(value - prices.value, 0.0)


def _column_scales(matrix: sp.csc_matrix, entry: int, rows: np.ndarray, factor: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Column ``entry`` of a CSC ``matrix``: its stored rows, its values (a view into
    ``matrix.data``) and each one's scale, ``factor`` on ``rows`` and 1 elsewhere."""
    start, stop = matrix.indptr[entry], matrix.indptr[entry + 1]
    on = matrix.indices[start:stop]
    scale = np.ones(matrix.shape[0])
    scale[rows] = factor
    return on, matrix.data[start:stop], scale[on]

"""The packed max-min policy's exploration rule (value of information at the LP's prices): on a
hand-built belief over one unknown pair, the pair is tried exactly when the expected rise of the
LP optimum from knowing its rate, over the horizon its jobs remain, beats a one-round trial's
expected loss; the expected rise equals the brute-force expectation over the belief's draws."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from bayes_sched.cells import Cell, CellObservation
from bayes_sched.cluster import ClusterState
from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.estimates import Estimates
from bayes_sched.estimation.cell_learners import PerCellLearner
from bayes_sched.estimation.throughput_cells import CellPrediction, ThroughputBelief
from bayes_sched.estimation.throughput_stage import ThroughputEstimator
from bayes_sched.mechanisms.time_fraction_lp import HighsModel, highs_result
from bayes_sched.mechanisms.value_of_information import (
    column_values,
    expected_gain,
    lp_prices,
    max_min_value,
    positive_part_bound,
    worth_trying,
)
from bayes_sched.policies import make_policy
from bayes_sched.policies.gavel.max_min_fairness import (
    MaxMinFairnessPackedPolicy,
    class_max_min_program,
)
from bayes_sched.policies.gavel.time_sharing import AllocationInputs
from bayes_sched.sim.gavel_jobs import make_job
from bayes_sched.sim.table_cluster import TableCluster
from bayes_sched.throughputs import load_gavel_throughputs
from tests.test_gavel_packing import _inputs as packed_inputs

ROUND = 360.0


def _inputs(pair_rate: float) -> AllocationInputs:
    """Two one-GPU jobs of two classes, alone at 1 step/s on the one GPU of one type, and their
    pair at ``pair_rate`` each."""
    return AllocationInputs(
        names=("a", "b"), throughputs=np.ones((2, 1)), scale_factors=np.ones(2),
        capacities=np.ones(1), elapsed=np.zeros(2), remaining_steps=np.full(2, 1e4),
        pairs=np.array([[0, 1]]), pair_throughputs=np.full((1, 2, 1), pair_rate),
        job_classes=np.array([0, 1]), class_keys=(("a", 1), ("b", 1)))


def test_an_unknown_pair_is_tried_only_when_its_expected_gain_beats_the_trials_loss() -> None:
    # The belief: the pair fits with probability 1/2 and then runs at 0.8 steps/s each (a
    # mean of 0.4): alone, time-sharing the GPU gives each job 0.5; packed, 0.8.
    fits = np.tile([1.0, 0.0], 500)
    drawn_rate = 0.8 * fits
    mean_rate = float(drawn_rate.mean())
    inputs = _inputs(mean_rate)
    reduced, scores, program = class_max_min_program(inputs)
    prices = lp_prices(program, 2, 1)
    assert prices is not None and prices.value == pytest.approx(0.5)
    assert prices.floor.sum() == pytest.approx(1.0) and prices.gpus == pytest.approx([0.5])
    pair = int(np.flatnonzero(reduced.terms.combination >= 2)[0])
    scores_csc, time = scores.tocsc(), reduced.terms.membership.tocsc()
    gpus = np.asarray(reduced.terms.gpus.sum(axis=0)).ravel()
    # v = 0.5 r_a + 0.5 r_b - 0.5 (the GPU's price): -0.1 at the mean, the mean LP leaves it.
    at_mean = column_values(scores_csc, time, gpus, reduced.terms.gpu_type, prices)
    assert at_mean[pair] == pytest.approx(-0.1)
    ratios = np.ones((len(fits), 2, reduced.terms.num_entries))
    ratios[:, :, pair] = (drawn_rate / mean_rate)[:, None]
    drawn = column_values(scores_csc, time, gpus, reduced.terms.gpu_type, prices, ratios)
    gain = expected_gain(program, prices, pair, np.array([0, 1]), drawn[:, pair],
                         ratios[:, :, pair])
    # Brute force: the optimum with the pair at each draw's rate, averaged over the draws.
    optimum = {rate: max_min_value(class_max_min_program(_inputs(rate))[2]) or 0.5
               for rate in (0.8, 1e-9)}
    brute = np.mean([optimum[0.8] if f else optimum[1e-9] for f in fits]) - prices.value
    assert gain == pytest.approx(brute) and gain == pytest.approx(0.5 * (0.8 - 0.5))
    # A one-round trial loses 0.1 per second at the prices; the answer is worth 0.15 a second
    # for as long as both jobs remain.
    assert worth_trying(gain, ROUND, float(at_mean[pair]), ROUND) == (
        True, pytest.approx(0.15 * ROUND), pytest.approx(0.1 * ROUND))
    assert not worth_trying(gain, ROUND / 2, float(at_mean[pair]), ROUND)[0]
    # A pair that fits but never beats time-sharing is worth nothing, however long the jobs run.
    slow = np.tile([0.45, 0.0], 500)
    ratios[:, :, pair] = (slow / mean_rate)[:, None]
    drawn = column_values(scores_csc, time, gpus, reduced.terms.gpu_type, prices, ratios)
    assert expected_gain(program, prices, pair, np.array([0, 1]), drawn[:, pair],
                         ratios[:, :, pair]) == 0.0


class _HandBelief:
    """Every job at 1 step/s alone; every pair fits with probability 1/2 and then runs at 0.8
    steps/s each (joint draws: half the draws 0.8, half 0)."""

    def predict(self, cells: Sequence[Cell], num_draws: int = 0, seed: int = 0
                ) -> CellPrediction:
        paired = np.array([c.partner is not None for c in cells])
        mean = np.where(paired, 0.4, 1.0)
        fits = np.tile([0.8, 0.0], max(num_draws, 2) // 2 + 1)[:max(num_draws, 1)]
        draws = np.where(paired[None, :], fits[:, None], 1.0)
        return CellPrediction(mean, draws if num_draws else mean[None, :])


class _HandLearner:
    name = "hand"

    def fit(self, observations: Sequence[CellObservation]) -> ThroughputBelief:
        return _HandBelief()

    def profiling_cells(self, job_type: str, scale_factor: int, gpu_types: Sequence[str],
                        belief: ThroughputBelief) -> list[Cell]:
        return []


@pytest.mark.parametrize("steps", [50.0, 1e4])
def test_the_packed_policy_asks_to_try_the_pair_only_when_its_jobs_stay_long_enough(
        steps: float) -> None:
    """The hand-built belief above in the packed policy, two one-GPU jobs on one V100: the mean
    allocation time-shares the GPU (0.5 steps/s each); trying the pair for a round loses 0.1 x
    360 s at the prices and the answer is worth 0.15 a second while both jobs remain: with
    10,000 steps each (20,000 s at 0.5 steps/s) the pair goes into a job's profiling plan, with
    50 (100 s) it does not; Thompson sampling and ``exploration="none"`` never ask for a
    trial."""
    spec = replace(load_cluster_spec("v100:1x1"), round_interval=ROUND)
    jobs = [make_job("a", 0.0, "ResNet-18 (batch size 16)", 1, steps),
            make_job("b", 0.0, "A3C", 1, steps)]
    views = TableCluster(jobs, spec, load_gavel_throughputs()).job_views()
    cluster = ClusterState(spec=spec, now=0.0)
    pair = Cell("ResNet-18 (batch size 16)", 1, "v100", "A3C")
    plans = {}
    for exploration in ("value_of_information", "thompson", "none"):
        policy = make_policy("max_min_fairness_packed", exploration=exploration)
        assert isinstance(policy, MaxMinFairnessPackedPolicy)
        stage = ThroughputEstimator(_HandLearner())
        stage.estimate(cluster, views)
        policy.decide(cluster, views, Estimates(stage.published()))
        # Its trials draw from one stream in turn: POP's sub-problems then not side by side.
        assert policy.sub_problems_commute() == (exploration != "value_of_information")
        plans[exploration] = stage.pending_profiling("a")
        if exploration != "thompson":
            assert policy.pair_fractions() == {}  # the mean allocation does not pack them
    assert plans["value_of_information"] == ((pair,) if steps > 1e3 else ())
    assert plans["thompson"] == () and plans["none"] == ()


def test_the_value_of_information_rule_decides_on_the_mean() -> None:
    for exploration in ("value_of_information", "none"):
        policy = make_policy("max_min_fairness_packed", exploration=exploration)
        assert isinstance(policy, MaxMinFairnessPackedPolicy) and policy.thompson is False
    with pytest.raises(ValueError, match="exploration is 'ucb'"):
        make_policy("max_min_fairness_packed", exploration="ucb")


def _scaled_columns(reduced: Any) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Each column of the packed program ``reduced``: its entry, its time rows and four draws'
    rate ratios on them ``(4, rows)``, all beating the prices at 0.5-3 times the mean (seeded)."""
    time = reduced.terms.membership.tocsc()
    rng = np.random.default_rng(0)
    for entry in range(reduced.terms.num_entries):
        rows = time.indices[time.indptr[entry]:time.indptr[entry + 1]]
        yield entry, rows, np.tile(rng.uniform(0.5, 3.0, size=len(rows)), (4, 1))


def test_the_held_program_solves_as_linprog_and_re_solves_from_its_basis_as_afresh() -> None:
    """The packed class program of eleven jobs on Gavel's table (six classes, three types):
    held in HiGHS, its first solve is ``linprog``'s to the bit (primal, duals, optimum: the
    prices the rule reads); each column's re-solve at scaled rates, started from the last
    basis, gives the optimum of a fresh solve of the changed program; and the column is put
    back after each."""
    inputs = packed_inputs()
    reduced, _, program = class_max_min_program(inputs)
    num_classes, num_types = len(reduced.representative), len(inputs.capacities)
    model = HighsModel(program)
    prices = lp_prices(program, num_classes, num_types, model)
    result = highs_result(program)
    assert prices is not None and result.status == 0
    price = -np.asarray(result.ineqlin.marginals)
    assert np.array_equal(prices.floor, price[:num_classes])
    assert np.array_equal(prices.time, price[num_classes:2 * num_classes])
    assert np.array_equal(prices.gpus, price[2 * num_classes:2 * num_classes + num_types])
    assert prices.value == -result.fun
    assert np.array_equal(prices.entries, result.x[:program.num_entries])
    rises = 0
    for entry, rows, ratios in _scaled_columns(reduced):
        beats = np.ones(4)
        warm = expected_gain(program, prices, entry, rows, beats, ratios, model)
        cold = expected_gain(program, prices, entry, rows, beats, ratios)
        assert warm == pytest.approx(cold, rel=1e-9, abs=1e-12)
        rises += cold > 1e-6
    assert rises >= 5  # columns whose scaled rates raise the optimum
    assert model.solve() and -model.objective == pytest.approx(prices.value, rel=1e-12)


def test_the_pair_fit_memo_sees_a_new_failed_launch() -> None:
    """Whether two job types may share GPUs, asked of every job pair each round, is memoised
    per estimator state: a failed launch recorded after a first answer changes the next."""
    policy = make_policy("max_min_fairness_packed")
    assert isinstance(policy, MaxMinFairnessPackedPolicy)
    stage = ThroughputEstimator(PerCellLearner())
    policy.estimator = stage  # the round's estimate, as decide reads it from the bundle
    policy._reset_state(("v100", "p100", "k80"))
    a, b = ("A3C", 1), ("CycleGAN", 1)
    assert policy._pair_may_fit("v100", a, b)
    assert policy._pair_fit_mask(a, b).tolist() == [True, True, True]
    assert not policy._pair_may_fit("v100", a, ("CycleGAN", 2))  # scale factors differ
    assert stage.note_failed_launch(Cell("CycleGAN", 1, "v100", "A3C"))
    assert not policy._pair_may_fit("v100", a, b) and not policy._pair_may_fit("v100", b, a)
    assert policy._pair_fit_mask(a, b).tolist() == [False, True, True]
    assert policy._pair_may_fit("p100", a, b)


def test_a_re_solve_stopped_at_its_iteration_limit_falls_back_to_a_fresh_solve() -> None:
    """A held program whose re-solve hits the simplex iteration limit reports no optimum, and
    the column's gain is then the fresh solve's, not the stopped solve's objective."""
    inputs = packed_inputs()
    reduced, _, program = class_max_min_program(inputs)
    num_classes, num_types = len(reduced.representative), len(inputs.capacities)
    model = HighsModel(program)
    assert model.iteration_limit == 10 * sum(model.matrix.shape) + 1000
    prices = lp_prices(program, num_classes, num_types, model)
    assert prices is not None
    model.highs.setOptionValue("simplex_iteration_limit", 1)
    stopped = 0
    for entry, rows, ratios in _scaled_columns(reduced):
        model.change(rows, entry, model.matrix[rows, entry].toarray().ravel() * ratios[0])
        stopped += not model.solve()
        model.change(rows, entry, model.matrix[rows, entry].toarray().ravel())
        warm = expected_gain(program, prices, entry, rows, np.ones(4), ratios, model)
        cold = expected_gain(program, prices, entry, rows, np.ones(4), ratios)
        assert warm == pytest.approx(cold, rel=1e-9, abs=1e-12)
    assert stopped >= 5  # the limit did stop re-solves


def test_the_positive_part_bound_is_exact_for_one_cell_and_bounds_a_pair_of_cells() -> None:
    """The draw-free screen: for a one-cell column (a log-normal rate that runs with
    probability q) the bound is the expectation itself (2 million seeded draws); for a pair of
    cells sharing whether they run, with correlated rates, it is above the expectation; a column
    with no fixed price has ``v >= 0`` and its bound is its mean."""
    rng = np.random.default_rng(7)
    n = 2_000_000
    log_var, fit, w, fixed = 0.6, 0.4, 1.3, 1.1
    runs = rng.uniform(size=n) < fit
    rate = np.exp(rng.normal(0.0, np.sqrt(log_var), size=n))
    ratio = runs * rate / (fit * np.exp(log_var / 2))  # F R / E[F R]
    exact = np.maximum(w * ratio - fixed, 0.0).mean()
    one = positive_part_bound(np.array([w]), np.array([0]), np.array([fixed]),
                              np.array([log_var]), np.array([fit]))
    assert one[0] == pytest.approx(exact, rel=0.01)
    # Two cells of one pair: one fit draw, log rates correlated 0.8.
    z = rng.standard_normal((n, 2))
    z[:, 1] = 0.8 * z[:, 0] + 0.6 * z[:, 1]
    variances = np.array([0.3, 1.2])
    ratios = runs[:, None] * np.exp(z * np.sqrt(variances)) / (fit * np.exp(variances / 2))
    weights = np.array([0.7, 0.9])
    pair_exact = np.maximum(ratios @ weights - 1.4, 0.0).mean()
    bounds = positive_part_bound(np.array([*weights, 0.5]), np.array([0, 0, 1]),
                                 np.array([1.4, -0.2]), np.array([*variances, 0.5]),
                                 np.array([fit, fit, 1.0]))
    assert pair_exact < bounds[0] < 2 * pair_exact
    assert bounds[1] == pytest.approx(0.5 + 0.2)  # v = 0.5 rho + 0.2 >= 0: its mean


class _ScreenedHandBelief(_HandBelief):
    """:class:`_HandBelief` telling the screen its spread: a pair's rate is 0.8 exactly, and it
    runs with probability 1/2."""

    draws_asked = 0

    def predict(self, cells: Sequence[Cell], num_draws: int = 0, seed: int = 0
                ) -> CellPrediction:
        type(self).draws_asked += num_draws > 0
        return super().predict(cells, num_draws, seed)

    def log_variance_and_fit(self, cells: Sequence[Cell]) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(len(cells)), np.array([0.5 if c.partner else 1.0 for c in cells])


class _ScreenedHandLearner(_HandLearner):
    def fit(self, observations: Sequence[CellObservation]) -> ThroughputBelief:
        return _ScreenedHandBelief()


@pytest.mark.parametrize("steps", [50.0, 1e4])
def test_the_draw_free_screen_changes_no_trial_and_skips_the_draws_it_rules_out(
        steps: float) -> None:
    """The packed policy with the screen (a belief with ``log_variance_and_fit``) asks for
    the same trials as without it. With 50 steps per job (100 s left) the bound, here exact
    (the pair's one fit draw decides both rates: 0.15 a second), cannot pay for a round's
    trial (0.1 x 360 s) and no draw is made; with 10,000 the pair is drawn and tried."""
    spec = replace(load_cluster_spec("v100:1x1"), round_interval=ROUND)
    jobs = [make_job("a", 0.0, "ResNet-18 (batch size 16)", 1, steps),
            make_job("b", 0.0, "A3C", 1, steps)]
    views = TableCluster(jobs, spec, load_gavel_throughputs()).job_views()
    cluster = ClusterState(spec=spec, now=0.0)
    plans = []
    _ScreenedHandBelief.draws_asked = 0
    for learner in (_HandLearner(), _ScreenedHandLearner()):
        policy = make_policy("max_min_fairness_packed")
        stage = ThroughputEstimator(learner)
        stage.estimate(cluster, views)
        policy.decide(cluster, views, Estimates(stage.published()))
        plans.append(stage.pending_profiling("a"))
    assert plans[0] == plans[1]
    assert _ScreenedHandBelief.draws_asked == (0 if steps < 1e3 else 1)

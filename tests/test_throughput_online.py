"""Learning throughputs online in the table world: what jobs report (the cell they ran in, seeded
noise that never changes their progress), the estimation stage (refits, bad reports, profiling
GPU-seconds), and time-sharing policies reading a learner instead of the table (the oracle's
table behind the learning stage reproduces the table's runs exactly; Thompson draws change per
recompute and repeat by seed; profiling cells run as real rounds)."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest

from bayes_sched.cells import Cell, CellObservation
from bayes_sched.cluster import ClusterState, PackedAllocations
from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.errors import InputError
from bayes_sched.estimates import Estimates
from bayes_sched.estimation.cell_learners import PerCellLearner
from bayes_sched.estimation.throughput_cells import ThroughputBelief
from bayes_sched.estimation.throughput_stage import ThroughputEstimator
from bayes_sched.loop import run_loop
from bayes_sched.policies import make_policy
from bayes_sched.sim.gavel_jobs import make_job
from bayes_sched.sim.table_cluster import TableCluster
from bayes_sched.sim.table_run import run_table_simulation
from bayes_sched.throughputs import load_gavel_throughputs

TABLE = load_gavel_throughputs()
ROUND = 360.0
# Single-GPU types whose pairs share a V100 well (Gavel's measured pairs, all positive).
SMALL = ("ResNet-18 (batch size 16)", "CycleGAN", "A3C", "LM (batch size 5)")


def _spec(text: str):  # noqa: ANN202
    return replace(load_cluster_spec(text), round_interval=ROUND)


def _jobs(count: int, steps: float = 20000.0) -> list:  # noqa: ANN202
    """Single-GPU jobs of the four SMALL types arriving every 5 minutes, contending for 4 GPUs
    over about 50 rounds (the per-cell learner's runs differ from the table's here)."""
    return [make_job(str(i), 300.0 * i, SMALL[i % 4], 1, steps * (1 + i % 3))
            for i in range(count)]


@pytest.mark.parametrize("policy", ["max_min_fairness_perf", "max_min_fairness_packed"])
def test_the_oracle_stage_reproduces_the_table_runs(policy: str) -> None:
    """Through the learning stage with noiseless reports, the oracle's table as a learner gives
    a Gavel policy exactly the known table's JCTs (solo and packed); the known table's JCTs do
    not change with the measurement noise (it changes reports, never progress)."""
    spec = _spec("v100:1x2,k80:1x2")
    table = run_table_simulation(_jobs(8), make_policy(policy), spec, measurement_noise=0.0)
    oracle = run_table_simulation(_jobs(8), make_policy(policy), spec, measurement_noise=0.0,
                                  estimators={"throughput": "oracle_stage"})
    noisy = run_table_simulation(_jobs(8), make_policy(policy), spec, measurement_noise=0.3)
    learned = run_table_simulation(_jobs(8), make_policy(policy), spec, measurement_noise=0.0,
                                   estimators={"per_cell": {}})
    assert table.estimates_from == {"throughput": "oracle"}
    assert learned.estimates_from == {"throughput": "per_cell"}
    assert table.summary["finished"] == 8
    assert learned.jobs["jct"].tolist() != table.jobs["jct"].tolist()  # the source matters
    assert oracle.jobs["jct"].tolist() == table.jobs["jct"].tolist()
    assert noisy.jobs["jct"].tolist() == table.jobs["jct"].tolist()
    assert oracle.summary["profiling_gpu_hours"] == 0.0
    assert oracle.summary["fits"] > 1 and len(oracle.estimate_seconds) == len(
        oracle.decision_seconds)


def test_reports_carry_the_cell_they_ran_in() -> None:
    """Two jobs sharing a V100 and one alone on a K80 report their steps/s in their cells (the
    partner's type for the pair); noiseless reports are the true rates, noisy ones differ by a
    seeded factor (the same seed, the same reports), a job that did not run reports nothing."""
    spec = _spec("v100:1x1,k80:1x1")
    jobs = [make_job(str(i), 0.0, SMALL[i], 1, 1e9) for i in range(4)]

    def one_round(noise: float, seed: int = 0) -> dict[str, tuple[CellObservation, ...]]:
        world = TableCluster(jobs, spec, TABLE, measurement_noise=noise, noise_seed=seed)
        world.apply(PackedAllocations({"0": np.array([1, 0]), "1": np.array([1, 0]),
                                       "2": np.array([0, 1])}, [("0", "1")]))
        world.advance(ROUND)
        return {v.name: v.cell_observations for v in world.job_views()}

    reports = one_round(0.0)
    pair = TABLE.pair_steps_per_second("v100", (SMALL[0], 1), (SMALL[1], 1))
    assert pair is not None
    (a,), (b,), (c,) = reports["0"], reports["1"], reports["2"]
    assert a.cell == Cell(SMALL[0], 1, "v100", SMALL[1]) and a.steps_per_second == pair[0]
    assert b.cell == Cell(SMALL[1], 1, "v100", SMALL[0]) and b.steps_per_second == pair[1]
    assert c.cell == Cell(SMALL[2], 1, "k80") and c.steps_per_second == TABLE.steps_per_second(
        SMALL[2], 1, "k80")
    assert a.seconds == pytest.approx(math.floor(pair[0] * ROUND) / pair[0]) and a.time > 0
    assert reports["3"] == ()
    noisy, again, other = one_round(0.2), one_round(0.2), one_round(0.2, seed=1)
    assert noisy == again and noisy != other
    ratios = [noisy[n][0].steps_per_second / reports[n][0].steps_per_second for n in "012"]
    assert all(r != 1.0 and 0.3 < r < 3.0 for r in ratios)
    assert [noisy[n][0].cell for n in "012"] == [a.cell, b.cell, c.cell]


class SoloEverywhere(PerCellLearner):
    """The per-cell learner asking for Sia's profiling: one round on every GPU type, then
    Gavel-like pairs with every job type named in ``partners``."""

    def __init__(self, partners: Sequence[str] = ()) -> None:
        super().__init__()
        self.partners = tuple(partners)

    def profiling_cells(self, job_type: str, scale_factor: int, gpu_types: Sequence[str],
                        belief: ThroughputBelief) -> list[Cell]:
        return ([Cell(job_type, scale_factor, g) for g in gpu_types]
                + [Cell(job_type, scale_factor, "v100", p) for p in self.partners
                   if p != job_type])


def test_profiling_cells_run_as_real_rounds_and_are_counted() -> None:
    """A learner that profiles each new job on every type and in a pair with a job of another
    type: the jobs run those rounds (progressing at those cells' rates), the cells are struck
    off, and exactly those rounds' GPU-seconds are counted as profiling; a pair with no job of
    the partner type active is dropped."""
    spec = _spec("v100:1x1,k80:1x1")
    jobs = [make_job("0", 0.0, SMALL[0], 1, 1e9), make_job("1", 0.0, SMALL[1], 1, 1e9)]
    world = TableCluster(jobs, spec, TABLE, measurement_noise=0.0)
    policy = make_policy("max_min_fairness_perf")
    estimator = ThroughputEstimator(SoloEverywhere(partners=(SMALL[1], SMALL[3])))
    seen: list[dict[str, tuple[CellObservation, ...]]] = []
    run_loop(world, policy, ROUND, max_rounds=6, estimators=[estimator],
             on_round=lambda w: seen.append({v.name: v.cell_observations
                                             for v in w.job_views()}))
    assert all(not estimator.pending_profiling(n) for n in "01")
    assert estimator.dropped_profiling_cells == 2  # pairs with an LM job: none is active
    cells = {n: [r[n][0].cell for r in seen if r[n]] for n in "01"}
    # Job 0 ran alone on both types and shared the V100 with job 1 (job 1's types are not
    # in its partners, so it profiled alone only).
    assert {Cell(SMALL[0], 1, "v100"), Cell(SMALL[0], 1, "k80"),
            Cell(SMALL[0], 1, "v100", SMALL[1])} <= set(cells["0"])
    assert {Cell(SMALL[1], 1, "v100"), Cell(SMALL[1], 1, "k80")} <= set(cells["1"])
    plans = {"0": {Cell(SMALL[0], 1, "v100"), Cell(SMALL[0], 1, "k80"),
                   Cell(SMALL[0], 1, "v100", SMALL[1])},
             "1": {Cell(SMALL[1], 1, "v100"), Cell(SMALL[1], 1, "k80")}}
    profiled = 0.0  # the seconds of each job's first report from each cell of its plan
    for reports in seen:
        for name, plan in plans.items():
            if reports[name] and reports[name][0].cell in plan:
                plan.discard(reports[name][0].cell)
                profiled += reports[name][0].seconds
    assert estimator.profiling_gpu_seconds == pytest.approx(profiled)
    k80 = TABLE.steps_per_second(SMALL[0], 1, "k80")
    assert k80 is not None
    first_k80 = next(r["0"][0] for r in seen if r["0"] and r["0"][0].cell.gpu_type == "k80")
    assert first_k80.steps_per_second == k80  # real progress at the profiled cell's rate


def test_thompson_draws_differ_across_recomputes_and_repeat_by_seed() -> None:
    """Under the per-cell learner each recompute decides on a fresh joint draw of the solo and
    pair rates (different from one recompute to the next), the same seed gives the same draws
    and a whole run repeats exactly; the posterior mean does not change between recomputes."""
    spec = _spec("v100:1x2,k80:1x2")
    views = TableCluster(_jobs(4), spec, TABLE).job_views()

    def draws(seed: int, thompson: bool = True) -> list[np.ndarray]:
        policy = make_policy("max_min_fairness_packed", seed=seed, exploration="thompson",
                             acquisition="thompson" if thompson else "mean")
        learned = Estimates(ThroughputEstimator(PerCellLearner()).published())
        policy.decide(ClusterState(spec=spec, now=ROUND), views, learned)  # sets the types
        runnable = np.ones((len(views), 2), dtype=bool)
        out = []
        for _ in range(3):
            solo = policy._believed(views, runnable)
            pairs = policy._pair_draw[1]
            assert (pairs > 0).any()  # the packing policy draws pair rates too
            out.append(np.concatenate([solo.ravel(), pairs.ravel()]))
        return out

    first, second = draws(7), draws(7)
    assert not np.allclose(first[0], first[1]) and not np.allclose(first[1], first[2])
    assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))
    assert not np.allclose(draws(8)[0], first[0])
    means = draws(7, thompson=False)
    assert np.array_equal(means[0], means[1])
    run = [run_table_simulation(_jobs(6), make_policy("max_min_fairness_perf", seed=2), spec,
                                estimators={"throughput": "per_cell"}).jobs["jct"].tolist()
           for _ in range(2)]
    assert run[0] == run[1]


def test_a_bad_report_leaves_the_belief_unchanged(caplog: pytest.LogCaptureFixture) -> None:
    """Reports with a NaN, zero or negative rate, or no seconds, are ignored with a logged
    reason: no refit, the same predictions; a good report then moves the belief; with a
    minimum refit interval the next reports wait for it."""
    spec = _spec("v100:1x1")
    view = TableCluster([make_job("0", 0.0, SMALL[0], 1, 1e9)], spec, TABLE).job_views()[0]
    cell = Cell(SMALL[0], 1, "v100")
    estimator = ThroughputEstimator(PerCellLearner(), min_refit_interval=1000.0)
    before = estimator.belief.predict([cell])
    bad = tuple(CellObservation(cell, rate, seconds) for rate, seconds in
                ((float("nan"), 360.0), (0.0, 360.0), (-3.0, 360.0), (5.0, 0.0)))
    with caplog.at_level(logging.WARNING):
        estimator.estimate(ClusterState(spec=spec, now=ROUND), [replace(view,
                                                                        cell_observations=bad)])
    assert estimator.rejected_reports == 4 and estimator.version == 0
    assert sum("ignored report" in r.message for r in caplog.records) == 4
    assert np.array_equal(estimator.belief.predict([cell]).mean, before.mean)
    good = (CellObservation(cell, 50.0, 360.0),)
    estimator.estimate(ClusterState(spec=spec, now=2 * ROUND),
                       [replace(view, cell_observations=good)])
    after = estimator.belief.predict([cell]).mean[0]
    assert estimator.version == 1 and after == pytest.approx(50.0, rel=0.05)
    estimator.estimate(ClusterState(spec=spec, now=3 * ROUND),
                       [replace(view, cell_observations=(CellObservation(cell, 80.0, 360.0),))])
    assert estimator.belief.predict([cell]).mean[0] == after  # the refit waits for 1000 s
    assert estimator.version == 1 and len(estimator.observations) == 2
    estimator.estimate(ClusterState(spec=spec, now=5 * ROUND), [view])
    assert estimator.version == 1  # fitting is lazy: only when the belief is read
    assert estimator.belief.predict([cell]).mean[0] > after
    assert estimator.version == 2 and len(estimator.fit_seconds) == 3


@pytest.mark.parametrize("growth, fitted_at", [(1.0, [1, 2, 3, 4, 5, 6, 7, 8, 9]),
                                               (2.0, [1, 2, 4, 7, 9])])
def test_a_refit_is_due_on_a_new_cell_a_failed_launch_or_seconds_grown_by_the_factor(
        growth: float, fitted_at: list[int]) -> None:
    """One cell reported every round (360 s): at growth 2 it makes a refit due when its seconds
    double (rounds 1, 2, 4); a new cell (round 7) and a failed launch (round 9) make one due at
    once (the fit at round 7 takes the first cell's seconds in too: its next doubling is at 14);
    at growth 1 every round refits. Each fit reads every report so far."""
    spec = _spec("v100:1x2")
    view = TableCluster([make_job("0", 0.0, SMALL[0], 1, 1e9)], spec, TABLE).job_views()[0]
    cell, other = Cell(SMALL[0], 1, "v100"), Cell(SMALL[1], 1, "v100")
    estimator = ThroughputEstimator(PerCellLearner(), refit_growth=growth)
    fitted = []
    for r in range(1, 10):
        reports = [CellObservation(cell, 50.0 + r, ROUND)]
        if r == 7:
            reports.append(CellObservation(other, 20.0, ROUND))
        if r == 9:
            reports.append(CellObservation(Cell(SMALL[0], 2, "v100"), 0.0, ROUND,
                                           out_of_memory=True))
        estimator.estimate(ClusterState(spec=spec, now=r * ROUND),
                           [replace(view, cell_observations=tuple(reports))])
        version = estimator.version
        belief = estimator.belief
        if estimator.version != version:
            fitted.append(r)
            fresh = PerCellLearner().fit(list(estimator.observations))
            assert np.array_equal(belief.predict([cell, other]).mean,
                                  fresh.predict([cell, other]).mean)
    assert fitted == fitted_at
    with pytest.raises(ValueError, match="refit_growth is 0.5: expected a factor >= 1"):
        ThroughputEstimator(PerCellLearner(), refit_growth=0.5)


def test_per_cell_posterior_is_the_conjugate_update_and_refits_incrementally() -> None:
    """Two reports of one cell: the posterior of log(steps/s) is the normal-normal update of
    the prior; a refit on the same list extended gives what a fresh learner gives on it; a
    cell never reported answers with the prior; an earlier belief does not change."""
    learner = PerCellLearner(prior_mean_steps_per_second=10.0, prior_sd=3.0,
                             observation_sd=0.1)
    cell, other = Cell(SMALL[0], 1, "v100"), Cell(SMALL[1], 1, "k80", SMALL[2])
    reports = [CellObservation(cell, 20.0, 360.0)]
    first = learner.fit(reports)
    reports += [CellObservation(cell, 30.0, 360.0), CellObservation(other, 4.0, 100.0)]
    second = learner.fit(reports)
    precision = 3.0 ** -2 + 2 / 0.1 ** 2
    mean = (math.log(10.0) * 3.0 ** -2 + (math.log(20.0) + math.log(30.0)) / 0.1 ** 2) / precision
    expected = math.exp(mean + 0.5 / precision)
    assert second.predict([cell]).mean[0] == pytest.approx(expected, rel=1e-12)
    fresh = PerCellLearner().fit(reports).predict([cell, other]).mean
    assert np.array_equal(second.predict([cell, other]).mean, fresh)
    unseen = second.predict([Cell("A3C", 1, "p100")]).mean[0]
    assert unseen == pytest.approx(10.0 * math.exp(9.0 / 2))
    assert first.predict([other]).mean[0] == pytest.approx(unseen)


class Failing(PerCellLearner):
    def fit(self, observations: Sequence[CellObservation]) -> ThroughputBelief:
        if observations:
            raise FloatingPointError("did not converge")
        return super().fit(observations)


def test_a_failing_fit_keeps_the_previous_belief(caplog: pytest.LogCaptureFixture) -> None:
    spec = _spec("v100:1x1")
    view = TableCluster([make_job("0", 0.0, SMALL[0], 1, 1e9)], spec, TABLE).job_views()[0]
    cell = Cell(SMALL[0], 1, "v100")
    estimator = ThroughputEstimator(Failing())
    before = estimator.belief
    with caplog.at_level(logging.WARNING):
        estimator.estimate(ClusterState(spec=spec, now=ROUND), [replace(
            view, cell_observations=(CellObservation(cell, 50.0, 360.0),))])
    assert estimator.belief is before and estimator.failed_fits == 1 and estimator.version == 0
    assert "did not converge" in caplog.text
    # The belief kept has no report of the cell: its next report, if short, makes a retry due
    # (growth counts from the belief in force, not from the failed attempt's 360 s).
    estimator.estimate(ClusterState(spec=spec, now=2 * ROUND), [replace(
        view, cell_observations=(CellObservation(cell, 50.0, 100.0),))])
    assert estimator.belief is before and estimator.failed_fits == 2


def test_an_unknown_estimator_is_a_one_line_error() -> None:
    spec = _spec("v100:1x1")
    with pytest.raises(InputError, match="unknown estimator 'nope': expected one of oracle"):
        run_table_simulation(_jobs(1), make_policy("max_min_fairness_perf"), spec,
                             estimators={"throughput": "nope"})
    with pytest.raises(InputError, match="has no option 'source'"):
        make_policy("max_min_fairness_perf", source="per_cell")


def test_shockwave_jobs_report_the_batch_size_they_ran_at() -> None:
    """In the Shockwave world a GNS job reports each round in the cell of the batch size it ran
    at (the round in which it asks to double still at the old one), at that batch size's
    measured rate when the noise is 0."""
    from bayes_sched.sim.shockwave_cluster import ShockwaveCluster
    from bayes_sched.throughputs import load_shockwave_throughputs
    from tests.test_shockwave import GOOD, read_shockwave_trace_text

    (job,) = read_shockwave_trace_text(GOOD)
    table = load_shockwave_throughputs()
    cluster = ShockwaveCluster([job], _spec("v100:1x1"), table, measurement_noise=0.0)
    reported, batch = [], []  # per round: the job type reported, the batch size after it
    while not cluster.done():
        cluster.apply({"0": np.array([1])})
        cluster.advance(120.0)
        report = cluster.jobs["0"].reports[0]
        reported.append(report.cell.job_type)
        batch.append(cluster.batch["0"].batch_size)
        assert report.steps_per_second == table.steps_per_second(report.cell.job_type, 1, "v100")
    change = batch.index(20)  # the round after which the job runs at batch 20
    assert reported[change] == "LM (batch size 10)"
    assert set(reported[change + 1:]) == {"LM (batch size 20)"} and len(reported) > change + 1


def test_a_failed_launch_alone_refits_where_pairs_fit_and_keeps_the_rates_posterior() -> None:
    """Our learner: a round whose only news is a failed launch gives a new belief (the pair
    now predicts 0, its group's unlaunched pairs less) sharing the last posterior over rates
    (the same object, the same means); the rates reported meanwhile wait for the next refit a
    rate makes due, which conditions on every report so far as a fresh learner does."""
    from bayes_sched.estimation.throughput.bayesian import BayesianThroughputLearner

    spec = _spec("v100:1x2")
    view = TableCluster([make_job("0", 0.0, SMALL[0], 1, 1e9)], spec, TABLE).job_views()[0]
    alone = [Cell(t, 1, "v100") for t in SMALL]
    failed = Cell(SMALL[0], 1, "v100", SMALL[1])
    other_pair = Cell(SMALL[2], 1, "v100", SMALL[3])
    estimator = ThroughputEstimator(BayesianThroughputLearner(max_iterations=0))

    def report(r: int, reports: list[CellObservation]) -> None:
        estimator.estimate(ClusterState(spec=spec, now=r * ROUND),
                           [replace(view, cell_observations=tuple(reports))])

    report(1, [CellObservation(c, 10.0 + i, ROUND) for i, c in enumerate(alone)])
    first = estimator.belief
    before = first.predict([*alone, failed, other_pair]).mean
    fits = len(estimator.fit_seconds)
    # The same cells again (not due: seconds not doubled) and a failed launch (due).
    report(2, [CellObservation(alone[0], 30.0, ROUND / 4),
               CellObservation(failed, 0.0, ROUND, out_of_memory=True)])
    second = estimator.belief
    assert second is not first and len(estimator.fit_seconds) == fits + 1
    assert second.posterior is first.posterior  # type: ignore[attr-defined]
    after = second.predict([*alone, failed, other_pair]).mean
    np.testing.assert_array_equal(after[:4], before[:4])
    assert after[4] == 0.0 and 0.0 < after[5] < before[5]
    # A new cell's rate: a full refit on every report so far, the held-back one included.
    report(3, [CellObservation(Cell(SMALL[1], 2, "v100"), 7.0, ROUND)])
    third = estimator.belief
    assert third.posterior is not first.posterior  # type: ignore[attr-defined]
    fresh = BayesianThroughputLearner(max_iterations=0).fit(list(estimator.observations))
    np.testing.assert_allclose(third.predict(alone).mean, fresh.predict(alone).mean,
                               rtol=1e-12)
    assert third.predict(alone).mean[0] != after[0]

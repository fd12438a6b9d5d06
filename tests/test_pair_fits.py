"""Where pairs fit, learned from launches: the table world launches a pair that does not fit and
both jobs report it (out of memory) instead of the whole decision being thrown away; ours keeps a
Beta-Bernoulli posterior per (scale factor, GPU type) over whether unlaunched pairs fit; Gavel's
learner reads a failed pair as a measured normalised throughput of 0, as Gavel's table does."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bayes_sched.cells import Cell, CellObservation
from bayes_sched.cluster import PackedAllocations
from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.errors import AllocationError
from bayes_sched.estimation.pair_cells import PairPrior, class_cell
from bayes_sched.estimation.throughput import (
    BayesianThroughputLearner,
    GavelMatrixCompletionLearner,
    table_observations,
)
from bayes_sched.estimation.throughput.observations import table_rate
from bayes_sched.estimation.throughput.pair_fit import PairFitBelief, PairLaunches, pair_key
from bayes_sched.sim.gavel_jobs import make_job
from bayes_sched.sim.table_cluster import TableCluster
from bayes_sched.throughputs import ThroughputTable, load_gavel_throughputs

TABLE = load_gavel_throughputs()
ROUND = 360.0
#: Two ResNet-50s that do not fit in one V100 together (Gavel's table: rate 0).
R32, R128 = "ResNet-50 (batch size 32)", "ResNet-50 (batch size 128)"
SMALL = "ResNet-18 (batch size 16)"


def _failed(a: str, b: str, scale_factor: int = 1, gpu: str = "v100") -> CellObservation:
    return CellObservation(Cell(a, scale_factor, gpu, b), 0.0, ROUND, ROUND, out_of_memory=True)


def test_the_world_launches_a_pair_that_does_not_fit_and_both_jobs_report_it() -> None:
    assert TABLE.pair_steps_per_second("v100", (R32, 1), (R128, 1)) == (0.0, 0.0)
    spec = replace(load_cluster_spec("v100:1x2"), round_interval=ROUND)
    jobs = [make_job("r", 0.0, R32, 1, 1e6), make_job("w", 0.0, R128, 1, 1e6),
            make_job("s", 0.0, SMALL, 1, 1e6)]
    world = TableCluster(jobs, spec, TABLE)
    one = np.array([1])
    world.apply(PackedAllocations({"r": one, "w": one, "s": one}, [("r", "w")]))
    world.advance(ROUND)
    views = {view.name: view for view in world.job_views()}
    assert views["r"].cell_observations == (_failed(R32, R128),)
    assert views["w"].cell_observations == (_failed(R128, R32),)
    assert views["r"].progress == views["w"].progress == 0.0
    assert views["s"].progress > 0  # the rest of the decision ran
    # A pair the table does not hold at all is still refused, with the jobs named.
    without = ThroughputTable(TABLE.solo, {g: {k: v for k, v in d.items()
                                               if {k[0][0], k[1][0]} != {R32, R128}}
                                           for g, d in TABLE.pairs.items()})
    world = TableCluster(jobs, spec, without)
    with pytest.raises(AllocationError, match="'r' and 'w' share v100 GPUs.*no measured pair"):
        world.apply(PackedAllocations({"r": one, "w": one}, [("r", "w")]))


def test_the_fit_posterior_per_group_and_pair() -> None:
    launches = PairLaunches()
    reports = [_failed("a", "b", 4), _failed("b", "a", 4), _failed("a", "c", 4),
               CellObservation(Cell("a", 1, "v100", "b"), 2.0, ROUND)]
    belief = launches.update(reports)
    assert belief.counts == {(4, "v100"): (0, 2), (1, "v100"): (1, 0)}
    assert belief.probability(Cell("a", 4, "v100", "b")) == 0.0  # seen to fail
    assert belief.probability(Cell("a", 1, "v100", "b")) == 1.0  # seen to run
    assert belief.probability(Cell("d", 4, "v100", "e")) == pytest.approx(1 / 4)  # Beta(1, 3)
    assert belief.probability(Cell("d", 1, "v100", "e")) == pytest.approx(2 / 3)
    assert belief.probability(Cell("d", 4, "k80", "e")) == pytest.approx(1 / 2)  # no launch yet
    assert belief.probability(Cell("d", 4, "v100")) == 1.0  # alone: the stage's business
    # A pair seen to run after a failed launch runs.
    assert launches.update([*reports, CellObservation(Cell("c", 4, "v100", "a"), 1.0, ROUND)]
                           ).probability(Cell("a", 4, "v100", "c")) == 1.0
    # Joint draws: both directions of a pair together; frequencies follow the posterior.
    cells = [Cell("d", 4, "v100", "e"), Cell("e", 4, "v100", "d"), Cell("d", 4, "v100")]
    draws = belief.draw(cells, 4000, seed=3)
    assert np.array_equal(draws[:, 0], draws[:, 1]) and np.all(draws[:, 2] == 1)
    assert draws[:, 0].mean() == pytest.approx(1 / 4, abs=0.03)
    assert pair_key(cells[0]) == pair_key(cells[1])
    assert PairFitBelief().probability(cells[0]) == 0.5


def test_ours_stops_believing_in_pairs_of_a_group_where_every_launch_failed() -> None:
    """Reports of 1-GPU cells and 2-GPU alone cells, with every 2-GPU pair launched so far out of
    memory (as in Gavel's table): ours' belief in an unlaunched 2-GPU pair drops to its posterior
    probability of fitting, a failed pair to 0, and 1-GPU pairs are untouched."""
    types = TABLE.job_types[:6:2]
    reports = table_observations(TABLE, keep=lambda c: c.job_type in types and (
        c.partner in types if c.partner else c.scale_factor in (1, 2)))
    assert not any(r.cell.partner and r.cell.scale_factor == 2 for r in reports)
    failed = [_failed(a, b, 2) for a in types[:2] for b in types[:2]]
    after = BayesianThroughputLearner(max_iterations=0).fit([*reports, *failed])
    # The rates alone (bo's node-sharing cells always launch: the option off).
    rates = BayesianThroughputLearner(max_iterations=0, learn_pair_fits=False).fit(
        [*reports, *failed])
    unlaunched = Cell(types[0], 2, "v100", types[2])
    known_bad = Cell(types[0], 2, "v100", types[1])
    one_gpu = Cell(types[0], 1, "v100", types[2])
    cells = [unlaunched, known_bad, one_gpu, Cell(types[0], 2, "v100")]
    old, new = rates.predict(cells).mean, after.predict(cells).mean
    assert np.all(old > 0)
    assert new[0] == pytest.approx(old[0] / 5)  # Beta(1, 4): the pairs {0,0} {0,1} {1,1} failed
    assert new[1] == 0.0
    assert new[2:] == pytest.approx(old[2:])  # 1-GPU pairs (all seen to run) and alone cells
    draws = after.predict(cells, num_draws=2000, seed=1).draws
    assert np.all(draws[:, 1] == 0) and 0.15 < np.mean(draws[:, 0] > 0) < 0.25


def test_gavel_reads_a_failed_pair_as_a_measured_zero_and_a_mapped_job_inherits_it() -> None:
    """As Gavel's table holds a pair that does not fit as 0: a reference type's failed pair
    predicts 0, and so does the same pair for a new type mapped to that reference type."""
    types = TABLE.job_types[::5]
    solo = {k: v for k, v in TABLE.solo.items() if k[1] == 1 and k[0] in types}
    pairs = {g: {k: v for k, v in d.items() if k[0][1] == 1 and k[0][0] in types
                 and k[1][0] in types} for g, d in TABLE.pairs.items()}
    table = ThroughputTable(solo, pairs)
    learner = GavelMatrixCompletionLearner(num_reference_types=3, seed=0)
    references = learner.fit(table_observations(table)).reference_types[1]
    reference, partner = references[0], next(t for t in types if t not in references)
    gone = {Cell(reference, 1, "v100", partner), Cell(partner, 1, "v100", reference)}
    assert all(table_rate(table, c) for c in gone)
    observations = table_observations(table, keep=lambda c: c not in gone)
    observations += [_failed(reference, partner), _failed(partner, reference)]
    copy = "Copy (batch size 1)"
    observations += [CellObservation(Cell(copy, o.cell.scale_factor, o.cell.gpu_type,
                                          o.cell.partner), o.steps_per_second, o.seconds)
                     for o in observations if o.cell.job_type == reference
                     and o.cell.partner in (None, *references[1:]) and not o.out_of_memory]
    belief = learner.fit(observations)  # the reference types stay those drawn first
    assert belief.mapped[(copy, 1)] == reference
    mean = belief.predict([Cell(reference, 1, "v100", partner), Cell(copy, 1, "v100", partner),
                           Cell(copy, 1, "k80", partner)]).mean
    assert mean[0] == 0.0 and mean[1] == 0.0
    assert mean[2] == pytest.approx(table_rate(table, Cell(reference, 1, "k80", partner)))


def test_ours_prior_for_a_place_without_pairs_comes_from_the_places_with_pairs() -> None:
    """1-GPU pairs measured on every GPU type, none at 2 GPUs: ours' mean for a 2-GPU pair is
    near the job's 2-GPU alone rate times the 1-GPU slowdowns, not the broad level prior (with
    variance 25 the mean was 10^5 times the alone rate)."""
    types = TABLE.job_types[:6:2]
    reports = table_observations(TABLE, keep=lambda c: c.job_type in types and (
        c.partner in types if c.partner else c.scale_factor in (1, 2)))
    belief = BayesianThroughputLearner(max_iterations=0, learn_pair_fits=False).fit(reports)
    alone, paired = belief.predict([Cell(types[0], 2, "v100"),
                                    Cell(types[0], 2, "v100", types[2])]).mean
    assert 0.2 * alone < paired < 2.0 * alone


def test_bos_pair_prior_at_a_scale_without_pairs_comes_from_the_scale_with_pairs() -> None:
    """bo's node-sharing cells: co-runners measured on one node only. A pair across nodes (scale
    2) has no report of its own; its log slowdown's prior variance is the fleet's (the learner's
    per-place deviation), not the broad level's 25."""
    apps = ["bert", "ncf"]
    learner = BayesianThroughputLearner(max_iterations=0, measurement_noise=0.15,
                                        log_variances=PairPrior().log_variances(),
                                        learn_pair_fits=False)
    reports = [CellObservation(class_cell(apps, k), 1.0, 600.0) for k in range(4)]
    reports += [CellObservation(class_cell(apps, 0, m), 0.8, 600.0) for m in (0, 2)]
    belief = learner.fit(reports)
    _, variance, _ = belief.log_moments([class_cell(apps, 1, 3), class_cell(apps, 0, 2)])
    assert variance[0] < 1.0  # was > 25
    assert variance[1] < variance[0]


def test_ours_reads_where_pairs_fit_only_when_a_pair_is_asked_about_and_as_of_its_fit() -> None:
    """The launches are read lazily: a belief asked only about alone cells reads none; a belief
    asked after a later fit's belief read more reports still answers from the reports of its own
    fit, the same as reading them at once."""
    first = [_failed("a", "b", 4), CellObservation(Cell("a", 1, "v100"), 2.0, ROUND),
             CellObservation(Cell("b", 1, "v100"), 3.0, ROUND)]
    growing = list(first)
    learner = BayesianThroughputLearner(max_iterations=0)
    old = learner.fit(growing)
    growing += [CellObservation(Cell("a", 4, "v100", "b"), 1.0, ROUND),
                _failed("a", "c", 4), _failed("c", "d", 4)]
    new = learner.fit(growing)
    new.predict([Cell("a", 1, "v100"), Cell("b", 1, "v100")], num_draws=2)
    assert learner._launches.seen == 0  # alone cells only: nothing read
    pair = [Cell("a", 4, "v100", "b"), Cell("c", 4, "v100", "e")]
    assert new.predict(pair).mean[0] > 0  # the pair ran after its failed launch
    assert learner._launches.seen == len(growing)
    assert old.predict(pair).mean[0] == 0.0  # as of the old fit it had only failed
    assert old.pair_fits == PairLaunches().update(first)
    assert new.pair_fits == PairLaunches().update(growing)
    assert new.pair_fits is not None and new.pair_fits.counts == {(4, "v100"): (1, 2)}

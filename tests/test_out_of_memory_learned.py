"""Where a job does not fit (out of memory) is a report a job makes, learned by the estimation
stage rather than read from the table: a failed launch reports its cell, the stage keeps it out
of the learner's rates, and a time-sharing policy reading a learner stops placing the job there;
invalid reports (NaN, negative) are still dropped with a logged reason."""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import pytest

from bayes_sched.cells import Cell, CellObservation
from bayes_sched.cluster import ClusterState, PackedAllocations
from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.estimation.cell_learners import PerCellLearner
from bayes_sched.estimation.registry import make_estimator
from bayes_sched.estimation.throughput_stage import ThroughputEstimator
from bayes_sched.jobs import JobView
from bayes_sched.policies import make_policy
from bayes_sched.policies.gavel.time_sharing import TimeSharingPolicy
from bayes_sched.sim.gavel_jobs import make_job
from bayes_sched.sim.table_cluster import TableCluster
from bayes_sched.sim.table_run import run_table_simulation
from bayes_sched.throughputs import load_gavel_throughputs

TABLE = load_gavel_throughputs()
ROUND = 360.0
#: Gavel's table has no K80 entry above one GPU for this type (rate 0: out of memory).
BIG = "ResNet-50 (batch size 128)"


def _spec(text: str):  # noqa: ANN202
    return replace(load_cluster_spec(text), round_interval=ROUND)


def test_the_table_world_reports_a_failed_launch_and_no_rate() -> None:
    assert TABLE.steps_per_second(BIG, 2, "k80") == 0
    spec = _spec("v100:1x2,k80:1x2")
    world = TableCluster([make_job("0", 0.0, BIG, 2, 1e6)], spec, TABLE)
    world.apply(PackedAllocations({"0": np.array([0, 2])}, []))
    world.advance(ROUND)
    (view,) = world.job_views()
    (report,) = view.cell_observations
    assert report.out_of_memory and report.cell == Cell(BIG, 2, "k80")
    assert report.steps_per_second == 0.0 and report.seconds == ROUND
    assert view.progress == 0.0


def _view(name: str, reports: tuple[CellObservation, ...]) -> JobView:
    world = TableCluster([make_job(name, 0.0, BIG, 2, 1e9)], _spec("v100:1x2,k80:1x2"), TABLE)
    return replace(world.job_views()[0], cell_observations=reports)


def test_the_stage_learns_where_a_job_does_not_fit_and_drops_invalid_reports(
        caplog: pytest.LogCaptureFixture) -> None:
    stage = ThroughputEstimator(PerCellLearner())
    cluster = ClusterState(spec=_spec("v100:1x2,k80:1x2"), now=ROUND)
    k80, v100 = Cell(BIG, 2, "k80"), Cell(BIG, 2, "v100")
    assert stage.fits(k80) and stage.fits(v100)
    with caplog.at_level(logging.WARNING):
        stage.estimate(cluster, [_view("0", (
            CellObservation(k80, 0.0, ROUND, ROUND, out_of_memory=True),
            CellObservation(v100, float("nan"), ROUND, ROUND),
            CellObservation(v100, -3.0, ROUND, ROUND)))])
    assert not stage.fits(k80) and stage.fits(v100)
    # A failed launch reaches the learner (which may generalise from it; every pool skips it as
    # a rate); NaN and -3 are dropped.
    assert stage.observations == [CellObservation(k80, 0.0, ROUND, ROUND, out_of_memory=True)]
    assert stage.rejected_reports == 2
    assert sum("ignored report" in r.getMessage() for r in caplog.records) == 2
    assert stage.first_visit_gpu_seconds == 2 * ROUND  # the failed launch held 2 GPUs a round
    bad = CellObservation(k80, 0.0, float("nan"), ROUND, out_of_memory=True)
    stage.estimate(cluster, [_view("1", (bad,))])
    assert stage.rejected_reports == 3


def test_a_learning_policy_tries_a_type_once_and_then_avoids_it() -> None:
    """One 2-GPU job of a type that fits only on the V100s, with the K80s free: a policy reading
    a learner may try the K80s (nothing says it cannot), fails once there, and from then on runs
    only on V100s; the known table (the oracle) never tries."""
    spec = _spec("v100:1x2,k80:1x2")
    jobs = [make_job(str(i), 0.0, BIG, 2, 3000.0) for i in range(3)]

    table = make_policy("max_min_fairness_perf", seed=0, min_reset_interval=0.0)
    assert run_table_simulation(jobs, table, spec, table=TABLE).summary["finished"] == 3
    assert isinstance(table, TimeSharingPolicy) and table.estimator is None
    # The uniform learner believes every type alike: it tries the K80s.
    learned = make_policy("max_min_fairness_perf", seed=0, min_reset_interval=0.0)
    stage = make_estimator("uniform")
    assert isinstance(stage, ThroughputEstimator)
    result = run_table_simulation(jobs, learned, spec, table=TABLE, estimators=[stage])
    assert result.summary["finished"] == 3
    assert isinstance(learned, TimeSharingPolicy) and learned.estimator is stage
    assert list(stage.failed_launches) == [Cell(BIG, 2, "k80")]
    # One failed launch (one round on the two K80s), never again once learned.
    assert stage.failed_launch_gpu_seconds == 2 * ROUND

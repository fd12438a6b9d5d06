"""Sia reading a learner through the estimation stage (an estimator chosen outside the policy),
as the Gavel family does: the oracle's table behind the learning stage decides as the known table
does, a learner's profiling cells run first as real rounds and are counted, and a bad choice is a
one-line error."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.errors import InputError
from bayes_sched.estimation.registry import make_estimator
from bayes_sched.estimation.throughput_stage import ThroughputEstimator
from bayes_sched.policies import make_policy
from bayes_sched.sim.gavel_jobs import make_job
from bayes_sched.sim.result import RunResult
from bayes_sched.sim.table_run import run_table_simulation
from bayes_sched.throughputs import load_gavel_throughputs

TABLE = load_gavel_throughputs()
TYPES = ("ResNet-18 (batch size 16)", "CycleGAN", "A3C", "LM (batch size 5)")
SPEC = replace(load_cluster_spec("v100:1x2,p100:1x2,k80:1x2"), round_interval=360.0)
JOBS = [make_job(str(i), 600.0 * i, TYPES[i % 4], 1, 4000.0 * (1 + i % 2)) for i in range(6)]


def _run(estimators: object = None) -> RunResult:
    return run_table_simulation(JOBS, make_policy("sia", seed=0), SPEC, table=TABLE,
                                estimators=estimators)  # type: ignore[arg-type]


def test_the_oracle_stage_decides_as_the_known_table() -> None:
    table = _run()
    oracle = _run({"throughput": "oracle_stage"})
    assert table.estimates_from == {"throughput": "oracle"}
    assert table.jobs["jct"].tolist() == oracle.jobs["jct"].tolist()
    assert oracle.summary["profiling_gpu_hours"] == 0.0


def test_sia_profiles_each_new_job_on_every_type_through_the_stage() -> None:
    stage = make_estimator("sia")
    assert isinstance(stage, ThroughputEstimator)
    result = _run([stage])
    assert result.estimates_from == {"throughput": "sia"}
    assert result.summary["finished"] == len(JOBS)
    # One round on one GPU of each of the three types per job, less the rounds a job finished in.
    assert 0 < result.summary["profiling_gpu_hours"] <= len(JOBS) * 3 * 360.0 / 3600.0
    assert all(not stage.pending_profiling(job.name) for job in JOBS)
    assert stage.fit_seconds  # the belief was refitted from the reports


def test_a_bad_sia_estimator_is_an_error() -> None:
    with pytest.raises(InputError, match="unknown estimator 'nope'"):
        _run({"throughput": "nope"})
    with pytest.raises(InputError, match="need 'job_goodput': the policy reads throughput"):
        _run({"job_goodput": "sia"})

"""Sia reading a learner through the estimation stage (``source=``), as the Gavel family does:
the oracle learner decides as the table does, a learner's profiling cells run first as real
rounds and are counted, and a bad source is a one-line error."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.policies import make_policy
from bayes_sched.policies.sia import SiaPolicy
from bayes_sched.sim.gavel_jobs import make_job
from bayes_sched.sim.table_run import run_table_simulation
from bayes_sched.throughputs import load_gavel_throughputs

TABLE = load_gavel_throughputs()
TYPES = ("ResNet-18 (batch size 16)", "CycleGAN", "A3C", "LM (batch size 5)")
SPEC = replace(load_cluster_spec("v100:1x2,p100:1x2,k80:1x2"), round_interval=360.0)
JOBS = [make_job(str(i), 600.0 * i, TYPES[i % 4], 1, 4000.0 * (1 + i % 2)) for i in range(6)]


def _run(source: str):  # noqa: ANN202
    policy = make_policy("sia", source=source, seed=0)
    return policy, run_table_simulation(JOBS, policy, SPEC, table=TABLE)


def test_the_oracle_source_decides_as_the_table() -> None:
    _, table = _run("table")
    _, oracle = _run("oracle")
    assert table.jobs["jct"].tolist() == oracle.jobs["jct"].tolist()
    assert oracle.summary["profiling_gpu_hours"] == 0.0


def test_sia_profiles_each_new_job_on_every_type_through_the_stage() -> None:
    policy, result = _run("sia")
    assert isinstance(policy, SiaPolicy) and policy.estimator is not None
    assert result.summary["finished"] == len(JOBS)
    # One round on one GPU of each of the three types per job, less the rounds a job finished in.
    assert 0 < result.summary["profiling_gpu_hours"] <= len(JOBS) * 3 * 360.0 / 3600.0
    assert all(not policy.estimator.pending_profiling(job.name) for job in JOBS)
    assert policy.estimator.fit_seconds  # the belief was refitted from the reports


def test_an_unknown_sia_source_is_an_error() -> None:
    with pytest.raises(ValueError, match="source is 'nope'"):
        SiaPolicy(source="nope")

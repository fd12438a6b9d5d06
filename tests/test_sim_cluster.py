"""The simulated cluster and the loop: job physics end to end, restarts, interference, rejection."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from bayes_sched.cluster import ClusterState
from bayes_sched.errors import InputError
from bayes_sched.jobs import JobSettings, JobSpec
from bayes_sched.loop import run_loop
from bayes_sched.policies import FifoPolicy
from bayes_sched.sim.physics import get_application
from bayes_sched.sim.simulator import SimConfig, SimulatedCluster
from bayes_sched.sim.workload import Workload


def _workload(*specs: JobSpec) -> Workload:
    return Workload("test", tuple(specs))


def test_lone_job_finishes_after_restart_delay_plus_its_standalone_time() -> None:
    spec = JobSpec("j", 0.0, "cifar10", 4, 512)
    config = SimConfig(num_nodes=2, gpus_per_node=4, restart_delay=30.0)
    cluster = SimulatedCluster(_workload(spec), config)
    stats = run_loop(cluster, FifoPolicy(), config.interval)
    job = cluster.jobs["j"]
    expected = 60.0 + 30.0 + get_application("cifar10").standalone_runtime(4, 512, 4)
    # Jobs start at the first round (60 s); each of the 100 epochs ends on a whole second.
    assert job.completion_time == pytest.approx(expected, abs=100 * 0.5 + 1)
    assert job.num_restarts == 0 and stats.rejected == []
    assert job.attained_service == pytest.approx(4 * (job.completion_time - 60.0), abs=1e-6)


def test_restart_costs_the_delay() -> None:
    spec = JobSpec("j", 0.0, "cifar10", 1, 128)
    config = SimConfig(num_nodes=1, gpus_per_node=4, restart_delay=30.0)
    done = {}
    for moves in (0, 1):
        cluster = SimulatedCluster(_workload(spec), config)
        cluster.advance(60)
        cluster.apply({"j": np.array([1, 0, 0, 0][:1])})
        cluster.advance(600)
        if moves:
            cluster.apply({})  # preempted ...
            cluster.apply({"j": np.array([1])})  # ... and restarted
        cluster.advance(600)
        done[moves] = cluster.jobs["j"].progress
    app = get_application("cifar10")
    step, _ = app.step_time((1,), 128)
    lost = done[0] - done[1]
    assert lost == pytest.approx(30.0 / step * app.gain(128, 0), rel=0.05)


def test_interference_slows_distributed_jobs_sharing_a_node() -> None:
    specs = (JobSpec("a", 0.0, "cifar10", 2, 512), JobSpec("b", 0.0, "cifar10", 2, 512))
    progress = {}
    for slowdown in (0.0, 0.5):
        cluster = SimulatedCluster(_workload(*specs),
                                   SimConfig(num_nodes=2, gpus_per_node=4, interference=slowdown))
        cluster.advance(60)
        cluster.apply({"a": np.array([1, 1]), "b": np.array([1, 1])})
        cluster.advance(60)   # restart delay
        cluster.advance(120)
        progress[slowdown] = cluster.jobs["a"].progress
    assert progress[0.5] < progress[0.0]


class _Greedy:
    """A broken policy: gives every job every GPU of node 0."""

    name = "greedy"

    needs = ()

    def stats(self) -> dict[str, float]:
        return {}

    def job_settings(self, spec: JobSpec) -> JobSettings:
        return JobSettings(spec.batch_size)

    def decide(self, cluster: ClusterState, jobs, estimates):  # noqa: ANN001, ANN201
        counts = np.zeros(cluster.num_nodes, dtype=np.int64)
        counts[0] = cluster.gpus_per_node
        if len(jobs) == 1:
            return {jobs[0].name: counts}
        return {job.name: counts for job in jobs}


def test_oversubscribing_decision_is_rejected_logged_and_previous_kept(
        caplog: pytest.LogCaptureFixture) -> None:
    specs = (JobSpec("a", 0.0, "cifar10", 1, 128), JobSpec("b", 100.0, "cifar10", 1, 128))
    cluster = SimulatedCluster(_workload(*specs), SimConfig(num_nodes=2, gpus_per_node=4))
    with caplog.at_level(logging.WARNING, logger="bayes_sched.loop"):
        stats = run_loop(cluster, _Greedy(), 60.0, max_rounds=3)
    assert len(stats.rejected) == 2 and "oversubscribes node 0" in stats.rejected[0][1]
    assert "rejected decision" in caplog.text
    allocations = cluster.allocations()
    assert list(allocations) == ["a"] and allocations["a"].tolist() == [4, 0]


def test_cluster_that_cannot_fit_a_job_is_an_input_error() -> None:
    with pytest.raises(InputError, match="asks for 8 GPUs but the cluster has 4"):
        SimulatedCluster(_workload(JobSpec("big", 0.0, "cifar10", 8, 512)),
                         SimConfig(num_nodes=1, gpus_per_node=4))
    with pytest.raises(InputError, match="interference"):
        SimConfig(interference=1.5)


def test_the_loop_times_estimation_and_decisions_with_the_clock_it_is_given() -> None:
    ticks = iter(range(10_000))
    readings: list[float] = []

    def clock() -> float:  # one tick a reading: every timed stage lasts exactly 1 "second"
        readings.append(float(next(ticks)))
        return readings[-1]

    spec = JobSpec("j", 0.0, "cifar10", 1, 128)
    cluster = SimulatedCluster(_workload(spec), SimConfig(num_nodes=1, gpus_per_node=4))
    stats = run_loop(cluster, FifoPolicy(), 60.0, max_rounds=3, clock=clock)
    assert stats.decision_seconds == [1.0, 1.0, 1.0]
    assert stats.estimate_seconds == [1.0, 1.0, 1.0]
    assert len(readings) == 12  # two readings per stage, two stages per round

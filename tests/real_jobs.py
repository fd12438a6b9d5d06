"""What every real-cluster backend owes jobs the scheduler moved (shared by the local and the Ray
backend's tests): read back from the jobs' own reports and the scheduler's state file."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from bayes_sched.backends.real_cluster import RealCluster, RealClusterConfig
from bayes_sched.client.protocol import read_reports
from bayes_sched.estimation import run_estimators
from bayes_sched.estimation.choose import policy_estimators
from bayes_sched.estimation.job_models import profile_of
from bayes_sched.policies import make_policy
from perfmodel.throughput import fit_throughput

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def local_ray_cluster(head: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]] = ()
                      ) -> Iterator[Any]:
    """A local Ray cluster (``ray.cluster_utils.Cluster``: a head node with ``head``'s
    arguments and one node per entry of ``nodes``) whose workers import this checkout; shut
    down, and this process disconnected from it, on the way out."""
    import ray
    from ray.cluster_utils import Cluster

    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(ROOT)  # the actors and tasks import bayes_sched
    cluster = Cluster(initialize_head=True, head_node_args={**head, "include_dashboard": False})
    try:
        for node in nodes:
            cluster.add_node(**node)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        if saved is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = saved


def check_moved_jobs(state: Path, jobs: dict[str, dict[str, Any]], target_epochs: float
                     ) -> int:
    """Assert of each job of the state directory ``state`` (``jobs``: its rows, by name) that
    it is done, nothing ran twice (at most one start report per attempt, in order; one
    ``done``), every restart resumed at or after the last acknowledged checkpoint (no progress
    lost beyond the request point), and the batch the scheduler tuned is the one it trained
    with. Returns the jobs' restarts in all."""
    restarts = 0
    for name, job in jobs.items():
        assert job["status"] == "done", (name, job["record"]["reason"])
        record = job["record"]
        reports = read_reports(state / "jobs" / name)[0]
        starts = [r for r in reports if r["kind"] == "start"]
        # One start report per attempt at most, in order, the last attempt's among them (a
        # start stopped again before its client began training reports none).
        attempts = [r["attempt"] for r in starts]
        assert attempts == sorted(set(attempts)) and attempts[-1] == record["attempt"] - 1
        assert sum(r["kind"] == "exit" and r["status"] == "done" for r in reports) == 1
        assert reports[-1]["kind"] == "exit" and reports[-1]["epochs"] == target_epochs
        acked = {"step": 0}
        for report in reports:
            if report["kind"] == "checkpoint":
                acked = report
            if report["kind"] == "start" and report["attempt"] > 0:
                assert report["restored"] and report["step"] >= acked["step"], (name, report)
        restarts += record["num_restarts"]
        # The batch the scheduler tuned (each start's control) is the one the job ran with.
        steps = [r for r in reports if r["kind"] == "step"]
        assert {(r["local_bsz"], r["accum_steps"]) for r in steps} >= {
            (s["local_bsz"], s["accum_steps"]) for s in starts[1:] if any(
                r["local_bsz"] == s["local_bsz"] for r in steps)}
    return restarts


def check_step_times_reach_the_model(state: Path, record: dict[str, Any], gpu_type: str,
                                     launcher: Any) -> None:
    """Assert that a job's measured step times are its job model's data (the first report per
    configuration) and the model is the fit of exactly those, once the state is restored."""
    name = record["spec"]["name"]
    record = dict(record, status="pending", allocation=[0] * len(record["allocation"]))
    cluster = RealCluster(launcher, state / "jobs", RealClusterConfig())
    cluster.restore([record])
    # restore() finishes a waiting job whose reports say done (it ended while no scheduler
    # ran); this one is read as if still waiting, to see the view a policy would get.
    cluster.records[name].status = "pending"
    (view,) = run_estimators(policy_estimators(make_policy("pollux")), cluster.state,
                             cluster.job_views())
    steps = [r for r in read_reports(state / "jobs" / name)[0] if r["kind"] == "step"]
    first: dict[tuple[int, int, int], float] = {}
    for r in steps:
        first.setdefault((r["num_nodes"], r["num_replicas"], r["local_bsz"]), r["step_time"])
    assert {k: o.step_time for k, o in view.observations.items()} == first
    assert view.gradient is not None and view.gradient.grad_sqr > 0
    model = view.models[gpu_type]
    expected = fit_throughput(profile_of(name, list(view.observations.values())), starts=1)
    np.testing.assert_allclose(model.params.as_array(), expected.as_array(), rtol=1e-6)

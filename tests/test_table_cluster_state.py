"""The table world's per-job state derived when allocations change (computed for all jobs at
once) agrees with the job's GPUs, round after round of time sharing."""

from __future__ import annotations

from dataclasses import replace
from itertools import islice

import numpy as np
import pytest

from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.jobs import _VIEW_FIELDS, AllocationHistory, BatchLimits, JobSettings, JobView
from bayes_sched.policies import make_policy
from bayes_sched.sim.gavel_jobs import generate_continuous_jobs
from bayes_sched.sim.table_cluster import TableCluster
from bayes_sched.sim.table_run import run_table_simulation


def test_derived_job_state_follows_the_gpus_held() -> None:
    """Under LAS (most jobs' GPUs change every round) and with packing: each active job's GPU
    count, its one GPU type (None when it holds none), its history's last entry and its
    view's allocation match the GPUs it holds; the arrays shared with views are read-only;
    restarts count the changes to a non-empty allocation after the first."""
    spec = replace(load_cluster_spec("v100:1x4,p100:1x4,k80:1x4"), round_interval=360.0)
    jobs = list(islice(generate_continuous_jobs(20.0, 3, True), 8))
    checked = []
    earlier: list[tuple[JobView, tuple[object, ...]]] = []  # views and their history then

    def check(cluster: TableCluster) -> None:
        node_type = np.array(spec.gpu_types)
        views = {view.name: view for view in cluster.job_views()}
        for name, job in cluster._active.items():
            view = views[name]
            assert view.allocation_history == job.history
            assert (view.age, view.attained_service, view.progress, view.num_restarts) == (
                cluster.state.now - job.spec.submit_time, job.attained_service,
                job.steps_done, job.num_restarts or 0)
            assert view.cell_observations == job.reports
            earlier.append((view, tuple(view.allocation_history)))
            types = set(node_type[job.counts > 0].tolist())
            assert job.num_gpus == int(job.counts.sum())
            assert job.gpu_type == (types.pop() if len(types) == 1 else None)
            assert not job.counts.flags.writeable
            assert np.array_equal(views[name].allocation, job.counts)
            if job.allocation_history:
                assert job.history[-1][1] == tuple(job.counts.tolist())
                assert job.history == tuple(job.allocation_history)
                started = sum(1 for _, c in job.allocation_history if any(c))
                assert job.num_restarts == (started - 1 if started else None)
            checked.append(name)

    for policy in ("max_min_fairness", "max_min_fairness_packed"):
        result = run_table_simulation(jobs, make_policy(policy, seed=1), spec, on_round=check)
        assert result.summary["finished"] == len(jobs)
    assert len(checked) > 100
    # A view's history is what it was when the view was taken, whatever came after.
    assert any(len(view.allocation_history) > 2 for view, _ in earlier)
    for view, then in earlier:
        assert tuple(view.allocation_history) == then
        assert view.allocation_history[-1:] == then[-1:]


def test_allocation_history_is_a_fixed_prefix() -> None:
    """An :class:`AllocationHistory` reads as the entries there were when it was taken: length,
    indexing (negative too), slices, iteration and equality with tuples; out of range raises."""
    entries: list[tuple[float, tuple[int, ...]]] = [(0.0, (1, 0)), (360.0, (0, 2))]
    history = AllocationHistory(entries)
    entries.append((720.0, (0, 0)))
    assert len(history) == 2 and history[-1] == (360.0, (0, 2)) and history[0] == entries[0]
    assert history[1:] == ((360.0, (0, 2)),) and list(history) == entries[:2]
    assert history == tuple(entries[:2]) and history != tuple(entries)
    assert AllocationHistory(entries) == tuple(entries)
    with pytest.raises(IndexError):
        history[2]


def test_updated_view_is_the_view_with_the_changes() -> None:
    """``JobView.updated`` gives the view construction would give with the changed fields, leaves
    the original as it was, and refuses an unknown field or a writable allocation."""
    allocation = np.array([0, 2])
    base = JobView(name="a", application="x", submit_time=5.0, age=0.0, attained_service=0.0,
                   allocation=allocation, num_restarts=0, requested_replicas=2,
                   requested_batch_size=32, settings=JobSettings(32, 2),
                   limits=BatchLimits(1, 1, 1, 1), target_steps=100.0)
    held = base.allocation
    new = base.updated(age=3.0, progress=7.0, allocation_history=((0.0, (0, 2)),))
    direct = replace(base, age=3.0, progress=7.0, allocation_history=((0.0, (0, 2)),))
    for name in _VIEW_FIELDS - {"allocation"}:
        assert getattr(new, name) == getattr(direct, name), name
    assert np.array_equal(new.allocation, direct.allocation)
    assert (base.age, base.progress, base.allocation_history) == (0.0, 0.0, ())
    assert new.allocation is held and not new.allocation.flags.writeable
    with pytest.raises(TypeError, match="no such fields"):
        base.updated(agee=1.0)
    with pytest.raises(ValueError, match="read-only"):
        base.updated(allocation=np.array([1, 1]))


class _HoldsNothing:
    """A policy that never gives a job a GPU: to the jobs, a solver failing every round."""

    name = "holds_nothing"
    solver_failures = 0

    needs = ()

    def stats(self) -> dict[str, float]:
        return {"solver_failures": float(self.solver_failures)}

    def job_settings(self, spec: object) -> JobSettings:
        raise NotImplementedError

    def decide(self, cluster: object, jobs: object, estimates: object) -> dict[str, np.ndarray]:
        self.solver_failures += 1
        return {}


def test_a_run_whose_policy_holds_no_gpu_is_given_up_at_the_stall_limit(
        caplog: pytest.LogCaptureFixture) -> None:
    """Jobs waiting with no GPU held for ``stall_limit`` simulated seconds end the run (where it
    went on to its 1e9 s horizon: session 13's CI hang, a Shockwave planner failing every
    solve); a policy that runs the jobs never trips it."""
    spec = replace(load_cluster_spec("v100:4"), round_interval=360.0)
    jobs = list(islice(generate_continuous_jobs(2.0, 0), 3))
    limit = 10 * 3600.0
    stalled = run_table_simulation(jobs, _HoldsNothing(), spec, stall_limit=limit)  # type: ignore[arg-type]
    assert stalled.summary["finished"] == 0
    start = stalled.summary["stalled_at"]
    assert start == jobs[0].submit_time // 360.0 * 360.0  # from the first round a job waited
    assert start + limit <= stalled.summary["rounds"] * 360.0 < start + limit + 360.0
    assert "the policy stalled (solver failures: " in caplog.text
    healthy = run_table_simulation(jobs, make_policy("max_min_fairness"), spec,
                                   stall_limit=limit)
    assert healthy.summary["finished"] == 3 and "stalled_at" not in healthy.summary

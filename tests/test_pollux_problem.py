"""Pollux's search problem, built across jobs at once and from cached tables, against the per-job
definitions: the status quo, replica caps, restart penalties and speedup tables over rounds in
which jobs come, go and move, and share models."""

from __future__ import annotations

import math
from types import MappingProxyType

import numpy as np

from bayes_sched.agent import JobAgent
from bayes_sched.cluster import ClusterState
from bayes_sched.cluster_spec import ClusterSpec
from bayes_sched.estimation import estimate_round
from bayes_sched.jobs import GoodputPosterior, GradientStats, JobModel, JobSettings, JobView
from bayes_sched.mechanisms.genetic_allocation.search import (
    STATE_DTYPE,
    SpeedupTables,
    restart_penalty,
    status_quo,
)
from bayes_sched.policies.pollux import PolluxPolicy
from bayes_sched.sim.physics import get_application
from tests.agents import estimators_of, job_view, measured_agent

NODES = 4


def _views(now: float, count: int, shift: int) -> list[JobView]:
    """``count`` jobs: pairs share one agent's measurements (equal models), one job has no
    measurements (no model), one its own replica cap; allocations move with ``shift``."""
    views = []
    for i in range(count):
        app = ("cifar10", "imagenet", "bert")[i % 3]
        if i == 0:
            agent = JobAgent("job0", get_application(app).limits, JobSettings())
        else:
            agent = measured_agent(f"job{i}", app)
        allocation = [0] * NODES
        if (i + shift) % 3 == 0:
            allocation[(i + shift) % NODES] = 1 + i % 4
            if i % 5 == 0:
                allocation[(i + shift + 1) % NODES] = 2
        settings = JobSettings(max_replicas=3) if i == 4 else None
        views.append(job_view(agent, app, now, allocation, submit=-10.0 * (i // 2),
                              attained=float((i * 37) % 11), num_restarts=i % 3,
                              settings=settings))
    return views


def _replica_cap(job: JobView, cap: int) -> int:
    limit = min(max(2 * max((k[1] for k in job.observations), default=0), 1), cap,
                job.limits.max_batch_size // job.limits.min_local_bsz)
    if job.settings.max_replicas is not None:
        limit = min(limit, job.settings.max_replicas)
    return max(limit, 1)


def test_problem_arrays_equal_the_per_job_definitions_over_rounds() -> None:
    policy = PolluxPolicy(max_replicas_cap=16)
    spec = ClusterSpec.homogeneous(NODES, 4)
    spec = ClusterSpec(spec.nodes, restart_delays={"bert": 250.0})
    for r, count in enumerate((13, 13, 6, 13)):
        cluster = ClusterState(spec=spec, now=600.0 + 60 * r)
        views, _ = estimate_round(estimators_of(policy), cluster, _views(cluster.now, count, r))
        problem, names = policy.problem(cluster, views)
        jobs = sorted(views, key=lambda j: (j.attained_service, j.submit_time, j.name))
        assert names == [job.name for job in jobs]
        dense = np.stack([job.allocation for job in jobs]).astype(STATE_DTYPE)
        assert problem.base.dtype == STATE_DTYPE and np.array_equal(problem.base, dense)
        j, n = np.nonzero(dense)
        reference: tuple[np.ndarray, ...] = (j, n, dense[j, n])
        for mine, theirs in zip(problem.base_entries, reference, strict=True):
            assert mine.dtype == theirs.dtype and np.array_equal(mine, theirs)
        assert np.array_equal(problem._base_nodes, np.count_nonzero(dense, axis=1))
        caps = np.array([_replica_cap(job, 16) for job in jobs])
        assert np.array_equal(problem.max_replicas, caps) and 3 in caps.tolist()
        delays = np.array([250.0 if job.application == "bert" else cluster.spec.restart_delay
                           for job in jobs])
        expected = restart_penalty(np.array([job.age for job in jobs]),
                                   np.array([job.num_restarts for job in jobs]), delays)
        assert problem.penalty.tobytes() == expected.tobytes()
        # The cached tables read as a fresh build's, to the bit.
        fresh = SpeedupTables(policy.max_nodes_per_job).build(jobs, cluster, caps)
        assert problem.tables.shape == fresh.shape and problem.tables.tobytes() == fresh.tobytes()
        fair_r = max(1, math.ceil(cluster.total_gpus / len(jobs)))
        for row, job in zip(problem.tables, jobs, strict=True):
            if job.model is None:  # scales linearly
                assert row[1, 2 * fair_r] == 2.0 and row[2, 1] == 0.0
            else:
                assert row[1, fair_r] == 1.0 and row[0].max() == 0.0
                assert not row[:, max(int(_replica_cap(job, 16)), fair_r) + 1:].any()


def test_status_quo_of_jobs_holding_nothing() -> None:
    agent = measured_agent("a")
    jobs = [job_view(agent, "cifar10", 60.0, [0, 0, 0])] * 2
    base, (j, n, v) = status_quo(jobs)
    assert base.shape == (2, 3) and not base.any()
    assert j.size == n.size == v.size == 0 and v.dtype == STATE_DTYPE and j.dtype == np.int64


def test_tables_rescored_for_new_gradient_noise_equal_the_job_models_goodput() -> None:
    # One fit, its gradient noise from none to far past every batch, tables of several widths:
    # each table, rescored from the candidates' throughputs kept for its width, reads as the
    # job model's own goodput, to the bit, where the allocation fits on nodes of 4 GPUs (and
    # on one node, where every GPU count is kept: a fair share may exceed a node).
    policy = PolluxPolicy()
    cluster = ClusterState(NODES, 4, 600.0)
    (view,), _ = estimate_round(estimators_of(policy), cluster,
                                [job_view(measured_agent("a", "imagenet"), "imagenet", 600.0,
                                          [0] * NODES)])
    fitted = view.model
    assert fitted is not None
    tables = SpeedupTables(NODES)
    for grad_var, max_r in ((0.0, 8), (1e-3, 16), (0.7, 4), (40.0, 16), (1e6, 24)):
        model = JobModel(fitted.gpu_type, fitted.version, fitted.params,
                         GradientStats(1.0, grad_var), fitted.limits)
        rr, nn = np.meshgrid(np.arange(1, max_r + 1), np.arange(1, NODES + 1))
        valid = (nn <= rr) & ((nn == 1) | (rr <= 4 * nn))
        goodput = np.zeros((NODES + 1, max_r + 1))
        goodput[nn[valid], rr[valid]] = GoodputPosterior(model, nn[valid], rr[valid]).mean()
        assert tables._goodput(model, NODES, max_r, 4).tobytes() == goodput.tobytes()
        if max_r == 16:  # and the speedup table the search reads, through the public build
            job = view.updated(models=MappingProxyType({fitted.gpu_type: model}))
            got = tables.build([job], cluster, np.array([16]))[0]
            assert got.tobytes() == (goodput / goodput[1, 16]).tobytes()
    assert len(tables._rates) == 4  # one per width: the second 16 wide rescored the first's

"""The table world's per-job state derived when allocations change (computed for all jobs at
once) agrees with the job's GPUs, round after round of time sharing."""

from __future__ import annotations

from dataclasses import replace
from itertools import islice

import numpy as np

from bayes_sched.cluster_spec import load_cluster_spec
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

    def check(cluster: TableCluster) -> None:
        node_type = np.array(spec.gpu_types)
        views = {view.name: view for view in cluster.job_views()}
        for name, job in cluster._active.items():
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

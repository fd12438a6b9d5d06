"""One tenant run in the throughput-table world: jobs with tenants, a policy (quota-wrapped or a
tenant policy), a cluster with ``[[tenants]]`` -> the run's result and its per-tenant report."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bayes_sched.cluster_spec import ClusterSpec
from bayes_sched.policies.base import Policy
from bayes_sched.sim.gavel_jobs import TableJobSpec
from bayes_sched.sim.result import RunResult
from bayes_sched.sim.table_run import run_table_simulation
from bayes_sched.sim.tenant_cluster import TenantTableCluster
from bayes_sched.sim.tenant_metrics import TenantReport
from bayes_sched.tenants import check_job_tenants


def run_tenant_simulation(jobs: Sequence[TableJobSpec], policy: Policy, spec: ClusterSpec,
                          **options: Any) -> tuple[RunResult, TenantReport]:
    """Simulate ``jobs`` under ``policy`` on ``spec`` (every option of
    :func:`~bayes_sched.sim.table_run.run_table_simulation` but ``cluster_type``), on a
    :class:`~bayes_sched.sim.tenant_cluster.TenantTableCluster`, with its per-tenant report
    (whose summary the result's summary holds too: ``ltgf_spread``, ...).

    Raises:
        InputError: a job whose tenant the cluster does not list (one line naming it).
    """
    check_job_tenants(jobs, spec.tenants, options.get("source") or None)
    result = run_table_simulation(jobs, policy, spec, cluster_type=TenantTableCluster,
                                  **options)
    assert result.tenants is not None  # a TenantTableCluster's run has its report
    return result, result.tenants

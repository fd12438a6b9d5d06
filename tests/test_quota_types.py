"""Per-GPU-type quotas in the quota stage (:func:`bayes_sched.tenancy.quotas.admit_typed`), on
real simulations of the throughput-table world on a cluster of V100s and K80s: a tenant's jobs
stay within its quota of each type, idle typed quota is lent only by tenants that lend, and it
is reclaimed on its own type when the owner's jobs arrive."""

from __future__ import annotations

import dataclasses

from bayes_sched.cluster_spec import ClusterSpec, parse_cluster_spec
from bayes_sched.policies import make_policy
from bayes_sched.sim.gavel_jobs import TableJobSpec, make_job
from bayes_sched.sim.table_cluster import TableCluster
from bayes_sched.sim.table_run import run_table_simulation
from bayes_sched.sim.tenant_cluster import TenantTableCluster
from bayes_sched.tenancy.quotas import with_quotas
from bayes_sched.tenants import TenantSpec
from bayes_sched.throughputs import load_gavel_throughputs

JOB_TYPE = "ResNet-18 (batch size 16)"

Held = dict[tuple[str, str], int]


def _spec(*tenants: TenantSpec) -> ClusterSpec:
    return dataclasses.replace(parse_cluster_spec("v100:1x4,k80:1x4"), round_interval=60.0,
                               tenants=tenants)


def _job(name: str, at: float, tenant: str, seconds: float) -> TableJobSpec:
    rate = load_gavel_throughputs().steps_per_second(JOB_TYPE, 1, "k80") or 0.0
    return make_job(name, at, JOB_TYPE, 1, seconds * rate, tenant=tenant)


def _held(jobs: list[TableJobSpec], policy_name: str, spec: ClusterSpec, quotas: bool = True
          ) -> list[tuple[float, Held]]:
    """(time, GPUs held per (tenant, type)) after every round's decision."""
    rounds: list[tuple[float, Held]] = []

    def record(cluster: TableCluster) -> None:
        held: Held = {}
        for name, counts in cluster.allocations().items():
            tenant = cluster.jobs[name].spec.tenant
            for node in counts.nonzero()[0]:
                key = (tenant, cluster.spec.gpu_types[node])
                held[key] = held.get(key, 0) + int(counts[node])
        rounds.append((cluster.state.now, held))

    policy = make_policy(policy_name)
    run_table_simulation(jobs, with_quotas(policy) if quotas else policy, spec,
                         cluster_type=TenantTableCluster, on_round=record,
                         measurement_noise=0.0)
    return rounds


def test_a_tenant_never_runs_on_a_type_whose_quota_another_keeps() -> None:
    spec = _spec(TenantSpec("a", {"v100": 4}), TenantSpec("b", {"k80": 4}, lend=False))
    jobs = [_job(f"a{i}", 0.0, "a", 3600) for i in range(8)]
    for policy in ("fifo", "tiresias"):
        rounds = _held(jobs, policy, spec)
        assert all(h.get(("a", "k80"), 0) == 0 for _, h in rounds), policy
        assert max(h.get(("a", "v100"), 0) for _, h in rounds) == 4, policy
    # Without the stage the policy runs a's jobs on b's K80s too.
    plain = _held(jobs, "fifo", spec, quotas=False)
    assert max(h.get(("a", "k80"), 0) for _, h in plain) > 0


def test_idle_typed_quota_is_lent_and_reclaimed_on_its_type() -> None:
    spec = _spec(TenantSpec("a", {"v100": 4}), TenantSpec("b", {"k80": 4}))
    jobs = [_job(f"a{i}", 0.0, "a", 12 * 3600) for i in range(8)]  # hours on V100s too
    jobs += [_job(f"b{i}", 3600.0, "b", 1800) for i in range(4)]
    rounds = _held(jobs, "fifo", spec)
    before = [h for now, h in rounds if now < 3600]
    after = [h for now, h in rounds if 3600 + 60 < now < 3600 + 1800]
    assert before and all(h.get(("a", "k80"), 0) == 4 for h in before)  # borrowed b's idle K80s
    assert after and all(h.get(("b", "k80"), 0) == 4 and h.get(("a", "k80"), 0) == 0
                         and h.get(("a", "v100"), 0) == 4 for h in after)


def test_a_tenant_without_a_typed_quota_runs_on_the_unreserved_gpus() -> None:
    spec = _spec(TenantSpec("a", {"v100": 2}, lend=False), TenantSpec("b", lend=False,
                                                                     borrow=False))
    jobs = [_job(f"b{i}", 0.0, "b", 3600) for i in range(8)]
    rounds = _held(jobs, "fifo", spec)
    # b is entitled to the 6 GPUs no quota reserves: 2 V100s and 4 K80s, never a's 2 V100s.
    assert max(h.get(("b", "v100"), 0) for _, h in rounds) == 2
    assert max(sum(v for (t, _), v in h.items() if t == "b") for _, h in rounds) == 6

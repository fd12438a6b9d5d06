"""Tenants on the scheduling side: the quota stage that wraps any policy (:mod:`.quotas`).

Fair shares between tenants are :mod:`bayes_sched.fair_shares`; tenant workloads, the simulated
cluster that records tenants, a tenant run and the per-tenant metrics are the simulator's
(:mod:`bayes_sched.sim.tenant_workload`, :mod:`~bayes_sched.sim.tenant_cluster`,
:mod:`~bayes_sched.sim.tenant_run`, :mod:`~bayes_sched.sim.tenant_metrics`)."""

"""Tenants sharing a cluster: a quota stage that wraps any policy (:mod:`.quotas`), tenant
workloads with early exits (:mod:`.workload`), the simulated cluster that records them
(:mod:`.cluster`), one tenant run (:mod:`.run`) and the per-tenant metrics (:mod:`.metrics`);
fair shares between tenants are :mod:`bayes_sched.fair_shares`."""

"""Tenants sharing a cluster: fair shares between them (:mod:`.shares`), a quota stage that wraps
any policy (:mod:`.quotas`), tenant workloads with early exits (:mod:`.workload`), the simulated
cluster that records them (:mod:`.cluster`) and the per-tenant metrics (:mod:`.metrics`)."""

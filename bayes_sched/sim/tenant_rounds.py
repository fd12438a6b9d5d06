"""What a world records per round for the per-tenant metrics (:mod:`bayes_sched.sim.tenant_metrics`),
in one form for every world: :class:`TenantRounds`.

Per round of ``seconds``: each tenant's demand (the GPUs its jobs active at the round's start
asked for: a job's requested replicas, its ``scale_factor`` in the throughput-table world, its
user's ``num_replicas`` in the Pollux world), the GPU-seconds its jobs received in the round
(attained service's growth), its fair share of GPUs (:func:`~bayes_sched.fair_shares.
tenant_shares` of the cluster's tenants and those demands) and, per job, the fair GPU-seconds it
was owed (its tenant's share split among the tenant's active jobs,
:func:`~bayes_sched.fair_shares.job_shares`, times the round's length).

The throughput-table world records as it runs
(:class:`~bayes_sched.sim.tenant_cluster.TenantTableCluster`); the Pollux world's run is read
afterwards from the GPUs each job held per round (:meth:`TenantRounds.from_held`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from bayes_sched.fair_shares import job_shares, tenant_shares
from bayes_sched.tenants import TenantTable


@dataclass
class TenantRounds:
    """Per-round tenant records of one run (see the module).

    Attributes:
        table: the cluster's tenants and entitlements.
        round_seconds: each round's length, seconds, ``(rounds,)`` (list).
        received: GPU-seconds per tenant per round (tenants with active jobs; list of dicts).
        demand: GPUs asked for per tenant at each round's start (list of dicts).
        fair: each tenant's fair share of GPUs in each round (list of dicts).
        job_fair: fair GPU-seconds each job was owed while active, by job name.
    """

    table: TenantTable
    round_seconds: list[float] = field(default_factory=list)
    received: list[dict[str, float]] = field(default_factory=list)
    demand: list[dict[str, float]] = field(default_factory=list)
    fair: list[dict[str, float]] = field(default_factory=list)
    job_fair: dict[str, float] = field(default_factory=dict)

    def record(self, seconds: float, requests: Mapping[str, tuple[str, float]],
               received: Mapping[str, float]) -> None:
        """Record one round of ``seconds``: ``requests`` maps each job active at its start to
        ``(tenant, GPUs requested)``, ``received`` each tenant to the GPU-seconds its jobs got
        in the round (missing: 0)."""
        demand: dict[str, float] = {}
        for tenant, gpus in requests.values():
            demand[tenant] = demand.get(tenant, 0.0) + float(gpus)
        shares = tenant_shares(self.table, demand)
        self.round_seconds.append(float(seconds))
        self.received.append({t: float(np.round(received.get(t, 0.0), 9)) for t in demand})
        self.demand.append(demand)
        self.fair.append({t: shares.get(t, 0.0) for t in demand})
        for tenant in demand:
            mine = {name: gpus for name, (owner, gpus) in requests.items() if owner == tenant}
            for name, share in job_shares(shares.get(tenant, 0.0), mine).items():
                self.job_fair[name] = self.job_fair.get(name, 0.0) + share * seconds

    @property
    def end(self) -> float:
        """The last round's end, seconds from the run's start."""
        return float(np.sum(self.round_seconds))

    @classmethod
    def from_held(cls, table: TenantTable, round_end: np.ndarray, held: np.ndarray,
                  jobs: Sequence[tuple[str, str, float]], submit: np.ndarray,
                  completion: np.ndarray) -> tuple[TenantRounds, np.ndarray, np.ndarray]:
        """The records of a run whose rounds end at ``round_end`` ``(R,)`` (s, the first
        starting at 0), from the GPUs each job held per round ``held`` ``(R, J)``; ``jobs``
        ``(J,)`` each job's ``(name, tenant, GPUs requested)``, ``submit`` and ``completion``
        ``(J,)`` its times (s; NaN: unfinished). A job is active in a round when submitted by
        its start and unfinished then; it receives its GPUs times the part of the round before
        it completed. Returns the records, each job's GPU-seconds received ``(J,)`` and the
        seconds it held GPUs ``(J,)``."""
        round_end = np.asarray(round_end, dtype=np.float64)
        seconds = np.diff(round_end, prepend=0.0)
        start = round_end - seconds
        done = np.where(np.isnan(completion), np.inf, completion)
        active = (np.asarray(submit)[None, :] <= start[:, None]) & (done[None, :] > start[:, None])
        ran = np.clip(np.minimum(round_end[:, None], done[None, :]) - start[:, None], 0.0,
                      seconds[:, None]) * (held > 0) * active   # (R, J) seconds holding GPUs
        got = held * ran
        tenants = np.array([tenant for _, tenant, _ in jobs], dtype=object)
        rounds = cls(table)
        names = list(dict.fromkeys(tenants.tolist()))
        per_tenant = np.stack([got[:, tenants == t].sum(axis=1) for t in names], axis=1) \
            if names else np.zeros((len(round_end), 0))
        for r in range(len(round_end)):
            requests = {jobs[j][0]: (jobs[j][1], jobs[j][2])
                        for j in np.flatnonzero(active[r]).tolist()}
            rounds.record(float(seconds[r]), requests,
                          dict(zip(names, per_tenant[r].tolist(), strict=True)))
        return rounds, got.sum(axis=0), ran.sum(axis=0)


__all__ = ["TenantRounds"]

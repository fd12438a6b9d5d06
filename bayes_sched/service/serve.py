"""``bayes-sched serve``: the scheduling loop on a real cluster, its state kept in SQLite.

Each round: take up new submissions and cancel requests from the state file, let the interval
pass (reading the jobs' reports), run the policy's estimators and decision, carry it out
(:class:`~bayes_sched.backends.real_cluster.RealCluster`), and save every job's record with the
round's allocations and predictions in one transaction. Every start or stop of a job's processes
is saved at once too, so a service killed at any moment (SIGKILL included) restarts knowing every
job, reattaches to the processes still running and starts none twice.

Every transition of a job (submitted, started, resized, re-batched, checkpointed, restarted
and why, finished, failed with its log's last lines, cancelled) is an event
(:mod:`bayes_sched.service.events`): logged as one line and kept in the state's ``events``
table in the transaction that saves it. Every round's save also writes the service's heartbeat,
so ``status`` tells a live service from a stopped or stalled one; :meth:`Service.close` records
a clean stop and removes the service's lock file.

With tenants (``serve --tenants``, :mod:`bayes_sched.service.tenants`) the policy decides behind
the simulator's quota stage (:class:`ServeQuotas`), the tenants are recorded in the state, a job
of a tenant the service does not serve is cancelled as it is taken up (saying so), and a borrowed
GPU taken back for its owner is a ``reclaimed`` event naming the owner.

Every path handed to a job (its job directory, hence its reports, control file, logs and
checkpoints) is absolute: a job runs in its own directory (or the job file's ``cwd``), so a state
directory given relative to the scheduler's working folder would name nothing there.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from bayes_sched.backends.counters_feed import CountersFeed
from bayes_sched.backends.launcher import Launcher
from bayes_sched.backends.real_cluster import RealCluster, RealClusterConfig
from bayes_sched.cluster import Allocations, Cluster, ClusterState
from bayes_sched.estimates import Estimates
from bayes_sched.estimation import Estimator
from bayes_sched.estimation.choose import policy_estimators
from bayes_sched.jobs import JobView
from bayes_sched.loop import LoopStats, run_loop
from bayes_sched.policies.base import Policy
from bayes_sched.service.events import Event, EventTracker, plural
from bayes_sched.service.state import (
    SERVE_INTERVAL,
    SERVE_PID,
    SERVE_STARTED,
    SERVE_STOPPED,
    SERVE_TENANTS,
    StateStore,
)
from bayes_sched.service.tenants import reclaims, tenants_meta, unknown_tenant
from bayes_sched.tenancy.quotas import QuotaStage
from bayes_sched.tenants import TenantSpec

if TYPE_CHECKING:
    from bayes_sched.service.metrics import ServeMetrics

LOG = logging.getLogger(__name__)
#: Where events are logged (one line each; failures as warnings).
EVENTS_LOG = logging.getLogger("bayes_sched.service.events")
#: Event kinds logged as warnings.
WARNING_EVENTS = ("retrying", "failed", "stopped")
_DEFAULT_CONFIG = RealClusterConfig()


class ServeQuotas(QuotaStage):
    """The simulator's quota stage around serve's policy
    (:class:`~bayes_sched.tenancy.quotas.QuotaStage`, unchanged), telling ``on_reclaim`` after
    each decision which jobs it reclaims (:func:`~bayes_sched.service.tenants.reclaims`; an
    empty mapping where none)."""

    def __init__(self, policy: Policy,
                 on_reclaim: Callable[[Mapping[str, tuple[str, ...]]], None]) -> None:
        super().__init__(policy)
        self.on_reclaim = on_reclaim

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView],
               estimates: Estimates) -> Allocations:
        decision = super().decide(cluster, jobs, estimates)
        self.on_reclaim(reclaims(self.tenants(cluster), jobs, decision))
        return decision


class Service:
    """The scheduler service over one state directory.

    Args:
        store: the state file (its directory may be relative: it is made absolute here, once).
        launcher: where jobs run.
        policy: the scheduling policy.
        config: the cluster's timeouts and restart rules.
        counters: the nodes' collector stores, read into the cluster state every round.
        estimators: the estimation stage's estimators, chosen outside the policy
            (:func:`~bayes_sched.estimation.choose.policy_estimators`; default: the policy's
            defaults, no oracle: a real cluster has no truth to hand out).
        metrics: what a Prometheus endpoint serves (:mod:`bayes_sched.service.metrics`),
            updated at every save; ``None``: no endpoint.
        interval: the round interval ``run`` will be given (seconds), recorded for ``status``.
        tenants: the teams sharing the cluster, checked against the launcher's GPUs
            (:func:`~bayes_sched.service.tenants.read_tenants_file`); none: no quotas, the
            jobs' tenants are labels.
        keep_rounds: how many of the latest rounds' rows the state keeps (older ones are
            deleted as each round is saved); ``None``: all of them.
    """

    def __init__(self, store: StateStore, launcher: Launcher, policy: Policy,
                 config: RealClusterConfig = _DEFAULT_CONFIG,
                 counters: CountersFeed | None = None,
                 estimators: Sequence[Estimator] | None = None,
                 metrics: ServeMetrics | None = None, interval: float | None = None,
                 tenants: Sequence[TenantSpec] = (), keep_rounds: int | None = None) -> None:
        store.lock_for_service()
        self.store = store
        self.keep_rounds = keep_rounds
        # A real cluster supplies no oracle: a policy whose default is one is refused here.
        self.estimators = (policy_estimators(policy, where=f"policy {policy.name}")
                           if estimators is None else list(estimators))
        self.metrics = metrics
        self.tracker = EventTracker(store.records(), store.jobs_dir.resolve())
        self.policy: Policy = (ServeQuotas(policy, self.tracker.reclaimed) if tenants
                               else policy)
        self.cluster = RealCluster(launcher, store.jobs_dir.resolve(), config, epoch=store.epoch(),
                                   on_change=self.save, counters=counters, tenants=tenants)
        store.set_meta({SERVE_PID: str(os.getpid()), SERVE_STARTED: repr(time.time()),
                        SERVE_INTERVAL: None if interval is None else repr(interval),
                        SERVE_STOPPED: None,
                        SERVE_TENANTS: tenants_meta(self.cluster.spec) if tenants else None})
        self.cluster.on_change = None  # no saves while restoring
        self.reattached = self.cluster.restore(store.records())
        self.cluster.on_change = self.save
        last = store.last_round()
        self.round = 0 if last is None else int(last["round"])
        spec = self.cluster.spec
        served = (f", tenants {', '.join(t.name for t in spec.tenants)}" if spec.tenants
                  else "")
        started = [Event(time.time(), None, "serve-started", f"pid {os.getpid()}, policy "
                         f"{self.policy.name}, {plural(spec.total_gpus, 'GPU')} on "
                         f"{plural(spec.num_nodes, 'node')}{served}", {"pid": os.getpid()})]
        if self.reattached:
            started.append(Event(time.time(), None, "reattached",
                                 ", ".join(self.reattached), {"jobs": self.reattached}))
        self.take_up()
        self.save(events=started)

    def take_up(self) -> list[str]:
        """Submissions and cancel requests from the state file; returns the names cancelled.
        A job of a tenant the service does not serve is cancelled, saying why."""
        epoch = self.cluster.epoch
        table = self.cluster.spec.tenant_table() if self.cluster.tenants else None
        for spec, submitted in self.store.new_submissions():
            self.cluster.submit(spec, submit_time=submitted - epoch)
            if table is not None and spec.tenant not in table.names:
                refusal = unknown_tenant(spec.tenant, table)
                self.cluster.cancel(spec.name, reason=f"refused: {refusal}")
        cancelled = []
        for name in self.store.cancel_requests():
            self.cluster.cancel(name)
            cancelled.append(name)
        return cancelled

    def save(self, cancelled: list[str] | None = None,
             round_row: tuple[int, float, Any, Any, float | None] | None = None,
             events: list[Event] | None = None) -> None:
        """Save every job's record (and a round's row, and ``events`` of the service's own)
        with the events that the records' changes since the last save are, and log those."""
        records = self.cluster.snapshot()
        node_types = [node.gpu_type for node in self.cluster.spec.nodes]
        happened = [*(events or []),
                    *self.tracker.update(records, node_types, self.cluster.now)]
        self.store.save(records, cancelled or (), round_row, happened, self.keep_rounds)
        self._report(happened)  # once saved: every line logged is in the state too
        if self.metrics is not None:
            self.metrics.update(records, self.cluster.spec, happened, round_row is not None)

    def _report(self, events: list[Event]) -> None:
        for event in events:
            level = logging.WARNING if event.kind in WARNING_EVENTS else logging.INFO
            EVENTS_LOG.log(level, "%s", event.line())

    def on_round(self, stats: LoopStats) -> Callable[[Cluster], None]:
        def after_round(cluster: Cluster) -> None:
            self.round += 1
            allocations = {name: counts.tolist()
                           for name, counts in self.cluster.allocations().items()}
            seconds = stats.decision_seconds[-1] if stats.decision_seconds else None
            cancelled = self.take_up()
            predictions = self.cluster.predictions()
            if self.metrics is not None:
                self.metrics.round_done(stats, predictions)
            self.save(cancelled, (self.round, self.cluster.now, allocations, predictions,
                                  seconds))
        return after_round

    def run(self, interval: float, max_rounds: int | None = None) -> LoopStats:
        """Run rounds of ``interval`` seconds until the cluster is done (``exit_when_idle``) or
        ``max_rounds``; the state is saved on the way out, also on Ctrl-C (jobs keep running and
        are reattached by the next service)."""
        stats = LoopStats()
        start = time.monotonic()
        try:
            result = run_loop(self.cluster, self.policy, interval,
                              on_round=self.on_round(stats), max_rounds=max_rounds,
                              stats=stats, estimators=self.estimators)
        finally:
            self.save()
        LOG.info("served %d rounds in %.1f s", result.rounds, time.monotonic() - start)
        return result

    def close(self) -> None:
        """Record a clean stop (an event and the ``serve_stopped`` time ``status`` shows), and
        close the state, removing the service's lock file. Jobs still running keep running:
        the next service reattaches to them."""
        running = [name for name, record in self.cluster.records.items()
                   if record.status == "running"]
        stopped = Event(time.time(), None, "serve-stopped", f"pid {os.getpid()}, after round "
                        f"{self.round}" + (f"; still running: {', '.join(running)}"
                                           if running else ""),
                        {"pid": os.getpid(), "round": self.round, "running": running})
        self.store.add_events([stopped])
        self._report([stopped])
        self.store.set_meta({SERVE_STOPPED: repr(stopped.time)})
        self.store.close()

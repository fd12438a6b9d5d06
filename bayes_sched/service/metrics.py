"""What ``serve --prometheus PORT`` serves: the scheduler's state as Prometheus metrics.

:class:`ServeMetrics` is updated by the service at every save (the jobs' records and the events
they end) and after every round (the decision's and estimation's seconds, the predictions), and
read by Prometheus's client library when scraped (a custom collector: each scrape sees one
save's state whole). Metrics (all prefixed ``bayes_sched_serve_``):

================================== ========= =====================================================
name                               type      what
================================== ========= =====================================================
``rounds_total``                   counter   scheduling rounds of this state (all services)
``last_round_timestamp_seconds``   gauge     wall-clock time of the last round's save
``decision_seconds``               histogram the policy's decision per round (wall seconds)
``estimate_seconds``               histogram the estimation stage per round (wall seconds)
``jobs{state}``                    gauge     jobs per state (pending, running, backoff, done, ...)
``gpus{gpu_type}``                 gauge     GPUs of the cluster per type
``gpus_allocated{gpu_type}``       gauge     GPUs allocated to jobs per type
``job_gpus{job_name,gpu_type}``    gauge     GPUs allocated per job and type (jobs holding GPUs)
``job_goodput{job_name}``          gauge     predicted goodput, examples per second at the
                                             initial batch's statistical efficiency
``job_throughput{job_name}``       gauge     predicted throughput, examples per second
``job_epochs{job_name}``           gauge     epochs done (of the jobs not yet ended)
``restarts_total``                 counter   restarts of all jobs (reallocations and failures)
``failures_total``                 counter   failed starts of all jobs
``events_total{kind}``             counter   events reported since this service started
``tenant_gpus{tenant}``            gauge     GPUs held by a tenant's jobs
``tenant_quota_gpus{tenant}``      gauge     GPUs a tenant is entitled to (its quota, or its
                                             weight's part of the GPUs no quota reserves)
``tenant_borrowed_gpus{tenant}``   gauge     GPUs a tenant holds beyond its entitlement (lent
                                             by tenants that do not use theirs)
``tenant_jobs{tenant,state}``      gauge     a tenant's jobs per state
================================== ========= =====================================================

The tenants are those ``serve --tenants`` serves (without: one, ``default``, entitled to every
GPU), then any other tenant a job names (GPUs and jobs only: it has no entitlement).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from bayes_sched.errors import InputError
from bayes_sched.service.events import Event
from bayes_sched.service.tenants import tenant_usage
from bayes_sched.tenants import DEFAULT_TENANT

if TYPE_CHECKING:
    from bayes_sched.cluster_spec import ClusterSpec
    from bayes_sched.loop import LoopStats
    from bayes_sched.tenants import TenantTable

PREFIX = "bayes_sched_serve_"
#: Job states, as the records name them.
STATES = ("pending", "running", "backoff", "done", "failed", "cancelled")
#: Histogram buckets of the per-round seconds (a decision takes milliseconds to minutes).
SECONDS_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0)


class ServeMetrics:
    """The scheduler's metrics, as a Prometheus collector over the latest save.

    Args:
        rounds: rounds the state holds already (a restarted service counts on from there).
    """

    def __init__(self, rounds: int = 0) -> None:
        self.decision = Histogram(f"{PREFIX}decision_seconds", "The policy's decision per "
                                  "round (wall seconds).", buckets=SECONDS_BUCKETS,
                                  registry=None)
        self.estimate = Histogram(f"{PREFIX}estimate_seconds", "The estimation stage per "
                                  "round (wall seconds).", buckets=SECONDS_BUCKETS,
                                  registry=None)
        self._lock = threading.Lock()
        self._rounds = rounds
        self._last_round: float | None = None
        self._seen_decisions = self._seen_estimates = 0
        self._records: list[Mapping[str, Any]] = []
        self._node_types: list[str] = []
        self._node_gpus: list[int] = []
        self._tenants: TenantTable | None = None
        self._predictions: dict[str, Mapping[str, float]] = {}
        self._events: Counter[str] = Counter()

    def update(self, records: Sequence[Mapping[str, Any]], spec: ClusterSpec,
               events: Sequence[Event], round_saved: bool) -> None:
        """Take the jobs' records of a save, the cluster, and the events it reports."""
        with self._lock:
            self._records = list(records)
            self._node_types = [node.gpu_type for node in spec.nodes]
            self._node_gpus = [node.num_gpus for node in spec.nodes]
            self._tenants = spec.tenant_table()
            self._events.update(event.kind for event in events)
            if round_saved:
                self._last_round = time.time()

    def round_done(self, stats: LoopStats, predictions: Mapping[str, Mapping[str, float]]
                   ) -> None:
        """Count a round: its decision's and estimation's seconds (where the round decided),
        and the predictions of the running jobs."""
        for value in stats.decision_seconds[self._seen_decisions:]:
            self.decision.observe(value)
        for value in stats.estimate_seconds[self._seen_estimates:]:
            self.estimate.observe(value)
        self._seen_decisions = len(stats.decision_seconds)
        self._seen_estimates = len(stats.estimate_seconds)
        with self._lock:
            self._rounds += 1
            self._predictions = {name: dict(values) for name, values in predictions.items()}

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        """The metrics of the latest save (called by the client library at each scrape)."""
        with self._lock:
            records, types, sizes = list(self._records), self._node_types, self._node_gpus
            predictions, events = dict(self._predictions), Counter(self._events)
            rounds, last, tenants = self._rounds, self._last_round, self._tenants
        yield CounterMetricFamily(f"{PREFIX}rounds", "Scheduling rounds of this state.",
                                  value=rounds)
        yield from self.decision.collect()
        yield from self.estimate.collect()
        if last is not None:
            yield GaugeMetricFamily(f"{PREFIX}last_round_timestamp_seconds", "Wall-clock time "
                                    "of the last round's save (seconds since the epoch).",
                                    value=last)
        jobs = GaugeMetricFamily(f"{PREFIX}jobs", "Jobs per state.", labels=["state"])
        states = Counter(str(r["status"]) for r in records)
        for state in STATES:
            jobs.add_metric([state], states.get(state, 0))
        yield jobs
        yield from self._gpus(records, types, sizes)
        yield from _per_job(records, predictions)
        yield CounterMetricFamily(f"{PREFIX}restarts", "Restarts of all jobs (reallocations "
                                  "and failures).",
                                  value=sum(int(r.get("num_restarts", 0)) for r in records))
        yield CounterMetricFamily(f"{PREFIX}failures", "Failed starts of all jobs.",
                                  value=sum(int(r.get("failures", 0)) for r in records))
        counted = CounterMetricFamily(f"{PREFIX}events", "Events reported since this service "
                                      "started, per kind.", labels=["kind"])
        for kind, count in sorted(events.items()):
            counted.add_metric([kind], count)
        yield counted
        yield from _per_tenant(records, tenants)

    @staticmethod
    def _gpus(records: Sequence[Mapping[str, Any]], types: Sequence[str],
              sizes: Sequence[int]) -> Iterator[Metric]:
        capacity: Counter[str] = Counter()
        for gpu_type, count in zip(types, sizes, strict=True):
            capacity[gpu_type] += count
        allocated: Counter[str] = Counter({gpu_type: 0 for gpu_type in capacity})
        per_job = GaugeMetricFamily(f"{PREFIX}job_gpus", "GPUs allocated per job and GPU "
                                    "type.", labels=["job_name", "gpu_type"])
        for record in records:
            if record["status"] not in ("running", "pending", "backoff"):
                continue
            held: Counter[str] = Counter()
            for index, count in enumerate(record.get("allocation") or []):
                if count > 0 and index < len(types):
                    held[types[index]] += int(count)
            for gpu_type, count in sorted(held.items()):
                per_job.add_metric([record["spec"]["name"], gpu_type], count)
                allocated[gpu_type] += count
        total = GaugeMetricFamily(f"{PREFIX}gpus", "GPUs of the cluster per GPU type.",
                                  labels=["gpu_type"])
        used = GaugeMetricFamily(f"{PREFIX}gpus_allocated", "GPUs allocated to jobs per GPU "
                                 "type.", labels=["gpu_type"])
        for gpu_type in sorted(capacity):
            total.add_metric([gpu_type], capacity[gpu_type])
            used.add_metric([gpu_type], allocated[gpu_type])
        yield from (total, used, per_job)


def _per_job(records: Sequence[Mapping[str, Any]],
             predictions: Mapping[str, Mapping[str, float]]) -> Iterator[Metric]:
    goodput = GaugeMetricFamily(f"{PREFIX}job_goodput", "Predicted goodput of a running job "
                                "(examples per second at the initial batch's statistical "
                                "efficiency).", labels=["job_name"])
    throughput = GaugeMetricFamily(f"{PREFIX}job_throughput", "Predicted throughput of a "
                                   "running job (examples per second).", labels=["job_name"])
    epochs = GaugeMetricFamily(f"{PREFIX}job_epochs", "Epochs done by a job not yet ended.",
                               labels=["job_name"])
    for record in records:
        name = record["spec"]["name"]
        if record["status"] in ("pending", "running", "backoff"):
            epochs.add_metric([name], float(record.get("epochs", 0.0)))
        prediction = predictions.get(name)
        if prediction is not None and record["status"] == "running":
            goodput.add_metric([name], prediction["goodput"])
            throughput.add_metric([name], prediction["throughput"])
    yield from (goodput, throughput, epochs)


def _per_tenant(records: Sequence[Mapping[str, Any]], table: TenantTable | None
                ) -> Iterator[Metric]:
    held = GaugeMetricFamily(f"{PREFIX}tenant_gpus", "GPUs held by a tenant's jobs.",
                             labels=["tenant"])
    quota = GaugeMetricFamily(f"{PREFIX}tenant_quota_gpus", "GPUs a tenant is entitled to "
                              "(its quota, or its weight's part of the GPUs no quota reserves).",
                              labels=["tenant"])
    borrowed = GaugeMetricFamily(f"{PREFIX}tenant_borrowed_gpus", "GPUs a tenant holds beyond "
                                 "its entitlement.", labels=["tenant"])
    jobs = GaugeMetricFamily(f"{PREFIX}tenant_jobs", "A tenant's jobs per state.",
                             labels=["tenant", "state"])
    usage = tenant_usage(table, ((str(r["spec"].get("tenant", DEFAULT_TENANT)), str(r["status"]),
                                  int(sum(r.get("allocation") or []))) for r in records))
    for tenant in usage:
        held.add_metric([tenant.name], tenant.gpus)
        if tenant.quota is not None and tenant.borrowed is not None:
            quota.add_metric([tenant.name], tenant.quota)
            borrowed.add_metric([tenant.name], tenant.borrowed)
        for state in STATES:
            jobs.add_metric([tenant.name, state], tenant.jobs.get(state, 0))
    yield from (held, quota, borrowed, jobs)


def metrics_endpoint(metrics: ServeMetrics, port: int, address: str = "127.0.0.1") -> Any:
    """An HTTP server on ``address:port`` serving ``metrics`` at ``/metrics`` (a thread of
    Prometheus's client library; ``port`` 0 picks a free one, the result's ``port`` says which;
    ``close()`` stops it).

    Raises:
        InputError: the port is taken or cannot be listened on (naming ``--prometheus``).
    """
    from collectors.base import CollectorError
    from collectors.prometheus import PrometheusEndpoint

    try:
        return PrometheusEndpoint(metrics, port, address)
    except CollectorError as error:
        raise InputError(f"{error}: expected a free port", "--prometheus") from None

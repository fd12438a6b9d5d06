"""A Prometheus endpoint for the latest sample, with conventional names and labels.

Metric names come from the counter catalog (base units; ``_total`` on counters, e.g.
``gpu_energy_joules_total``, ``node_cpu_seconds_total{mode="user"}``). Every metric has the label
``node``; per-GPU metrics also ``gpu`` (index) and ``uuid``. NaN values (not read this time) are
left out rather than exported as numbers. The collector's own health is exported as
``bayes_sched_collector_*``.
"""

from __future__ import annotations

import errno
import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from collectors.base import CollectorError, Devices, Values
from counters.catalog import CATALOG

#: A callable giving the latest compute processes per GPU index: [(pid, used bytes)].
ProcessUsage = Callable[[], Mapping[int, Sequence[tuple[int, float]]]]


class LatestSampleCollector:
    """A prometheus_client custom collector that exposes the most recent sample."""

    def __init__(self, node: str, devices: Devices | None,
                 process_usage: ProcessUsage | None = None) -> None:
        self.node = node
        self.devices = devices
        self.process_usage = process_usage
        self._lock = threading.Lock()
        self._values: Values = {}
        self._health: dict[str, float] = {}

    def update(self, values: Values, health: Mapping[str, float]) -> None:
        with self._lock:
            self._values = dict(values)
            self._health = dict(health)

    def describe(self) -> list[Metric]:
        return []  # metrics depend on discovery; skip registration-time collection

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            values, health = self._values, self._health
        families: dict[str, Metric] = {}
        device_labels = self._device_labels()
        for name, value in values.items():
            counter = CATALOG.get(name)
            if counter is None or not counter.prometheus_name:
                continue
            extra = dict(counter.prometheus_labels)
            label_names = ["node", *extra] + (["gpu", "uuid"] if counter.per_device else [])
            family = families.get(counter.prometheus_name)
            if family is None:
                kind = CounterMetricFamily if counter.kind == "counter" else GaugeMetricFamily
                family = kind(counter.prometheus_name,
                              f"{counter.description} ({counter.units})", labels=label_names)
                families[counter.prometheus_name] = family
            if counter.per_device:
                for index, item in enumerate(np.asarray(value, dtype=float).ravel()):
                    if math.isfinite(item):
                        family.add_metric([self.node, *extra.values(), *device_labels[index]],
                                          float(item))
            elif math.isfinite(float(value)):  # type: ignore[arg-type]
                family.add_metric([self.node, *extra.values()], float(value))  # type: ignore[arg-type]
        yield from families.values()
        if self.process_usage is not None:
            processes = GaugeMetricFamily(
                "gpu_process_memory_used_bytes", "device memory used by one compute process",
                labels=["node", "gpu", "uuid", "pid"])
            for index, running in self.process_usage().items():
                gpu, uuid = device_labels[index] if index < len(device_labels) else (str(index), "")
                for pid, used in running:
                    processes.add_metric([self.node, gpu, uuid, str(pid)], used)
            yield processes
        for key, value in health.items():
            kind = CounterMetricFamily if key.endswith("_total") else GaugeMetricFamily
            metric = kind(f"bayes_sched_collector_{key}", f"collector {key.replace('_', ' ')}",
                          labels=["node"])
            metric.add_metric([self.node], value)
            yield metric

    def _device_labels(self) -> list[tuple[str, str]]:
        if self.devices is None:
            return []
        uuids = list(self.devices.uuids) + [""] * self.devices.count
        return [(str(i), uuids[i]) for i in range(self.devices.count)]


class PrometheusEndpoint:
    """An HTTP server on ``address:port`` serving a :class:`LatestSampleCollector`."""

    def __init__(self, collector: LatestSampleCollector, port: int,
                 address: str = "127.0.0.1") -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)  # type: ignore[arg-type]
        self.collector = collector
        try:
            server: Any = start_http_server(port, addr=address, registry=self.registry)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise CollectorError(f"Prometheus port {port} on {address} is already in use"
                                     ) from None
            raise CollectorError(f"cannot serve Prometheus metrics on {address}:{port} "
                                 f"({error.strerror or error})") from None
        self._server, self._thread = server if isinstance(server, tuple) else (server, None)
        self.port = int(self._server.server_address[1])
        self.address = address

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

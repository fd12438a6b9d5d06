"""A Prometheus endpoint for the latest sample, with our own prefix and the labels operators use.

Metric names come from the counter catalog: ``bayes_sched_`` then Prometheus naming in base
units (``_total`` on counters, ``_ratio`` for fractions 0..1), e.g.
``bayes_sched_gpu_energy_joules_total`` or ``bayes_sched_cpu_seconds_total{mode="user"}`` -- never a
node_exporter or dcgm-exporter name, since ours mean other things (host counters are summed over
all CPUs, interfaces and disks).

Labels: every metric has ``hostname`` (the collector's node name, ``--node``, default the host
name); per-GPU metrics add ``gpu`` (NVML index), ``uuid`` and ``model_name``; the per-process GPU
memory adds ``pid`` and, for a process in a container, ``pod_uid`` and ``container_id`` (from
``/proc/<pid>/cgroup``, see :mod:`collectors.cgroup`). NaN values (not read this time) are left
out rather than exported. The collector's own health is ``bayes_sched_collector_*``, among it
``bayes_sched_collector_source_up{source}`` (0 for a source whose latest read failed, so a node
whose NVML fails shows it rather than silently losing its GPU series), and
``bayes_sched_build_info{version,python}`` is always 1. Every exported name is in the catalog
(:func:`counters.catalog.prometheus_names`, ``bayes-sched counters catalog``).

The port is :data:`DEFAULT_PORT` (10451): not 9400 (dcgm-exporter) nor any port of Prometheus's
default-port allocation list, so the collector runs beside node_exporter and dcgm-exporter.
"""

from __future__ import annotations

import errno
import math
import platform
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from collectors import DEFAULT_PROMETHEUS_PORT
from collectors.base import CollectorError, Devices, Values
from collectors.cgroup import Workload, workload_of
from counters.catalog import (
    CATALOG,
    CLOCK_EVENT_REASON_BITS,
    GPU_LABELS,
    SERIES,
    Series,
)

#: The collector's Prometheus port, documented in the README and used by the deploy/ files.
DEFAULT_PORT = DEFAULT_PROMETHEUS_PORT

#: A callable giving the latest compute processes per GPU index: [(pid, used bytes)].
ProcessUsage = Callable[[], Mapping[int, Sequence[tuple[int, float]]]]

#: The collector's own health metrics, by name after ``bayes_sched_collector_`` (catalog
#: :data:`counters.catalog.SERIES`), which :meth:`LatestSampleCollector.update` takes.
HEALTH_METRICS: tuple[str, ...] = tuple(
    name.removeprefix("collector_") for name, series in SERIES.items()
    if series.source == "collector" and name.startswith("collector_") and not series.labels)


def build_version() -> str:
    """The installed bayes-sched distribution's version, ``"unknown"`` when it is not installed
    (a source checkout on ``PYTHONPATH``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bayes-sched")
    except PackageNotFoundError:
        return "unknown"


def _family(series: Series) -> CounterMetricFamily | GaugeMetricFamily:
    """An empty family for a catalog series, with its help text and labels."""
    kind = CounterMetricFamily if series.kind == "counter" else GaugeMetricFamily
    return kind(series.prometheus_name, series.description, labels=["hostname", *series.labels])


class LatestSampleCollector:
    """A prometheus_client custom collector that exposes the most recent sample."""

    def __init__(self, node: str, devices: Devices | None,
                 process_usage: ProcessUsage | None = None,
                 workload: Callable[[int], Workload] = workload_of) -> None:
        self.node = node
        self.devices = devices
        self.process_usage = process_usage
        self.workload = workload
        self._lock = threading.Lock()
        self._values: Values = {}
        self._health: dict[str, float] = {}
        self._up: dict[str, float] = {}
        self.version = build_version()

    def update(self, values: Values, health: Mapping[str, float],
               sources_up: Mapping[str, bool] | None = None) -> None:
        """Serve ``values`` (one sample), ``health`` (keys of :data:`HEALTH_METRICS`) and, per
        source name, whether its latest read worked (``bayes_sched_collector_source_up``)."""
        unknown = set(health) - set(HEALTH_METRICS)
        if unknown:
            raise ValueError(f"unknown collector health metric(s): {', '.join(sorted(unknown))}")
        with self._lock:
            self._values = dict(values)
            self._health = dict(health)
            if sources_up is not None:
                self._up = {name: 1.0 if up else 0.0 for name, up in sources_up.items()}

    def describe(self) -> list[Metric]:
        return []  # metrics depend on discovery; skip registration-time collection

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            values, health, up = self._values, self._health, self._up
        yield self._build_info()
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        device_labels = self._device_labels()
        for name, value in values.items():
            counter = CATALOG.get(name)
            if counter is None or not counter.prometheus_name:
                continue
            extra = dict(counter.prometheus_labels)
            label_names = ["hostname", *extra] + (list(GPU_LABELS) if counter.per_device else [])
            family = families.get(counter.prometheus_name)
            if family is None:
                kind = CounterMetricFamily if counter.kind == "counter" else GaugeMetricFamily
                family = kind(counter.prometheus_name, _help(counter.description, counter.units),
                              labels=label_names)
                families[counter.prometheus_name] = family
            if counter.per_device:
                for index, item in enumerate(np.asarray(value, dtype=float).ravel()):
                    if math.isfinite(item) and index < len(device_labels):
                        family.add_metric([self.node, *extra.values(), *device_labels[index]],
                                          float(item))
            elif math.isfinite(float(value)):
                family.add_metric([self.node, *extra.values()], float(value))
        yield from families.values()
        if device_labels:
            yield self._gpu_info(device_labels)
        reasons = values.get("gpu_clock_event_reasons")
        if reasons is not None:
            yield self._clock_events(np.asarray(reasons, dtype=float).ravel(), device_labels)
        if self.process_usage is not None:
            yield self._processes(device_labels)
        for key, value in health.items():
            metric = _family(SERIES[f"collector_{key}"])
            metric.add_metric([self.node], value)
            yield metric
        if up:
            source_up = _family(SERIES["collector_source_up"])
            for name, value in sorted(up.items()):
                source_up.add_metric([self.node, name], value)
            yield source_up

    def _build_info(self) -> Metric:
        info = _family(SERIES["build_info"])
        info.add_metric([self.node, self.version, platform.python_version()], 1.0)
        return info

    def _gpu_info(self, device_labels: list[tuple[str, str, str]]) -> Metric:
        info = _family(SERIES["gpu_info"])
        bus_ids = list(self.devices.pci_bus_ids) if self.devices is not None else []
        for index, labels in enumerate(device_labels):
            info.add_metric([self.node, *labels, bus_ids[index] if index < len(bus_ids) else ""],
                            1.0)
        return info

    def _processes(self, device_labels: list[tuple[str, str, str]]) -> Metric:
        """Device memory per compute process, labelled with its pod and container."""
        assert self.process_usage is not None
        processes = _family(SERIES["gpu_process_memory_used_bytes"])
        for index, running in self.process_usage().items():
            gpu = (device_labels[index] if index < len(device_labels)
                   else (str(index), "", ""))
            for pid, used in running:
                where = self.workload(pid)
                processes.add_metric([self.node, *gpu, str(pid), where.pod_uid,
                                      where.container_id], used)
        return processes

    def _clock_events(self, masks: np.ndarray,
                      device_labels: list[tuple[str, str, str]]) -> Metric:
        """One 0/1 series per GPU and clock-event reason, decoded from the NVML bitmask."""
        active = _family(SERIES["gpu_clock_event_reason_active"])
        for index, mask in enumerate(masks):
            if not math.isfinite(mask) or index >= len(device_labels):
                continue
            for bit, reason in CLOCK_EVENT_REASON_BITS.items():
                active.add_metric([self.node, *device_labels[index], reason],
                                  1.0 if int(mask) & bit else 0.0)
        return active

    def _device_labels(self) -> list[tuple[str, str, str]]:
        """``(gpu, uuid, model_name)`` per device index; empty strings where not known."""
        if self.devices is None:
            return []
        count = self.devices.count
        uuids = list(self.devices.uuids) + [""] * count
        names = list(self.devices.names) + [""] * count
        return [(str(i), uuids[i], names[i]) for i in range(count)]


def _help(description: str, units: str) -> str:
    """A help text: the catalog's description, capitalised, with the stored units."""
    text = description[:1].upper() + description[1:]
    return f"{text} ({units})." if units and units != "1" else f"{text}."


class PrometheusEndpoint:
    """An HTTP server on ``address:port`` serving a Prometheus collector (a
    :class:`LatestSampleCollector`, or the scheduler's metrics)."""

    def __init__(self, collector: Collector, port: int, address: str = "127.0.0.1") -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
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

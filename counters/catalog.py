"""The counter catalog: every counter bayes-sched knows, with units, kind, source and resource.

Each :class:`Counter` names one data variable of a counters dataset (see
:mod:`counters.schema`). The catalog is the single place that says what a variable means:

* ``units``: a CF/UDUNITS units string of the *stored* values, always base units (bytes, seconds,
  watts, joules, hertz, ratios in ``"1"`` as fractions 0..1, not percent);
* ``kind``: ``"gauge"`` (a level, read as is) or ``"counter"`` (monotonically increasing, turn it
  into a rate with :func:`counters.rates.counter_rate`; it may wrap at ``2**wrap_bits`` or reset);
* ``source``: which collector produces it (``nvml``, ``nvml_gpm``, ``pcie_sysfs``, ``perf``,
  ``procfs``);
* ``resource``: the shared resource it reflects, which the contention model groups by;
* ``window_s``: the averaging window of a gauge in seconds where the source defines one (NVML
  utilisation averages over up to 1 s), ``None`` for instantaneous values and counters;
* ``per_device``: whether the variable has the ``device`` dimension (one value per GPU) or only
  ``node``;
* ``prometheus_name`` / ``prometheus_labels``: the exported name and constant labels, e.g.
  ``bayes_sched_cpu_seconds_total{mode="user"}``: Prometheus naming (base units, ``_total`` on
  counters, ``_ratio`` for fractions 0..1) under our own prefix :data:`PROMETHEUS_PREFIX`. Names
  never reuse node_exporter's or dcgm-exporter's: ours mean other things (CPU time summed over all
  CPUs, bytes over all interfaces), and a shared name would double-count in their dashboards.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, get_args

from counters.errors import CountersError

Kind = Literal["gauge", "counter"]
SourceName = Literal["nvml", "nvml_gpm", "pcie_sysfs", "perf", "procfs"]
Resource = Literal[
    "gpu_sm",
    "gpu_memory_bandwidth",
    "gpu_memory_capacity",
    "gpu_power",
    "pcie_link",
    "nvlink",
    "host_memory_bandwidth",
    "host_memory_capacity",
    "cpu",
    "network",
    "disk",
]

#: Prefix of every exported Prometheus metric.
PROMETHEUS_PREFIX = "bayes_sched_"

#: Every resource a counter may reflect, in the order tables list them.
RESOURCES: tuple[Resource, ...] = get_args(Resource)
SOURCES: tuple[SourceName, ...] = get_args(SourceName)


@dataclass(frozen=True)
class Counter:
    """One counter: a data variable of a counters dataset and a Prometheus metric."""

    name: str
    units: str
    kind: Kind
    source: SourceName
    resource: Resource
    description: str
    per_device: bool = False
    window_s: float | None = None
    wrap_bits: int | None = None
    prometheus_name: str = ""
    prometheus_labels: tuple[tuple[str, str], ...] = field(default=())

    def attrs(self) -> dict[str, str | float | int]:
        """The variable attributes the schema requires for this counter (CF-style ``units``...)."""
        attrs: dict[str, str | float | int] = {
            "units": self.units,
            "long_name": self.description,
            "kind": self.kind,
            "source": self.source,
            "resource": self.resource,
        }
        if self.window_s is not None:
            attrs["window_s"] = self.window_s
        if self.wrap_bits is not None:
            attrs["wrap_bits"] = self.wrap_bits
        return attrs


def _gpu(name: str, units: str, kind: Kind, resource: Resource, description: str,
         prometheus_name: str, source: SourceName = "nvml", window_s: float | None = None,
         wrap_bits: int | None = None) -> Counter:
    return Counter(name, units, kind, source, resource, description, per_device=True,
                   window_s=window_s, wrap_bits=wrap_bits,
                   prometheus_name=PROMETHEUS_PREFIX + prometheus_name)


_NVML: tuple[Counter, ...] = (
    _gpu("gpu_utilization", "1", "gauge", "gpu_sm",
         "fraction of the sample window in which a kernel was running", "gpu_utilization_ratio",
         window_s=1.0),
    _gpu("gpu_memory_utilization", "1", "gauge", "gpu_memory_bandwidth",
         "fraction of the sample window in which device memory was read or written",
         "gpu_memory_utilization_ratio", window_s=1.0),
    _gpu("gpu_memory_used", "byte", "gauge", "gpu_memory_capacity", "device memory in use",
         "gpu_memory_used_bytes"),
    _gpu("gpu_memory_total", "byte", "gauge", "gpu_memory_capacity", "device memory installed",
         "gpu_memory_total_bytes"),
    _gpu("gpu_sm_clock", "Hz", "gauge", "gpu_sm", "SM clock frequency", "gpu_sm_clock_hertz"),
    _gpu("gpu_memory_clock", "Hz", "gauge", "gpu_memory_bandwidth", "memory clock frequency",
         "gpu_memory_clock_hertz"),
    _gpu("gpu_power", "W", "gauge", "gpu_power", "board power draw", "gpu_power_watts",
         window_s=1.0),
    _gpu("gpu_energy", "J", "counter", "gpu_power", "energy used since the driver was loaded",
         "gpu_energy_joules_total", wrap_bits=64),
    _gpu("gpu_temperature", "degC", "gauge", "gpu_power", "GPU core temperature",
         "gpu_temperature_celsius"),
    _gpu("gpu_clock_event_reasons", "1", "gauge", "gpu_sm",
         "bitmask of active clock-event (throttle) reasons, NVML nvmlClocksEventReason* bits",
         "gpu_clock_event_reasons"),
    _gpu("gpu_pcie_tx", "byte", "counter", "pcie_link", "bytes sent by the GPU over PCIe",
         "gpu_pcie_transmit_bytes_total", wrap_bits=64),
    _gpu("gpu_pcie_rx", "byte", "counter", "pcie_link", "bytes received by the GPU over PCIe",
         "gpu_pcie_receive_bytes_total", wrap_bits=64),
    _gpu("gpu_pcie_replays", "1", "counter", "pcie_link", "PCIe link replays",
         "gpu_pcie_replays_total", wrap_bits=64),
    _gpu("gpu_pcie_replay_rollovers", "1", "counter", "pcie_link",
         "PCIe replay-number rollovers", "gpu_pcie_replay_rollovers_total", wrap_bits=64),
    _gpu("gpu_pcie_correctable_errors", "1", "counter", "pcie_link",
         "PCIe correctable errors seen by the GPU", "gpu_pcie_correctable_errors_total",
         wrap_bits=64),
    _gpu("gpu_pcie_nonfatal_errors", "1", "counter", "pcie_link",
         "PCIe non-fatal uncorrectable errors", "gpu_pcie_nonfatal_errors_total", wrap_bits=64),
    _gpu("gpu_pcie_fatal_errors", "1", "counter", "pcie_link",
         "PCIe fatal uncorrectable errors", "gpu_pcie_fatal_errors_total", wrap_bits=64),
    _gpu("gpu_nvlink_tx", "byte", "counter", "nvlink", "NVLink data sent, all links",
         "gpu_nvlink_transmit_bytes_total", wrap_bits=64),
    _gpu("gpu_nvlink_rx", "byte", "counter", "nvlink", "NVLink data received, all links",
         "gpu_nvlink_receive_bytes_total", wrap_bits=64),
    _gpu("gpu_compute_processes", "1", "gauge", "gpu_sm", "compute processes on the GPU",
         "gpu_compute_processes"),
    # Stored only: Prometheus gets it per process (SERIES["gpu_process_memory_used_bytes"],
    # which ``sum by (gpu)`` totals), so one name never carries two label sets.
    Counter("gpu_process_memory_used", "byte", "gauge", "nvml", "gpu_memory_capacity",
            "device memory used by compute processes, summed", per_device=True),
)

_GPM: tuple[Counter, ...] = (
    _gpu("gpu_gpm_sm_utilization", "1", "gauge", "gpu_sm",
         "fraction of SMs busy over the interval (GPM, Hopper and later)",
         "gpu_gpm_sm_utilization_ratio", source="nvml_gpm"),
    _gpu("gpu_gpm_sm_occupancy", "1", "gauge", "gpu_sm",
         "active warps over the theoretical maximum (GPM)", "gpu_gpm_sm_occupancy_ratio",
         source="nvml_gpm"),
    _gpu("gpu_gpm_dram_bandwidth_utilization", "1", "gauge", "gpu_memory_bandwidth",
         "DRAM bandwidth used over the maximum (GPM)", "gpu_gpm_dram_bandwidth_utilization_ratio",
         source="nvml_gpm"),
    _gpu("gpu_gpm_pcie_tx_rate", "byte s-1", "gauge", "pcie_link",
         "PCIe traffic from the GPU (GPM)",
         "gpu_gpm_pcie_transmit_bytes_per_second", source="nvml_gpm"),
    _gpu("gpu_gpm_pcie_rx_rate", "byte s-1", "gauge", "pcie_link",
         "PCIe traffic to the GPU (GPM)",
         "gpu_gpm_pcie_receive_bytes_per_second", source="nvml_gpm"),
    _gpu("gpu_gpm_nvlink_tx_rate", "byte s-1", "gauge", "nvlink",
         "NVLink traffic out, all links (GPM)",
         "gpu_gpm_nvlink_transmit_bytes_per_second", source="nvml_gpm"),
    _gpu("gpu_gpm_nvlink_rx_rate", "byte s-1", "gauge", "nvlink",
         "NVLink traffic in, all links (GPM)",
         "gpu_gpm_nvlink_receive_bytes_per_second", source="nvml_gpm"),
)

_PCIE: tuple[Counter, ...] = (
    _gpu("pcie_link_speed", "s-1", "gauge", "pcie_link",
         "current PCIe link speed, transfers per lane",
         "pcie_link_speed_transfers_per_second", source="pcie_sysfs"),
    _gpu("pcie_link_max_speed", "s-1", "gauge", "pcie_link", "maximum PCIe link speed",
         "pcie_link_max_speed_transfers_per_second", source="pcie_sysfs"),
    _gpu("pcie_link_width", "1", "gauge", "pcie_link", "current PCIe link width in lanes",
         "pcie_link_width_lanes", source="pcie_sysfs"),
    _gpu("pcie_link_max_width", "1", "gauge", "pcie_link", "maximum PCIe link width in lanes",
         "pcie_link_max_width_lanes", source="pcie_sysfs"),
    _gpu("pcie_aer_correctable_errors", "1", "counter", "pcie_link",
         "AER correctable errors (TOTAL_ERR_COR)", "pcie_aer_correctable_errors_total",
         source="pcie_sysfs", wrap_bits=64),
    _gpu("pcie_aer_nonfatal_errors", "1", "counter", "pcie_link",
         "AER non-fatal errors (TOTAL_ERR_NONFATAL)", "pcie_aer_nonfatal_errors_total",
         source="pcie_sysfs", wrap_bits=64),
    _gpu("pcie_aer_fatal_errors", "1", "counter", "pcie_link",
         "AER fatal errors (TOTAL_ERR_FATAL)", "pcie_aer_fatal_errors_total",
         source="pcie_sysfs", wrap_bits=64),
)

#: perf events: (counter name, perf event name, units, resource, description).
PERF_EVENTS: tuple[tuple[str, str, str, Resource, str], ...] = (
    ("perf_task_clock", "task-clock", "s", "cpu", "CPU time counted by perf (software)"),
    ("perf_context_switches", "context-switches", "1", "cpu", "context switches (software)"),
    ("perf_cpu_migrations", "cpu-migrations", "1", "cpu", "CPU migrations (software)"),
    ("perf_page_faults", "page-faults", "1", "host_memory_capacity", "page faults (software)"),
    ("perf_cycles", "cycles", "1", "cpu", "CPU cycles (hardware)"),
    ("perf_instructions", "instructions", "1", "cpu", "instructions retired (hardware)"),
    ("perf_cache_misses", "cache-misses", "1", "host_memory_bandwidth",
     "last-level cache misses (hardware)"),
    ("perf_dram_read", "uncore_imc/cas_count_read/", "byte", "host_memory_bandwidth",
     "DRAM bytes read, summed over memory controllers (uncore)"),
    ("perf_dram_write", "uncore_imc/cas_count_write/", "byte", "host_memory_bandwidth",
     "DRAM bytes written, summed over memory controllers (uncore)"),
)


def _perf_counters() -> tuple[Counter, ...]:
    out: list[Counter] = []
    for name, event, units, resource, description in PERF_EVENTS:
        base = name.removeprefix("perf_")
        suffix = {"s": "_seconds_total", "byte": "_bytes_total"}.get(units, "_total")
        out.append(Counter(name, units, "counter", "perf", resource, f"{description}: {event}",
                           wrap_bits=64, prometheus_name=f"{PROMETHEUS_PREFIX}perf_{base}{suffix}"))
        # Kept as data: the contention model reads multiplexing as a measure of noise.
        out.append(Counter(f"{name}_running_fraction", "1", "gauge", "perf", resource,
                           f"time running over time enabled for {event} in the interval "
                           "(perf multiplexing; 1 means counted all the time)",
                           prometheus_name=f"{PROMETHEUS_PREFIX}perf_{base}_running_ratio"))
    return tuple(out)


def _node(name: str, units: str, kind: Kind, resource: Resource, description: str,
          prometheus_name: str, labels: tuple[tuple[str, str], ...] = (),
          window_s: float | None = None) -> Counter:
    return Counter(name, units, kind, "procfs", resource, description, window_s=window_s,
                   wrap_bits=64 if kind == "counter" else None,
                   prometheus_name=PROMETHEUS_PREFIX + prometheus_name, prometheus_labels=labels)


#: The CPU modes of /proc/stat, in the kernel's column order.
CPU_MODES: tuple[str, ...] = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")

_PROCFS: tuple[Counter, ...] = (
    *(
        _node(f"cpu_{mode}", "s", "counter", "cpu", f"CPU time in {mode} mode, all CPUs",
              "cpu_seconds_total", (("mode", mode),))
        for mode in CPU_MODES
    ),
    _node("memory_total", "byte", "gauge", "host_memory_capacity", "MemTotal",
          "memory_total_bytes"),
    _node("memory_available", "byte", "gauge", "host_memory_capacity", "MemAvailable",
          "memory_available_bytes"),
    _node("memory_cached", "byte", "gauge", "host_memory_capacity", "Cached (page cache)",
          "memory_cached_bytes"),
    _node("memory_dirty", "byte", "gauge", "disk", "Dirty (waiting for write-back)",
          "memory_dirty_bytes"),
    _node("pressure_cpu_some", "s", "counter", "cpu",
          "time some tasks stalled waiting for CPU (/proc/pressure/cpu total)",
          "pressure_cpu_waiting_seconds_total"),
    _node("pressure_memory_some", "s", "counter", "host_memory_capacity",
          "time some tasks stalled on memory", "pressure_memory_waiting_seconds_total"),
    _node("pressure_memory_full", "s", "counter", "host_memory_capacity",
          "time all non-idle tasks stalled on memory",
          "pressure_memory_stalled_seconds_total"),
    _node("pressure_io_some", "s", "counter", "disk", "time some tasks stalled on I/O",
          "pressure_io_waiting_seconds_total"),
    _node("pressure_io_full", "s", "counter", "disk", "time all non-idle tasks stalled on I/O",
          "pressure_io_stalled_seconds_total"),
    _node("network_rx", "byte", "counter", "network",
          "bytes received, all interfaces but loopback", "network_receive_bytes_total"),
    _node("network_tx", "byte", "counter", "network",
          "bytes sent, all interfaces but loopback", "network_transmit_bytes_total"),
    _node("disk_read", "byte", "counter", "disk", "bytes read, all whole disks",
          "disk_read_bytes_total"),
    _node("disk_written", "byte", "counter", "disk", "bytes written, all whole disks",
          "disk_written_bytes_total"),
)

#: Bits of ``gpu_clock_event_reasons`` (nvml.h ``nvmlClocksEventReason*``), bit -> reason.
CLOCK_EVENT_REASON_BITS: Mapping[int, str] = MappingProxyType({
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
})

#: Every counter the toolkit knows, by name.
CATALOG: Mapping[str, Counter] = MappingProxyType(
    {c.name: c for c in (*_NVML, *_GPM, *_PCIE, *_perf_counters(), *_PROCFS)}
)


#: Labels of every per-GPU series, after ``hostname``.
GPU_LABELS: tuple[str, ...] = ("gpu", "uuid", "model_name")

SeriesSource = Literal["nvml", "collector"]


@dataclass(frozen=True)
class Series:
    """A Prometheus series the collector exports that is not a stored counter.

    ``labels`` are the label names beyond ``hostname`` (every series has it), in export order;
    ``source`` is the collector source that feeds it, or ``"collector"`` for the collector's own
    health and build information.
    """

    name: str
    kind: Kind
    source: SeriesSource
    description: str
    labels: tuple[str, ...] = ()
    units: str = "1"
    resource: Resource | None = None

    @property
    def per_device(self) -> bool:
        return self.labels[:len(GPU_LABELS)] == GPU_LABELS

    @property
    def prometheus_name(self) -> str:
        return PROMETHEUS_PREFIX + self.name


#: Every exported series that is not a counter of :data:`CATALOG`, by name (after the prefix).
SERIES: Mapping[str, Series] = MappingProxyType({s.name: s for s in (
    Series("gpu_info", "gauge", "nvml",
           "1 for each GPU the collector reads; its labels name the GPU (join on gpu or uuid).",
           (*GPU_LABELS, "pci_bus_id")),
    Series("gpu_clock_event_reason_active", "gauge", "nvml",
           "1 while NVML reports this clock-event (throttle) reason for the GPU, else 0.",
           (*GPU_LABELS, "reason"), resource="gpu_sm"),
    Series("gpu_process_memory_used_bytes", "gauge", "nvml",
           "Device memory used by one compute process on the GPU (bytes); pod_uid and "
           "container_id name its Kubernetes pod and container, empty outside one.",
           (*GPU_LABELS, "pid", "pod_uid", "container_id"), "byte", "gpu_memory_capacity"),
    Series("collector_samples_total", "counter", "collector",
           "Samples taken since the collector started."),
    Series("collector_skipped_samples_total", "counter", "collector",
           "Sampling instants missed because a sample overran the interval."),
    Series("collector_dropped_samples_total", "counter", "collector",
           "Samples dropped unwritten because the store could not keep up (memory bound)."),
    Series("collector_out_of_order_samples_total", "counter", "collector",
           "Samples not stored because the wall clock had stepped back (stamped at or before "
           "the last stored sample); still exported."),
    Series("collector_sample_duration_seconds", "gauge", "collector",
           "Time the latest sample took to read every source.", units="s"),
    Series("collector_resident_memory_bytes", "gauge", "collector",
           "Resident set size of the collector process.", units="byte"),
    Series("collector_source_up", "gauge", "collector",
           "1 when the source's latest read gave at least one value; 0 when it raised, gave "
           "none, or discovery found nothing it can read (no driver, not permitted).",
           ("source",)),
    Series("build_info", "gauge", "collector",
           "1, labelled with the running collector's bayes-sched version and Python version.",
           ("version", "python")),
)})


def prometheus_names() -> frozenset[str]:
    """Every metric name the collector may export: the counters' and :data:`SERIES`."""
    return frozenset({c.prometheus_name for c in CATALOG.values() if c.prometheus_name}
                     | {s.prometheus_name for s in SERIES.values()})


def get(name: str) -> Counter:
    """The catalog entry for ``name``; :class:`CountersError` naming it when unknown."""
    try:
        return CATALOG[name]
    except KeyError:
        raise CountersError(f"unknown counter '{name}': not in the counters catalog") from None


def select(source: SourceName | None = None, resource: Resource | None = None,
           names: Iterable[str] | None = None) -> tuple[Counter, ...]:
    """Catalog entries filtered by source, resource and/or an explicit list of names."""
    chosen = CATALOG.values() if names is None else [get(n) for n in names]
    return tuple(c for c in chosen
                 if (source is None or c.source == source)
                 and (resource is None or c.resource == resource))

"""NVML source through nvidia-ml-py (``pynvml``): utilisation, memory, clocks, power and energy,
temperature, clock-event reasons, PCIe and NVLink byte counters and PCIe errors (field values API),
GPM metrics on Hopper and later, and compute processes.

Discovery initialises NVML and tries every query once on every GPU. A counter is read when at
least one GPU answers; on GPUs that answered NotSupported or NoPermission it stays NaN and the
discovery notes say so. A GPU that reports GpuIsLost (fell off the bus, Xid 79) is marked lost:
its values are NaN from then on, and NVML is not asked about it again.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collectors.base import Devices, Discovery, Values

try:  # nvidia-ml-py is a dependency, but a broken install must not stop the other sources.
    import pynvml
except ImportError:  # pragma: no cover - exercised only without nvidia-ml-py
    pynvml = None

UINT_MAX = 0xFFFFFFFF
MIB = 1048576.0

#: NVML field id, scope id, counter name, scale to catalog units.
FIELDS: tuple[tuple[str, int, str, float], ...] = (
    ("NVML_FI_DEV_PCIE_COUNT_TX_BYTES", 0, "gpu_pcie_tx", 1.0),
    ("NVML_FI_DEV_PCIE_COUNT_RX_BYTES", 0, "gpu_pcie_rx", 1.0),
    ("NVML_FI_DEV_PCIE_REPLAY_COUNTER", 0, "gpu_pcie_replays", 1.0),
    ("NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER", 0, "gpu_pcie_replay_rollovers", 1.0),
    ("NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS", 0, "gpu_pcie_correctable_errors", 1.0),
    ("NVML_FI_DEV_PCIE_COUNT_NON_FATAL_ERROR", 0, "gpu_pcie_nonfatal_errors", 1.0),
    ("NVML_FI_DEV_PCIE_COUNT_FATAL_ERROR", 0, "gpu_pcie_fatal_errors", 1.0),
    # NVLink data counters are in KiB; scope UINT_MAX sums all links.
    ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", UINT_MAX, "gpu_nvlink_tx", 1024.0),
    ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", UINT_MAX, "gpu_nvlink_rx", 1024.0),
)

#: GPM metric id name, counter name, scale (percent -> fraction, MiB/s -> byte/s).
GPM_METRICS: tuple[tuple[str, str, float], ...] = (
    ("NVML_GPM_METRIC_SM_UTIL", "gpu_gpm_sm_utilization", 0.01),
    ("NVML_GPM_METRIC_SM_OCCUPANCY", "gpu_gpm_sm_occupancy", 0.01),
    ("NVML_GPM_METRIC_DRAM_BW_UTIL", "gpu_gpm_dram_bandwidth_utilization", 0.01),
    ("NVML_GPM_METRIC_PCIE_TX_PER_SEC", "gpu_gpm_pcie_tx_rate", MIB),
    ("NVML_GPM_METRIC_PCIE_RX_PER_SEC", "gpu_gpm_pcie_rx_rate", MIB),
    ("NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", "gpu_gpm_nvlink_tx_rate", MIB),
    ("NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", "gpu_gpm_nvlink_rx_rate", MIB),
)


def _utilization(handle: Any) -> dict[str, float]:
    rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
    return {"gpu_utilization": rates.gpu / 100.0, "gpu_memory_utilization": rates.memory / 100.0}


def _memory(handle: Any) -> dict[str, float]:
    info = pynvml.nvmlDeviceGetMemoryInfo(handle)
    return {"gpu_memory_used": float(info.used), "gpu_memory_total": float(info.total)}


def _clocks(handle: Any) -> dict[str, float]:
    return {"gpu_sm_clock": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM) * 1e6,
            "gpu_memory_clock": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM) * 1e6}


def _power(handle: Any) -> dict[str, float]:
    return {"gpu_power": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0}


def _energy(handle: Any) -> dict[str, float]:
    return {"gpu_energy": pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0}


def _temperature(handle: Any) -> dict[str, float]:
    return {"gpu_temperature": float(
        pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))}


def _clock_events(handle: Any) -> dict[str, float]:
    return {"gpu_clock_event_reasons": float(
        pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle))}


def _field_value(value: Any) -> float:
    kind = value.valueType
    union = value.value
    if kind == pynvml.NVML_VALUE_TYPE_DOUBLE:
        return float(union.dVal)
    if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT:
        return float(union.uiVal)
    if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG:
        return float(union.ulVal)
    if kind == pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return float(union.sllVal)
    return float(union.ullVal)


#: query group -> (function, the counters it gives).
QUERIES: dict[str, tuple[Callable[[Any], dict[str, float]], tuple[str, ...]]] = {
    "utilization": (_utilization, ("gpu_utilization", "gpu_memory_utilization")),
    "memory": (_memory, ("gpu_memory_used", "gpu_memory_total")),
    "clocks": (_clocks, ("gpu_sm_clock", "gpu_memory_clock")),
    "power": (_power, ("gpu_power",)),
    "energy": (_energy, ("gpu_energy",)),
    "temperature": (_temperature, ("gpu_temperature",)),
    "clock_events": (_clock_events, ("gpu_clock_event_reasons",)),
}


def describe_error(error: Exception) -> str:
    """Why an NVML call failed, in words an operator can act on."""
    if pynvml is None:
        return "nvidia-ml-py is not installed"
    code = getattr(error, "value", None)
    return {
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
            "no NVIDIA driver: libnvidia-ml.so.1 not found",
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "the NVIDIA kernel driver is not loaded",
        pynvml.NVML_ERROR_NO_PERMISSION:
            "not permitted (NVML NoPermission: run as root or adjust /dev/nvidia* access)",
        pynvml.NVML_ERROR_NOT_SUPPORTED: "not supported on this GPU",
        pynvml.NVML_ERROR_GPU_IS_LOST: "the GPU is lost (fell off the bus)",
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
            "the installed driver's NVML lacks this function (driver too old)",
    }.get(code, f"NVML error: {error}")


@dataclass
class _Gpu:
    index: int
    handle: Any
    name: str
    lost: bool = False
    queries: list[str] = field(default_factory=list)  # query groups that answered, in order
    fields: list[int] = field(default_factory=list)  # positions in FIELDS that answered
    gpm: tuple[Any, Any] | None = None  # two GPM sample buffers
    processes: list[tuple[int, float]] = field(default_factory=list)


class NvmlSource:
    """Per-GPU counters from NVML; ``library`` preloads a specific libnvidia-ml.so for pynvml."""

    name = "nvml"

    def __init__(self, gpm: bool = True, processes: bool = True,
                 library: str | None = None) -> None:
        self.gpm = gpm
        self.processes = processes
        self.library = library
        self.gpus: list[_Gpu] = []
        self.counters: list[str] = []
        self.lost_notes: list[str] = []
        self.pci_bus_ids: list[str] = []
        self._initialised = False
        self._field_ids: list[tuple[int, int]] = []

    def _init(self) -> None:
        if pynvml is None:
            raise RuntimeError("nvidia-ml-py is not installed")
        if self.library is not None and pynvml.nvmlLib is None:
            try:  # pynvml dlopens "libnvidia-ml.so.1" by name; this points it at a given file.
                pynvml.nvmlLib = ctypes.CDLL(self.library)
            except OSError:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND) from None
        pynvml.nvmlInit()
        self._initialised = True

    def discover(self) -> Discovery:
        found = Discovery(self.name)
        every = [name for _, names in QUERIES.values() for name in names]
        every += [name for *_, name, _ in FIELDS] + ["gpu_compute_processes",
                                                      "gpu_process_memory_used"]
        every += [name for _, name, _ in GPM_METRICS]
        try:
            self._init()
            count = pynvml.nvmlDeviceGetCount()
        except Exception as error:  # NVMLError or RuntimeError without pynvml
            reason = describe_error(error)
            found.unavailable.update({name: reason for name in every})
            return found
        found.notes.append(f"driver {_text(pynvml.nvmlSystemGetDriverVersion())}, {count} GPU(s)")
        devices = Devices(count=count)
        for index in range(count):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpu = _Gpu(index, handle, _safe_text(pynvml.nvmlDeviceGetName, handle))
            devices.names.append(gpu.name)
            devices.uuids.append(_safe_text(pynvml.nvmlDeviceGetUUID, handle))
            try:
                devices.pci_bus_ids.append(_text(pynvml.nvmlDeviceGetPciInfo(handle).busId))
            except pynvml.NVMLError:
                devices.pci_bus_ids.append("")
            self.gpus.append(gpu)
        self._field_ids = [(getattr(pynvml, fid), scope) for fid, scope, _, _ in FIELDS]
        reasons: dict[str, dict[int, str]] = {name: {} for name in every}
        for gpu in self.gpus:
            self._probe(gpu, reasons)
        for name in every:
            answered = [g.index for g in self.gpus if name in self._gpu_counters(g)]
            if answered:
                self.counters.append(name)
                for index, why in sorted(reasons[name].items()):
                    found.notes.append(f"{name} on GPU {index} ({self.gpus[index].name}): {why}")
            else:
                whys = sorted(set(reasons[name].values())) or ["no GPU answered"]
                gpus = ", ".join(sorted({g.name for g in self.gpus})) or "no GPUs"
                found.unavailable[name] = f"{'; '.join(whys)} ({gpus})"
        found.counters = list(self.counters)
        found.devices = devices
        self.pci_bus_ids = list(devices.pci_bus_ids)
        return found

    def _probe(self, gpu: _Gpu, reasons: dict[str, dict[int, str]]) -> None:
        for group, (query, names) in QUERIES.items():
            try:
                query(gpu.handle)
                gpu.queries.append(group)
            except pynvml.NVMLError as error:
                if isinstance(error, pynvml.NVMLError_GpuIsLost):
                    gpu.lost = True
                for name in names:
                    reasons[name][gpu.index] = describe_error(error)
        if gpu.lost:
            return
        try:
            values = pynvml.nvmlDeviceGetFieldValues(gpu.handle, self._field_ids)
            for position, value in enumerate(values):
                name = FIELDS[position][2]
                if value.nvmlReturn == pynvml.NVML_SUCCESS:
                    gpu.fields.append(position)
                else:
                    reasons[name][gpu.index] = describe_error(pynvml.NVMLError(value.nvmlReturn))
        except pynvml.NVMLError as error:
            for *_, name, _ in FIELDS:
                reasons[name][gpu.index] = describe_error(error)
        if self.processes:
            try:
                self._read_processes(gpu)
                gpu.queries.append("processes")
            except pynvml.NVMLError as error:
                for name in ("gpu_compute_processes", "gpu_process_memory_used"):
                    reasons[name][gpu.index] = describe_error(error)
        else:
            for name in ("gpu_compute_processes", "gpu_process_memory_used"):
                reasons[name][gpu.index] = "process queries turned off"
        self._probe_gpm(gpu, reasons)

    def _probe_gpm(self, gpu: _Gpu, reasons: dict[str, dict[int, str]]) -> None:
        why = None
        if not self.gpm:
            why = "GPM turned off"
        else:
            try:
                if not pynvml.nvmlGpmQueryDeviceSupport(gpu.handle).isSupportedDevice:
                    why = "GPM not supported on this GPU (needs Hopper or later)"
                else:
                    samples = (pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc())
                    pynvml.nvmlGpmSampleGet(gpu.handle, samples[1])
                    gpu.gpm = samples
            except pynvml.NVMLError as error:
                why = describe_error(error)
        if why is not None:
            for _, name, _ in GPM_METRICS:
                reasons[name][gpu.index] = why

    def _gpu_counters(self, gpu: _Gpu) -> set[str]:
        names = {n for group in gpu.queries if group in QUERIES for n in QUERIES[group][1]}
        names |= {FIELDS[p][2] for p in gpu.fields}
        if "processes" in gpu.queries:
            names |= {"gpu_compute_processes", "gpu_process_memory_used"}
        if gpu.gpm is not None:
            names |= {name for _, name, _ in GPM_METRICS}
        return names

    def _read_processes(self, gpu: _Gpu) -> dict[str, float]:
        running = pynvml.nvmlDeviceGetComputeRunningProcesses(gpu.handle)
        gpu.processes = [(int(p.pid), float(p.usedGpuMemory or 0.0)) for p in running]
        return {"gpu_compute_processes": float(len(gpu.processes)),
                "gpu_process_memory_used": sum(m for _, m in gpu.processes)}

    def sample(self) -> Values:
        arrays = {name: np.full(len(self.gpus), np.nan) for name in self.counters}
        for gpu in self.gpus:
            if gpu.lost:
                continue
            try:
                for name, value in self._sample_gpu(gpu).items():
                    if name in arrays:
                        arrays[name][gpu.index] = value
            except pynvml.NVMLError_GpuIsLost:
                gpu.lost = True
                gpu.processes = []
                self.lost_notes.append(f"GPU {gpu.index} ({gpu.name}) is lost; its values are "
                                       "NaN from now on")
                for array in arrays.values():
                    array[gpu.index] = np.nan
        return dict(arrays)

    def _sample_gpu(self, gpu: _Gpu) -> dict[str, float]:
        values: dict[str, float] = {}
        for group in gpu.queries:
            if group in QUERIES:
                values.update(_guarded(QUERIES[group][0], gpu.handle))
        if gpu.fields:
            try:
                answers = pynvml.nvmlDeviceGetFieldValues(gpu.handle, self._field_ids)
                for position in gpu.fields:
                    _, _, name, scale = FIELDS[position]
                    if answers[position].nvmlReturn == pynvml.NVML_SUCCESS:
                        values[name] = _field_value(answers[position]) * scale
            except pynvml.NVMLError_GpuIsLost:
                raise
            except pynvml.NVMLError:
                pass
        if "processes" in gpu.queries:
            values.update(_guarded(lambda _: self._read_processes(gpu), gpu.handle))
        if gpu.gpm is not None:
            values.update(self._sample_gpm(gpu))
        return values

    def _sample_gpm(self, gpu: _Gpu) -> dict[str, float]:
        assert gpu.gpm is not None
        previous, current = gpu.gpm[1], gpu.gpm[0]
        try:
            pynvml.nvmlGpmSampleGet(gpu.handle, current)
        except pynvml.NVMLError_GpuIsLost:
            raise
        except pynvml.NVMLError:
            return {}
        gpu.gpm = (previous, current)
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        request.sample1, request.sample2 = previous, current
        for position, (metric, _, _) in enumerate(GPM_METRICS):
            request.metrics[position].metricId = getattr(pynvml, metric)
        try:
            pynvml.nvmlGpmMetricsGet(request)
        except pynvml.NVMLError_GpuIsLost:
            raise
        except pynvml.NVMLError:
            return {}
        return {name: request.metrics[p].value * scale
                for p, (_, name, scale) in enumerate(GPM_METRICS)
                if request.metrics[p].nvmlReturn == pynvml.NVML_SUCCESS}

    def process_usage(self) -> dict[int, list[tuple[int, float]]]:
        """Latest compute processes per GPU index: ``[(pid, used GPU memory bytes), ...]``."""
        return {gpu.index: list(gpu.processes) for gpu in self.gpus}

    def close(self) -> None:
        for gpu in self.gpus:
            if gpu.gpm is not None:
                for buffer in gpu.gpm:
                    try:
                        pynvml.nvmlGpmSampleFree(buffer)
                    except pynvml.NVMLError:
                        pass
                gpu.gpm = None
        if self._initialised:
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError:
                pass
            self._initialised = False


def _guarded(query: Callable[[Any], dict[str, float]], handle: Any) -> dict[str, float]:
    """A query's values, or none if it failed this time (GpuIsLost is passed on)."""
    try:
        return query(handle)
    except pynvml.NVMLError_GpuIsLost:
        raise
    except pynvml.NVMLError:
        return {}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _safe_text(query: Callable[[Any], bytes | str], handle: Any) -> str:
    try:
        return _text(query(handle))
    except pynvml.NVMLError:
        return ""

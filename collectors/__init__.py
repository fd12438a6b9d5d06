"""Node collectors (NVML, PCIe, perf, procfs) writing counters datasets and a Prometheus endpoint.

Depends on :mod:`counters` only, and never imports torch or pyro: a collector-only node installs
``bayes-sched[collector]``. The main objects are importable from here (``from collectors import
Collector``); they load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: The collector's Prometheus port (``bayes-sched collect --prometheus``): not 9400 (dcgm-exporter),
#: 9100 (node_exporter) nor any other port of Prometheus's default-port allocation list.
DEFAULT_PROMETHEUS_PORT = 10451

if TYPE_CHECKING:  # the exported names, for type checkers
    from collectors.base import (
        CollectorError,
        Devices,
        Discovery,
        Source,
    )
    from collectors.daemon import Collector
    from collectors.nvml import NvmlSource
    from collectors.pcie import PcieSysfsSource
    from collectors.perf import PerfSource
    from collectors.procfs import ProcfsSource
    from collectors.prometheus import (
        LatestSampleCollector,
        PrometheusEndpoint,
    )
    from collectors.replay import ReplaySource

#: Public name -> module that defines it (imported on first use).
_EXPORTS: dict[str, str] = {
    "CollectorError": "collectors.base",
    "Devices": "collectors.base",
    "Discovery": "collectors.base",
    "Source": "collectors.base",
    "Collector": "collectors.daemon",
    "NvmlSource": "collectors.nvml",
    "PcieSysfsSource": "collectors.pcie",
    "PerfSource": "collectors.perf",
    "ProcfsSource": "collectors.procfs",
    "ReplaySource": "collectors.replay",
    "LatestSampleCollector": "collectors.prometheus",
    "PrometheusEndpoint": "collectors.prometheus",
}


def __getattr__(name: str) -> Any:
    # The main objects, imported on first use so that importing the package stays light.
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "DEFAULT_PROMETHEUS_PORT",
    "CollectorError",
    "Devices",
    "Discovery",
    "Source",
    "Collector",
    "NvmlSource",
    "PcieSysfsSource",
    "PerfSource",
    "ProcfsSource",
    "ReplaySource",
    "LatestSampleCollector",
    "PrometheusEndpoint",
]

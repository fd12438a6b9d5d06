"""PCIe links from sysfs: current and maximum link speed and width, and AER error counters.

For each PCI function (by default every NVIDIA display/3D controller, vendor ``0x10de`` class
``0x03xxxx``, in bus order -- the order NVML enumerates GPUs in), reads under
``/sys/bus/pci/devices/<address>/``:

* ``current_link_speed``, ``max_link_speed``: ``"16.0 GT/s PCIe"`` (older kernels: ``"8 GT/s"``),
  stored in transfers per second;
* ``current_link_width``, ``max_link_width``: lanes;
* ``aer_dev_correctable``, ``aer_dev_nonfatal``, ``aer_dev_fatal``: ``NAME COUNT`` lines whose
  ``TOTAL_ERR_*`` line is the counter (present when the kernel has AER and the device reports it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from collectors.base import Devices, Discovery, Values, read_text

if TYPE_CHECKING:
    from collectors.nvml import NvmlSource

NVIDIA_VENDOR = "0x10de"
_SPEED = re.compile(r"^\s*([0-9.]+)\s*GT/s")
_FILES: dict[str, tuple[str, str | None]] = {
    "pcie_link_speed": ("current_link_speed", None),
    "pcie_link_max_speed": ("max_link_speed", None),
    "pcie_link_width": ("current_link_width", None),
    "pcie_link_max_width": ("max_link_width", None),
    "pcie_aer_correctable_errors": ("aer_dev_correctable", "TOTAL_ERR_COR"),
    "pcie_aer_nonfatal_errors": ("aer_dev_nonfatal", "TOTAL_ERR_NONFATAL"),
    "pcie_aer_fatal_errors": ("aer_dev_fatal", "TOTAL_ERR_FATAL"),
}


def normalize_bus_id(bus_id: str) -> str:
    """NVML's ``00000000:3B:00.0`` or sysfs ``0000:3b:00.0`` -> sysfs form ``0000:3b:00.0``."""
    domain, _, rest = bus_id.strip().lower().rpartition(":")
    head, _, _ = domain.rpartition(":")
    bus = domain.rsplit(":", 1)[-1]
    return f"{int(head or '0', 16):04x}:{bus}:{rest}"


def parse_link_speed(text: str) -> float:
    """``"16.0 GT/s PCIe"`` -> 16e9 transfers/s; NaN for ``"Unknown"`` and other text."""
    match = _SPEED.match(text)
    return float(match.group(1)) * 1e9 if match else float("nan")


def parse_aer(text: str, total_key: str) -> float:
    """The ``TOTAL_ERR_*`` count of an ``aer_dev_*`` file, NaN if the line is missing."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0] == total_key:
            return float(fields[1])
    return float("nan")


def _read_value(path: str, key: str | None) -> float:
    text = read_text(path)
    if text is None:
        return float("nan")
    if key is not None:
        return parse_aer(text, key)
    if os.path.basename(path).endswith("speed"):
        return parse_link_speed(text)
    try:
        return float(text.strip())
    except ValueError:
        return float("nan")


def find_gpus(sys_root: str = "/sys") -> list[str]:
    """Addresses of NVIDIA display/3D controllers under ``sys_root``, in bus order."""
    devices = os.path.join(sys_root, "bus", "pci", "devices")
    try:
        addresses = sorted(os.listdir(devices))
    except OSError:
        return []
    found = []
    for address in addresses:
        vendor = (read_text(os.path.join(devices, address, "vendor")) or "").strip()
        klass = (read_text(os.path.join(devices, address, "class")) or "").strip()
        if vendor == NVIDIA_VENDOR and klass.startswith("0x03"):
            found.append(address)
    return found


class PcieSysfsSource:
    """Per-device PCIe link and AER counters from sysfs."""

    name = "pcie_sysfs"

    def __init__(self, addresses: Sequence[str] | None = None, sys_root: str = "/sys") -> None:
        self.sys_root = sys_root
        self.requested = [normalize_bus_id(a) for a in addresses] if addresses else None
        self.addresses: list[str] = []
        self._counters: list[str] = []

    def _path(self, address: str, filename: str) -> str:
        return os.path.join(self.sys_root, "bus", "pci", "devices", address, filename)

    def discover(self) -> Discovery:
        found = Discovery(self.name)
        self.addresses = list(self.requested) if self.requested is not None else find_gpus(
            self.sys_root)
        if not self.addresses:
            reason = (f"no NVIDIA GPU PCI functions under {self.sys_root}/bus/pci/devices"
                      if self.requested is None else "no PCI devices requested")
            found.unavailable.update({name: reason for name in _FILES})
            self._counters = []
            return found
        for address in self.addresses:
            if not os.path.isdir(self._path(address, "")):
                found.notes.append(f"{address}: no such PCI device; its values stay NaN")
        for name, (filename, key) in _FILES.items():
            readable = [a for a in self.addresses
                        if np.isfinite(_read_value(self._path(a, filename), key))]
            if readable:
                self._counters.append(name)
                if len(readable) < len(self.addresses):
                    missing = sorted(set(self.addresses) - set(readable))
                    found.notes.append(f"{name}: not readable for {', '.join(missing)}")
            elif filename.startswith("aer"):
                found.unavailable[name] = (f"no {filename} in sysfs (kernel without PCIe AER, "
                                           "or the device does not report AER)")
            else:
                found.unavailable[name] = (f"no {filename} in sysfs (not a PCI Express device, "
                                           "e.g. a virtual or legacy PCI function)")
        found.counters = list(self._counters)
        found.devices = Devices(count=len(self.addresses), pci_bus_ids=list(self.addresses))
        return found

    def sample(self) -> Values:
        values: Values = {}
        for name in self._counters:
            filename, key = _FILES[name]
            values[name] = np.array([_read_value(self._path(a, filename), key)
                                     for a in self.addresses])
        return values

    def close(self) -> None:
        self._counters = []


class PcieAfterNvml(PcieSysfsSource):
    """PCIe sysfs source that reads the GPUs NVML found, in NVML's order, when NVML found any."""

    def __init__(self, nvml: NvmlSource | None) -> None:
        super().__init__()
        self.nvml = nvml

    def discover(self) -> Discovery:
        if self.nvml is not None and self.nvml.pci_bus_ids:
            self.requested = [normalize_bus_id(b) if b else "ffff:ff:ff.f"
                              for b in self.nvml.pci_bus_ids]
        return super().discover()

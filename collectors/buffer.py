"""A bounded, preallocated buffer of samples that turns into a counters dataset on flush."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from collectors.base import Devices, Values

if TYPE_CHECKING:  # xarray is loaded on the first flush to a store, not by a Prometheus-only node
    import xarray as xr


class SampleBuffer:
    """Holds up to ``capacity`` samples of a fixed set of counters, in preallocated arrays.

    Memory is fixed at construction: ``capacity x (n_node_counters + n_device_counters x
    n_devices) x 8`` bytes. When a sample arrives and the buffer is full (the store could not take
    the last flush), the oldest sample is dropped and counted in :attr:`dropped` -- memory stays
    bounded whatever happens to the disk.
    """

    def __init__(self, node: str, node_counters: Sequence[str], device_counters: Sequence[str],
                 devices: Devices | None, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"buffer capacity must be at least 1, not {capacity}")
        self.node = node
        self.devices = devices
        self.capacity = capacity
        n_devices = devices.count if devices is not None else 0
        self._times = np.empty(capacity, dtype=np.float64)
        self._node = {n: np.empty(capacity) for n in node_counters}
        self._device = {n: np.empty((capacity, n_devices)) for n in device_counters}
        self.node_counters = list(node_counters)
        self.device_counters = list(device_counters)
        self._start = 0  # ring start
        self.size = 0
        self.dropped = 0

    @property
    def full(self) -> bool:
        return self.size == self.capacity

    def add(self, time_s: float, values: Values) -> None:
        """Add one sample taken at ``time_s`` (seconds since the epoch); missing values -> NaN."""
        if self.full:
            self._start = (self._start + 1) % self.capacity
            self.size -= 1
            self.dropped += 1
        slot = (self._start + self.size) % self.capacity
        self._times[slot] = time_s
        for name, array in self._node.items():
            array[slot] = float(values.get(name, np.nan))  # type: ignore[arg-type]
        for name, array in self._device.items():
            array[slot] = values.get(name, np.nan)
        self.size += 1

    def _ordered(self, array: np.ndarray) -> np.ndarray:
        index = (self._start + np.arange(self.size)) % self.capacity
        return array[index]

    def to_dataset(self, attrs: Mapping[str, object] | None = None) -> xr.Dataset:
        """The buffered samples as a counters dataset (one node), oldest first."""
        from counters import schema

        variables = {n: self._ordered(a) for n, a in self._node.items()}
        variables.update({n: self._ordered(a) for n, a in self._device.items()})
        devices = self.devices
        return schema.build(
            self._ordered(self._times), self.node, variables,
            device=range(devices.count) if devices is not None and self._device else None,
            gpu_uuid=_padded(devices.uuids, devices.count) if devices and self._device else None,
            pci_bus_id=(_padded(devices.pci_bus_ids, devices.count)
                        if devices and self._device else None),
            attrs=attrs,
        )

    def clear(self) -> None:
        self._start = 0
        self.size = 0


def _padded(labels: Sequence[str], count: int) -> list[str]:
    return [str(x) for x in labels][:count] + [""] * max(0, count - len(labels))

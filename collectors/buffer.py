"""A bounded, preallocated ring of samples (the rows the store's journal records), readable as a
counters dataset."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from collectors.base import Devices, Values
from counters.journal import JournalLayout

if TYPE_CHECKING:  # xarray is loaded only by to_dataset, which the collector never calls
    import xarray as xr


class SampleBuffer:
    """Holds up to ``capacity`` samples of a fixed set of counters, in one preallocated array.

    Each sample is one row of :attr:`layout` (the same row the store's journal records), so
    memory is fixed at construction: ``capacity x (1 + n_node_counters + n_device_counters x
    n_devices) x 8`` bytes. When a sample arrives and the buffer is full, the oldest sample is
    dropped and counted in :attr:`dropped`. (The collector clears it at every flush, so there it
    never fills: a store commits from its journal segments, not from this buffer.)
    """

    def __init__(self, node: str, node_counters: Sequence[str], device_counters: Sequence[str],
                 devices: Devices | None, capacity: int,
                 attrs: Mapping[str, object] | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"buffer capacity must be at least 1, not {capacity}")
        self.node = node
        self.devices = devices
        self.capacity = capacity
        self.node_counters = list(node_counters)
        self.device_counters = list(device_counters)
        n_devices = devices.count if devices is not None and device_counters else 0
        self.layout = JournalLayout(
            node=node, node_counters=tuple(node_counters),
            device_counters=tuple(device_counters) if n_devices else (), n_devices=n_devices,
            gpu_uuid=tuple(devices.uuids) if devices is not None and n_devices else (),
            pci_bus_id=tuple(devices.pci_bus_ids) if devices is not None and n_devices else (),
            attrs=dict(attrs or {}))
        self._rows = np.empty((capacity, self.layout.width), dtype=np.float64)
        self._start = 0  # ring start
        self.size = 0
        self.dropped = 0

    @property
    def full(self) -> bool:
        return self.size == self.capacity

    def add(self, time_s: float, values: Values) -> np.ndarray:
        """Add one sample taken at ``time_s`` (seconds since the epoch); missing values -> NaN.

        Returns the sample's row (``layout.width`` floats), e.g. for the store's journal.
        """
        if self.full:
            self._start = (self._start + 1) % self.capacity
            self.size -= 1
            self.dropped += 1
        slot = (self._start + self.size) % self.capacity
        self._rows[slot] = self.layout.row(time_s, values)
        self.size += 1
        return self._rows[slot]

    def to_dataset(self, attrs: Mapping[str, object] | None = None) -> xr.Dataset:
        """The buffered samples as a counters dataset (one node), oldest first."""
        index = (self._start + np.arange(self.size)) % self.capacity
        layout = self.layout
        if attrs is not None:
            layout = replace(layout, attrs=dict(attrs))
        return layout.to_dataset(self._rows[index])

    def clear(self) -> None:
        self._start = 0
        self.size = 0

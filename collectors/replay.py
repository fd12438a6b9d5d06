"""Replay a recorded counters store as if it were live, for offline pipelines and tests."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from collectors.base import Devices, Discovery, Values
from counters import schema
from counters.errors import CountersError
from counters.store import open_store


class ReplaySource:
    """A :class:`~collectors.base.Source` that returns a store's samples one after another.

    Per-device values come back for the recorded devices. After the last recorded sample it sets
    :attr:`exhausted` (the collector loop then stops) and returns NaN. :meth:`stream` yields the
    samples with their recorded time stamps, paced at ``speed`` times the recorded rate.
    """

    name = "replay"

    def __init__(self, store: str | Path, node: str | None = None) -> None:
        self.store = Path(store)
        self.node = node
        self.exhausted = False
        self._position = 0

    def discover(self) -> Discovery:
        # Read every value now: a damaged chunk must fail here, as one line naming the store,
        # not later as a sampling error that turns every replayed sample into NaN.
        ds = open_store(self.store, lazy=False)
        node = self.node if self.node is not None else str(ds[schema.NODE].values[0])
        if node not in set(map(str, ds[schema.NODE].values)):
            raise CountersError(f"{self.store}: no node {node!r} in the store")
        self._ds = ds.sel({schema.NODE: node})
        self._names = schema.value_names(self._ds)
        self._times = schema.time_to_seconds(self._ds[schema.TIME].values)
        found = Discovery(self.name, counters=list(self._names))
        if schema.DEVICE in self._ds.dims:
            count = self._ds.sizes[schema.DEVICE]
            uuids = ([str(u) for u in self._ds["gpu_uuid"].values]
                     if "gpu_uuid" in self._ds.coords else [])
            found.devices = Devices(count=count, uuids=uuids)
        found.notes.append(f"replaying {len(self._times)} samples of node {node} from {self.store}")
        return found

    def _row(self, position: int) -> Values:
        row = self._ds.isel({schema.TIME: position}).load()
        values: Values = {}
        for name in self._names:
            array = np.asarray(row[name].values, dtype=np.float64)
            values[name] = array if array.ndim else float(array)
        return values

    def sample(self) -> Values:
        if self._position >= len(self._times):
            self.exhausted = True
            return {name: np.nan for name in self._names}
        values = self._row(self._position)
        self._position += 1
        self.exhausted = self._position >= len(self._times)
        return values

    def stream(self, speed: float = 1.0) -> Iterator[tuple[float, Values]]:
        """``(recorded time in s since the epoch, values)`` paced by the recorded gaps / speed;
        ``speed=float("inf")`` replays as fast as it can."""
        if not hasattr(self, "_times"):
            self.discover()
        origin = time.monotonic()
        for position, stamp in enumerate(self._times):
            if np.isfinite(speed):
                wait = (stamp - self._times[0]) / speed - (time.monotonic() - origin)
                if wait > 0:
                    time.sleep(wait)
            yield float(stamp), self._row(position)

    def close(self) -> None:
        self.exhausted = True

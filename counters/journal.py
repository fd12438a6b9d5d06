"""The counters store's write-ahead journal: one framed record per sample, synced every second.

A journal segment ``journal-NNNNN.bin`` holds the samples that will become store part ``NNNNN``
once they are committed (see :mod:`counters.store`). It is a sequence of records::

    magic b"BSJ1" | payload length (uint32 LE) | CRC-32 of payload (uint32 LE) | payload

The first record's payload is the :class:`JournalLayout` as UTF-8 JSON; every later payload is one
sample as little-endian float64: ``[time (s since the epoch), node counters..., device counters
(n_devices values each)...]``. A record is written with one ``write`` call on an ``O_APPEND``
descriptor, so a process killed at any instant leaves whole records plus at most one torn record
at the end; the reader stops at the first record whose frame, length or CRC does not check out.
``fdatasync`` runs at most every ``sync_interval_s`` (1 s by default), which bounds what a power
loss or kernel crash can take to the last second; SIGKILL (the OOM killer) takes nothing written.
"""

from __future__ import annotations

import errno
import json
import os
import struct
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from counters.errors import CountersError

if TYPE_CHECKING:  # xarray loads where a dataset is built (a commit, a reader), never in a collector
    import xarray as xr

MAGIC = b"BSJ1"
_FRAME = struct.Struct("<4sII")
#: A header or sample record larger than this is damage, not data (1 MiB: ~130k values).
MAX_RECORD_BYTES = 1 << 20
DEFAULT_SYNC_INTERVAL_S = 1.0


@dataclass(frozen=True)
class JournalLayout:
    """What one journal row holds: node, counters in row order, devices and dataset attrs."""

    node: str
    node_counters: tuple[str, ...]
    device_counters: tuple[str, ...] = ()
    n_devices: int = 0
    gpu_uuid: tuple[str, ...] = ()
    pci_bus_id: tuple[str, ...] = ()
    attrs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def width(self) -> int:
        """Float64 values per row: time, one per node counter, ``n_devices`` per device counter."""
        return 1 + len(self.node_counters) + self.n_devices * len(self.device_counters)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), default=str).encode()

    @classmethod
    def from_json(cls, payload: bytes) -> JournalLayout:
        raw = json.loads(payload.decode())
        if not isinstance(raw, dict):
            raise ValueError("journal header is not a JSON object")
        layout = cls(node=str(raw["node"]),
                     node_counters=tuple(map(str, raw["node_counters"])),
                     device_counters=tuple(map(str, raw.get("device_counters", ()))),
                     n_devices=int(raw.get("n_devices", 0)),
                     gpu_uuid=tuple(map(str, raw.get("gpu_uuid", ()))),
                     pci_bus_id=tuple(map(str, raw.get("pci_bus_id", ()))),
                     attrs=dict(raw.get("attrs", {})))
        if layout.n_devices < 0 or (layout.device_counters and layout.n_devices == 0):
            raise ValueError("journal header: device counters without devices")
        return layout

    def row(self, time_s: float, values: Mapping[str, Any]) -> np.ndarray:
        """One ``(width,)`` float64 row from ``{counter: float or (n_devices,) array}``; NaN for
        a counter missing from ``values``."""
        out = np.full(self.width, np.nan)
        out[0] = time_s
        for i, name in enumerate(self.node_counters):
            out[1 + i] = float(values.get(name, np.nan))
        start = 1 + len(self.node_counters)
        for name in self.device_counters:
            out[start:start + self.n_devices] = values.get(name, np.nan)
            start += self.n_devices
        return out

    def to_dataset(self, rows: np.ndarray) -> xr.Dataset:
        """``(T, width)`` rows as a counters dataset of one node (the schema's layout)."""
        rows = np.asarray(rows, dtype=np.float64).reshape(-1, self.width)
        variables: dict[str, np.ndarray] = {}
        for i, name in enumerate(self.node_counters):
            variables[name] = rows[:, 1 + i]
        start = 1 + len(self.node_counters)
        for name in self.device_counters:
            variables[name] = rows[:, start:start + self.n_devices]
            start += self.n_devices
        per_device = bool(self.device_counters)
        from counters import schema

        return schema.build(
            rows[:, 0], self.node, variables,
            device=range(self.n_devices) if per_device else None,
            gpu_uuid=_padded(self.gpu_uuid, self.n_devices) if per_device else None,
            pci_bus_id=_padded(self.pci_bus_id, self.n_devices) if per_device else None,
            attrs=dict(self.attrs),
        )


def _padded(labels: Sequence[str], count: int) -> list[str]:
    return [str(x) for x in labels][:count] + [""] * max(0, count - len(labels))


def _frame(payload: bytes) -> bytes:
    return _FRAME.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload


class JournalWriter:
    """Appends rows to one journal segment; ``fdatasync`` at most every ``sync_interval_s``."""

    def __init__(self, path: str | Path, layout: JournalLayout,
                 sync_interval_s: float = DEFAULT_SYNC_INTERVAL_S) -> None:
        self.path = Path(path)
        self.layout = layout
        self.sync_interval_s = sync_interval_s
        self.rows = 0
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_EXCL, 0o644)
        self._last_sync = time.monotonic()
        os.write(self._fd, _frame(layout.to_json()))
        self.sync()
        _sync_directory(self.path.parent)

    def append(self, row: np.ndarray) -> None:
        """Write one row (one ``write`` call) and sync if the last sync is ``sync_interval_s``
        old."""
        self.write(row)
        self.sync_if_due()

    def write(self, row: np.ndarray) -> None:
        """Write one row with one ``write`` call; OSError unless the whole record was written
        (a short write on a full disk leaves a torn record, which readers stop at)."""
        record = _frame(np.ascontiguousarray(row, dtype="<f8").tobytes())
        if os.write(self._fd, record) != len(record):
            raise OSError(errno.ENOSPC, "short write to the journal")
        self.rows += 1

    def sync_if_due(self) -> None:
        """Sync if the last sync is ``sync_interval_s`` old."""
        if time.monotonic() - self._last_sync >= self.sync_interval_s:
            self.sync()

    def sync(self) -> None:
        os.fdatasync(self._fd)
        self._last_sync = time.monotonic()

    def close(self) -> None:
        if self._fd >= 0:
            try:
                self.sync()
            finally:
                os.close(self._fd)
                self._fd = -1


@dataclass
class JournalContents:
    """What a journal segment holds: its layout (None when even the header is torn), the valid
    rows, and how many bytes follow the last valid record (a torn or damaged tail)."""

    layout: JournalLayout | None
    rows: np.ndarray
    valid_bytes: int
    tail_bytes: int

    def to_dataset(self) -> xr.Dataset | None:
        if self.layout is None or not len(self.rows):
            return None
        return self.layout.to_dataset(self.rows)


def read_journal(path: str | Path) -> JournalContents:
    """Every whole, valid record of a journal segment; stops at the first bad one.

    Rows must have the header's width, finite strictly increasing times; a record that breaks
    this (or its frame) ends the valid part. Raises :class:`CountersError` only when the file
    cannot be read at all.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise CountersError(f"{path}: cannot read journal ({error.strerror or error})") from None
    layout: JournalLayout | None = None
    rows: list[np.ndarray] = []
    offset = 0
    last_time = -np.inf
    while offset + _FRAME.size <= len(data):
        magic, length, crc = _FRAME.unpack_from(data, offset)
        end = offset + _FRAME.size + length
        if magic != MAGIC or length > MAX_RECORD_BYTES or end > len(data):
            break
        payload = data[offset + _FRAME.size:end]
        if zlib.crc32(payload) != crc:
            break
        if layout is None:
            try:
                layout = JournalLayout.from_json(payload)
            except (ValueError, KeyError, TypeError):
                break
        else:
            if length != 8 * layout.width:
                break
            row = np.frombuffer(payload, dtype="<f8")
            if not np.isfinite(row[0]) or row[0] <= last_time:
                break
            last_time = float(row[0])
            rows.append(row)
        offset = end
    width = layout.width if layout is not None else 1
    stacked = np.vstack(rows) if rows else np.empty((0, width))
    return JournalContents(layout, stacked, offset, len(data) - offset)


def _sync_directory(folder: Path) -> None:
    """fsync a directory so a file created or renamed in it survives a power loss."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)

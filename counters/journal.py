"""The counters store's write-ahead journal: one framed record per sample, synced every second.

A journal segment ``journal-NNNNN.bin`` holds the samples that will become store part ``NNNNN``
once they are committed (see :mod:`counters.store`). It is a sequence of records::

    magic b"BSJ1" | payload length (uint32 LE) | CRC-32 of payload (uint32 LE) | payload

The first record's payload is the :class:`JournalLayout` as UTF-8 JSON; every later payload is one
sample as little-endian float64: ``[time (s since the epoch), node counters..., device counters
(n_devices values each)...]``. A record is written with one ``write`` call on an ``O_APPEND``
descriptor, so a process killed at any instant leaves whole records plus at most one torn record
at the end, which the reader leaves out. Damage in the middle (a record whose frame, length, CRC or
time does not check out, followed by whole records: outside damage, or a hole a power loss left)
costs only the records it hit: the reader looks for the next record that checks out (its magic,
a CRC-32 over its payload, the header's width and a time after the last) and reads on from it.
``fdatasync`` runs at most every ``sync_interval_s`` (1 s by default), which bounds what a power
loss or kernel crash can take to the last second; SIGKILL (the OOM killer) takes nothing written.
"""

from __future__ import annotations

import errno
import fcntl
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
from counters.names import whole_microseconds

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
        # Held while the segment is open (the kernel drops it with the process): ``repair``
        # leaves a segment that a running writer still appends to as it is.
        fcntl.flock(self._fd, fcntl.LOCK_SH)
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
    rows, the byte ranges ``[start, end)`` of damage between whole records (``skipped``), where
    the last whole record ends (``valid_bytes``) and how many bytes follow it (``tail_bytes``: a
    torn or damaged tail)."""

    layout: JournalLayout | None
    rows: np.ndarray
    valid_bytes: int
    tail_bytes: int
    skipped: tuple[tuple[int, int], ...] = ()

    @property
    def skipped_bytes(self) -> int:
        """Bytes of damage between whole records (left out of ``rows``)."""
        return sum(end - start for start, end in self.skipped)

    def to_dataset(self) -> xr.Dataset | None:
        if self.layout is None or not len(self.rows):
            return None
        return self.layout.to_dataset(self.rows)


def read_journal(path: str | Path) -> JournalContents:
    """Every whole, valid record of a journal segment, damage skipped (see the module docstring).

    The first record must be the header; without a valid one nothing is read. A later record
    counts where its frame and CRC check out, it has the header's width and its time is finite
    and after the last valid record's in whole microseconds (the store's resolution,
    :func:`counters.schema.seconds_to_time`). Raises :class:`CountersError` only when the file cannot
    be read at all.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise CountersError(f"{path}: cannot read journal ({error.strerror or error})") from None
    header = _payload_at(data, 0)
    layout: JournalLayout | None = None
    if header is not None:
        try:
            layout = JournalLayout.from_json(header[0])
        except (ValueError, KeyError, TypeError):
            layout = None
    if header is None or layout is None:
        return JournalContents(None, np.empty((0, 1)), 0, len(data))
    rows: list[np.ndarray] = []
    skipped: list[tuple[int, int]] = []
    offset = valid_end = header[1]
    last_micros = -np.inf  # times compared as the store keeps them
    while offset + _FRAME.size <= len(data):
        record = _payload_at(data, offset, 8 * layout.width)
        if record is not None:
            row = np.frombuffer(record[0], dtype="<f8")
            micros = float(whole_microseconds(row[0]))
            if np.isfinite(micros) and micros > last_micros:
                if offset > valid_end:
                    skipped.append((valid_end, offset))
                last_micros = micros
                rows.append(row)
                offset = valid_end = record[1]
                continue
        offset = data.find(MAGIC, offset + 1)  # damage: on to the next frame that checks out
        if offset < 0:
            break
    stacked = np.vstack(rows) if rows else np.empty((0, layout.width))
    return JournalContents(layout, stacked, valid_end, len(data) - valid_end, tuple(skipped))


def _payload_at(data: bytes, offset: int, length: int | None = None
                ) -> tuple[bytes, int] | None:
    """The payload of the record at ``offset`` of ``data`` and where the record ends, or None
    where its frame or CRC does not check out (or its payload is not ``length`` bytes)."""
    if offset + _FRAME.size > len(data):
        return None
    magic, size, crc = _FRAME.unpack_from(data, offset)
    end = offset + _FRAME.size + size
    if (magic != MAGIC or size > MAX_RECORD_BYTES or end > len(data)
            or (length is not None and size != length)):
        return None
    payload = data[offset + _FRAME.size:end]
    return (payload, end) if zlib.crc32(payload) == crc else None


def being_written(path: str | Path) -> bool:
    """Whether a :class:`JournalWriter` (of any process) has the segment at ``path`` open: it
    would append after a repair's truncation, or to the file a rewrite renamed away."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # drops the lock where it was taken
    return False


def rewrite_whole_records(path: str | Path, contents: JournalContents, temporary: Path) -> None:
    """Rewrite the segment at ``path`` as its header and whole records only, the damage that
    ``contents`` (:func:`read_journal` of it) found between them and after them left out: the
    records' bytes are copied as they are into ``temporary`` (same folder), synced, and renamed
    over ``path``. A running writer's segment must not be rewritten (:func:`being_written`):
    its later records would go to the file renamed away."""
    path = Path(path)
    data = path.read_bytes()[:contents.valid_bytes]
    kept, start = [], 0
    for begin, end in contents.skipped:
        kept.append(data[start:begin])
        start = end
    kept.append(data[start:])
    with open(temporary, "wb") as handle:
        handle.write(b"".join(kept))
        handle.flush()
        os.fdatasync(handle.fileno())
    os.replace(temporary, path)
    _sync_directory(path.parent)


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

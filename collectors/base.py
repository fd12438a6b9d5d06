"""What every collector source provides: discovery of what it can read, then samples.

A source is created cheaply, then :meth:`Source.discover` finds out, once, what it can read on this
machine and says why it cannot read the rest (no driver, not permitted, not supported). After that,
:meth:`Source.sample` returns one reading of every counter it discovered: a float for a node-level
counter, a ``(n_devices,)`` float array for a per-device one, NaN where a reading failed -- never 0.
Counter names and units are those of :mod:`counters.catalog`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

#: One sample: counter name -> value (node level) or ``(n_devices,)`` values (per device).
Values = dict[str, float | np.ndarray]


class CollectorError(RuntimeError):
    """A collector cannot run as asked (unwritable output, port in use...): one-line message."""


@dataclass
class Devices:
    """The GPUs a per-device source reads, in ``device`` index order."""

    count: int
    uuids: list[str] = field(default_factory=list)
    pci_bus_ids: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)


@dataclass
class Discovery:
    """What a source found it can read (``counters``) and why it cannot read the rest."""

    source: str
    counters: list[str] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)
    devices: Devices | None = None
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """Human-readable report, one line per finding."""
        out = [f"{self.source}: reading {len(self.counters)} counter(s)"
               + (f" on {self.devices.count} device(s)" if self.devices else "")]
        out += [f"{self.source}: {note}" for note in self.notes]
        by_reason: dict[str, list[str]] = {}
        for name, why in self.unavailable.items():
            by_reason.setdefault(why, []).append(name)
        for why, names in by_reason.items():
            shown = ", ".join(names)
            if len(names) > 4:
                shown = f"{len(names)} counters ({names[0]}, ...)"
            out.append(f"{self.source}: cannot read {shown}: {why}")
        return out


@runtime_checkable
class Source(Protocol):
    """A collector source. ``discover`` once, then ``sample`` repeatedly, then ``close``."""

    name: str

    def discover(self) -> Discovery: ...

    def sample(self) -> Values: ...

    def close(self) -> None: ...


def read_text(path: str) -> str | None:
    """A small kernel file's text, or None when it is absent or unreadable."""
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None

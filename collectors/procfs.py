"""procfs source: CPU time per mode, memory, pressure stall information, network and disk bytes.

Reads ``/proc/stat`` (jiffies of ``os.sysconf("SC_CLK_TCK")``), ``/proc/meminfo`` (kB), the PSI
files ``/proc/pressure/{cpu,memory,io}`` (``total=`` in microseconds), ``/proc/net/dev`` (all
interfaces but ``lo``) and ``/proc/diskstats`` (512-byte sectors, whole disks listed in
``/sys/block`` except loop, RAM, zram, device-mapper and md devices so nothing counts twice).
"""

from __future__ import annotations

import os

from collectors.base import Discovery, Values, read_text
from counters.catalog import CPU_MODES
from counters.textcheck import finite_number

_MEMINFO_KEYS = {
    "memory_total": "MemTotal",
    "memory_available": "MemAvailable",
    "memory_cached": "Cached",
    "memory_dirty": "Dirty",
}
_PSI = {
    "pressure_cpu_some": ("cpu", "some"),
    "pressure_memory_some": ("memory", "some"),
    "pressure_memory_full": ("memory", "full"),
    "pressure_io_some": ("io", "some"),
    "pressure_io_full": ("io", "full"),
}
_SKIPPED_DISK_PREFIXES = ("loop", "ram", "zram", "dm-", "md", "sr", "fd")
SECTOR_BYTES = 512


class ProcfsParseError(ValueError):
    """A procfs file whose text does not have the kernel's layout or holds a negative or
    non-finite count; the message names the file and what was expected."""


def _count(raw: str, where: str) -> float:
    """A kernel counter: a finite number >= 0."""
    try:
        return finite_number(raw, 0.0)
    except ValueError as error:
        raise ProcfsParseError(f"{where}: {error}") from None


def parse_stat_cpu(text: str, ticks_per_second: float) -> dict[str, float]:
    """``cpu_<mode>`` seconds from the aggregate ``cpu`` line of /proc/stat."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            jiffies = [_count(x, "/proc/stat cpu line") for x in fields[1 : 1 + len(CPU_MODES)]]
            return {f"cpu_{mode}": value / ticks_per_second
                    for mode, value in zip(CPU_MODES, jiffies, strict=False)}
    raise ProcfsParseError("/proc/stat: no aggregate 'cpu' line")


def parse_meminfo(text: str) -> dict[str, float]:
    """``memory_*`` bytes from /proc/meminfo (values there are kB = 1024 bytes)."""
    found: dict[str, float] = {}
    by_key = {key: name for name, key in _MEMINFO_KEYS.items()}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in by_key:
            parts = rest.split() or [""]
            scale = 1024.0 if len(parts) > 1 and parts[1] == "kB" else 1.0
            found[by_key[key]] = _count(parts[0], f"/proc/meminfo {key}") * scale
    return found


def parse_psi(text: str) -> dict[str, float]:
    """``{"some": seconds, "full": seconds}`` from a /proc/pressure file's ``total=`` (us)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        for item in fields[1:]:
            key, _, value = item.partition("=")
            if key == "total":
                found[fields[0]] = _count(value, "/proc/pressure total") / 1e6
    return found


def parse_net_dev(text: str) -> dict[str, float]:
    """Receive and transmit bytes summed over all interfaces except loopback."""
    rx = tx = 0.0
    for line in text.splitlines()[2:]:
        name, _, rest = line.partition(":")
        fields = rest.split()
        if name.strip() == "lo" or len(fields) < 16:
            continue
        rx += _count(fields[0], "/proc/net/dev receive bytes")
        tx += _count(fields[8], "/proc/net/dev transmit bytes")
    return {"network_rx": rx, "network_tx": tx}


def parse_diskstats(text: str, disks: set[str]) -> dict[str, float]:
    """Bytes read and written summed over ``disks`` (sectors are always 512 bytes here)."""
    read = written = 0.0
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 10 and fields[2] in disks:
            read += _count(fields[5], "/proc/diskstats sectors read") * SECTOR_BYTES
            written += _count(fields[9], "/proc/diskstats sectors written") * SECTOR_BYTES
    return {"disk_read": read, "disk_written": written}


class ProcfsSource:
    """Node-level counters from procfs; ``proc`` and ``sys`` roots can point elsewhere for tests."""

    name = "procfs"

    def __init__(self, proc: str = "/proc", sys: str = "/sys") -> None:
        self.proc = proc
        self.sys = sys
        self._ticks = float(os.sysconf("SC_CLK_TCK"))
        self._disks: set[str] = set()
        self._readers: list[tuple[str, list[str]]] = []

    def discover(self) -> Discovery:
        found = Discovery(self.name)
        self._readers = []
        checks = [
            ("stat", [f"cpu_{m}" for m in CPU_MODES]),
            ("meminfo", list(_MEMINFO_KEYS)),
            ("net/dev", ["network_rx", "network_tx"]),
            ("diskstats", ["disk_read", "disk_written"]),
        ]
        for resource in ("cpu", "memory", "io"):
            names = [n for n, (r, _) in _PSI.items() if r == resource]
            checks.append((f"pressure/{resource}", names))
        block = os.path.join(self.sys, "block")
        try:
            self._disks = {d for d in os.listdir(block) if not d.startswith(_SKIPPED_DISK_PREFIXES)}
        except OSError:
            self._disks = set()
        for relative, names in checks:
            path = os.path.join(self.proc, relative)
            text = read_text(path)
            if text is None:
                why = (f"{path} is absent (kernel without CONFIG_PSI or psi=0)"
                       if relative.startswith("pressure") else f"{path} is not readable")
                found.unavailable.update({n: why for n in names})
                continue
            try:
                got = self._parse(relative, text)
            except ProcfsParseError as error:
                found.unavailable.update({n: str(error) for n in names})
                continue
            for name in names:
                if name in got:
                    found.counters.append(name)
                else:
                    found.unavailable[name] = f"{path} has no field for it"
            self._readers.append((relative, [n for n in names if n in got]))
        if not self._disks:
            found.notes.append(f"no whole disks under {block}: disk bytes stay 0")
        return found

    def _parse(self, relative: str, text: str) -> dict[str, float]:
        if relative == "stat":
            return parse_stat_cpu(text, self._ticks)
        if relative == "meminfo":
            return parse_meminfo(text)
        if relative == "net/dev":
            return parse_net_dev(text)
        if relative == "diskstats":
            return parse_diskstats(text, self._disks)
        resource = relative.split("/")[1]
        psi = parse_psi(text)
        return {n: psi[kind] for n, (r, kind) in _PSI.items() if r == resource and kind in psi}

    def sample(self) -> Values:
        values: Values = {}
        for relative, names in self._readers:
            text = read_text(os.path.join(self.proc, relative))
            try:
                got = self._parse(relative, text) if text is not None else {}
            except ProcfsParseError:
                got = {}
            for name in names:
                values[name] = got.get(name, float("nan"))
        return values

    def close(self) -> None:
        self._readers = []

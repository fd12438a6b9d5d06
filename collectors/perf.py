"""Linux perf source: perf_event_open(2) through ctypes, system-wide or for given processes.

Counts software events (task-clock, context switches, CPU migrations, page faults), hardware
events (cycles, instructions, cache misses) and, where the uncore PMU exists, DRAM bytes read and
written (``uncore_imc_*/cas_count_{read,write}/``, scaled by the PMU's ``.scale`` and ``.unit``).

Every event is opened with ``PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING``;
each sample stores the raw cumulative count (summed over CPUs, processes or memory controllers)
and, as its own variable, the fraction of the interval the event was actually counted (time
running / time enabled). Below 1 means perf multiplexed the PMU; divide the count's rate by it for
a full-time estimate, and read it as a noise level.

System-wide counting (``pid = -1`` on each online CPU) needs ``kernel.perf_event_paranoid <= 0``
or CAP_PERFMON (CAP_SYS_ADMIN before Linux 5.8); :func:`system_wide_refusal` checks both when the
source is discovered and, when neither holds, every event is reported unavailable with one line
saying so (the collector goes on with its other sources). Counting given processes (``pid``,
``inherit`` to their children) needs ``perf_event_paranoid <= 2`` and the same user; at level 2
without CAP_PERFMON only user-space time can be counted, which the source falls back to (and says
so). Each event that cannot be opened is reported with the reason; the rest are counted.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from collectors.base import Discovery, Values, read_text
from counters.catalog import PERF_EVENTS

PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE = 0, 1
PERF_FORMAT_TOTAL_TIME_ENABLED, PERF_FORMAT_TOTAL_TIME_RUNNING = 1, 2
PERF_FLAG_FD_CLOEXEC = 1 << 3
_INHERIT_BIT = 1 << 1
_EXCLUDE_KERNEL_AND_HV = (1 << 5) | (1 << 6)
PERF_ATTR_SIZE_VER5 = 112
_SYSCALL = {"x86_64": 298, "aarch64": 241, "ppc64le": 319, "s390x": 331}

#: perf event name -> (type, config) for the generalised events.
GENERIC_EVENTS: dict[str, tuple[int, int]] = {
    "task-clock": (PERF_TYPE_SOFTWARE, 1),
    "context-switches": (PERF_TYPE_SOFTWARE, 3),
    "cpu-migrations": (PERF_TYPE_SOFTWARE, 4),
    "page-faults": (PERF_TYPE_SOFTWARE, 2),
    "cycles": (PERF_TYPE_HARDWARE, 0),
    "instructions": (PERF_TYPE_HARDWARE, 1),
    "cache-misses": (PERF_TYPE_HARDWARE, 3),
}
EVENT_NAMES = {event: name for name, event, *_ in PERF_EVENTS}
_UNIT_SCALE = {"MiB": 1048576.0, "KiB": 1024.0, "Bytes": 1.0, "": 1.0}


class PerfEventAttr(ctypes.Structure):
    """``struct perf_event_attr`` up to PERF_ATTR_SIZE_VER5 (fields after ``config2`` zeroed)."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64),
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
        ("wakeup_events", ctypes.c_uint32),
        ("bp_type", ctypes.c_uint32),
        ("config1", ctypes.c_uint64),
        ("config2", ctypes.c_uint64),
        ("_rest", ctypes.c_uint8 * (PERF_ATTR_SIZE_VER5 - 72)),
    ]


_libc = ctypes.CDLL(None, use_errno=True)


def paranoid_level(proc: str = "/proc") -> int | None:
    """``kernel.perf_event_paranoid``; None when the kernel has no perf events."""
    text = read_text(os.path.join(proc, "sys/kernel/perf_event_paranoid"))
    return int(text) if text is not None and text.strip().lstrip("-").isdigit() else None


#: Capability bits (linux/capability.h) that lift perf_event_paranoid for CPU-wide events.
CAP_SYS_ADMIN, CAP_PERFMON = 21, 38


def effective_capabilities(proc: str = "/proc") -> int | None:
    """This process's effective capability mask (``CapEff`` of ``self/status``); None when
    unreadable."""
    for line in (read_text(os.path.join(proc, "self/status")) or "").splitlines():
        if line.startswith("CapEff:"):
            try:
                return int(line.split(":", 1)[1].strip(), 16)
            except ValueError:
                return None
    return None


def system_wide_refusal(proc: str = "/proc") -> str | None:
    """Why this process may not count perf events system-wide, in one line; None when it may
    (``kernel.perf_event_paranoid <= 0``, or CAP_PERFMON or CAP_SYS_ADMIN in effect) or when
    that cannot be told (no perf events, capabilities unreadable: opening the events says)."""
    paranoid = paranoid_level(proc)
    capabilities = effective_capabilities(proc)
    if paranoid is None or paranoid <= 0 or capabilities is None:
        return None
    if capabilities & ((1 << CAP_PERFMON) | (1 << CAP_SYS_ADMIN)):
        return None
    return (f"system-wide perf counting needs kernel.perf_event_paranoid <= 0 (this host: "
            f"{paranoid}) or CAP_PERFMON, which this process lacks; set the host's sysctl "
            "kernel.perf_event_paranoid=0, or grant CAP_PERFMON (systemd: "
            "AmbientCapabilities=CAP_PERFMON), or count given processes with --pid")


def perf_event_open(type_: int, config: int, pid: int, cpu: int, inherit: bool = False,
                    config1: int = 0, user_only: bool = False) -> int:
    """Open one counting event and return its fd; ``OSError`` with the errno on failure."""
    number = _SYSCALL.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"perf_event_open syscall number unknown on "
                                    f"{platform.machine()}")
    attr = PerfEventAttr()
    attr.type, attr.size, attr.config, attr.config1 = type_, PERF_ATTR_SIZE_VER5, config, config1
    attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING
    attr.flags = (_INHERIT_BIT if inherit else 0) | (_EXCLUDE_KERNEL_AND_HV if user_only else 0)
    fd = _libc.syscall(number, ctypes.byref(attr), pid, cpu, -1, PERF_FLAG_FD_CLOEXEC)
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int(fd)


def read_event(fd: int) -> tuple[int, int, int]:
    """``(count, time_enabled_ns, time_running_ns)`` of an open event."""
    return struct.unpack("QQQ", os.read(fd, 24))


def online_cpus(sys_root: str = "/sys") -> list[int]:
    """Online CPU numbers from ``devices/system/cpu/online`` (``0-3,6``)."""
    text = read_text(os.path.join(sys_root, "devices/system/cpu/online"))
    if text is None:
        return list(range(os.cpu_count() or 1))
    return parse_cpu_list(text)


def parse_cpu_list(text: str) -> list[int]:
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


@dataclass
class UncoreEvent:
    """An uncore PMU event resolved from sysfs: PMU type, config bits, scale to base units."""

    pmu: str
    type_: int
    config: int
    config1: int
    scale: float
    cpus: list[int]


def resolve_uncore(pmu_dir: str, event: str) -> UncoreEvent:
    """Resolve ``event`` (e.g. ``cas_count_read``) of the PMU at ``pmu_dir`` from its sysfs files.

    ``events/<event>`` holds ``term=value`` pairs (``event=0x04,umask=0x03``), ``format/<term>``
    the bits each term occupies (``config:8-15``), ``events/<event>.scale`` and ``.unit`` the
    factor to ``MiB`` and so on, ``cpumask`` the CPU(s) to open it on.
    """
    def text(*parts: str) -> str:
        value = read_text(os.path.join(pmu_dir, *parts))
        if value is None:
            raise OSError(errno.ENOENT, f"{os.path.join(pmu_dir, *parts)} is missing")
        return value.strip()

    configs = {"config": 0, "config1": 0}
    for term in text("events", event).split(","):
        key, _, raw = term.partition("=")
        field, _, bits = text("format", key.strip()).partition(":")
        lo = int(bits.split("-")[0])
        configs[field] = configs.get(field, 0) | (int(raw or "1", 0) << lo)
    scale = float(read_text(os.path.join(pmu_dir, "events", f"{event}.scale")) or 1.0)
    unit = (read_text(os.path.join(pmu_dir, "events", f"{event}.unit")) or "").strip()
    cpus = parse_cpu_list(read_text(os.path.join(pmu_dir, "cpumask")) or "0")
    return UncoreEvent(os.path.basename(pmu_dir), int(text("type")), configs["config"],
                       configs["config1"], scale * _UNIT_SCALE.get(unit, 1.0), cpus)


def _why(error: OSError, event: str, scope: str, paranoid: int | None) -> str:
    if error.errno in (errno.EACCES, errno.EPERM):
        return (f"not permitted to count {scope} (perf_event_paranoid={paranoid}; system-wide "
                "needs <= 0 or CAP_PERFMON)")
    if error.errno in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV, errno.EINVAL):
        return f"'{event}' is not supported on this CPU or virtual machine (no such PMU event)"
    if error.errno == errno.ESRCH:
        return "the process to count does not exist"
    return f"perf_event_open failed: {error.strerror}"


class PerfSource:
    """Node-level perf counters, system-wide (default) or summed over ``pids``."""

    name = "perf"

    def __init__(self, pids: Sequence[int] | None = None, events: Sequence[str] | None = None,
                 sys_root: str = "/sys", proc: str = "/proc") -> None:
        self.pids = list(pids or [])
        self.sys_root, self.proc = sys_root, proc
        self.events = list(events) if events is not None else [e for _, e, *_ in PERF_EVENTS]
        # counter name -> list of (fd, scale); previous (enabled, running) sums per counter.
        self._fds: dict[str, list[tuple[int, float]]] = {}
        self._last_times: dict[str, tuple[int, int]] = {}
        self.user_only: set[str] = set()

    @property
    def scope(self) -> str:
        return f"processes {','.join(map(str, self.pids))}" if self.pids else "system-wide"

    def _targets(self) -> list[tuple[int, int]]:
        if self.pids:
            return [(pid, -1) for pid in self.pids]
        return [(-1, cpu) for cpu in online_cpus(self.sys_root)]

    def discover(self) -> Discovery:
        found = Discovery(self.name)
        paranoid = paranoid_level(self.proc)
        if paranoid is None:
            reason = "no perf events in this kernel (no /proc/sys/kernel/perf_event_paranoid)"
            for name, *_ in PERF_EVENTS:
                found.unavailable[name] = reason
            return found
        refusal = None if self.pids else system_wide_refusal(self.proc)
        if refusal is not None:  # checked once, at start: one line rather than one per event
            for event in self.events:
                found.unavailable[EVENT_NAMES.get(event, event)] = refusal
            return found
        found.notes.append(f"counting {self.scope}, perf_event_paranoid={paranoid}")
        by_event = {event: name for name, event, *_ in PERF_EVENTS}
        for event in self.events:
            known = by_event.get(event)
            if known is None:
                found.unavailable[event] = "not a perf event the catalog knows"
                continue
            name = known
            try:
                self._fds[name] = self._open(event)
            except OSError as error:
                found.unavailable[name] = _why(error, event, self.scope, paranoid)
                continue
            found.counters += [name, f"{name}_running_fraction"]
            self._last_times[name] = self._times(name)
        if self.user_only:
            found.notes.append(f"counting user space only for {', '.join(sorted(self.user_only))} "
                               f"(perf_event_paranoid={paranoid} without CAP_PERFMON)")
        return found

    def _open(self, event: str) -> list[tuple[int, float]]:
        opened: list[tuple[int, float]] = []
        try:
            if event.startswith("uncore_imc/"):
                if self.pids:
                    raise OSError(errno.EOPNOTSUPP, "uncore events count system-wide only")
                for pmu in self._uncore_pmus():
                    resolved = resolve_uncore(pmu, event.split("/")[1])
                    for cpu in resolved.cpus:
                        opened.append((perf_event_open(resolved.type_, resolved.config, -1, cpu,
                                                       config1=resolved.config1), resolved.scale))
                if not opened:
                    raise OSError(errno.ENOENT, "no uncore_imc PMU")
            else:
                type_, config = GENERIC_EVENTS[event]
                scale = 1e-9 if event == "task-clock" else 1.0  # ns -> s
                user_only = False
                for pid, cpu in self._targets():
                    try:
                        fd = perf_event_open(type_, config, pid, cpu, inherit=bool(self.pids),
                                             user_only=user_only)
                    except OSError as error:
                        # perf_event_paranoid=2 allows a process's own user-space events only.
                        if error.errno != errno.EACCES or user_only or not self.pids:
                            raise
                        user_only = True
                        fd = perf_event_open(type_, config, pid, cpu, inherit=True,
                                             user_only=True)
                    opened.append((fd, scale))
                if user_only:
                    self.user_only.add(EVENT_NAMES[event])
        except OSError:
            for fd, _ in opened:
                os.close(fd)
            raise
        return opened

    def _uncore_pmus(self) -> list[str]:
        root = os.path.join(self.sys_root, "bus/event_source/devices")
        try:
            return sorted(os.path.join(root, d) for d in os.listdir(root)
                          if d.startswith("uncore_imc"))
        except OSError:
            return []

    def _times(self, name: str) -> tuple[int, int]:
        enabled = running = 0
        for fd, _ in self._fds[name]:
            _, e, r = read_event(fd)
            enabled, running = enabled + e, running + r
        return enabled, running

    def sample(self) -> Values:
        values: Values = {}
        for name, fds in self._fds.items():
            count = 0.0
            enabled = running = 0
            try:
                for fd, scale in fds:
                    value, e, r = read_event(fd)
                    count += value * scale
                    enabled, running = enabled + e, running + r
            except OSError:
                values[name] = values[f"{name}_running_fraction"] = float("nan")
                continue
            last_enabled, last_running = self._last_times[name]
            self._last_times[name] = (enabled, running)
            delta = enabled - last_enabled
            values[name] = count
            values[f"{name}_running_fraction"] = (
                (running - last_running) / delta if delta > 0 else float("nan"))
        return values

    def close(self) -> None:
        for fds in self._fds.values():
            for fd, _ in fds:
                os.close(fd)
        self._fds.clear()

"""Parsers for ``perf stat -x,`` (CSV) and ``perf stat -j`` (JSON lines) output, with or without -I.

Both give, per event and interval, the count, its unit, the time the event was counted
(``event-runtime``, ns) and the percentage of the enabled time it was counted (``pcnt-running``,
below 100 when perf multiplexes more events than the PMU has counters). :func:`to_values` maps the
readings onto catalog counters in base units, keeping the running fraction as its own variable.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from counters.catalog import PERF_EVENTS

#: perf event name -> catalog counter name.
EVENT_COUNTERS: dict[str, str] = {event: name for name, event, *_ in PERF_EVENTS}
# perf stat -a names cpu-clock what task-clock is per task; both are CPU time in msec.
EVENT_COUNTERS["cpu-clock"] = "perf_task_clock"
_UNIT_SCALE = {"msec": 1e-3, "ns": 1e-9, "MiB": 1048576.0, "KiB": 1024.0, "Bytes": 1.0, "": 1.0}
NOT_COUNTED = ("<not counted>", "<not supported>")


class PerfStatParseError(ValueError):
    """perf stat output that does not follow the expected layout (line number named)."""


@dataclass(frozen=True)
class PerfReading:
    """One event of one ``perf stat`` report."""

    event: str
    value: float  # NaN when perf printed <not counted> or <not supported>
    unit: str
    running_ns: float
    fraction_running: float  # pcnt-running / 100
    interval_s: float | None = None
    status: str = "counted"  # or "not counted", "not supported"


def _status(raw: str) -> str:
    return raw.strip("<>") if raw in NOT_COUNTED else "counted"


def _number(raw: str, where: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise PerfStatParseError(f"{where}: expected a number, found {raw!r}") from None


def parse_csv(text: str, source: str = "perf stat output") -> list[PerfReading]:
    """Readings from ``perf stat -x,`` output (with ``-I``, lines start with the timestamp)."""
    readings: list[PerfReading] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = [f.strip() for f in line.split(",")]
        where = f"{source}, line {number}"
        interval: float | None = None
        # Without -I the first field is the count (or <not ...>); with -I it is a timestamp and
        # the count follows. Seven columns either way after the optional timestamp.
        if len(fields) >= 8 and fields[1] and fields[3] and not fields[0].startswith("<"):
            try:
                interval = float(fields[0])
                fields = fields[1:]
            except ValueError:
                pass
        if len(fields) < 5:
            raise PerfStatParseError(f"{where}: expected 'value,unit,event,runtime,pcnt,...', "
                                     f"found {line!r}")
        raw, unit, event = fields[0], fields[1], fields[2]
        status = _status(raw)
        value = math.nan if status != "counted" else _number(raw, where)
        readings.append(PerfReading(event, value, unit, _number(fields[3], where),
                                    _number(fields[4], where) / 100.0, interval, status))
    return readings


def parse_json(text: str, source: str = "perf stat output") -> list[PerfReading]:
    """Readings from ``perf stat -j`` output: one JSON object per line."""
    readings: list[PerfReading] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{source}, line {number}"
        try:
            record = json.loads(line)
            raw = str(record["counter-value"])
            status = _status(raw)
            readings.append(PerfReading(
                event=str(record["event"]),
                value=math.nan if status != "counted" else _number(raw, where),
                unit=str(record.get("unit", "")),
                running_ns=float(record["event-runtime"]),
                fraction_running=float(record["pcnt-running"]) / 100.0,
                interval_s=float(record["interval"]) if "interval" in record else None,
                status=status,
            ))
        except (ValueError, KeyError, TypeError) as error:
            raise PerfStatParseError(f"{where}: not a perf stat JSON record ({error})") from None
    return readings


def parse(text: str, source: str = "perf stat output") -> list[PerfReading]:
    """CSV or JSON, told apart by the first non-comment line."""
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            return parse_json(text, source) if line.lstrip().startswith("{") else parse_csv(
                text, source)
    return []


def canonical_event(event: str) -> str:
    """``cpu_core/cycles/`` -> ``cycles``; ``cycles:u`` -> ``cycles``; uncore names kept."""
    if event.startswith("uncore_"):
        pmu, _, rest = event.partition("/")
        return f"{pmu.rstrip('_0123456789')}/{rest}"
    if event.count("/") == 2 and event.endswith("/"):
        event = event.split("/")[1]
    return event.split(":")[0]


def by_interval(readings: list[PerfReading]) -> dict[float | None, list[PerfReading]]:
    """Readings grouped by their ``-I`` timestamp (one group, key None, without ``-I``)."""
    groups: dict[float | None, list[PerfReading]] = {}
    for reading in readings:
        groups.setdefault(reading.interval_s, []).append(reading)
    return groups


def to_values(readings: list[PerfReading]) -> dict[str, float]:
    """Catalog counter values (base units) and ``*_running_fraction`` for known events.

    ``readings`` are those of one report (one interval: see :func:`by_interval`).

    Values are raw counts as perf printed them (perf already scales multiplexed counts to the
    enabled time); uncore counters of several memory controllers are summed. Events perf could not
    count give NaN, not zero.
    """
    values: dict[str, float] = {}
    fractions: dict[str, list[float]] = {}
    for reading in readings:
        name = EVENT_COUNTERS.get(canonical_event(reading.event))
        if name is None:
            continue
        scale = _UNIT_SCALE.get(reading.unit, 1.0)
        value = reading.value * scale
        values[name] = value if name not in values or math.isnan(values[name]) else (
            values[name] + value)
        fractions.setdefault(name, []).append(
            reading.fraction_running if reading.status == "counted" else math.nan)
    for name, seen in fractions.items():
        values[f"{name}_running_fraction"] = min(seen)
    return values

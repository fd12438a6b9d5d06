"""Parsers for ``perf stat -x,`` (CSV) and ``perf stat -j`` (JSON lines) output, with or without -I.

Both give, per event and interval, the count, its unit, the time the event was counted
(``event-runtime``, ns) and the percentage of the enabled time it was counted (``pcnt-running``,
below 100 when perf multiplexes more events than the PMU has counters). :func:`to_values` maps the
readings onto catalog counters in base units, keeping the running fraction as its own variable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from counters.catalog import PERF_EVENTS
from counters.textcheck import finite_number, loads_json

#: perf event name -> catalog counter name.
EVENT_COUNTERS: dict[str, str] = {event: name for name, event, *_ in PERF_EVENTS}
# perf stat -a names cpu-clock what task-clock is per task; both are CPU time in msec.
EVENT_COUNTERS["cpu-clock"] = "perf_task_clock"
_UNIT_SCALE = {"msec": 1e-3, "ns": 1e-9, "MiB": 1048576.0, "KiB": 1024.0, "Bytes": 1.0, "": 1.0}
NOT_COUNTED = ("<not counted>", "<not supported>")


class PerfStatParseError(ValueError):
    """perf stat output that does not follow the expected layout, or holds impossible numbers
    (negative or non-finite counts and run times, pcnt-running outside [0, 100]); the message
    names the source, the line and the field."""


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


def _number(raw: object, where: str, field: str, maximum: float = math.inf) -> float:
    """A finite, non-negative number (counts, run times and percentages all are)."""
    try:
        return finite_number(raw, 0.0, maximum)
    except ValueError as error:
        raise PerfStatParseError(f"{where}: {field}: {error}") from None


def _reading(raw_value: object, unit: object, event: object, runtime: object, pcnt: object,
             interval: object | None, where: str) -> PerfReading:
    """One checked reading: a count >= 0 (or <not counted>), a run time >= 0 ns, pcnt-running in
    [0, 100], a timestamp >= 0, a non-empty event name."""
    raw = str(raw_value).strip() if isinstance(raw_value, str | int | float) else raw_value
    status = _status(raw) if isinstance(raw, str) else "counted"
    value = math.nan if status != "counted" else _number(raw, where, "counter-value")
    if not isinstance(event, str) or not event.strip():
        raise PerfStatParseError(f"{where}: event: expected an event name, found {event!r}")
    if not isinstance(unit, str):
        raise PerfStatParseError(f"{where}: unit: expected a unit name, found {unit!r}")
    return PerfReading(event, value, unit, _number(runtime, where, "event-runtime"),
                       _number(pcnt, where, "pcnt-running", 100.0) / 100.0,
                       None if interval is None else _number(interval, where, "interval"),
                       status)


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
        readings.append(_reading(fields[0], fields[1], fields[2], fields[3], fields[4],
                                 interval, where))
    return readings


def parse_json(text: str, source: str = "perf stat output") -> list[PerfReading]:
    """Readings from ``perf stat -j`` output: one JSON object per line."""
    readings: list[PerfReading] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{source}, line {number}"
        try:
            record = loads_json(line)
        except ValueError as error:
            raise PerfStatParseError(f"{where}: not a perf stat JSON record ({error})") from None
        if not isinstance(record, dict):
            raise PerfStatParseError(f"{where}: expected a JSON object per line")
        missing = [k for k in ("counter-value", "event", "event-runtime", "pcnt-running")
                   if k not in record]
        if missing:
            raise PerfStatParseError(f"{where}: not a perf stat JSON record (missing "
                                     f"{', '.join(missing)})")
        readings.append(_reading(record["counter-value"], record.get("unit", ""),
                                 record["event"], record["event-runtime"],
                                 record["pcnt-running"], record.get("interval"), where))
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

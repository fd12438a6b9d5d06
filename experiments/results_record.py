"""Benchmark results as committed data: ``experiments/results/<benchmark>.json``.

A benchmark that prints a table takes ``--record`` (:func:`add_record_flag`); with it, the script
ends by calling :func:`record_results`, which appends one record to its file. Recording is opt-in
because it writes into the repository: a run made to try a setting, or on a loaded machine, should
not become a published figure by default. ``experiments/results_pages.py`` (and the docs build,
through ``docs/hooks/results_pages.py``) renders the files into ``docs/results/<benchmark>.md``.

A results file is one JSON object::

    {"benchmark": "bench_pop",            # the script's stem
     "records": [                          # appended in run order; pages show newest first
       {"command": "python experiments/bench_pop.py --parts gap",   # as run, less --record;
                                           #   null when a transcribed figure stated none
        "commit": "3431958...",            # HEAD of the checkout that ran it (null: no git)
        "dirty": false,                    # uncommitted changes outside experiments/results/
        "date": "2026-12-06T05:22:34Z",    # UTC, ISO 8601
        "load": [3.1, 2.9, 2.5],           # /proc/loadavg (1, 5, 15 min) at start; a number
                                           #   when only one was stated; null when unknown
        "cpu_s": 812.4,                    # CPU seconds of the process and its waited children
        "machine": {"cpu": "...", "cores": 2},      # null when unknown
        "source": "run",                   # or "transcribed from docstring"
        "note": "...",                     # optional: setting, seeds, caveats (null if none)
        "tables": [{"title": "decision", "rows": [{"gpus": 256, "exact_cpu_s": 1.9}]}]}]}

Rows are flat objects of strings, numbers, booleans or null; column names carry their units
(``_s``, ``_h``, ``_pct``, ``_x`` for a ratio). A transcribed table may instead be ``{"title",
"text"}``: the docstring's figures verbatim (aligned columns, the prose that read them), shown as
preformatted text, where the old layout does not map onto one row per line. Transcribed records
are figures that used to sit in docstrings: their commit is the one that last wrote those lines
and their date that commit's.

:func:`load_results` checks a file against this format and raises :class:`ResultsFormatError`
whose message is one line naming the file and the field.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

#: The repository root and the folder of the committed results files.
ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "experiments" / "results"

#: What a record's ``source`` may say.
SOURCES = ("run", "transcribed from docstring")

#: One table cell.
Cell = str | int | float | bool | None

#: The load average when this module was imported, i.e. when the benchmark started (a script
#: imports it with its other modules, before any work).
START_LOAD: list[float] | None = ([round(v, 2) for v in os.getloadavg()]
                                  if hasattr(os, "getloadavg") else None)


class ResultsFormatError(ValueError):
    """A results file that does not follow the format; the message is one line."""


@dataclass(frozen=True)
class ResultsFile:
    """One validated results file: the benchmark's name and its records, in file order."""

    path: Path
    benchmark: str
    records: list[dict[str, Any]]


def add_record_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``--record`` to a benchmark's parser."""
    parser.add_argument(
        "--record", action="store_true",
        help="append this run's table(s), command, commit, date, load and CPU time to "
             "experiments/results/<benchmark>.json (rendered as docs/results/<benchmark>.md)")


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _command(argv: Sequence[str]) -> str:
    script = Path(argv[0]).resolve()
    shown = script.relative_to(ROOT).as_posix() if script.is_relative_to(ROOT) else argv[0]
    return shlex.join(["python", shown, *(a for a in argv[1:] if a != "--record")])


def _cell(value: Any) -> Cell:
    """A row's value as a cell: numpy scalars as Python ones, non-finite numbers as null, lists
    and other values as their JSON (or ``str``) text."""
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    try:
        return json.dumps(value, default=str, allow_nan=False)
    except ValueError:
        return str(value)


def new_record(tables: Mapping[str, Sequence[Mapping[str, Any]]], *,
               argv: Sequence[str] | None = None, note: str | None = None) -> dict[str, Any]:
    """The record of the run now ending: ``tables`` (title -> rows) with its provenance."""
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".",
                  ":(exclude)experiments/results")
    return {
        "command": _command(sys.argv if argv is None else argv),
        "commit": commit,
        "dirty": None if status is None else bool(status),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "load": START_LOAD,
        "cpu_s": round(sum(u.ru_utime + u.ru_stime for u in usage), 2),
        "machine": {"cpu": _cpu_model(), "cores": os.cpu_count() or 0},
        "source": "run",
        "note": note,
        # A table without rows (a ratio of cases this run did not measure) is left out.
        "tables": [{"title": title, "rows": [{str(k): _cell(v) for k, v in row.items()}
                                             for row in rows]}
                   for title, rows in tables.items() if rows],
    }


def record_results(script: str, tables: Mapping[str, Sequence[Mapping[str, Any]]], *,
                   note: str | None = None, results_dir: Path = RESULTS_DIR) -> Path:
    """Append this run's record to ``results_dir/<stem of script>.json``; return the file.

    ``script`` is the benchmark's ``__file__``; ``tables`` maps a table's title to its rows.
    """
    benchmark = Path(script).stem
    path = results_dir / f"{benchmark}.json"
    records = load_results(path).records if path.exists() else []
    records.append(new_record(tables, note=note))
    results_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"benchmark": benchmark, "records": records}, indent=1,
                               allow_nan=False) + "\n")
    print(f"recorded in {path}", file=sys.stderr)
    return path


def _fail(path: Path, field: str, expected: str) -> ResultsFormatError:
    return ResultsFormatError(f"{path}: {field}: expected {expected}")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_load(value: Any) -> bool:
    if value is None or _number(value):
        return True
    return isinstance(value, list) and len(value) == 3 and all(_number(v) for v in value)


def _check_date(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).tzinfo is not None
    except ValueError:
        return False


#: Record field -> (check, what is expected); every field is required (null where allowed).
_FIELDS: dict[str, tuple[Any, str]] = {
    "command": (lambda v: v is None or (isinstance(v, str) and v.startswith("python ")),
                "the command as run, starting 'python ' (null: a transcribed one not stated)"),
    "commit": (lambda v: v is None or (isinstance(v, str) and 7 <= len(v) <= 40
                                       and all(c in "0123456789abcdef" for c in v)),
               "a git commit (7-40 hex digits) or null"),
    "dirty": (lambda v: v is None or isinstance(v, bool), "true, false or null"),
    "date": (_check_date, "a UTC ISO 8601 date and time such as 2026-12-06T05:22:34Z"),
    "load": (_check_load, "null, a number or [1-min, 5-min, 15-min] load averages"),
    "cpu_s": (lambda v: v is None or (_number(v) and v >= 0), "CPU seconds >= 0 or null"),
    "machine": (lambda v: v is None or (isinstance(v, dict) and isinstance(v.get("cpu"), str)
                                        and isinstance(v.get("cores"), int)),
                "null or {\"cpu\": str, \"cores\": int}"),
    "source": (lambda v: v in SOURCES, " or ".join(repr(s) for s in SOURCES)),
    "note": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "tables": (lambda v: isinstance(v, list) and len(v) > 0, "a non-empty list of tables"),
}


def _check_tables(path: Path, where: str, tables: list[Any]) -> None:
    for t, table in enumerate(tables):
        here = f"{where}.tables[{t}]"
        if not isinstance(table, dict) or not isinstance(table.get("title"), str):
            raise _fail(path, f"{here}.title", "a string")
        if "text" in table:
            if set(table) != {"title", "text"} or not isinstance(table["text"], str) \
                    or not table["text"].strip():
                raise _fail(path, f"{here}.text", "non-empty text and no rows")
            continue
        rows = table.get("rows")
        if not isinstance(rows, list) or not rows:
            raise _fail(path, f"{here}.rows", "a non-empty list of row objects")
        for r, row in enumerate(rows):
            if not isinstance(row, dict) or not row:
                raise _fail(path, f"{here}.rows[{r}]", "an object of column -> value")
            for column, value in row.items():
                if not (value is None or isinstance(value, str | bool) or _number(value)):
                    raise _fail(path, f"{here}.rows[{r}].{column}",
                                "a string, number, boolean or null")


def load_results(path: Path) -> ResultsFile:
    """Read and check one results file (see the module docstring)."""
    try:
        data = json.loads(path.read_text(), parse_constant=lambda c: _reject_constant(path, c))
    except json.JSONDecodeError as exc:
        raise ResultsFormatError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise _fail(path, "top level", "an object with 'benchmark' and 'records'")
    if data.get("benchmark") != path.stem:
        raise _fail(path, "benchmark", f"the file's stem {path.stem!r}")
    records = data.get("records")
    if not isinstance(records, list) or not records:
        raise _fail(path, "records", "a non-empty list of records")
    for i, record in enumerate(records):
        where = f"records[{i}]"
        if not isinstance(record, dict):
            raise _fail(path, where, "an object")
        for name, (check, expected) in _FIELDS.items():
            if name not in record:
                raise _fail(path, f"{where}.{name}", f"{expected} (missing)")
            if not check(record[name]):
                raise _fail(path, f"{where}.{name}", expected)
        extra = sorted(set(record) - set(_FIELDS))
        if extra:
            raise _fail(path, f"{where}.{extra[0]}", "no such field (known: "
                        + ", ".join(_FIELDS) + ")")
        _check_tables(path, where, record["tables"])
    return ResultsFile(path=path, benchmark=data["benchmark"], records=records)


def _reject_constant(path: Path, constant: str) -> Any:
    raise ResultsFormatError(f"{path}: {constant} is not strict JSON: expected a number or null")

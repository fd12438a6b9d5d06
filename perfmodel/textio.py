"""The one validation layer under every reader of user files: text, CSV tables, JSON, and cells.

Every reader of perfmodel and bayes_sched (profiles, gradient traces, workloads, the interference
pairs table, topology JSON) goes through here, so that bad bytes, ragged rows, huge integers and
deep JSON all fail the same way: an :class:`~perfmodel.errors.InputError` (or the caller's subclass
of it) whose one-line message names the file, the row (1-based, the header is row 1) and the
column, and says what was expected. No other exception type leaves these functions.

* Text is UTF-8, with or without a byte-order mark (Excel writes one). UTF-16, NUL bytes and other
  encodings are refused with the row of the first bad byte.
* Long inputs are streamed: :func:`iter_lines` and :func:`iter_csv` yield row by row with the same
  checks, so a reader that needs the first N rows (a trace cut to ``--max-jobs``) reads only
  those, and never holds the file whole.
* A CSV header has unique, non-empty names; every row has as many fields as the header, so an extra
  field cannot silently shift the columns after it.
* Integers are written as integers (``12``, ``12.0`` or ``1e3``) and lie within the bounds the
  caller gives, so no value of 2^63 or more reaches numpy (:data:`MAX_GPUS` and friends document the
  bounds the toolkit uses). Numbers are finite.
* JSON is nested at most :data:`MAX_JSON_DEPTH` deep (checked before parsing, so the parser never
  recurses into a RecursionError), integers have at most :data:`MAX_INT_DIGITS` digits, ``NaN`` and
  ``Infinity`` and duplicate keys are refused; :func:`json_int` and :func:`json_number` refuse
  strings, booleans and fractions where counts or numbers are expected.

The collectors cannot import this module (collectors depend on counters only); the minimal part
they need for ``perf stat`` JSON lives in :mod:`counters.textcheck`.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfmodel.errors import InputError

#: Largest file any reader accepts, bytes: tables of measurements are kilobytes to a few megabytes.
MAX_FILE_BYTES = 256 * 1024 * 1024
#: Longest line a streamed reader accepts, bytes (a trace line is about 100).
MAX_LINE_BYTES = 1024 * 1024
#: JSON nesting deeper than this is refused (topology files nest two levels).
MAX_JSON_DEPTH = 32
#: Integers with more digits than this are refused before any conversion (2^63 has 19 digits).
MAX_INT_DIGITS = 19
#: GPUs (replicas) or nodes of one job or cluster: 2^20, far above any cluster built.
MAX_GPUS = 2**20
#: Examples in one batch (per GPU or in all): 2^31; with MAX_GPUS their product fits an int64.
MAX_BATCH = 2**31
#: Gradient-accumulation steps of one optimiser step.
MAX_ACCUM_STEPS = 2**16
#: Seconds of one training iteration. No synchronous data-parallel step takes an hour; a larger
#: figure is a unit error (ms written as s) or a corrupt row, and would dominate any fit.
MAX_STEP_TIME_S = 3600.0

_NOT_A_NUMBER = "not a number"
_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_UTF8_BOM = b"\xef\xbb\xbf"

ErrorType = type[InputError]


def read_text(path: str | Path, error: ErrorType = InputError) -> str:
    """The text of ``path``: UTF-8 with or without a byte-order mark, universal newlines kept as
    they are. Raises ``error`` naming the file (and the row of the first bad byte)."""
    file = Path(path)
    if file.is_dir():
        raise error("is a directory: expected a file", file)
    try:
        with file.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise error("no such file", file) from None
    except OSError as failure:
        raise error(f"cannot read file: {failure.strerror or failure}", file) from None
    if len(data) > MAX_FILE_BYTES:
        raise error(f"larger than {MAX_FILE_BYTES} bytes: expected a small text file", file)
    return decode_text(data, file, error)


def decode_text(data: bytes, path: str | Path | None = None,
                error: ErrorType = InputError) -> str:
    """``data`` decoded as UTF-8 (a leading byte-order mark dropped); see :func:`read_text`."""
    if data.startswith(_UTF16_BOMS):
        raise error("UTF-16 text: expected UTF-8 (save the file as UTF-8 or CSV UTF-8)", path)
    if data.startswith(_UTF8_BOM):
        data = data[len(_UTF8_BOM):]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as failure:
        row = data.count(b"\n", 0, failure.start) + 1
        raise error(f"byte 0x{data[failure.start]:02x} is not UTF-8: expected UTF-8 text",
                    path, row) from None
    nul = text.find("\0")
    if nul >= 0:
        raise error("NUL byte (binary data): expected UTF-8 text", path,
                    text.count("\n", 0, nul) + 1)
    return text


def iter_lines(path: str | Path, error: ErrorType = InputError,
               max_bytes: int = MAX_FILE_BYTES) -> Iterator[tuple[int, str]]:
    """The lines of ``path`` streamed: ``(row, line)``, row 1-based, the line without its
    newline (``\\n`` or ``\\r\\n``). The checks of :func:`read_text`, line by line: a UTF-16
    byte-order mark, a byte that is not UTF-8, a NUL byte; and a line over
    :data:`MAX_LINE_BYTES`, or more than ``max_bytes`` read in all. Raises ``error`` naming the
    file and the row; the file is open only while the iterator runs."""
    file = Path(path)
    if file.is_dir():
        raise error("is a directory: expected a file", file)
    try:
        handle = file.open("rb")
    except FileNotFoundError:
        raise error("no such file", file) from None
    except OSError as failure:
        raise error(f"cannot read file: {failure.strerror or failure}", file) from None
    with handle:
        consumed, row = 0, 0
        while True:
            try:
                data = handle.readline(MAX_LINE_BYTES + 1)
            except OSError as failure:
                raise error(f"cannot read file: {failure.strerror or failure}", file,
                            row + 1) from None
            if not data:
                return
            row += 1
            consumed += len(data)
            if len(data) > MAX_LINE_BYTES:
                raise error(f"a line longer than {MAX_LINE_BYTES} bytes: expected text lines",
                            file, row)
            if consumed > max_bytes:
                raise error(f"larger than {max_bytes} bytes: expected a smaller text file",
                            file, row)
            if row == 1:
                if data.startswith(_UTF16_BOMS):
                    raise error("UTF-16 text: expected UTF-8 (save the file as UTF-8 or CSV "
                                "UTF-8)", file)
                data = data.removeprefix(_UTF8_BOM)
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as failure:
                raise error(f"byte 0x{data[failure.start]:02x} is not UTF-8: expected UTF-8 "
                            "text", file, row) from None
            if "\0" in text:
                raise error("NUL byte (binary data): expected UTF-8 text", file, row)
            yield row, text.removesuffix("\n").removesuffix("\r")


# --- CSV tables ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CsvTable:
    """A CSV file's header and its non-blank rows, each with its 1-based row number in the file.

    Every row has exactly ``len(header)`` fields, header names are stripped, unique and non-empty.
    """

    path: Path
    header: tuple[str, ...]
    rows: tuple[tuple[int, tuple[str, ...]], ...]

    def index(self, column: str) -> int:
        return self.header.index(column)

    def require(self, columns: Sequence[str], error: ErrorType = InputError) -> None:
        """Raise ``error`` (row 1) when any of ``columns`` is absent from the header."""
        missing = [c for c in columns if c not in self.header]
        if missing:
            raise error(f"missing column(s) {', '.join(missing)}: expected "
                        f"{', '.join(columns)}", self.path, row=1)


def read_csv(path: str | Path, error: ErrorType = InputError) -> CsvTable:
    """Read a CSV file whole through :func:`read_text` (so a bad byte anywhere is found before
    any row is parsed), checking its header and field counts.

    Blank rows are skipped (their numbers still count). Raises ``error`` naming file and row.
    """
    file = Path(path)
    # newline="" keeps the csv module's own newline handling (quoted fields may span lines).
    rows = _csv_rows(io.StringIO(read_text(file, error), newline=""), file, error)
    _, header = next(rows)
    return CsvTable(file, header, tuple(rows))


def iter_csv(path: str | Path, error: ErrorType = InputError
             ) -> Iterator[tuple[int, tuple[str, ...]]]:
    """The rows of a CSV file streamed through :func:`iter_lines`: first the header, then every
    non-blank row, each with its 1-based row number, checked as :func:`read_csv` checks them.
    Any problem, an empty file included, is raised when its row is reached."""
    file = Path(path)
    return _csv_rows((line + "\n" for _, line in iter_lines(file, error)), file, error)


def _csv_rows(lines: Iterable[str], file: Path, error: ErrorType
              ) -> Iterator[tuple[int, tuple[str, ...]]]:
    """The header (unique, non-empty names, stripped), then each non-blank row with as many
    fields as the header, with their row numbers (the csv module's ``line_num``)."""
    reader = csv.reader(lines, strict=True)
    header: tuple[str, ...] | None = None
    try:
        for fields in reader:
            row_number = reader.line_num
            if not any(cell.strip() for cell in fields):
                continue
            if header is None:
                header = _check_header(fields, file, row_number, error)
                yield row_number, header
                continue
            if len(fields) != len(header):
                raise error(f"{len(fields)} fields, the header has {len(header)}: expected "
                            f"one field per column ({','.join(header)})", file, row_number)
            yield row_number, tuple(fields)
    except csv.Error as failure:
        raise error(f"not a CSV row ({failure})", file, reader.line_num) from None
    if header is None:
        raise error("empty file: expected a CSV header", file)


def _check_header(fields: list[str], path: Path, row: int, error: ErrorType) -> tuple[str, ...]:
    names = tuple(cell.strip() for cell in fields)
    for position, name in enumerate(names, start=1):
        if not name:
            raise error(f"header field {position} is empty: expected a column name", path, row)
        if names.index(name) != position - 1:
            raise error(f"column '{name}' appears twice in the header: expected unique names",
                        path, row)
    return names


def parse_cells(table: CsvTable, parsers: dict[str, Callable[[str], Any]],
                error: ErrorType = InputError) -> dict[str, list[Any]]:
    """Parse the named columns of every row: ``{column: [value per row]}``.

    Each parser takes the stripped cell text and raises ``ValueError('expected ...')``; the first
    failure becomes ``error`` naming file, row and column. Empty cells are errors.
    """
    table.require(list(parsers), error)
    index = {c: table.index(c) for c in parsers}
    columns: dict[str, list[Any]] = {c: [] for c in parsers}
    for row_number, fields in table.rows:
        for name, parse in parsers.items():
            columns[name].append(parse_cell(fields[index[name]], parse, table.path, row_number,
                                            name, error))
    return columns


def parse_cell(text: str, parse: Callable[[str], Any], path: str | Path | None, row: int | None,
               column: str, error: ErrorType = InputError) -> Any:
    """``parse(text.strip())``, its ValueError turned into ``error`` naming the place."""
    cell = text.strip()
    if cell == "":
        raise error(f"empty cell: {_expectation(parse)}", path, row, column)
    try:
        return parse(cell)
    except (ValueError, OverflowError) as failure:
        message = str(failure)
        if message.startswith(_NOT_A_NUMBER):
            verdict = message  # "not a number: expected ..."
        else:
            verdict = "not valid: " + (message if message.startswith("expected")
                                       else _expectation(parse))
        shown = cell if len(cell) <= 40 else cell[:37] + "..."
        raise error(f"'{shown}' is {verdict}", path, row, column) from None


def _expectation(parse: Callable[[str], Any]) -> str:
    try:
        parse("")
    except (ValueError, OverflowError) as failure:
        _, _, expected = str(failure).rpartition(": ")
        if expected.startswith("expected"):
            return expected
    return "expected a value"


# --- cells -----------------------------------------------------------------------------------------

def parse_int(text: str, minimum: int, maximum: int) -> int:
    """An integer in ``[minimum, maximum]`` written as ``12``, ``12.0`` or ``1.2e1``.

    Raises ValueError('expected an integer in [minimum, maximum]') otherwise; never OverflowError.
    """
    kind = {0: "a non-negative integer", 1: "a positive integer"}.get(minimum, "an integer")
    expected = f"expected {kind} in [{minimum}, {maximum}]"
    text = text.strip()
    if _INTEGER.match(text):
        if len(text.lstrip("+-")) > MAX_INT_DIGITS:
            raise ValueError(expected)
        value = int(text)
    else:
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"{_NOT_A_NUMBER}: {expected}") from None
        if not math.isfinite(number) or number != math.floor(number) or abs(number) > 2.0**63:
            raise ValueError(expected)
        value = int(number)
    if not minimum <= value <= maximum:
        raise ValueError(expected)
    return value


def parse_float(text: str, minimum: float = -math.inf, maximum: float = math.inf,
                above_minimum: bool = False) -> float:
    """A finite number in ``[minimum, maximum]`` (``(minimum, maximum]`` with ``above_minimum``).

    Raises ValueError('expected ...') otherwise.
    """
    expected = _range_text(minimum, maximum, above_minimum)
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{_NOT_A_NUMBER}: {expected}") from None
    if not math.isfinite(value) or value > maximum or value < minimum or (
            above_minimum and value == minimum):
        raise ValueError(expected)
    return value


def _range_text(minimum: float, maximum: float, above_minimum: bool) -> str:
    if math.isinf(minimum) and math.isinf(maximum):
        return "expected a finite number"
    if math.isinf(maximum):
        return f"expected a finite number {'>' if above_minimum else '>='} {minimum:g}"
    low = "(" if above_minimum else "["
    return f"expected a number in {low}{minimum:g}, {maximum:g}]"


def int_parser(minimum: int, maximum: int) -> Callable[[str], int]:
    """A cell parser for integers in ``[minimum, maximum]`` (see :func:`parse_int`)."""
    def parse(text: str) -> int:
        return parse_int(text, minimum, maximum)
    return parse


def float_parser(minimum: float = -math.inf, maximum: float = math.inf,
                 above_minimum: bool = False) -> Callable[[str], float]:
    """A cell parser for finite numbers in a range (see :func:`parse_float`)."""
    def parse(text: str) -> float:
        return parse_float(text, minimum, maximum, above_minimum)
    return parse


# --- JSON ------------------------------------------------------------------------------------------

def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON ``text`` (strings skipped), without
    parsing it, so that deep input cannot exhaust the parser's recursion.

    :func:`counters.textcheck.json_depth` is the same scan for the collectors: perfmodel may not
    import counters, nor collectors perfmodel (see this module's docstring)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def loads_json(text: str, path: str | Path | None = None, error: ErrorType = InputError,
               max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse JSON ``text`` with the bounds of the module docstring; raises ``error``."""
    if json_depth(text) > max_depth:
        raise error(f"JSON nested deeper than {max_depth} levels: expected a flat document", path)
    try:
        return json.loads(text, parse_int=_json_int_literal, parse_constant=_json_constant,
                          object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as failure:
        raise error(f"not JSON ({failure.msg} at line {failure.lineno} column {failure.colno})",
                    path, failure.lineno) from None
    except ValueError as failure:
        raise error(f"{failure}", path) from None


def read_json(path: str | Path, error: ErrorType = InputError) -> Any:
    """A JSON file read through :func:`read_text` and :func:`loads_json`."""
    return loads_json(read_text(path, error), Path(path), error)


def _json_int_literal(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"integer of {len(text.lstrip('-'))} digits: expected at most "
                         f"{MAX_INT_DIGITS}")
    return int(text)


def _json_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number: expected finite numbers")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key '{key}' appears twice: expected unique keys")
        out[key] = value
    return out


def json_int(value: Any, minimum: int, maximum: int) -> int:
    """``value`` if it is a JSON integer (not a boolean, string or fraction) in range; raises
    ValueError('expected ...')."""
    if isinstance(value, bool) or not isinstance(value, int | float) or (
            isinstance(value, float) and (not math.isfinite(value) or value != int(value))):
        raise ValueError(f"{_show(value)}: expected an integer in [{minimum}, {maximum}]")
    if not minimum <= value <= maximum:
        raise ValueError(f"{_show(value)}: expected an integer in [{minimum}, {maximum}]")
    return int(value)


def json_number(value: Any, minimum: float = -math.inf, maximum: float = math.inf,
                above_minimum: bool = False) -> float:
    """``value`` as a float if it is a finite JSON number (not a boolean or string) in range."""
    expected = _range_text(minimum, maximum, above_minimum)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{_show(value)}: {expected}")
    number = float(value)
    if not math.isfinite(number) or number > maximum or number < minimum or (
            above_minimum and number == minimum):
        raise ValueError(f"{_show(value)}: {expected}")
    return number


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, float) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."

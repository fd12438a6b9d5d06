"""Results a user reads: a table on stdout, or strict JSON for machines (``--json``).

The command line and the experiments print their results through these two, so every table looks
alike and every JSON document parses (NaN and infinities become ``null``). rich is imported only
when a table is printed.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from numbers import Integral, Real
from typing import Any

from bayes_sched.strict_json import json_safe

#: Width of a table printed into a pipe or file with ``COLUMNS`` unset: wide, so that a saved or
#: grepped table keeps one row per line. A terminal (or ``COLUMNS``) sets the width otherwise.
PIPE_WIDTH = 200
#: How a missing value (None, NaN) prints in a table (JSON prints ``null``).
MISSING = "-"


def print_table(
    rows: Sequence[Mapping[str, Any]],
    title: str | None = None,
    as_json: bool = False,
    float_format: str = "{:.4g}",
) -> None:
    """Print ``rows`` (dicts) as a table on stdout, or as a JSON list. The columns are the
    rows' keys in order of first appearance; a row without a key shows :data:`MISSING` there.

    The table is as wide as the terminal (rich reads it, or ``COLUMNS``); into a pipe with
    ``COLUMNS`` unset, :data:`PIPE_WIDTH`. Nothing is cut: prose wraps at spaces, and a number or
    an identifier too wide for its column folds onto the next line, never an ellipsis. Numbers
    align right, text left; missing values print as :data:`MISSING`.
    """
    if as_json:
        print_json(list(rows))
        return
    from rich.console import Console
    from rich.table import Table

    columns = list(dict.fromkeys(key for row in rows for key in row))
    cells = [[_format(row.get(c), float_format) for c in columns] for row in rows]
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else PIPE_WIDTH
    console = Console(width=width)
    if _narrowest(columns, cells) <= console.width:
        table = Table(title=title)
        for i, column in enumerate(columns):
            numeric = all(_is_number(row.get(column)) for row in rows)
            # no_wrap=True would truncate at the column's edge whatever the overflow (rich's
            # Text.wrap): wrapping with "fold" breaks a word only where it cannot fit whole.
            table.add_column(column, justify="right" if numeric else "left", overflow="fold",
                             min_width=_column_width(i, column, cells))
        for values in cells:
            table.add_row(*values)
    else:  # too many columns for the terminal: one block of field | value per row
        table = Table("field", "value", title=title)
        table.columns[1].overflow = "fold"
        for values in cells:
            for j, (column, value) in enumerate(zip(columns, values, strict=True)):
                table.add_row(column, value, end_section=j == len(columns) - 1)
    console.print(table)


def _longest_word(text: str) -> int:
    return max((len(word) for word in text.split()), default=0)


def _narrowest(columns: Sequence[str], cells: Sequence[Sequence[str]]) -> int:
    """The fewest characters a table of ``cells`` takes with no word (number, identifier)
    broken: each column's longest word, its padding and border."""
    return 1 + sum(3 + _column_width(i, column, cells) for i, column in enumerate(columns))


def _column_width(index: int, header: str, cells: Sequence[Sequence[str]]) -> int:
    """The longest word of column ``index``, header included: its narrowest unbroken width."""
    return max(_longest_word(header), *(_longest_word(row[index]) for row in cells))


def print_json(value: Any) -> None:
    """Print ``value`` as strict JSON (RFC 8259) on stdout: NaN and infinities become ``null``,
    numpy numbers and arrays plain numbers and lists, anything else its string."""
    json.dump(json_safe(value), sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")


def _is_number(value: Any) -> bool:
    return value is None or (isinstance(value, Real) and not isinstance(value, bool))


def _format(value: Any, float_format: str) -> str:
    if value is None or (isinstance(value, Real) and not isinstance(value, Integral)
                         and math.isnan(value)):
        return MISSING
    if isinstance(value, float):
        return float_format.format(value)
    if isinstance(value, list | tuple):
        return ", ".join(_format(v, float_format) for v in value) or MISSING
    return str(value)


__all__ = ["MISSING", "PIPE_WIDTH", "print_json", "print_table"]

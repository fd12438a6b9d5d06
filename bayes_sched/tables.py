"""Results a user reads: a table on stdout, or strict JSON for machines (``--json``).

The command line and the experiments print their results through these two, so every table looks
alike and every JSON document parses (NaN and infinities become ``null``). rich is imported only
when a table is printed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from bayes_sched.strict_json import json_safe


def print_table(
    rows: Sequence[Mapping[str, Any]],
    title: str | None = None,
    as_json: bool = False,
    float_format: str = "{:.4g}",
) -> None:
    """Print ``rows`` (dicts sharing keys) as a table on stdout, or as a JSON list."""
    if as_json:
        print_json(list(rows))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    columns = list(rows[0].keys()) if rows else []
    for column in columns:
        table.add_column(column, justify="left" if column in ("model", "name") else "right")
    for row in rows:
        table.add_row(*(_format(row[c], float_format) for c in columns))
    Console(width=200).print(table)


def print_json(value: Any) -> None:
    """Print ``value`` as strict JSON (RFC 8259) on stdout: NaN and infinities become ``null``,
    numpy numbers and arrays plain numbers and lists, anything else its string."""
    json.dump(json_safe(value), sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")


def _format(value: Any, float_format: str) -> str:
    if isinstance(value, float):
        return float_format.format(value)
    return str(value)


__all__ = ["print_json", "print_table"]

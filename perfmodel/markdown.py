"""Markdown tables for the reports: one writer for the model pages and the simulation reports.

A cell shows a float to four significant digits and a missing value (``None`` or NaN) as ``-``,
as the command line's tables do (JSON says ``null``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

#: How a missing value is shown.
MISSING = "-"


def markdown_cell(value: object, float_format: str = "{:.4g}") -> str:
    """One cell: ``-`` for ``None``, NaN or an empty list, floats with ``float_format``, a list
    or tuple as its items joined by commas, else ``str``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if isinstance(value, list | tuple):
        return ", ".join(markdown_cell(v, float_format) for v in value) or MISSING
    return float_format.format(value) if isinstance(value, float) else str(value)


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None,
                   float_format: str = "{:.4g}") -> str:
    """A Markdown table of ``rows`` over ``columns`` (default: the first row's keys)."""
    columns = list(rows[0]) if columns is None else list(columns)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(markdown_cell(row[c], float_format) for c in columns) + " |"
              for row in rows]
    return "\n".join(lines)
